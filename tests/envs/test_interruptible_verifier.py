"""interruptible_verifier-v0: the verifier's rule, playthroughs, and the interruption mid-turn at token level."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cogym.envs import make
from cogym.envs.interruptible_verifier import MAX_SCAN_CHARS, SCRIPTED, first_error, is_correct, matched_digits, solver_reward
from cogym.envs.token_level import ByteCodec


# ----------------------------------------------------------------------------- pure rules
@pytest.mark.parametrize(
    ("message", "reference", "error", "matched", "correct"),
    [
        ("82", "82", None, 2, True),
        ("  82 \n", "82", None, 2, True),
        ("8", "82", None, 1, False),  # viable but incomplete
        ("", "82", None, 0, False),
        ("83", "82", 1, 1, False),
        ("823", "82", 2, 2, False),
        ("82 b", "82", 3, 2, False),
        ("x82", "82", 0, 0, False),
        ("-5", "-5", None, 2, True),
        ("5", "-5", 0, 0, False),
    ],
)
def test_first_error_matched_digits_and_correctness(message: str, reference: str, error, matched: int, correct: bool) -> None:
    assert first_error(message, reference) == error
    assert matched_digits(message, reference) == matched
    assert is_correct(message, reference) is correct


def test_reward_gives_partial_credit_for_digits_before_the_first_error() -> None:
    assert solver_reward("82", "82", 0.5) == 1.0
    assert solver_reward("83", "82", 0.5) == pytest.approx(0.25)
    assert solver_reward("93", "82", 0.5) == 0.0
    assert solver_reward("83", "82", 0.0) == 0.0


@pytest.mark.parametrize("message", [" " * 1_000_000, "7" * 1_000_000, "9**9**9**9", "(" * 10_000 + ")" * 10_000])
def test_the_verifier_reads_a_bounded_prefix(message: str) -> None:
    t0 = time.perf_counter()
    error = first_error(message, "77")
    assert time.perf_counter() - t0 < 0.01
    assert error is not None and error <= MAX_SCAN_CHARS


# ----------------------------------------------------------------------------- turn level
def _play_turn_level(env, answers: dict[str, str]) -> dict[str, float]:
    final = {}
    for seat, text in answers.items():
        assert env.agent_selection == seat
        env.step(text)
        final = dict(env.rewards)
    return final


def test_turn_level_playthrough_scores_every_seat_at_the_end() -> None:
    env = make("interruptible_verifier-v0", num_solvers=3, partial_credit=0.5)
    env.reset(seed=3)
    problem = env.observe("solver_0")["text"]
    answer = SCRIPTED["solver"]["oracle"](problem, np.random.default_rng(0))
    assert env.ready_agents() == ["solver_0", "solver_1", "solver_2"]
    env.step(answer)
    assert env.rewards == {"solver_0": 0.0, "solver_1": 0.0, "solver_2": 0.0}
    env.step(SCRIPTED["solver"]["rambler"](problem, np.random.default_rng(0)))
    assert env.rewards == {"solver_0": 0.0, "solver_1": 0.0, "solver_2": 0.0}
    env.step("x")
    assert env.rewards == {"solver_0": 1.0, "solver_1": pytest.approx(0.5), "solver_2": 0.0}
    assert env.infos["solver_1"]["error_at"] == len(answer) + 1  # the space after the answer is fine, the chatter is not
    assert not any(env.infos[s]["interrupted"] for s in env.agents)  # turn level never cuts a message
    assert env.infos["solver_0"]["metrics"] == {"correct": True, "interrupted": False, "matched_digits": float(len(answer))}


# ----------------------------------------------------------------------------- token level
def test_token_level_interrupts_a_wrong_answer_mid_turn() -> None:
    env = make("interruptible_verifier-v0", granularity="token", num_solvers=2)
    codec: ByteCodec = env.codec
    env.reset(seed=5)
    problem = env.env.observe("solver_0")["text"]
    answer = SCRIPTED["solver"]["oracle"](problem, np.random.default_rng(0))
    wrong = SCRIPTED["solver"]["last_digit_wrong"](problem, np.random.default_rng(0))  # right but the last digit, then chatter
    tokens = codec.encode(wrong) + [codec.eos_id]
    emitted = 0
    for token in tokens:
        assert env.agent_selection == "solver_0"
        env.step(token)
        emitted += 1
        if not env.in_message("solver_0"):
            break
    # The verifier stopped solver_0 at the wrong last digit: the rest of its message was never emitted.
    assert emitted == len(answer) < len(tokens) - 1
    assert env.agent_selection == "solver_1"
    assert env.observe("solver_1")["length"].tolist() == [len(codec.prompt_ids("solver", problem)), 0]
    for token in codec.encode(answer) + [codec.eos_id]:
        env.step(token)
    assert env.rewards == {"solver_0": 0.0, "solver_1": 1.0}
    assert env.infos["solver_0"]["interrupted"] is True and env.infos["solver_0"]["error_at"] == len(answer) - 1
    assert env.infos["solver_0"]["metrics"]["matched_digits"] == len(answer) - 1
    assert env.infos["solver_1"]["interrupted"] is False and env.infos["solver_1"]["correct"] is True


def test_a_correct_answer_is_never_interrupted_and_rewards_match_turn_level() -> None:
    turn, token = make("interruptible_verifier-v0", num_solvers=4, partial_credit=0.5), make(
        "interruptible_verifier-v0", granularity="token", num_solvers=4, partial_credit=0.5)
    for seed in range(5):
        turn.reset(seed=seed)
        token.reset(seed=seed)
        problem = turn.observe("solver_0")["text"]
        plays = [SCRIPTED["solver"][name](problem, np.random.default_rng(seed)) for name in ("oracle", "last_digit_wrong", "rambler", "random")]
        turn_rewards = _play_turn_level(turn, dict(zip(turn.possible_agents, plays)))
        for seat, text in zip(token.possible_agents, plays):
            for t in token.codec.encode(text) + [token.codec.eos_id]:
                if token.agent_selection != seat:
                    break  # interrupted
                token.step(t)
        assert dict(token.rewards) == turn_rewards
