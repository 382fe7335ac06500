"""proposer_solver-v0 played by hand: rewards after every turn, invalid moves, ready seats, args."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cogym.envs import make
from cogym.envs.arithmetic import Domain
from cogym.envs.proposer_solver import PHASE_OVER, PHASE_PROPOSE, PHASE_SOLVE, PROPOSER_REQUEST, SCRIPTED
from cogym.envs.testing import drain
from cogym.envs.testing import step_as as act

SOLVERS4 = ["solver_0", "solver_1", "solver_2", "solver_3"]


def zeros(*agents: str) -> dict[str, float]:
    return {a: 0.0 for a in agents}


# ----------------------------------------------------------------------------- playthroughs
def test_oracle_and_always_wrong_mix_scores_learnability_after_every_turn() -> None:
    env = make("proposer_solver-v0", num_solvers=4)
    env.reset(seed=0)
    everyone = ["proposer", *SOLVERS4]
    assert env.observe("proposer")["text"] == PROPOSER_REQUEST
    assert act(env, "proposer", " 37 + 45 =") == zeros(*everyone)
    assert env.observe("solver_2")["text"] == "37+45"  # canonical form
    assert act(env, "solver_0", SCRIPTED["solver"]["oracle"]("37+45", np.random.default_rng(0))) == zeros(*everyone)
    assert act(env, "solver_1", "The answer is 82.") == zeros(*everyone)
    assert act(env, "solver_2", SCRIPTED["solver"]["always_wrong"]("37+45", np.random.default_rng(0))) == zeros(*everyone)
    final = act(env, "solver_3", "82")
    assert final == {"proposer": 0.25, "solver_0": 1.0, "solver_1": 1.0, "solver_2": 0.0, "solver_3": 1.0}
    assert all(env.terminations.values())
    assert env.infos["proposer"] == {"role": "proposer", "problem": "37+45", "success_rate": 0.75, "invalid": False}
    assert env.infos["solver_2"] == {"role": "solver", "problem": "37+45", "success_rate": 0.75, "invalid": False, "correct": False,
                                     "reference": "82"}
    # The reference is exactly what the oracle twin writes, on every solver, right or wrong.
    assert all(env.infos[s]["reference"] == SCRIPTED["solver"]["oracle"]("37+45", np.random.default_rng(0)) for s in SOLVERS4)
    assert "reference" not in env.infos["proposer"]
    assert drain(env) == final
    assert env.agents == []


def test_all_correct_and_all_wrong_give_the_proposer_nothing() -> None:
    for answer, solver_reward in (("82", 1.0), ("0", 0.0)):
        env = make("proposer_solver-v0", num_solvers=3)
        env.reset(seed=1)
        act(env, "proposer", "37+45")
        for s in ["solver_0", "solver_1", "solver_2"]:
            rewards = act(env, s, answer)
        assert rewards == {"proposer": 0.0, "solver_0": solver_reward, "solver_1": solver_reward, "solver_2": solver_reward}


@pytest.mark.parametrize("n_correct, expected", [(0, 0.0), (1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0), (5, 0.0)])
def test_band_reward_game(n_correct: int, expected: float) -> None:
    env = make("proposer_solver-v0", num_solvers=5, proposer_reward="band", band=(0.2, 0.8))
    env.reset(seed=0)
    act(env, "proposer", "6*7")
    for i in range(5):
        rewards = act(env, f"solver_{i}", "42" if i < n_correct else "41")
    assert rewards["proposer"] == expected
    assert env.infos["proposer"]["success_rate"] == n_correct / 5


def test_format_bonus_is_added_for_bare_integers_right_or_wrong() -> None:
    env = make("proposer_solver-v0", num_solvers=4, format_bonus=0.25)
    assert env.spec.reward_range == (-1.0, 1.25)
    env.reset(seed=0)
    act(env, "proposer", "9-12")
    for s, reply in zip(SOLVERS4, ["-3", "it is -3", " -4 ", "minus three"]):
        rewards = act(env, s, reply)
    assert rewards == {"proposer": 0.5, "solver_0": 1.25, "solver_1": 1.0, "solver_2": 0.25, "solver_3": 0.0}


def test_majority_vote_game_rewards_agreement_with_the_majority() -> None:
    env = make("proposer_solver-v0", num_solvers=5, verifier="majority")
    env.reset(seed=0)
    act(env, "proposer", "2+2")
    replies = ["4", "4", "3", "4", "7"]
    for i, reply in enumerate(replies):
        rewards = act(env, f"solver_{i}", reply)
    assert rewards == {"proposer": pytest.approx(0.4), "solver_0": 1.0, "solver_1": 1.0, "solver_2": 0.0, "solver_3": 1.0, "solver_4": 0.0}
    assert env.infos["proposer"]["success_rate"] == pytest.approx(0.6)


def test_majority_vote_game_can_reward_a_wrong_majority() -> None:
    env = make("proposer_solver-v0", num_solvers=3, verifier="majority", proposer_reward="band", band=(0.5, 1.0))
    env.reset(seed=0)
    act(env, "proposer", "2+2")
    for s, reply in zip(["solver_0", "solver_1", "solver_2"], ["5", "5", "4"]):
        rewards = act(env, s, reply)
    assert rewards == {"proposer": 1.0, "solver_0": 1.0, "solver_1": 1.0, "solver_2": 0.0}


@pytest.mark.parametrize(("replies", "majority_correct"), [(["5", "5", "4"], False), (["4", "x", "4"], True),
                                                         (["", " ", "4"], True), (["", "", ""], False)])
def test_label_free_play_reports_the_hidden_truth_without_rewarding_it(replies: list[str], majority_correct: bool) -> None:
    env = make("proposer_solver-v0", num_solvers=3, verifier="majority")
    assert "metrics" in env.spec.outcomes["solver"]
    env.reset(seed=0)
    act(env, "proposer", "2+2")
    for i, reply in enumerate(replies):
        rewards = act(env, f"solver_{i}", reply)
    for i, reply in enumerate(replies):
        metrics = env.infos[f"solver_{i}"]["metrics"]
        assert metrics == {"majority_correct": majority_correct, "true_correct": reply == "4"}  # no threshold: no label_kept
    # the rewards are agreement with the majority, whatever the truth
    assert [rewards[f"solver_{i}"] for i in range(3)] == [float(env.infos[f"solver_{i}"]["correct"]) for i in range(3)]


@pytest.mark.parametrize(("replies", "kept", "majority_correct"),
                         [(["5", "5", "5", "4"], True, False), (["5", "5", "4", "3"], False, False),
                          (["4", "4", "4", "4"], True, True), (["", "", "", "4"], False, True)])
def test_majority_min_withholds_the_reward_of_a_group_without_a_confident_majority(
        replies: list[str], kept: bool, majority_correct: bool) -> None:
    env = make("proposer_solver-v0", num_solvers=4, verifier="majority", majority_min=0.75)
    env.reset(seed=0)
    act(env, "proposer", "2+2")
    for i, reply in enumerate(replies):
        rewards = act(env, f"solver_{i}", reply)
    solver_rewards = [rewards[f"solver_{i}"] for i in range(4)]
    if kept:  # 3 or 4 of 4 agree: the agreement reward as without the threshold
        majority = max(set(replies), key=replies.count)
        assert solver_rewards == [float(r == majority) for r in replies]
    else:  # at most 2 of 4 agree: no label, no reward
        assert solver_rewards == [0.0] * 4
    for i, reply in enumerate(replies):
        metrics = env.infos[f"solver_{i}"]["metrics"]
        # the guard reads the vote before the threshold
        assert metrics["label_kept"] is kept and metrics["true_correct"] is (reply == "4")
    assert env.infos["solver_0"]["metrics"]["majority_correct"] is majority_correct  # blanks vote for nothing


def test_majority_min_pays_the_proposer_by_the_vote_before_the_threshold() -> None:
    """The threshold withholds the solvers' label; the problem's difficulty (the proposer's band reward,
    success_rate) is still the share agreeing with the majority."""
    env = make("proposer_solver-v0", num_solvers=4, verifier="majority", majority_min=0.75,
               proposer_reward="band", band=(0.4, 0.6))
    env.reset(seed=0)
    act(env, "proposer", "2+2")
    for i, reply in enumerate(["5", "5", "4", "3"]):  # 2 of 4 agree: dropped, but inside the band
        rewards = act(env, f"solver_{i}", reply)
    assert rewards == {"proposer": 1.0, "solver_0": 0.0, "solver_1": 0.0, "solver_2": 0.0, "solver_3": 0.0}
    assert env.infos["solver_0"]["success_rate"] == 0.5 and env.infos["solver_0"]["correct"] is False


def test_majority_min_is_checked() -> None:
    with pytest.raises(ValueError, match="majority_min applies to verifier='majority' only"):
        make("proposer_solver-v0", verifier="exact", majority_min=0.5)
    for bad in (True, False, "0.5", float("nan")):
        with pytest.raises(ValueError, match="majority_min must be a finite number"):
            make("proposer_solver-v0", verifier="majority", majority_min=bad)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"majority_min must be in \[0, 1\]"):
            make("proposer_solver-v0", verifier="majority", majority_min=bad)
    assert make("proposer_solver-v0", verifier="majority", majority_min=np.float32(0.5)).verifier.min_share == 0.5


def test_the_majority_threshold_counts_votes_exactly() -> None:
    from cogym.envs.verifiers import MajorityVote

    assert MajorityVote(0.28).kept([True] * 7 + [False] * 18)  # 0.28 * 25 is 7.000000000000001 in floats
    assert not MajorityVote(0.28).kept([True] * 6 + [False] * 19)
    assert MajorityVote(0.0).kept([False, False]) and MajorityVote(1.0).kept([True, True])
    with pytest.raises(ValueError, match="min_share must be a number in"):
        MajorityVote(True)


def test_the_guard_metrics_are_only_for_label_free_play() -> None:
    env = make("proposer_solver-v0", num_solvers=2, verifier="exact")
    assert "metrics" not in env.spec.outcomes["solver"]
    env.reset(seed=0)
    act(env, "proposer", "2+2")
    for i in range(2):
        act(env, f"solver_{i}", "4")
    assert "metrics" not in env.infos["solver_0"]
    labelfree = make("proposer_solver-v0", num_solvers=2, verifier="majority")
    labelfree.reset(seed=0)
    act(labelfree, "proposer", "2+")  # invalid: the game ends before any answer
    assert labelfree.infos["solver_0"]["metrics"] == {"majority_correct": None, "true_correct": None}


def test_math_verify_game_accepts_equivalent_forms() -> None:
    env = make("proposer_solver-v0", num_solvers=3, verifier="math_verify")
    env.reset(seed=0)
    act(env, "proposer", "6*7")
    for s, reply in zip(["solver_0", "solver_1", "solver_2"], ["$42$", "\\boxed{42}", "42.5"]):
        rewards = act(env, s, reply)
    assert rewards == {"proposer": pytest.approx(1 / 3), "solver_0": 1.0, "solver_1": 1.0, "solver_2": 0.0}


def test_dataset_game_draws_a_problem_with_the_game_rng(heldout_path: str) -> None:
    env = make("proposer_solver-v0", num_solvers=2, source="dataset", dataset=heldout_path)
    assert env.possible_agents == ["solver_0", "solver_1"]
    assert env.spec.roles == ("solver",) and env.spec.reward_range == (0.0, 1.0) and env.spec.max_turns == 2
    problems = []
    for seed in range(5):
        env.reset(seed=seed)
        problems.append(env.observe("solver_0")["text"])
    assert len(set(problems)) > 1
    env.reset(seed=3)
    assert env.observe("solver_1")["text"] == problems[3]
    question = problems[3]
    oracle = SCRIPTED["solver"]["oracle"](question, np.random.default_rng(0))
    assert act(env, "solver_0", oracle) == zeros("solver_0", "solver_1")
    assert act(env, "solver_1", "not a number") == {"solver_0": 1.0, "solver_1": 0.0}
    assert env.infos["solver_0"]["problem"] == question and env.infos["solver_0"]["success_rate"] == 0.5
    assert env.infos["solver_0"]["reference"] == env.infos["solver_1"]["reference"] == oracle  # the file's answer


def test_dataset_question_is_shown_exactly_and_fits_the_observation_space(write_jsonl) -> None:
    question = "Combien font 7 × 6 ? Répondez en chiffres."
    env = make("proposer_solver-v0", num_solvers=1, source="dataset", dataset=write_jsonl([{"question": question, "answer": "42"}]))
    env.reset(seed=0)
    obs = env.observe("solver_0")
    assert obs["text"] == question
    assert env.observation_space("solver_0").contains(obs)
    env.step("42")
    assert env.rewards == {"solver_0": 1.0}


# ----------------------------------------------------------------------------- invalid moves
@pytest.mark.parametrize(
    "proposal, reason",
    [
        ("garbage!", "not a problem of the form"),
        ("9**9**9**9", "not a problem of the form"),
        ("(" * 10_000 + "1" + ")" * 10_000, "characters; a problem has at most"),
        ("7" * 1_000_000, "characters; a problem has at most"),
        ("100+1", "outside the domain"),
        ("", "not a problem of the form"),
    ],
)
def test_pathological_proposals_get_the_penalty_and_end_the_game_fast(proposal: str, reason: str) -> None:
    env = make("proposer_solver-v0", num_solvers=3, invalid_penalty=-0.5)
    env.reset(seed=0)
    start = time.perf_counter()
    env.step(proposal)
    assert time.perf_counter() - start < 1.0
    assert env.rewards == {"proposer": -0.5, "solver_0": 0.0, "solver_1": 0.0, "solver_2": 0.0}
    assert all(env.terminations.values()) and env.ready_agents() == []
    assert env.infos["proposer"]["invalid"] is True and reason in env.infos["proposer"]["reason"]
    assert env.infos["solver_1"]["invalid"] is False and "proposer's move was invalid" in env.infos["solver_1"]["reason"]
    assert env.infos["solver_1"]["problem"] is None and env.infos["solver_1"]["correct"] is None
    assert all(env.infos[s]["reference"] is None for s in ("solver_0", "solver_1", "solver_2"))  # no answer is known
    assert env.observe("solver_0")["observation"].tolist() == [PHASE_OVER, 1]
    assert drain(env) == {"proposer": -0.5, "solver_0": 0.0, "solver_1": 0.0, "solver_2": 0.0}


def test_out_of_domain_operator_is_invalid() -> None:
    env = make("proposer_solver-v0", num_solvers=1, ops="+", max_operand=9)
    env.reset(seed=0)
    env.step("3*4")
    assert env.rewards["proposer"] == -1.0 and "outside the domain" in env.infos["proposer"]["reason"]
    env.reset(seed=0)
    env.step("3+4")
    assert env.agent_selection == "solver_0" and env.observe("solver_0")["text"] == "3+4"


def test_step_outside_an_episode_is_a_clear_error() -> None:
    env = make("proposer_solver-v0", num_solvers=1)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("1+1")
    env.reset(seed=0)
    env.step("1+1")
    env.step("2")
    drain(env)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("again")


def test_finished_seats_only_accept_none_and_non_text_actions_are_a_type_error() -> None:
    env = make("proposer_solver-v0", num_solvers=1)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(42)  # type: ignore[arg-type]
    env.step("nope")
    with pytest.raises(ValueError, match="only valid action is None"):
        env.step("1")


# ----------------------------------------------------------------------------- ready seats
def test_ready_agents_lists_unanswered_solvers_whose_observations_do_not_change() -> None:
    env = make("proposer_solver-v0", num_solvers=4)
    env.reset(seed=0)
    assert env.ready_agents() == ["proposer"]
    assert env.observe("solver_0") ["observation"].tolist() == [PHASE_PROPOSE, 1]
    env.step("5*5")
    assert env.ready_agents() == SOLVERS4
    before = {s: env.observe(s) for s in SOLVERS4}
    for i, s in enumerate(SOLVERS4):
        assert env.agent_selection == s
        for other in SOLVERS4[i:]:
            assert env.observe(other)["text"] == before[other]["text"] == "5*5"
            assert env.observe(other)["observation"].tolist() == before[other]["observation"].tolist() == [PHASE_SOLVE, 1 + SOLVERS4.index(other)]
        env.step("25")
        assert env.ready_agents() == SOLVERS4[i + 1:]
    assert env.ready_agents() == []


def test_dataset_game_starts_with_every_solver_ready(heldout_path: str) -> None:
    env = make("proposer_solver-v0", num_solvers=3, source="dataset", dataset=heldout_path)
    env.reset(seed=0)
    assert env.ready_agents() == ["solver_0", "solver_1", "solver_2"]


# ----------------------------------------------------------------------------- reference answers
def test_reference_is_what_the_oracle_writes_for_every_proposed_problem() -> None:
    env = make("proposer_solver-v0", num_solvers=2, ops="+-*")
    rng = np.random.default_rng(0)
    for seed in range(30):
        env.reset(seed=seed)
        problem = SCRIPTED["proposer"]["random"](PROPOSER_REQUEST, rng)
        act(env, "proposer", problem)
        canonical = env.observe("solver_0")["text"]
        oracle = SCRIPTED["solver"]["oracle"](canonical, rng)
        act(env, "solver_0", oracle)
        act(env, "solver_1", "no idea")
        assert env.infos["solver_0"]["reference"] == env.infos["solver_1"]["reference"] == oracle
        assert env.infos["solver_0"]["correct"] is True and env.infos["solver_1"]["correct"] is False


@pytest.mark.parametrize(
    "answer, verifier, reference",
    [(" 007 ", "exact", "7"), ("-18", "exact", "-18"), ("-0", "exact", "0"),
     (" \\frac{1}{2} ", "math_verify", "\\frac{1}{2}"), ("   ", "majority", None)],
)
def test_reference_of_a_dataset_answer_is_canonical(write_jsonl, answer: str, verifier: str, reference: str | None) -> None:
    env = make("proposer_solver-v0", num_solvers=1, source="dataset", verifier=verifier,
               dataset=write_jsonl([{"question": "what is it?", "answer": answer}]))
    env.reset(seed=0)
    env.step("7")
    assert env.infos["solver_0"]["reference"] == reference


def test_majority_game_reports_the_true_answer_as_reference() -> None:
    env = make("proposer_solver-v0", num_solvers=3, verifier="majority")
    env.reset(seed=0)
    act(env, "proposer", "2+2")
    for s in ("solver_0", "solver_1", "solver_2"):
        act(env, s, "5")  # a wrong majority wins the game, the reference stays the truth
    assert env.infos["solver_0"]["correct"] is True and env.infos["solver_0"]["reference"] == "4"


# ----------------------------------------------------------------------------- rng, twins, spec
def test_two_copies_with_the_same_seed_draw_the_same_problems_independently(heldout_path: str) -> None:
    a = make("proposer_solver-v0", num_solvers=1, source="dataset", dataset=heldout_path)
    b = make("proposer_solver-v0", num_solvers=1, source="dataset", dataset=heldout_path)
    a.reset(seed=7)
    b.reset(seed=7)
    for _ in range(3):
        a.reset(seed=None)  # a draws on; b must not notice
    b.reset(seed=None)
    c = make("proposer_solver-v0", num_solvers=1, source="dataset", dataset=heldout_path)
    c.reset(seed=7)
    c.reset(seed=None)
    assert b.observe("solver_0")["text"] == c.observe("solver_0")["text"]


def test_scripted_twins() -> None:
    rng = np.random.default_rng(0)
    domain = Domain()
    for _ in range(200):
        assert domain.parse(SCRIPTED["proposer"]["random"](PROPOSER_REQUEST, rng)) is not None
        assert Domain(max_operand=999_999).parse(SCRIPTED["proposer"]["garbage"](PROPOSER_REQUEST, rng)) is None
        assert int(SCRIPTED["solver"]["random"]("1+1", rng)) in range(-10_000, 10_001)
    assert SCRIPTED["solver"]["oracle"]("37+45", rng) == "82"
    assert SCRIPTED["solver"]["oracle"]("123456*2", rng) == "246912"
    assert SCRIPTED["solver"]["oracle"]("what?", rng) == "0"
    assert SCRIPTED["solver"]["always_wrong"]("12*9", rng) == "109"
    assert SCRIPTED["solver"]["always_wrong"]("what?", rng) == "1"


def test_spec_follows_the_arguments() -> None:
    env = make("proposer_solver-v0", num_solvers=6, invalid_penalty=-2.0, format_bonus=0.5)
    assert env.spec.id == "proposer_solver-v0" and env.spec.roles == ("proposer", "solver")
    assert env.spec.reward_range == (-2.0, 1.5) and env.spec.max_turns == 7 and env.spec.zero_sum is False
    assert env.possible_agents == ["proposer"] + [f"solver_{i}" for i in range(6)]
    assert env.role_of("proposer") == "proposer" and env.role_of("solver_5") == "solver"
    with pytest.raises(ValueError, match="unknown seat 'solver_6'"):
        env.role_of("solver_6")


def test_render_ansi_summarises_the_game() -> None:
    env = make("proposer_solver-v0", num_solvers=1, render_mode="ansi")
    env.reset(seed=0)
    env.step("1+2")
    assert "problem='1+2'" in env.render() and "solving" in env.render()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_solvers": 0}, "num_solvers must be an int >= 1, got 0"),
        ({"num_solvers": 2.5}, "num_solvers must be an int >= 1"),
        ({"source": "web"}, "source must be one of"),
        ({"source": "dataset"}, "source='dataset' needs dataset="),
        ({"dataset": "x.jsonl"}, "only read with source='dataset'"),
        ({"verifier": "judge"}, "verifier must be one of"),
        ({"proposer_reward": "novelty"}, "proposer_reward must be one of"),
        ({"band": (0.8, 0.2)}, "0 <= low <= high <= 1"),
        ({"band": (0.2,)}, "band must be a pair"),
        ({"band": "0.2,0.8"}, "band must be a pair"),
        ({"format_bonus": -0.1}, "format_bonus must be >= 0"),
        ({"format_bonus": float("nan")}, "format_bonus must be a finite number"),
        ({"invalid_penalty": 1.0}, "invalid_penalty must be <= 0"),
        ({"max_operand": 0}, "max_operand must be an int in"),
        ({"max_operand": 10**7}, "max_operand must be an int in"),
        ({"ops": "/"}, "ops must be a non-empty string"),
        ({"render_mode": "human"}, "render_mode must be None or one of"),
    ],
)
def test_arguments_are_validated_with_precise_messages(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("*", r"\*")):
        make("proposer_solver-v0", **kwargs)


def test_reset_seeds_the_spaces_reproducibly_and_rejects_bad_seeds() -> None:
    a, b = make("proposer_solver-v0", num_solvers=2), make("proposer_solver-v0", num_solvers=2)
    a.reset(seed=5)
    b.reset(seed=5)
    assert [a.action_space(s).sample() for s in a.possible_agents] == [b.action_space(s).sample() for s in b.possible_agents]
    a.reset(seed=6)
    assert a.action_space("proposer").sample() != b.action_space("proposer").sample()
    with pytest.raises(ValueError, match="seed must be a non-negative int or None"):
        a.reset(seed=-1)
