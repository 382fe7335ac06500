"""proposer_solver_judge-v0: pure rules, score parsing, playthroughs with rewards after every
turn, invalid proposals and scores, pathological strings, ground truth kept out of rewards."""

from __future__ import annotations

import time

import numpy as np
import pytest
from pettingzoo.test import api_test

from cogym.envs import make, scripted_strategies
from cogym.envs.arithmetic import PROPOSER_REQUEST
from cogym.envs.checks import PATHOLOGICAL, check_game
from cogym.envs.proposer_solver_judge import (
    PHASE_JUDGE,
    PHASE_OVER,
    PHASE_PROPOSE,
    PHASE_SOLVE,
    SCRIPTED,
    ProposerSolverJudgeEnv,
    episode_metrics,
    judge_reward,
    proposer_reward,
    solver_reward,
)
from cogym.envs.verdicts import parse_score
from cogym.envs.testing import drain

GAME = "proposer_solver_judge-v0"
SEATS = ("proposer", "solver", "judge")
RNG = np.random.default_rng(0)


def zeros() -> dict[str, float]:
    return dict.fromkeys(SEATS, 0.0)


def play(env: ProposerSolverJudgeEnv, problem: str, answer: str, judgement: str) -> dict[str, float]:
    """One episode by hand, checking rewards after every turn; returns the final rewards."""
    env.reset(seed=0)
    assert env.agent_selection == "proposer" and env.observe("proposer")["text"] == PROPOSER_REQUEST
    env.step(problem)
    assert env.rewards == zeros() and env.agent_selection == "solver" and not any(env.terminations.values())
    env.step(answer)
    assert env.rewards == zeros() and env.agent_selection == "judge" and not any(env.terminations.values())
    env.step(judgement)
    assert all(env.terminations.values())
    return dict(env.rewards)


# ----------------------------------------------------------------------------- pure rules
@pytest.mark.parametrize(
    "text, expected",
    [
        ("0", 0), ("7", 7), (" 10 ", 10), ("7/10", 7), ("10/10.", 10), ("yes", 10), ("Correct!", 10),
        ("no", 0), ("WRONG", 0), ("1", 1),
        ("11", None), ("-1", None), ("7.5", None), ("07", None), ("seven", None), ("", None), ("7/9", None), ("maybe", None),
    ],
)
def test_scores(text: str, expected: int | None) -> None:
    score, reason = parse_score(text)
    assert score == expected
    assert (reason is None) == (expected is not None)


@pytest.mark.parametrize("text", PATHOLOGICAL + ("1" * 1_000_000, "(" * 10_000 + "7"))
def test_pathological_scores_are_read_fast(text: str) -> None:
    start = time.perf_counter()
    for _ in range(100):
        score, reason = parse_score(text)
    assert time.perf_counter() - start < 1.0  # 100 reads: a guard against hangs, not a benchmark
    assert score is None and isinstance(reason, str)


@pytest.mark.parametrize(
    "mode, score, band, expected",
    [
        ("band", 2, (0.2, 0.8), 1.0), ("band", 8, (0.2, 0.8), 1.0), ("band", 5, (0.2, 0.8), 1.0),
        ("band", 1, (0.2, 0.8), 0.0), ("band", 9, (0.2, 0.8), 0.0), ("band", 0, (0.2, 0.8), 0.0), ("band", 10, (0.2, 0.8), 0.0),
        ("band", 7, (0.7, 0.7), 1.0),  # exact edges: 0.7 * 10 is 7.000000000000001 in floats
        ("band", None, (0.0, 1.0), 0.0),
        ("difficulty", 0, (0.2, 0.8), 1.0), ("difficulty", 3, (0.2, 0.8), 0.7), ("difficulty", 10, (0.2, 0.8), 0.0),
        ("difficulty", None, (0.2, 0.8), 0.0),
    ],
)
def test_proposer_reward(mode: str, score: int | None, band: tuple, expected: float) -> None:
    assert proposer_reward(mode, score, band) == pytest.approx(expected)


def test_solver_and_judge_rewards() -> None:
    assert solver_reward(None) == 0.0 and solver_reward(10) == 1.0 and solver_reward(3) == pytest.approx(0.3)
    assert judge_reward(7, "82", -1.0) == 1.0 and judge_reward(0, "82", -1.0) == 1.0
    assert judge_reward(None, "82", -0.5) == -0.5
    # No integer in the reply: only a zero score is consistent.
    assert judge_reward(0, "no idea", -1.0) == 1.0 and judge_reward(3, "no idea", -1.0) == 0.0
    with pytest.raises(ValueError, match="proposer_reward must be one of"):
        proposer_reward("novelty", 5)


def test_metrics() -> None:
    assert episode_metrics(False, None, None) == {"proposal_invalid": 1.0, "solver_correct": None, "judge_invalid": None,
                                                   "judge_score": None, "judge_agrees_with_truth": None, "judge_accepted_wrong": None}
    assert episode_metrics(True, False, 5) == {"proposal_invalid": 0.0, "solver_correct": 0.0, "judge_invalid": 0.0,
                                               "judge_score": 0.5, "judge_agrees_with_truth": 0.0, "judge_accepted_wrong": 1.0}
    assert episode_metrics(True, False, 4)["judge_accepted_wrong"] == 0.0
    assert episode_metrics(True, True, 4)["judge_agrees_with_truth"] == 0.0
    assert episode_metrics(True, True, 10)["judge_accepted_wrong"] is None
    assert episode_metrics(True, True, None)["judge_invalid"] == 1.0


# ----------------------------------------------------------------------------- playthroughs
def test_right_answer_scored_by_the_oracle_judge() -> None:
    env = make(GAME)
    env.reset(seed=0)
    assert [env.observe(a)["observation"].tolist() for a in SEATS] == [[PHASE_PROPOSE, 0], [PHASE_PROPOSE, 1], [PHASE_PROPOSE, 2]]
    assert env.observe("solver")["text"] == "" and env.observe("judge")["text"] == ""
    env.step(" 37 + 45 =")
    assert env.rewards == zeros()
    assert env.observe("solver") ["text"] == "37+45" and env.observe("solver")["observation"].tolist() == [PHASE_SOLVE, 1]
    env.step(SCRIPTED["solver"]["oracle"]("37+45", RNG))
    assert env.rewards == zeros()
    obs = env.observe("judge")
    assert obs["text"] == "37+45=82" and obs["observation"].tolist() == [PHASE_JUDGE, 2]
    env.step(SCRIPTED["judge"]["oracle"](obs["text"], RNG))
    # A perfect score: the band calls the problem trivial, so the proposer gets nothing.
    assert env.rewards == {"proposer": 0.0, "solver": 1.0, "judge": 1.0}
    assert env.infos["solver"]["correct"] is True and env.infos["judge"]["score"] == 10 and env.infos["judge"]["correct"] is True
    assert env.infos["proposer"]["metrics"] == {"proposal_invalid": 0.0, "solver_correct": 1.0, "judge_invalid": 0.0,
                                                "judge_score": 1.0, "judge_agrees_with_truth": 1.0, "judge_accepted_wrong": None}
    assert all(env.infos[a]["invalid"] is False for a in SEATS)
    assert env.observe("judge")["observation"].tolist() == [PHASE_OVER, 2]
    assert drain(env) == {"proposer": 0.0, "solver": 1.0, "judge": 1.0}
    assert env.agents == []


@pytest.mark.parametrize(
    "kwargs, answer, judgement, expected",
    [
        ({}, "82", "5", {"proposer": 1.0, "solver": 0.5, "judge": 1.0}),
        ({}, "82", "no", {"proposer": 0.0, "solver": 0.0, "judge": 1.0}),
        ({}, "81", "8/10", {"proposer": 1.0, "solver": 0.8, "judge": 1.0}),
        ({"band": (0.0, 0.3)}, "81", "0", {"proposer": 1.0, "solver": 0.0, "judge": 1.0}),
        ({"proposer_reward": "difficulty"}, "81", "3", {"proposer": 0.7, "solver": 0.3, "judge": 1.0}),
        ({"proposer_reward": "difficulty"}, "81", "yes", {"proposer": 0.0, "solver": 1.0, "judge": 1.0}),
        ({}, "I give up", "6", {"proposer": 1.0, "solver": 0.6, "judge": 0.0}),  # inconsistent judge
        ({}, "I give up", "0", {"proposer": 0.0, "solver": 0.0, "judge": 1.0}),
    ],
)
def test_reward_table(kwargs: dict, answer: str, judgement: str, expected: dict) -> None:
    env = make(GAME, **kwargs)
    assert play(env, "37+45", answer, judgement) == pytest.approx(expected)


def test_rewards_never_see_the_ground_truth() -> None:
    """The same score gives the same rewards whether the answer is right or wrong; only the metrics differ."""
    env = make(GAME)
    right = play(env, "6*7", "42", "yes")
    right_metrics = env.infos["judge"]["metrics"]
    wrong = play(env, "6*7", "41", "yes")
    wrong_metrics = env.infos["judge"]["metrics"]
    assert right == wrong == {"proposer": 0.0, "solver": 1.0, "judge": 1.0}
    assert right_metrics["solver_correct"] == 1.0 and wrong_metrics["solver_correct"] == 0.0
    assert right_metrics["judge_agrees_with_truth"] == 1.0 and wrong_metrics["judge_agrees_with_truth"] == 0.0
    assert wrong_metrics["judge_accepted_wrong"] == 1.0 and env.infos["solver"]["correct"] is False


def test_always_yes_judge_is_hacked_by_a_wrong_solver() -> None:
    always_yes, always_wrong = SCRIPTED["judge"]["always_yes"], SCRIPTED["solver"]["always_wrong"]
    env = make(GAME)
    for seed in range(10):
        env.reset(seed=seed)
        env.step(SCRIPTED["proposer"]["random"](PROPOSER_REQUEST, np.random.default_rng(seed)))
        env.step(always_wrong(env.observe("solver")["text"], RNG))
        env.step(always_yes(env.observe("judge")["text"], RNG))
        assert env.rewards == {"proposer": 0.0, "solver": 1.0, "judge": 1.0}
        assert env.infos["solver"]["metrics"]["judge_accepted_wrong"] == 1.0
        assert env.infos["judge"]["correct"] is False


def test_the_judge_sees_a_bounded_printable_answer() -> None:
    env = make(GAME)
    env.reset(seed=0)
    env.step("2+2")
    env.step("4\u202e" + "x" * 1_000_000)
    obs = env.observe("judge")
    assert obs["text"] == "2+2=4?" + "x" * 62 and env.observation_space("judge").contains(obs)
    env.step("yes")
    assert env.rewards == {"proposer": 0.0, "solver": 1.0, "judge": 1.0}


# ----------------------------------------------------------------------------- invalid moves
@pytest.mark.parametrize(
    "proposal, reason",
    [
        ("garbage!", "not a problem of the form"),
        ("9**9**9**9", "not a problem of the form"),
        ("(" * 10_000 + "1" + ")" * 10_000, "characters; a problem has at most"),
        ("7" * 1_000_000, "characters; a problem has at most"),
        ("100+1", "outside the domain"),
    ],
)
def test_invalid_proposals_end_the_game_with_the_penalty(proposal: str, reason: str) -> None:
    env = make(GAME, invalid_penalty=-0.5)
    env.reset(seed=0)
    start = time.perf_counter()
    env.step(proposal)
    assert time.perf_counter() - start < 1.0
    assert env.rewards == {"proposer": -0.5, "solver": 0.0, "judge": 0.0}
    assert all(env.terminations.values()) and env.ready_agents() == []
    assert env.infos["proposer"]["invalid"] is True and reason in env.infos["proposer"]["reason"]
    for seat in ("solver", "judge"):
        assert env.infos[seat]["invalid"] is False and "proposer's move was invalid" in env.infos[seat]["reason"]
        assert env.infos[seat]["correct"] is None and env.infos[seat]["problem"] is None
    assert env.infos["judge"]["score"] is None and env.infos["judge"]["metrics"]["proposal_invalid"] == 1.0
    assert env.observe("solver")["text"] == "" and env.observe("judge")["text"] == ""
    assert drain(env) == {"proposer": -0.5, "solver": 0.0, "judge": 0.0}


@pytest.mark.parametrize("judgement", ["maybe", "11", "82", "", "9**9**9**9", "7" * 1_000_000, "(" * 10_000 + "5" + ")" * 10_000])
def test_invalid_scores_get_the_penalty_and_pay_nobody(judgement: str) -> None:
    env = make(GAME, proposer_reward="difficulty", invalid_penalty=-2.0)
    start = time.perf_counter()
    assert play(env, "3*4", "12", judgement) == {"proposer": 0.0, "solver": 0.0, "judge": -2.0}
    assert time.perf_counter() - start < 1.0
    assert env.spec.reward_range == (-2.0, 1.0)
    j = env.infos["judge"]
    assert j["invalid"] is True and j["score"] is None and j["correct"] is False and isinstance(j["reason"], str)
    assert env.infos["solver"]["invalid"] is False and "judge's score was invalid" in env.infos["solver"]["reason"]
    assert j["metrics"]["judge_invalid"] == 1.0 and j["metrics"]["judge_score"] is None and j["metrics"]["solver_correct"] == 1.0


@pytest.mark.parametrize("answer", PATHOLOGICAL)
def test_pathological_answers_are_scored_fast(answer: str) -> None:
    env = make(GAME)
    start = time.perf_counter()
    play(env, "6*7", answer, "5")
    assert time.perf_counter() - start < 1.0
    assert env.infos["solver"]["correct"] is False


def test_step_misuse_is_a_clear_error() -> None:
    env = make(GAME)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("1+1")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(None)  # type: ignore[arg-type]
    env.step("x")
    with pytest.raises(ValueError, match="only valid action is None"):
        env.step("1+1")


# ----------------------------------------------------------------------------- twins, spec, args
def test_scripted_twins() -> None:
    rng = np.random.default_rng(0)
    assert set(scripted_strategies(GAME)) == set(SEATS)
    assert set(SCRIPTED["proposer"]) == {"random", "garbage"}
    assert set(SCRIPTED["solver"]) == {"oracle", "always_wrong", "random"}
    assert set(SCRIPTED["judge"]) == {"oracle", "always_yes", "random"}
    assert SCRIPTED["judge"]["oracle"]("12*9=108", rng) == "10" and SCRIPTED["judge"]["oracle"]("12*9=10", rng) == "0"
    assert SCRIPTED["judge"]["oracle"]("nonsense", rng) == "0"
    draws = {SCRIPTED["judge"]["random"]("1+1=2", rng) for _ in range(300)}
    assert draws == {str(i) for i in range(11)}


def test_spec_and_spaces() -> None:
    env = make(GAME, invalid_penalty=0.0)
    assert env.spec.id == GAME and env.spec.roles == SEATS and env.spec.max_turns == 3
    assert env.spec.reward_range == (0.0, 1.0) and env.spec.zero_sum is False
    assert env.possible_agents == list(SEATS) and [env.role_of(a) for a in SEATS] == list(SEATS)
    assert env.observation_space("judge")["text"].max_length == 32 + 1 + 64
    assert env.observation_space("proposer")["text"].max_length == len(PROPOSER_REQUEST)


def test_render_ansi() -> None:
    env = make(GAME, render_mode="ansi")
    env.reset(seed=0)
    env.step("1+2")
    env.step("3")
    assert "judging" in env.render() and "problem='1+2'" in env.render()


def test_domain_arguments_bound_proposals() -> None:
    env = make(GAME, max_operand=9, ops="+")
    env.reset(seed=0)
    env.step("3*4")
    assert env.rewards["proposer"] == -1.0 and "outside the domain" in env.infos["proposer"]["reason"]
    env.reset(seed=0)
    env.step("3+4")
    assert env.agent_selection == "solver"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"proposer_reward": "novelty"}, "proposer_reward must be one of"),
        ({"proposer_reward": "difficulty", "band": (0.1, 0.9)}, "band is only used with proposer_reward='band'"),
        ({"band": (0.8, 0.2)}, "0 <= low <= high <= 1"),
        ({"band": (0.2,)}, "band must be a pair"),
        ({"band": "0.2,0.8"}, "band must be a pair"),
        ({"band": (0.2, float("nan"))}, "band must hold two finite numbers"),
        ({"invalid_penalty": 1.0}, "invalid_penalty must be <= 0"),
        ({"invalid_penalty": "-1"}, "invalid_penalty must be a finite number"),
        ({"max_operand": 0}, "max_operand must be an int in"),
        ({"ops": "/"}, "ops must be a non-empty string"),
        ({"render_mode": "human"}, "render_mode must be None or one of"),
    ],
)
def test_arguments_are_validated_with_precise_messages(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(GAME, **kwargs)


# ----------------------------------------------------------------------------- contracts
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kwargs", [{}, {"proposer_reward": "difficulty", "invalid_penalty": -0.25}])
def test_pettingzoo_api_test(kwargs: dict) -> None:
    api_test(make(GAME, **kwargs), num_cycles=200)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"proposer_reward": "difficulty"},
        {"band": (0.0, 0.5), "invalid_penalty": 0.0, "max_operand": 9, "ops": "+"},
    ],
)
def test_check_game_variants(kwargs: dict) -> None:
    check_game(GAME, kwargs, episodes=12)
