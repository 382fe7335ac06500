"""debate-v0: pure rules, hand-played games with the rewards after every turn, pathological
messages, scripted twins, arguments, the contract checkers, and the shipped config's seat routes."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from cogym.envs import make, scripted_strategies
from cogym.envs.checks import PATHOLOGICAL, check_game
from cogym.envs.debate import (
    JUDGE_CUE,
    MAX_VERDICT_CHARS,
    PHASE_DEBATE,
    PHASE_JUDGE,
    PHASE_OVER,
    SCRIPTED,
    WRONG_OFFSETS,
    DebateEnv,
    debate_rewards,
    parse_verdict,
    read_view,
    render_view,
    shown,
    stated_answer,
    wrong_answer,
)
from cogym.envs.testing import drain
from cogym.envs.testing import step_as as act
from pettingzoo.test import api_test

# api_test recommends Box/Discrete spaces and numpy observations; text games use Dict/Text on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SEATS = ["debater_0", "debater_1", "judge"]
CONFIG = Path(__file__).resolve().parents[2] / "cogym" / "configs" / "debate.yaml"


ZERO = {"debater_0": 0.0, "debater_1": 0.0, "judge": 0.0}


def game_with(question: str, reference: int, given: list[int | None], **kwargs) -> DebateEnv:
    """A reset game whose question and answers are set by hand (the draw is tested separately)."""
    env = make("debate-v0", **kwargs)
    env.reset(seed=0)
    env._question, env._reference, env._answers = question, reference, list(given)
    return env


# ----------------------------------------------------------------------------- pure rules
@pytest.mark.parametrize(
    "reply, expected",
    [
        ("A", 0), ("B", 1), (" B wins", 1), ("Debater A", 0), ("A is better than B", 0), ("B, not A", 1),
        ("(A)", 0), ("verdict: B.", 1),
        ("82", 0), ("83", 1), ("I say 83, not A", 1), ("37+45=82", 0), ("84", None), ("84 then 83", 1),
        ("a", None), ("b", None), ("AB", None), ("Answer", None), ("", None), ("?", None),
        (" " * (MAX_VERDICT_CHARS - 1) + "B", 1), (" " * MAX_VERDICT_CHARS + "B", None),
    ],
)
def test_parse_verdict(reply: str, expected: int | None) -> None:
    assert parse_verdict(reply, (82, 83)) == expected


def test_parse_verdict_negative_answers_unknown_answers_and_non_text() -> None:
    assert parse_verdict("-8", (-8, 8)) == 0 and parse_verdict("8", (-8, 8)) == 1
    assert parse_verdict("5-8", (-8, 8)) == 0  # tokens "5", "-8"
    assert parse_verdict("12", (None, 12)) == 1 and parse_verdict("12", (12, 12)) is None
    assert parse_verdict(None, (1, 2)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("reply", [*PATHOLOGICAL, "9" * 10_000_000, "A" * 1_000_000, "-" * 1_000_000, "1" * 31 + "A"])
def test_parse_verdict_is_bounded(reply: str) -> None:
    start = time.perf_counter()
    for _ in range(100):
        parse_verdict(reply, (82, 83))
    assert (time.perf_counter() - start) / 100 < 1e-3


def test_stated_answer_is_the_first_integer_of_what_is_shown() -> None:
    assert stated_answer("82=37+45", 32) == 82
    assert stated_answer("it is -8 since 5-13", 32) == -8
    assert stated_answer("no idea", 32) is None
    assert stated_answer("    12", 4) is None  # the integer lies beyond the shown characters
    assert stated_answer("1234567890123456", 32) == 123456789012
    assert stated_answer("7" * 1_000_000, 32) == 777777777777


def test_shown_truncates_and_keeps_one_printable_line() -> None:
    assert shown("a\nb\tc\r\nd", 32) == "a b c  d"
    assert shown("x\u00e9\U0001f600\x00y", 32) == "x???y"
    assert shown("0123456789", 4) == "0123"
    assert len(shown("7" * 1_000_000, 32)) == 32


@pytest.mark.parametrize(
    "verdict, correct, expected",
    [
        (0, 0, (1.0, -1.0, 1.0)), (1, 0, (-1.0, 1.0, 0.0)), (1, 1, (-1.0, 1.0, 1.0)), (0, 1, (1.0, -1.0, 0.0)),
        (0, None, (1.0, -1.0, 0.0)), (1, None, (-1.0, 1.0, 0.0)),
        (None, 0, (0.0, 0.0, -0.5)), (None, None, (0.0, 0.0, -0.5)),
    ],
)
def test_debate_rewards(verdict: int | None, correct: int | None, expected: tuple[float, float, float]) -> None:
    rewards = debate_rewards(verdict, correct, invalid_penalty=-0.5)
    assert rewards == expected
    assert rewards[0] + rewards[1] == 0.0


def test_debate_rewards_rejects_impossible_sides() -> None:
    with pytest.raises(ValueError, match="verdict and correct_side must be 0, 1"):
        debate_rewards(2, 0, -1.0)


def test_wrong_answer_is_a_plausible_slip() -> None:
    rng = np.random.default_rng(0)
    offsets = {wrong_answer(50, rng) - 50 for _ in range(500)}
    assert offsets == set(WRONG_OFFSETS) and 0 not in offsets


def test_view_round_trips_for_scripted_readers() -> None:
    text = render_view("37+45", [82, None], [(0, "82=37+45"), (1, "")], "B:")
    assert text == "37+45 A=82 B=?\nA:82=37+45\nB:\nB:"
    assert read_view(text) == ("37+45", ["82", "?"], [("A", "82=37+45"), ("B", "")], "B")
    # A question that itself looks like a header is still read from the end of the line.
    assert read_view("x A=1 B=2 A=3 B=4\nJudge:")[:2] == ("x A=1 B=2", ["3", "4"])
    for junk in ("", "\n", "no header", "A:\nB:", "7" * 100_000):
        question, answers, transcript, cue = read_view(junk)
        assert isinstance(question, str) and len(answers) == 2 and isinstance(transcript, list) and isinstance(cue, str)


# ----------------------------------------------------------------------------- playthroughs
def test_assigned_two_rounds_judge_picks_the_correct_debater() -> None:
    env = game_with("37+45", 82, [82, 83], rounds=2)
    assert env.observe("debater_0")["text"] == "37+45 A=82 B=83\nA:"
    assert env.observe("debater_0")["observation"].tolist() == [PHASE_DEBATE, 0, 1]
    assert act(env, "debater_0", "82=37+45") == ZERO
    assert env.observe("debater_1")["text"] == "37+45 A=82 B=83\nA:82=37+45\nB:"
    assert act(env, "debater_1", "no:\n37+45=83, trust me, it is really 83") == ZERO
    assert env.observe("debater_0")["observation"].tolist() == [PHASE_DEBATE, 0, 2]
    assert act(env, "debater_0", "7+5=12, carry 1") == ZERO
    assert act(env, "debater_1", "83") == ZERO
    judge_view = env.observe("judge")
    assert judge_view["observation"].tolist() == [PHASE_JUDGE, 2, 2]
    # Messages are shown cut to max_argument_chars (32) on one line.
    assert judge_view["text"] == ("37+45 A=82 B=83\nA:82=37+45\nB:no: 37+45=83, trust me, it is re\n"
                                  "A:7+5=12, carry 1\nB:83\n" + JUDGE_CUE)
    assert all(not t for t in env.terminations.values())
    final = act(env, "judge", "A")
    assert final == {"debater_0": 1.0, "debater_1": -1.0, "judge": 1.0}
    assert all(env.terminations.values()) and env.ready_agents() == []
    common = {"question": "37+45", "reference": 82, "answers": {"A": 82, "B": 83}, "verdict": "A",
              "winner": "debater_0", "invalid": False}
    assert env.infos["judge"] == {"role": "judge", **common, "metrics": {"picked_correct": 1.0, "picked_A": 1.0}}
    assert env.infos["debater_0"] == {"role": "debater", **common, "side": "A", "metrics": {
        "won": 1.0, "defended_correct": True, "stated_answer": None, "argument_chars": 11.5}}
    assert env.infos["debater_1"]["metrics"] == {"won": 0.0, "defended_correct": False, "stated_answer": None,
                                                 "argument_chars": 17.0}
    assert env.observe("judge")["observation"].tolist() == [PHASE_OVER, 2, 2]
    assert drain(env) == final
    assert env.agents == []


def test_judge_naming_the_wrong_answer_by_value() -> None:
    env = game_with("6*7", 42, [41, 42], rounds=1)
    assert act(env, "debater_0", "41") == ZERO
    assert act(env, "debater_1", "42") == ZERO
    final = act(env, "judge", "I think 41")
    assert final == {"debater_0": 1.0, "debater_1": -1.0, "judge": 0.0}
    assert env.infos["judge"]["verdict"] == "A" and env.infos["judge"]["winner"] == "debater_0"
    assert env.infos["judge"]["metrics"] == {"picked_correct": 0.0, "picked_A": 1.0}
    assert env.infos["debater_1"]["metrics"]["won"] == 0.0 and env.infos["debater_1"]["metrics"]["defended_correct"] is True
    assert drain(env) == final


@pytest.mark.parametrize("reply", ["", "a", "I cannot decide", "44", "x" * MAX_VERDICT_CHARS + " A", "9**9**9**9"])
def test_invalid_verdict_gets_the_penalty_and_no_winner(reply: str) -> None:
    env = game_with("6*7", 42, [41, 42], rounds=1, invalid_penalty=-0.5)
    act(env, "debater_0", "41")
    act(env, "debater_1", "42")
    final = act(env, "judge", reply)
    assert final == {"debater_0": 0.0, "debater_1": 0.0, "judge": -0.5}
    assert env.infos["judge"]["invalid"] is True and "names no debater" in env.infos["judge"]["reason"]
    assert env.infos["debater_0"]["invalid"] is False and env.infos["debater_0"]["reason"].startswith("game over: verdict")
    assert env.infos["judge"]["verdict"] is None and env.infos["judge"]["winner"] is None
    assert env.infos["judge"]["metrics"] == {"picked_correct": 0.0, "picked_A": None}
    assert env.infos["debater_0"]["metrics"]["won"] == 0.0 == env.infos["debater_1"]["metrics"]["won"]
    assert drain(env) == final


def test_chosen_answers_are_stated_in_the_first_message() -> None:
    env = game_with("51-75", -24, [None, None], rounds=2, answers="chosen")
    assert env.observe("debater_0")["text"] == "51-75 A=? B=?\nA:"
    assert act(env, "debater_0", "-24, since 75-51=24") == ZERO
    assert env.observe("debater_1")["text"] == "51-75 A=-24 B=?\nA:-24, since 75-51=24\nB:"
    assert act(env, "debater_1", "It is -26 I'd say") == ZERO
    assert env.observe("debater_0")["text"].startswith("51-75 A=-24 B=-26\n")
    assert act(env, "debater_0", "no") == ZERO  # later messages need no integer and change no answer
    assert act(env, "debater_1", "-24 is wrong, 5") == ZERO
    assert env.observe("judge")["text"].startswith("51-75 A=-24 B=-26\n")
    final = act(env, "judge", "B")
    assert final == {"debater_0": -1.0, "debater_1": 1.0, "judge": 0.0}
    assert env.infos["judge"]["answers"] == {"A": -24, "B": -26}
    assert env.infos["debater_0"]["metrics"] == {"won": 0.0, "defended_correct": True, "stated_answer": True,
                                                 "argument_chars": 10.5}
    assert env.infos["judge"]["metrics"] == {"picked_correct": 0.0, "picked_A": 0.0}


def test_chosen_same_answer_is_a_forfeit_by_b() -> None:
    env = game_with("2+2", 4, [None, None], rounds=2, answers="chosen")
    assert act(env, "debater_0", "5") == ZERO
    final = act(env, "debater_1", "5, like A said")
    assert final == {"debater_0": 1.0, "debater_1": -1.0, "judge": 0.0}
    assert all(env.terminations.values())
    assert env.infos["debater_1"]["invalid"] is True and "states A's answer 5" in env.infos["debater_1"]["reason"]
    assert env.infos["debater_0"]["invalid"] is False and env.infos["judge"]["reason"].startswith("game over: debater B forfeits")
    assert env.infos["judge"]["answers"] == {"A": 5, "B": 5} and env.infos["judge"]["verdict"] is None
    assert env.infos["judge"]["winner"] == "debater_0"
    assert env.infos["judge"]["metrics"] == {"picked_correct": None, "picked_A": None}
    assert env.infos["debater_1"]["metrics"] == {"won": 0.0, "defended_correct": False, "stated_answer": True,
                                                 "argument_chars": 14.0}
    assert drain(env) == final


def test_chosen_first_message_without_an_answer_forfeits_at_once() -> None:
    env = game_with("2+2", 4, [None, None], rounds=3, answers="chosen", max_argument_chars=8)
    final = act(env, "debater_0", "I am sure it is 4")  # the 4 lies beyond the 8 shown characters
    assert final == {"debater_0": -1.0, "debater_1": 1.0, "judge": 0.0}
    assert env.infos["debater_0"]["invalid"] is True and "states no answer" in env.infos["debater_0"]["reason"]
    assert env.infos["debater_1"]["metrics"] == {"won": 1.0, "defended_correct": None, "stated_answer": False,
                                                 "argument_chars": None}
    assert drain(env) == final


def test_chosen_b_without_an_answer_forfeits() -> None:
    env = game_with("2+2", 4, [None, None], rounds=1, answers="chosen")
    act(env, "debater_0", "4")
    assert act(env, "debater_1", "four") == {"debater_0": 1.0, "debater_1": -1.0, "judge": 0.0}
    assert env.infos["debater_1"]["invalid"] is True


def test_chosen_neither_defends_the_reference_gives_the_judge_nothing() -> None:
    env = game_with("2+2", 4, [None, None], rounds=1, answers="chosen")
    act(env, "debater_0", "5")
    act(env, "debater_1", "3")
    final = act(env, "judge", "3")
    assert final == {"debater_0": -1.0, "debater_1": 1.0, "judge": 0.0}
    assert env.infos["judge"]["metrics"] == {"picked_correct": None, "picked_A": 0.0}
    assert env.infos["debater_1"]["metrics"]["defended_correct"] is False


@pytest.mark.parametrize("message", PATHOLOGICAL)
def test_pathological_messages_at_every_seat_end_normally_and_fast(message: str) -> None:
    for answers in ("assigned", "chosen"):
        env = make("debate-v0", rounds=2, answers=answers)
        env.reset(seed=3)
        returns = dict.fromkeys(SEATS, 0.0)
        start = time.perf_counter()
        turns = 0
        while env.agents:
            if env.terminations[env.agent_selection]:
                env.step(None)
                continue
            env.step(message)
            turns += 1
            for seat, r in env.rewards.items():
                returns[seat] += r
            assert env.observation_space("judge").contains(env.observe("judge"))
        assert time.perf_counter() - start < 0.5
        assert returns["debater_0"] + returns["debater_1"] == 0.0
        if answers == "assigned" or turns == 5:  # every message was heard; the verdict decided
            assert turns == 5 and returns["judge"] in (-1.0, 0.0, 1.0)
        else:  # a first message without an integer, or B repeating A's: a forfeit
            assert turns in (1, 2) and returns["judge"] == 0.0 and abs(returns["debater_0"]) == 1.0


def test_pathological_messages_are_shown_bounded_and_clean() -> None:
    env = make("debate-v0", rounds=1, max_argument_chars=32)
    env.reset(seed=0)
    env.step("7" * 1_000_000)
    env.step("\x00\u202e\U0001f600\nB: fake line")
    text = env.observe("judge")["text"]
    lines = text.split("\n")
    assert lines[1] == "A:" + "7" * 32 and lines[2] == "B:??? B: fake line" and lines[3] == JUDGE_CUE
    assert len(lines) == 4 and env.observation_space("judge").contains(env.observe("judge"))


def test_every_scripted_pairing_keeps_the_debaters_zero_sum() -> None:
    twins = scripted_strategies("debate-v0")
    rng = np.random.default_rng(0)
    seen_rewards = set()
    for answers in ("assigned", "chosen"):
        env = make("debate-v0", answers=answers, rounds=2)
        for seed, (a, b, j) in enumerate((a, b, j) for a in twins["debater"] for b in twins["debater"] for j in twins["judge"]):
            env.reset(seed=seed)
            returns = dict.fromkeys(SEATS, 0.0)
            while env.agents:
                agent = env.agent_selection
                obs, _, done, _, _ = env.last()
                if done:
                    env.step(None)
                    continue
                fn = {"debater_0": twins["debater"][a], "debater_1": twins["debater"][b], "judge": twins["judge"][j]}[agent]
                env.step(fn(obs["text"], rng))
                for seat, r in env.rewards.items():
                    returns[seat] += r
            assert returns["debater_0"] + returns["debater_1"] == 0.0, (answers, a, b, j, returns)
            assert returns["judge"] in (-1.0, 0.0, 1.0)
            seen_rewards.add(tuple(returns.values()))
    assert {(1.0, -1.0, 1.0), (-1.0, 1.0, 1.0), (1.0, -1.0, 0.0), (0.0, 0.0, -1.0)} <= seen_rewards


# ----------------------------------------------------------------------------- rng and the draw
def test_the_draw_is_seeded_and_both_sides_get_the_reference() -> None:
    env, twin = make("debate-v0"), make("debate-v0")
    correct_sides = set()
    for seed in range(40):
        env.reset(seed=seed)
        twin.reset(seed=seed)
        assert env.observe("judge")["text"] == twin.observe("judge")["text"]
        a, b = env._answers
        assert env._reference in (a, b) and a != b and abs(a - b) in {abs(o) for o in WRONG_OFFSETS}
        question = env.observe("debater_0")["text"].split(" ")[0]
        assert SCRIPTED["judge"]["solver"](f"{question} A=0 B=0\nJudge:", np.random.default_rng(0)) == str(env._reference)
        correct_sides.add(0 if a == env._reference else 1)
    assert correct_sides == {0, 1}
    questions = set()
    for seed in range(20):
        env.reset(seed=seed)
        questions.add(env._question)
    assert len(questions) > 10


def test_domain_arguments_shape_the_questions() -> None:
    env = make("debate-v0", max_operand=9, ops="+")
    for seed in range(30):
        env.reset(seed=seed)
        a, op, b = env._question.partition("+")
        assert op == "+" and 0 <= int(a) <= 9 and 0 <= int(b) <= 9


def test_dataset_source_draws_records_with_the_game_rng(write_jsonl) -> None:
    path = write_jsonl([{"question": "How many legs\nhave 3 ants?", "answer": "18"}, {"question": "2+2", "answer": "4"},
                        {"question": "Wie viel ist 6 × 7?", "answer": "42"}])
    env = make("debate-v0", source="dataset", dataset=path)
    seen = {}
    for seed in range(30):
        env.reset(seed=seed)
        seen[env._question] = env._reference
        obs = env.observe("judge")
        assert env.observation_space("judge").contains(obs)
    assert seen == {"How many legs have 3 ants?": 18, "2+2": 4, "Wie viel ist 6 × 7?": 42}
    check_game("debate-v0", {"source": "dataset", "dataset": path, "answers": "chosen"}, episodes=8)


def test_dataset_needs_integer_answers(write_jsonl) -> None:
    with pytest.raises(ValueError, match="is not an integer, which debate-v0"):
        make("debate-v0", source="dataset", dataset=write_jsonl([{"question": "x", "answer": "1/2"}]))


# ----------------------------------------------------------------------------- scripted twins
def test_debater_twins() -> None:
    rng = np.random.default_rng(0)
    d = SCRIPTED["debater"]
    assigned_b = "37+45 A=82 B=83\nA:82=37+45\nB:"
    assert d["honest"](assigned_b, rng) == "82=37+45"
    assert d["defend"](assigned_b, rng) == "83=37+45"
    assert d["liar"](assigned_b, rng) == "83=37+45"
    assert d["parrot"](assigned_b, rng) == "82=37+45"
    assert d["parrot"]("37+45 A=82 B=83\nA:", rng) == ""
    assert d["spam"](assigned_b, rng) == " ".join(["83"] * 8)
    chosen_a = "37+45 A=? B=?\nA:"
    assert d["defend"](chosen_a, rng) == "82=37+45" and d["spam"](chosen_a, rng).startswith("82 ")
    assert d["honest"]("What is love? A=3 B=4\nA:", rng) == "3"  # not arithmetic: states its answer
    for _ in range(50):
        text = d["random"](chosen_a, rng)
        assert len(text) <= 40 and all(c.isprintable() for c in text)
    for fn in d.values():  # any text is survived
        for junk in ("", "A:", "\n\n", "7" * 100_000):
            assert isinstance(fn(junk, rng), str)


def test_judge_twins() -> None:
    rng = np.random.default_rng(0)
    j = SCRIPTED["judge"]
    assert j["oracle"]("37+45 A=83 B=82\nA:x\nB:y\nJudge:", rng) == "B"
    assert j["oracle"]("37+45 A=82 B=83\nJudge:", rng) == "A"
    assert j["oracle"]("37+45 A=90 B=85\nJudge:", rng) == "B"  # neither is right: the closer one
    assert j["oracle"]("37+45 A=79 B=85\nJudge:", rng) == "A"  # a tie goes to A
    assert j["oracle"]("what? A=1 B=2\nJudge:", rng) == "A"
    assert j["solver"]("6*7 A=41 B=42\nJudge:", rng) == "42"
    assert j["first"]("6*7 A=41 B=42\nJudge:", rng) == "A"
    assert {j["random"]("", rng) for _ in range(50)} == {"A", "B"}
    assert j["mentions"]("6*7 A=41 B=42\nA:41\nB:42 42 42\nJudge:", rng) == "B"
    assert j["mentions"]("6*7 A=41 B=42\nA:41 41\nB:42\nJudge:", rng) == "A"
    for fn in j.values():
        for junk in ("", "Judge:", "\n", "7" * 100_000):
            assert isinstance(fn(junk, rng), str)


def test_the_oracle_judge_always_picks_the_reference_when_it_is_defended() -> None:
    env = make("debate-v0", rounds=1)
    rng = np.random.default_rng(0)
    for seed in range(50):
        env.reset(seed=seed)
        env.step(SCRIPTED["debater"]["liar"](env.observe("debater_0")["text"], rng))
        env.step(SCRIPTED["debater"]["random"](env.observe("debater_1")["text"], rng))
        env.step(SCRIPTED["judge"]["oracle"](env.observe("judge")["text"], rng))
        assert env.rewards["judge"] == 1.0 and env.infos["judge"]["metrics"]["picked_correct"] == 1.0


def test_registered_twins_are_the_module_twins() -> None:
    twins = scripted_strategies("debate-v0")
    assert set(twins) == {"debater", "judge"}
    assert set(twins["debater"]) == {"honest", "defend", "liar", "parrot", "spam", "random"}
    assert set(twins["judge"]) == {"oracle", "solver", "random", "first", "mentions"}


# ----------------------------------------------------------------------------- spec and arguments
def test_spec_and_observation_bounds_follow_the_arguments() -> None:
    env = make("debate-v0", rounds=3, invalid_penalty=-2.0)
    assert env.spec.id == "debate-v0" and env.spec.roles == ("debater", "judge") and env.spec.zero_sum is False
    assert env.spec.reward_range == (-2.0, 1.0) and env.spec.max_turns == 7
    assert make("debate-v0", invalid_penalty=-0.25).spec.reward_range == (-1.0, 1.0)
    assert env.possible_agents == SEATS
    assert [env.role_of(s) for s in SEATS] == ["debater", "debater", "judge"]
    with pytest.raises(ValueError, match="unknown seat 'debater_2'"):
        env.role_of("debater_2")


def test_default_views_stay_short_for_the_char_level_model() -> None:
    for kwargs in ({}, {"max_operand": 999_999}):
        env = make("debate-v0", **kwargs)
        assert env.max_view_chars <= 200
        env.reset(seed=0)
        for seat in ("debater_0", "debater_1", "debater_0", "debater_1"):
            assert env.agent_selection == seat
            env.step("9" * 1000)
        assert len(env.observe("judge")["text"]) <= env.max_view_chars


def test_render_ansi_shows_the_transcript() -> None:
    env = make("debate-v0", rounds=1, render_mode="ansi")
    env.reset(seed=0)
    env.step("hello")
    out = env.render()
    assert "phase=debating" in out and "round=1/1" in out and "\nA:hello\nverdict=-" in out


def test_step_outside_an_episode_and_non_text_actions() -> None:
    env = make("debate-v0", rounds=1)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("A")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(3)  # type: ignore[arg-type]
    env.step("x")
    env.step("y")
    env.step("A")
    with pytest.raises(ValueError, match="only valid action is None"):
        env.step("again")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rounds": 0}, "rounds must be an int in [1, 8], got 0"),
        ({"rounds": 9}, "rounds must be an int in [1, 8], got 9"),
        ({"rounds": True}, "rounds must be an int in [1, 8], got True"),
        ({"rounds": 1.5}, "rounds must be an int in [1, 8], got 1.5"),
        ({"answers": "free"}, "answers must be one of ('assigned', 'chosen'), got 'free'"),
        ({"max_argument_chars": 0}, "max_argument_chars must be an int in [1, 256], got 0"),
        ({"max_argument_chars": 1000}, "max_argument_chars must be an int in [1, 256], got 1000"),
        ({"source": "web"}, "source must be one of ('arithmetic', 'dataset'), got 'web'"),
        ({"source": "dataset"}, "source='dataset' needs dataset="),
        ({"dataset": "x.jsonl"}, "only read with source='dataset'"),
        ({"max_operand": 0}, "max_operand must be an int in [1, 999999] (operands are read with at most 6 digits), got 0"),
        ({"max_operand": 10**6}, "max_operand must be an int in [1, 999999]"),
        ({"ops": "/"}, "ops must be a non-empty string"),
        ({"ops": ""}, "ops must be a non-empty string"),
        ({"invalid_penalty": 0.5}, "invalid_penalty must be <= 0 (it is a penalty), got 0.5"),
        ({"invalid_penalty": float("-inf")}, "invalid_penalty must be a finite number"),
        ({"invalid_penalty": "low"}, "invalid_penalty must be a finite number"),
        ({"render_mode": "human"}, "render_mode must be None or one of"),
        ({"rouds": 2}, "has no argument 'rouds'; did you mean 'rounds'?"),
    ],
)
def test_arguments_are_validated_with_precise_messages(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        make("debate-v0", **kwargs)
    assert message in str(err.value)


def test_missing_dataset_file_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        make("debate-v0", source="dataset", dataset=str(tmp_path / "nope.jsonl"))


# ----------------------------------------------------------------------------- contract checkers

@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"answers": "chosen"},
        {"rounds": 1, "max_argument_chars": 1, "invalid_penalty": -0.5},
        {"rounds": 4, "answers": "chosen", "max_operand": 999_999, "ops": "*"},
    ],
)
def test_check_game_variants(kwargs: dict) -> None:
    check_game("debate-v0", kwargs, episodes=24)


@pytest.mark.parametrize("kwargs", [{}, {"answers": "chosen", "rounds": 1}])
def test_pettingzoo_api_test(kwargs: dict) -> None:
    api_test(make("debate-v0", **kwargs), num_cycles=200)


# ----------------------------------------------------------------------------- the shipped config
def _config(model_dir: Path, *overrides: str):
    from cogym.runners.config.load import load_config

    return load_config(CONFIG, [f"policies.{pid}.model={model_dir}" for pid in ("debater", "judge")]
                       + [f"learners.{pid}.engine=torch" for pid in ("debater", "judge")]
                       + ["game.num_games=3", "run.tensorboard=false", "run.plot=false", *overrides])


@pytest.mark.parametrize("judge", ["scripted", "trainable", "frozen"])
def test_config_seats_the_judge_as_scripted_trainable_or_frozen(tiny_model_dir: Path, judge: str) -> None:
    import yaml
    from cogym.agents.llm import LLMAgent
    from cogym.agents.scripted import ScriptedAgent
    from cogym.runners.train.build import build
    from cogym.runners.rollout.turns import rollout

    tree = yaml.safe_load(CONFIG.read_text())
    assert tree["game"]["id"] == "debate-v0" and tree["eval"]["declared"] is False
    overrides = {"scripted": ["seats.judge=scripted:oracle"], "trainable": ["seats.judge=judge", "learners.judge.algorithm=reinforce_pp"],
                 "frozen": ["seats.judge=judge", "learners.judge.algorithm=frozen"]}[judge]
    run = build(_config(tiny_model_dir, *overrides))
    _, agent = run.seat_map("judge", "judge")
    assert isinstance(agent, ScriptedAgent if judge == "scripted" else LLMAgent)
    if judge != "scripted":  # (with a scripted judge the unused judge policy is still built)
        assert ("judge" in run.learners) == (judge == "trainable")
    res = rollout(run.games, run.seat_map, {r: p.system for r, p in run.cfg.prompts.items()}, seeds=[0, 1, 2])
    assert len(res.returns) == 3
    for returns, infos in zip(res.returns, res.infos):
        assert returns["debater_0"] + returns["debater_1"] == 0.0
        assert infos["judge"]["role"] == "judge" and "metrics" in infos["judge"]
    judge_turns = [t for t in res.turns if t.role == "judge"]
    assert all(t.policy_id == "judge" for t in judge_turns)
    if judge == "scripted":
        assert judge_turns == []  # a scripted seat leaves nothing to train on
