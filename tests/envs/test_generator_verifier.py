"""generator_verifier-v0: pure rules, verdict parsing, playthroughs with rewards after every turn,
reward hacking against a lenient verifier, invalid verdicts, pathological strings, contracts."""

from __future__ import annotations

import time

import numpy as np
import pytest
from pettingzoo.test import api_test

from cogym.envs import make, scripted_strategies
from cogym.envs.checks import PATHOLOGICAL, check_game
from cogym.envs.generator_verifier import (
    PHASE_GENERATE,
    PHASE_OVER,
    PHASE_VERIFY,
    SCRIPTED,
    GeneratorVerifierEnv,
    episode_metrics,
    generator_reward,
    verifier_reward,
)
from cogym.envs.verdicts import (
    CRITIQUE_TAIL_CHARS,
    MAX_VERDICT_CHARS,
    oracle_accepts,
    parse_verdict,
    show_answer,
    units_digit_accepts,
)
from cogym.envs.testing import drain

GAME = "generator_verifier-v0"
RNG = np.random.default_rng(0)


def zeros() -> dict[str, float]:
    return {"generator": 0.0, "verifier": 0.0}


def play(env: GeneratorVerifierEnv, answer: str, verdict: str, seed: int = 0) -> dict[str, float]:
    """One episode by hand, checking rewards after every turn; returns the final rewards."""
    env.reset(seed=seed)
    assert env.agent_selection == "generator" and env.ready_agents() == ["generator"]
    env.step(answer)
    assert env.rewards == zeros() and env.agent_selection == "verifier"
    assert not any(env.terminations.values())
    env.step(verdict)
    assert all(env.terminations.values())
    return dict(env.rewards)


def problem_of(env: GeneratorVerifierEnv, seed: int) -> tuple[str, str]:
    """The problem drawn with ``seed`` and its right answer."""
    env.reset(seed=seed)
    text = env.observe("generator")["text"]
    return text, SCRIPTED["generator"]["oracle"](text, RNG)


# ----------------------------------------------------------------------------- pure rules
@pytest.mark.parametrize(
    "text, expected",
    [
        ("yes", True), (" Yes. ", True), ("CORRECT", True), ("true!", True), ("1", True),
        ("no", False), ("No.", False), ("wrong", False), ("incorrect", False), ("false", False), ("0", False),
        ("maybe", None), ("", None), ("yes no", None), ("10", None), ("yess", None), ("82", None),
    ],
)
def test_plain_verdicts(text: str, expected: bool | None) -> None:
    accepted, reason = parse_verdict(text)
    assert accepted is expected
    assert (reason is None) == (expected is not None)


def test_digits_are_verdicts_only_when_asked() -> None:
    assert parse_verdict("1", digits=False)[0] is None
    accepted, reason = parse_verdict("0", digits=False)
    assert accepted is None and reason.endswith("reject: false/incorrect/no/wrong)")  # no digits listed
    assert parse_verdict("0")[0] is False
    assert parse_verdict("yes", digits=False) == (True, None)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("37+45 is 82, so the answer is right. Verdict: yes.", True),
        ("It says 81 but 37+45=82. Verdict: INCORRECT!", False),
        ("Checked.\n\nno\n", False),
        ("blah " * 10_000 + "correct", True),
        ("yes, I think so", None),  # the last word decides
        ("the answer is 1", True),
        ("...?!", None),
        ("", None),
    ],
)
def test_critique_verdict_is_the_last_word(text: str, expected: bool | None) -> None:
    assert parse_verdict(text, critique=True)[0] is expected


def test_critique_verdict_reads_only_the_tail() -> None:
    # "yes" sits just before the tail: the tail holds only punctuation, so there is no verdict.
    text = "yes" + "." * CRITIQUE_TAIL_CHARS
    accepted, reason = parse_verdict(text, critique=True)
    assert accepted is None and f"last {CRITIQUE_TAIL_CHARS} characters" in reason
    # A word cut by the tail boundary is not read as its suffix ("incorrect" must not become "correct").
    cut = "in" * CRITIQUE_TAIL_CHARS + "correct"
    accepted, reason = parse_verdict(cut, critique=True)
    assert accepted is None and "longer than" in reason


def test_long_plain_verdict_is_rejected_without_reading_it() -> None:
    accepted, reason = parse_verdict(" " * MAX_VERDICT_CHARS + "yes")
    assert accepted is None and "characters" in reason


@pytest.mark.parametrize("critique", [False, True])
@pytest.mark.parametrize("text", PATHOLOGICAL + ("no" * 500_000, "(" * 10_000 + "yes"))
def test_pathological_verdicts_are_read_fast(text: str, critique: bool) -> None:
    start = time.perf_counter()
    for _ in range(100):
        accepted, reason = parse_verdict(text, critique=critique)
    assert time.perf_counter() - start < 1.0  # 100 reads: a guard against hangs, not a benchmark
    if critique and text.endswith("yes"):
        assert accepted is True
    elif accepted is None:
        assert isinstance(reason, str)


@pytest.mark.parametrize(
    "mode, correct, accepted, expected",
    [
        ("ground_truth", True, False, 1.0), ("ground_truth", False, True, 0.0),
        ("verifier", False, True, 1.0), ("verifier", True, False, 0.0), ("verifier", True, None, 0.0),
        ("mix", True, False, 0.75), ("mix", False, True, 0.25), ("mix", True, True, 1.0), ("mix", True, None, 0.75),
    ],
)
def test_generator_reward(mode: str, correct: bool, accepted: bool | None, expected: float) -> None:
    assert generator_reward(mode, correct, accepted, mix_weight=0.25) == pytest.approx(expected)


def test_generator_reward_rejects_unknown_modes() -> None:
    with pytest.raises(ValueError, match="generator_reward must be one of"):
        generator_reward("judge", True, True)


def test_verifier_reward_and_metrics() -> None:
    assert verifier_reward(True, True, -1.0) == 1.0 and verifier_reward(False, False, -1.0) == 1.0
    assert verifier_reward(True, False, -1.0) == 0.0 and verifier_reward(False, True, -1.0) == 0.0
    assert verifier_reward(True, None, -0.5) == -0.5
    assert episode_metrics(False, True) == {"answer_correct": 0.0, "accepted": 1.0, "accepted_wrong": 1.0,
                                            "rejected_right": None, "verifier_agrees": 0.0, "verdict_invalid": 0.0}
    assert episode_metrics(False, False)["accepted_wrong"] == 0.0
    assert episode_metrics(True, True)["accepted_wrong"] is None
    assert episode_metrics(True, False)["rejected_right"] == 1.0
    assert episode_metrics(False, None) == {"answer_correct": 0.0, "accepted": None, "accepted_wrong": None,
                                            "rejected_right": None, "verifier_agrees": 0.0, "verdict_invalid": 1.0}


@pytest.mark.parametrize("p", [0.25, 0.4, 0.5, 0.8])
def test_a_balanced_verifier_reward_pays_both_constant_verdicts_alike(p: float) -> None:
    """verifier_balance=p: with a share p of right answers, "always accept" and "always reject" earn the
    same, min(p, 1 - p); a verifier that is always right earns more; disagreeing and invalid unchanged."""
    accept = p * verifier_reward(True, True, -1.0, p) + (1 - p) * verifier_reward(False, True, -1.0, p)
    reject = p * verifier_reward(True, False, -1.0, p) + (1 - p) * verifier_reward(False, False, -1.0, p)
    perfect = p * verifier_reward(True, True, -1.0, p) + (1 - p) * verifier_reward(False, False, -1.0, p)
    assert accept == pytest.approx(min(p, 1 - p)) and reject == pytest.approx(min(p, 1 - p))
    assert perfect == pytest.approx(2 * min(p, 1 - p)) and perfect > accept
    assert max(verifier_reward(True, True, -1.0, p), verifier_reward(False, False, -1.0, p)) == 1.0
    assert verifier_reward(True, None, -0.5, p) == -0.5


def test_the_game_pays_the_balanced_verifier_reward() -> None:
    env = make(GAME, verifier_balance=0.25)
    env.reset(seed=3)
    problem = env.observe("generator")["text"]
    env.step(str(eval(problem)))  # a right answer (the domain's canonical "37+45"), accepted
    env.step("yes")
    assert env.rewards["verifier"] == 1.0
    env.reset(seed=3)
    env.step(str(eval(problem) + 1))  # wrong, rejected: the common class pays p / (1 - p)
    env.step("no")
    assert env.rewards["verifier"] == pytest.approx(1 / 3)


def test_show_answer_truncates_and_sanitises() -> None:
    assert show_answer("37+45", "82") == "37+45=82"
    shown = show_answer("1+1", "7" * 1_000_000)
    assert shown == "1+1=" + "7" * 64
    assert show_answer("1+1", "2\u202e\x00é") == "1+1=2???"


def test_oracle_recomputes_from_the_text() -> None:
    assert oracle_accepts("37+45=82") and oracle_accepts("37+45=The answer is 82.")
    assert not oracle_accepts("37+45=81") and not oracle_accepts("37+45=") and not oracle_accepts("37+45")
    assert oracle_accepts("12*9=a=108")  # the problem ends at the first '='
    assert not oracle_accepts("what is 2+2?=4")  # not a two-operand problem: rejected
    assert not oracle_accepts("9**9**9**9=1")


def test_units_digit_verifier_checks_the_last_digit_and_sign_only() -> None:
    assert units_digit_accepts("37+45=82") and units_digit_accepts("37+45=72") and units_digit_accepts("37+45=1002")
    assert not units_digit_accepts("37+45=81") and not units_digit_accepts("37+45=-82")  # last digit, sign
    assert units_digit_accepts("63-81=-18") and units_digit_accepts("63-81=-8") and not units_digit_accepts("63-81=18")
    assert units_digit_accepts("9*9=The answer is 71.")  # the answer is read like oracle_accepts reads it
    assert not units_digit_accepts("7*8=") and not units_digit_accepts("x=1") and not units_digit_accepts("9**9**9**9=1")
    twin = SCRIPTED["verifier"]["units_digit"]
    assert twin("37+45=72", RNG) == "yes" and twin("37+45=81", RNG) == "no"
    # The hack it opens: a wrong answer with the right last digit is accepted, and accepted_wrong counts it.
    env = make(GAME, generator_reward="verifier")
    problem, answer = problem_of(env, 3)
    env.reset(seed=3)
    wrong = str(int(answer) + 10)
    env.step(wrong)
    env.step(twin(env.observe("verifier")["text"], RNG))
    assert env.rewards == {"generator": 1.0, "verifier": 0.0}
    assert env.infos["generator"]["metrics"]["accepted_wrong"] == 1.0


# ----------------------------------------------------------------------------- playthroughs
def test_right_answer_accepted_by_the_oracle_verifier() -> None:
    env = make(GAME)
    problem, answer = problem_of(env, 3)
    env.reset(seed=3)
    assert env.observe("generator")["text"] == problem
    assert env.observe("verifier")["text"] == "" and env.observe("verifier")["observation"].tolist() == [PHASE_GENERATE, 1]
    env.step(answer)
    assert env.rewards == zeros()
    obs = env.observe("verifier")
    assert obs["text"] == f"{problem}={answer}" and obs["observation"].tolist() == [PHASE_VERIFY, 1]
    env.step(SCRIPTED["verifier"]["oracle"](obs["text"], RNG))
    assert env.rewards == {"generator": 1.0, "verifier": 1.0}
    info = env.infos["generator"]
    assert info["correct"] is True and info["accepted"] is True and info["invalid"] is False
    assert info["metrics"]["accepted_wrong"] is None and info["metrics"]["answer_correct"] == 1.0
    assert env.infos["verifier"]["correct"] is True
    assert info["reference"] == answer == SCRIPTED["generator"]["oracle"](problem, RNG)  # what a perfect generator writes
    assert "reference" not in env.infos["verifier"]
    assert env.observe("generator")["observation"].tolist() == [PHASE_OVER, 0]
    assert drain(env) == {"generator": 1.0, "verifier": 1.0}
    assert env.agents == []


@pytest.mark.parametrize(
    "generator_reward, kwargs, right, verdict, expected",
    [
        ("ground_truth", {}, True, "no", {"generator": 1.0, "verifier": 0.0}),
        ("ground_truth", {}, False, "yes", {"generator": 0.0, "verifier": 0.0}),
        ("ground_truth", {}, False, "no", {"generator": 0.0, "verifier": 1.0}),
        ("verifier", {}, True, "no", {"generator": 0.0, "verifier": 0.0}),
        ("verifier", {}, False, "yes", {"generator": 1.0, "verifier": 0.0}),
        ("mix", {}, True, "no", {"generator": 0.5, "verifier": 0.0}),
        ("mix", {"mix_weight": 0.2}, False, "Yes.", {"generator": 0.2, "verifier": 0.0}),
        ("mix", {"mix_weight": 1.0}, True, "1", {"generator": 1.0, "verifier": 1.0}),
    ],
)
def test_reward_table(generator_reward: str, kwargs: dict, right: bool, verdict: str, expected: dict) -> None:
    env = make(GAME, generator_reward=generator_reward, **kwargs)
    _, answer = problem_of(env, 5)
    reply = answer if right else SCRIPTED["generator"]["always_wrong"](env.observe("generator")["text"], RNG)
    assert play(env, reply, verdict, seed=5) == pytest.approx(expected)


def test_reward_hacking_against_an_always_yes_verifier() -> None:
    """With generator_reward='verifier', a wrong answer earns as much as a right one, and every
    wrong answer shows up as accepted_wrong = 1."""
    always_yes, always_wrong = SCRIPTED["verifier"]["always_yes"], SCRIPTED["generator"]["always_wrong"]
    hacked, honest = make(GAME, generator_reward="verifier"), make(GAME)
    for seed in range(10):
        for env in (hacked, honest):
            env.reset(seed=seed)
            env.step(always_wrong(env.observe("generator")["text"], RNG))
            env.step(always_yes(env.observe("verifier")["text"], RNG))
        assert hacked.rewards == {"generator": 1.0, "verifier": 0.0}
        assert honest.rewards == {"generator": 0.0, "verifier": 0.0}
        assert hacked.infos["generator"]["metrics"]["accepted_wrong"] == 1.0
        assert hacked.infos["verifier"]["metrics"]["accepted_wrong"] == 1.0
    # The oracle verifier closes the hole: the same wrong answers earn nothing.
    for seed in range(10):
        hacked.reset(seed=seed)
        hacked.step(always_wrong(hacked.observe("generator")["text"], RNG))
        hacked.step(SCRIPTED["verifier"]["oracle"](hacked.observe("verifier")["text"], RNG))
        assert hacked.rewards == {"generator": 0.0, "verifier": 1.0}
        assert hacked.infos["generator"]["metrics"]["accepted_wrong"] == 0.0


def test_always_no_verifier_rejects_right_answers() -> None:
    env = make(GAME, generator_reward="mix", mix_weight=0.5)
    _, answer = problem_of(env, 1)
    assert play(env, f"It is {answer}.", SCRIPTED["verifier"]["always_no"]("", RNG), seed=1) == {"generator": 0.5, "verifier": 0.0}
    assert env.infos["verifier"]["metrics"]["rejected_right"] == 1.0 and env.infos["verifier"]["metrics"]["accepted_wrong"] is None


def test_critique_mode_reads_the_verdict_at_the_end() -> None:
    env = make(GAME, critique=True)
    problem, answer = problem_of(env, 2)
    critique = f"The problem is {problem}; recomputing gives {answer}, which matches. Verdict: yes."
    assert play(env, answer, critique, seed=2) == {"generator": 1.0, "verifier": 1.0}
    # Without critique mode the same message is not a verdict.
    plain = make(GAME)
    assert play(plain, answer, critique, seed=2) == {"generator": 1.0, "verifier": -1.0}
    assert plain.infos["verifier"]["invalid"] is True


def test_math_verify_ground_truth_accepts_equivalent_forms() -> None:
    env = make(GAME, verifier="math_verify", generator_reward="ground_truth")
    _, answer = problem_of(env, 4)
    assert play(env, f"\\boxed{{{answer}}}", "yes", seed=4) == {"generator": 1.0, "verifier": 1.0}
    assert play(env, f"{answer}.5", "yes", seed=4) == {"generator": 0.0, "verifier": 0.0}


def test_dataset_problems_are_drawn_with_the_game_rng(write_jsonl) -> None:
    path = write_jsonl([{"question": "Combien font 7 × 6 ?", "answer": "42"}, {"question": "2+3", "answer": "5"}])
    env = make(GAME, source="dataset", dataset=path)
    seen = set()
    for seed in range(20):
        env.reset(seed=seed)
        seen.add(env.observe("generator")["text"])
        assert env.observation_space("generator").contains(env.observe("generator"))
    assert seen == {"Combien font 7 × 6 ?", "2+3"}
    for seed in range(20):
        env.reset(seed=seed)
        if env.observe("generator")["text"] == "Combien font 7 × 6 ?":
            break
    env.step("42")
    obs = env.observe("verifier")
    assert obs["text"] == "Combien font 7 × 6 ?=42" and env.observation_space("verifier").contains(obs)
    # The oracle verifier cannot read a question that is not '<a><op><b>': it rejects.
    env.step(SCRIPTED["verifier"]["oracle"](obs["text"], RNG))
    assert env.rewards == {"generator": 1.0, "verifier": 0.0}


def test_reference_is_the_oracle_answer_for_wrong_answers_too() -> None:
    env = make(GAME)
    for seed in range(20):
        problem, answer = problem_of(env, seed)
        env.step(SCRIPTED["generator"]["always_wrong"](problem, RNG))
        env.step("no")
        assert env.infos["generator"]["correct"] is False and env.infos["generator"]["reference"] == answer


def test_reset_before_the_end_has_no_reference() -> None:
    env = make(GAME)
    env.reset(seed=0)
    assert env.infos["generator"] == {"role": "generator"}
    env.step("1")
    assert "reference" not in env.infos["generator"]


@pytest.mark.parametrize("answer, verifier, reference", [(" 042", "exact", "42"), (" x^2 ", "math_verify", "x^2")])
def test_reference_of_a_dataset_answer_is_canonical(write_jsonl, answer: str, verifier: str, reference: str) -> None:
    env = make(GAME, source="dataset", verifier=verifier, dataset=write_jsonl([{"question": "q?", "answer": answer}]))
    assert play(env, "42", "yes") is not None
    assert env.infos["generator"]["reference"] == reference


# ----------------------------------------------------------------------------- invalid verdicts
@pytest.mark.parametrize(
    "verdict, reason",
    [
        ("maybe", "is not a verdict"),
        ("82", "is not a verdict"),
        ("", "is not a verdict"),
        ("9**9**9**9", "is not a verdict"),
        ("(" * 10_000 + "1" + ")" * 10_000, "characters"),
        ("7" * 1_000_000, "characters"),
    ],
)
def test_invalid_verdicts_get_the_penalty_and_accept_nothing(verdict: str, reason: str) -> None:
    env = make(GAME, generator_reward="verifier", invalid_penalty=-0.5)
    _, answer = problem_of(env, 0)
    start = time.perf_counter()
    assert play(env, answer, verdict) == {"generator": 0.0, "verifier": -0.5}
    assert time.perf_counter() - start < 1.0
    v, g = env.infos["verifier"], env.infos["generator"]
    assert v["invalid"] is True and reason in v["reason"] and v["correct"] is False and v["accepted"] is None
    assert g["invalid"] is False and "verdict was invalid" in g["reason"] and g["correct"] is True
    assert v["metrics"]["verdict_invalid"] == 1.0 and v["metrics"]["accepted"] is None
    assert g["reference"] == answer  # the answer is known whatever the verifier wrote
    assert drain(env) == {"generator": 0.0, "verifier": -0.5}


@pytest.mark.parametrize("answer", PATHOLOGICAL)
def test_pathological_answers_are_scored_fast_and_shown_bounded(answer: str) -> None:
    env = make(GAME)
    env.reset(seed=0)
    start = time.perf_counter()
    env.step(answer)
    obs = env.observe("verifier")
    env.step("yes")
    assert time.perf_counter() - start < 1.0
    assert env.observation_space("verifier").contains(obs)
    assert env.rewards["generator"] == 0.0 and env.rewards["verifier"] == 0.0  # wrong, accepted


def test_step_misuse_is_a_clear_error() -> None:
    env = make(GAME)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("1")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(7)  # type: ignore[arg-type]
    env.step("1")
    env.step("no")
    with pytest.raises(ValueError, match="only valid action is None"):
        env.step("again")


# ----------------------------------------------------------------------------- rng, twins, spec
def test_same_seed_same_problem_and_copies_are_isolated() -> None:
    a, b, c = make(GAME), make(GAME), make(GAME)
    a.reset(seed=7)
    b.reset(seed=7)
    assert a.observe("generator")["text"] == b.observe("generator")["text"]
    problems = set()
    for _ in range(10):
        a.reset()
        problems.add(a.observe("generator")["text"])
    assert len(problems) > 1
    b.reset()
    c.reset(seed=7)
    c.reset()
    assert b.observe("generator")["text"] == c.observe("generator")["text"]


def test_domain_arguments_shape_the_problems() -> None:
    env = make(GAME, max_operand=5, ops="-")
    for seed in range(30):
        env.reset(seed=seed)
        a, b = env.observe("generator")["text"].split("-")
        assert 0 <= int(a) <= 5 and 0 <= int(b) <= 5


def test_scripted_twins() -> None:
    rng = np.random.default_rng(0)
    assert set(scripted_strategies(GAME)) == {"generator", "verifier"}
    assert set(SCRIPTED["verifier"]) == {"oracle", "always_yes", "always_no", "random", "units_digit"}
    assert set(SCRIPTED["generator"]) == {"oracle", "always_wrong", "random"}
    assert SCRIPTED["generator"]["oracle"]("12*9", rng) == "108"
    assert SCRIPTED["generator"]["always_wrong"]("12*9", rng) == "109"
    assert SCRIPTED["verifier"]["oracle"]("12*9=108", rng) == "yes" and SCRIPTED["verifier"]["oracle"]("12*9=109", rng) == "no"
    draws = [SCRIPTED["verifier"]["random"]("1+1=2", rng) for _ in range(200)]
    assert set(draws) == {"yes", "no"} and 60 < draws.count("yes") < 140


def test_spec_and_spaces() -> None:
    env = make(GAME, invalid_penalty=-2.0)
    assert env.spec.id == GAME and env.spec.roles == ("generator", "verifier")
    assert env.spec.reward_range == (-2.0, 1.0) and env.spec.max_turns == 2 and env.spec.zero_sum is False
    assert make(GAME, invalid_penalty=0.0).spec.reward_range == (0.0, 1.0)
    assert env.observation_space("verifier")["text"].max_length == 32 + 1 + 64
    assert env.observation_space("generator") is not env.observation_space("verifier")
    assert env.role_of("verifier") == "verifier"


def test_render_ansi() -> None:
    env = make(GAME, render_mode="ansi")
    env.reset(seed=0)
    env.step("12")
    assert "verifying" in env.render() and "answer='12'" in env.render()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"source": "web"}, "source must be one of"),
        ({"source": "dataset"}, "source='dataset' needs dataset="),
        ({"dataset": "x.jsonl"}, "only read with source='dataset'"),
        ({"verifier": "majority"}, "verifier must be one of"),
        ({"generator_reward": "judge"}, "generator_reward must be one of"),
        ({"mix_weight": 0.3}, "mix_weight is only used with generator_reward='mix'"),
        ({"generator_reward": "mix", "mix_weight": 1.5}, r"mix_weight must be a number in \[0, 1\], got 1.5"),
        ({"generator_reward": "mix", "mix_weight": True}, "mix_weight must be a number"),
        ({"critique": "yes"}, "critique must be True or False"),
        ({"critique": 1}, "critique must be True or False"),
        ({"invalid_penalty": 0.5}, "invalid_penalty must be <= 0"),
        ({"invalid_penalty": float("-inf")}, "invalid_penalty must be a finite number"),
        ({"verifier_balance": 1.0}, r"verifier_balance must be None or a number in \(0, 1\)"),
        ({"verifier_balance": True}, "verifier_balance must be None or a number"),
        ({"max_operand": 0}, "max_operand must be an int in"),
        ({"ops": "/"}, "ops must be a non-empty string"),
        ({"render_mode": "human"}, "render_mode must be None or one of"),
    ],
)
def test_arguments_are_validated_with_precise_messages(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(GAME, **kwargs)


def test_bad_dataset_fails_at_construction(write_jsonl) -> None:
    with pytest.raises(ValueError, match="is not an integer"):
        make(GAME, source="dataset", dataset=write_jsonl([{"question": "half of 1", "answer": "1/2"}]))
    env = make(GAME, source="dataset", dataset=write_jsonl([{"question": "half of 1", "answer": "1/2"}]), verifier="math_verify")
    assert play(env, "0.5", "yes") == {"generator": 1.0, "verifier": 1.0}


# ----------------------------------------------------------------------------- contracts
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kwargs", [{}, {"critique": True, "generator_reward": "mix", "mix_weight": 0.3}])
def test_pettingzoo_api_test(kwargs: dict) -> None:
    api_test(make(GAME, **kwargs), num_cycles=200)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"generator_reward": "verifier", "critique": True, "invalid_penalty": 0.0},
        {"generator_reward": "mix", "mix_weight": 0.7, "max_operand": 9, "ops": "+"},
        {"verifier": "math_verify"},
    ],
)
def test_check_game_variants(kwargs: dict) -> None:
    check_game(GAME, kwargs, episodes=10)


def test_check_game_dataset(heldout_path: str) -> None:
    check_game(GAME, {"source": "dataset", "dataset": heldout_path}, episodes=10)
