"""Verifiers: exact arithmetic, majority vote (V10), math_verify (bounded, thread safe)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cogym.envs import verifiers
from cogym.envs.verifiers import (
    ExactArithmetic,
    MajorityVote,
    MathVerify,
    Verifier,
    majority_key,
    majority_rewards,
    make_verifier,
)

PATHOLOGICAL = {
    "power tower": "9**9**9**9",
    "latex power tower": "\\boxed{9^{9^{9^9}}}",
    "10 000 nested parentheses": "(" * 10_000 + "1" + ")" * 10_000,
    "1 MB of digits": "7" * 1_000_000,
    "500 open braces (slow latex parse)": "$" + "{" * 500 + "$",
}


# ----------------------------------------------------------------------------- exact
def test_exact_compares_the_last_integer_with_the_reference() -> None:
    v = ExactArithmetic()
    assert v.judge("37+45", "82", ["82", "The answer is 82.", "81", "", "82 or 83", "-82"]) == [True, True, False, False, False, False]


def test_exact_computes_the_reference_from_the_question_when_none() -> None:
    v = ExactArithmetic()
    assert v.judge("12*9", None, ["108", "109"]) == [True, False]
    assert v.judge("1-6", None, ["-5", "5"]) == [True, False]


def test_exact_rejects_unusable_references_and_questions() -> None:
    v = ExactArithmetic()
    with pytest.raises(ValueError, match="integer reference"):
        v.judge("q", "1/2", ["1"])
    with pytest.raises(ValueError, match="needs a reference answer"):
        v.judge("what is two plus two", None, ["4"])


def test_responses_must_be_a_list_of_strings() -> None:
    with pytest.raises(TypeError, match="single str"):
        ExactArithmetic().judge("1+1", "2", "2")
    with pytest.raises(TypeError, match=r"responses\[1\] must be a str"):
        MajorityVote().judge("1+1", None, ["2", 2])


# ----------------------------------------------------------------------------- majority
@pytest.mark.parametrize(
    "answers, rewards",
    [
        (["4", "4", "3", "4", "7"], [1, 1, 0, 1, 0]),
        (["2", "2", "2", "2", "2"], [1, 1, 1, 1, 1]),
        (["1", "2", "3", "4", "5"], [1, 0, 0, 0, 0]),  # tie -> first index
        (["a", "b", "a", "b", "c"], [1, 0, 1, 0, 0]),  # a/b tie -> first max = a
    ],
)
def test_majority_vote_reproduces_v10(answers: list[str], rewards: list[int]) -> None:
    assert MajorityVote().judge("q", None, answers) == [bool(r) for r in rewards]
    assert majority_rewards(answers) == [bool(r) for r in rewards]


def test_majority_compares_extracted_answers_not_raw_text() -> None:
    got = MajorityVote().judge("2+2", None, ["The answer is 4", "4", "  4\n", "so 5", "Four"])
    assert got == [True, True, True, False, False]
    assert majority_key("  Hello   World ") == majority_key("hello world")


def test_majority_ignores_the_reference() -> None:
    # Label-free: a wrong majority is still the majority.
    assert MajorityVote().judge("2+2", "4", ["5", "5", "4"]) == [True, True, False]


def test_responses_without_an_answer_agree_with_nothing() -> None:
    assert majority_key("   ") is None
    assert MajorityVote().judge("q", None, ["", " ", "\n"]) == [False, False, False]
    # Two blanks do not form a majority against a single answer.
    assert MajorityVote().judge("q", None, ["", "", "7"]) == [False, False, True]
    assert majority_rewards([]) == []


# ----------------------------------------------------------------------------- math_verify
@pytest.fixture(scope="module")
def math_verify() -> MathVerify:
    return MathVerify()  # starts (or reuses) the worker process once for this module


def test_math_verify_equivalent_forms(math_verify: MathVerify) -> None:
    responses = ["0.5", "1/2", "$\\frac{1}{2}$", "The answer is \\boxed{\\frac12}", "0.6", "2", ""]
    assert math_verify.judge("half of one", "1/2", responses) == [True, True, True, True, False, False, False]
    assert math_verify.judge("q", "\\frac{1}{2}", ["0.5"]) == [True]


def test_math_verify_needs_a_reference(math_verify: MathVerify) -> None:
    with pytest.raises(ValueError, match="needs a reference"):
        math_verify.judge("q", None, ["1"])


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_math_verify_pathological_answers_are_wrong_within_a_second(math_verify: MathVerify, name: str) -> None:
    start = time.perf_counter()
    assert math_verify.judge("q", "1/2", [PATHOLOGICAL[name]]) == [False]
    assert time.perf_counter() - start < 1.0
    assert math_verify.judge("q", "1/2", ["0.5"]) == [True]  # the worker is usable afterwards


def test_math_verify_is_bounded_from_a_non_main_thread(math_verify: MathVerify) -> None:
    results: dict[str, object] = {}

    def work() -> None:
        start = time.perf_counter()
        results["verdicts"] = math_verify.judge("q", "1/2", ["0.5", PATHOLOGICAL["power tower"], "1/3"])
        results["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert results["verdicts"] == [True, False, False]
    assert results["seconds"] < 1.0


def test_math_verify_kills_a_worker_that_stops_answering(math_verify: MathVerify) -> None:
    worker = verifiers._WORKER
    assert math_verify.judge("q", "1/2", ["0.5"]) == [True]
    kills = worker.kills
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGSTOP)  # a worker stuck where no timer can reach it
    start = time.perf_counter()
    assert math_verify.judge("q", "1/2", ["0.5"]) == [False]
    assert time.perf_counter() - start < 1.0
    assert worker.kills == kills + 1
    assert math_verify.judge("q", "1/2", ["0.5"]) == [True]  # a fresh child took over


def test_math_verify_truncates_keeping_the_end(math_verify: MathVerify) -> None:
    v = MathVerify(max_chars=20)
    assert v.judge("q", "1/2", ["x" * 5000 + " so the answer is 0.5"]) == [True]


@pytest.mark.parametrize("kwargs, message", [({"max_chars": 0}, "max_chars"), ({"timeout_s": 0}, "timeout_s")])
def test_math_verify_rejects_bad_options(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MathVerify(**kwargs)


# ----------------------------------------------------------------------------- factory
def test_make_verifier_builds_each_named_verifier() -> None:
    assert isinstance(make_verifier("exact"), ExactArithmetic)
    assert isinstance(make_verifier("majority"), MajorityVote)
    assert isinstance(make_verifier("math_verify"), MathVerify)
    for name in ("exact", "majority", "math_verify"):
        assert isinstance(make_verifier(name), Verifier)


def test_make_verifier_unknown_name_lists_the_names() -> None:
    with pytest.raises(ValueError) as err:
        make_verifier("llm_judge")
    message = str(err.value)
    assert "'llm_judge'" in message
    for name in ("exact", "majority", "math_verify"):
        assert name in message
