"""Verifiers: small objects that say which of a group of responses are correct.

``judge(question, reference, responses) -> list[bool]`` sees the whole group at once, so a
label-free verifier (majority vote) and a reference-based one share one interface. Every check
that reads model output is bounded in size and time, because model output is adversarial input:

* ``ExactArithmetic`` reads at most ``MAX_ANSWER_CHARS`` characters per response (arithmetic.py).
* ``MathVerify`` keeps the last ``max_chars`` characters of each input and runs ``math_verify``
  in the sandbox (``cogym.core.sandbox``: a fork per response with a sub-second timer, killed if
  the timer cannot interrupt it). It is safe to call from any thread (math_verify's own timeout is
  signal based, main thread only, with one-second resolution, and does not save you from
  ``9^9^9^9``). Linux only: the sandbox forks, and the parent waits on pipes with ``select``.
* ``MajorityVote`` compares extracted answers by exact equality: no parsing beyond
  ``extract_answer`` and a bounded prefix.
"""

from __future__ import annotations

import atexit
import math
import numbers
import sys
from pathlib import Path
from typing import Callable, Hashable, Protocol, Sequence, runtime_checkable

from cogym.core.sandbox import Sandbox
from cogym.envs.arithmetic import MAX_ANSWER_CHARS, Domain, extract_answer, is_strict_answer


@runtime_checkable
class Verifier(Protocol):
    """Correctness of each response to ``question``; ``reference`` is the gold answer, if any."""

    def judge(self, question: str, reference: str | None, responses: Sequence[str]) -> list[bool]: ...


def _check_responses(responses: Sequence[str]) -> None:
    # A bare string is a Sequence[str] too; judging its characters one by one is always a bug.
    if isinstance(responses, str):
        raise TypeError("responses must be a sequence of strings, got a single str; wrap it in a list")
    for i, r in enumerate(responses):
        if not isinstance(r, str):
            raise TypeError(f"responses[{i}] must be a str, got {type(r).__name__}")


class ExactArithmetic:
    """Correct when the response's last integer (``extract_answer``) equals the integer answer.

    ``reference`` is the answer as an integer string; when it is None the answer is computed from
    ``question`` with ``domain.parse`` (a question it cannot read is a ``ValueError``).
    """

    name = "exact"

    def __init__(self, domain: Domain | None = None) -> None:
        # The default reads any two-operand problem: the reference computation must not reject
        # a problem just because it is outside one game's sampling range.
        self.domain = domain if domain is not None else Domain(max_operand=999_999)

    def target(self, question: str, reference: str | None) -> int:
        if reference is None:
            problem = self.domain.parse(question)
            if problem is None:
                raise ValueError(f"ExactArithmetic needs a reference answer, or a question like '37+45' to compute it from; got question {question[:40]!r}")
            return problem.answer
        if not is_strict_answer(reference):
            raise ValueError(f"ExactArithmetic needs an integer reference answer (e.g. '-18'), got {reference[:40]!r}; use the 'math_verify' verifier for other answers")
        return int(reference)

    def judge(self, question: str, reference: str | None, responses: Sequence[str]) -> list[bool]:
        _check_responses(responses)
        target = self.target(question, reference)
        return [extract_answer(r) == target for r in responses]


def majority_key(response: str) -> Hashable | None:
    """The answer a response votes for: its last integer, else its normalized text, else None.

    Text is read from a bounded prefix, whitespace-collapsed and case-folded. None (a blank
    response) has no answer and agrees with nothing.
    """
    number = extract_answer(response)
    if number is not None:
        return number
    text = " ".join(response[:MAX_ANSWER_CHARS].split()).casefold()
    return text or None


def majority_rewards(keys: Sequence[Hashable | None]) -> list[bool]:
    """SeRL majority vote over answer keys (docs/algorithms.md §8.3, vector V10).

    ``E[i][j] = keys[i] == keys[j]``, ``count_i = sum_j E[i][j]``, ``k* = argmax count`` (first
    index on ties), reward ``E[k*][i]``. Project decision: a response with no answer (key None)
    is equivalent to nothing, itself included, so it is never rewarded (SeRL's ``E[i][i] = 1``
    would reward the first blank of an all-blank group); V10 is unchanged by this.
    """
    if not keys:
        return []
    eq = [[a is not None and a == b for b in keys] for a in keys]
    counts = [sum(row) for row in eq]
    k = counts.index(max(counts))
    return list(eq[k])


class MajorityVote:
    """Label-free (TTRL/SeRL): the group's majority answer is taken as the reference.

    ``min_share`` (SeRL's majority threshold, in [0, 1]): a group whose majority answer holds fewer
    than ``min_share`` of the votes has no trusted label, and every answer in it is judged False (so a
    group-normalised learner gets no agreement signal from it). 0 keeps every group, an empty or
    all-blank one included."""

    name = "majority"

    def __init__(self, min_share: float = 0.0) -> None:
        if isinstance(min_share, bool) or not isinstance(min_share, numbers.Real) or not 0.0 <= float(min_share) <= 1.0:
            raise ValueError(f"min_share must be a number in [0, 1], got {min_share!r}")
        self.min_share = float(min_share)

    def kept(self, agreed: Sequence[bool]) -> bool:
        """Whether a group whose majority agreement is ``agreed`` (``majority_rewards``) passes the threshold:
        at least ``ceil(min_share * k)`` agreeing votes (with a tolerance, so 0.28 of 25 asks for 7)."""
        return sum(agreed) >= math.ceil(self.min_share * len(agreed) - 1e-9)

    def votes(self, responses: Sequence[str]) -> list[bool]:
        """Which responses agree with the group's majority answer, before the threshold."""
        _check_responses(responses)
        return majority_rewards([majority_key(r) for r in responses])

    def threshold(self, agreed: Sequence[bool]) -> list[bool]:
        """The verdicts ``votes`` leave after the threshold: themselves if the group is kept, else all False."""
        return list(agreed) if self.kept(agreed) else [False] * len(agreed)

    def judge(self, question: str, reference: str | None, responses: Sequence[str]) -> list[bool]:
        return self.threshold(self.votes(responses))


# ------------------------------------------------------------------------------ math_verify
_WORKER_SCRIPT = Path(__file__).with_name("_math_verify_worker.py")
# Extra time the parent waits beyond the call's own timer before it kills the sandboxed worker.
_KILL_MARGIN_S = 0.25


class _MathVerifyWorker(Sandbox):
    """One sandboxed worker per Python process, shared by every MathVerify; calls are serialized."""

    def __init__(self) -> None:
        super().__init__(_WORKER_SCRIPT, "math_verify", f"is math-verify installed in {sys.executable}?")

    def check(self, gold: str, response: str, timeout_s: float) -> bool:
        reply = self.request({"gold": gold, "response": response, "timeout_s": timeout_s}, timeout_s + _KILL_MARGIN_S)
        # No reply: not even the sandbox's kill answered in time; not correct (the worker was replaced). The
        # call that wrote a reply ran the response: only a literal true counts.
        return reply is not None and reply.get("ok") is True


_WORKER = _MathVerifyWorker()
atexit.register(_WORKER.close)


class MathVerify:
    """Free-form math equivalence with ``math_verify`` (``"1/2"`` matches ``"0.5"``, ``"\\frac{1}{2}"``).

    Each input keeps its last ``max_chars`` characters (a worked answer ends with its result);
    each response gets ``timeout_s`` seconds of parse + verify, after which it is not correct.
    The sandboxed worker starts here, so a missing ``math-verify`` fails at construction.
    """

    name = "math_verify"

    def __init__(self, max_chars: int = 1000, timeout_s: float = 0.3) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        if not 0 < timeout_s <= 60:
            raise ValueError(f"timeout_s must be in (0, 60] seconds, got {timeout_s}")
        self.max_chars = max_chars
        self.timeout_s = float(timeout_s)
        _WORKER.start()

    def judge(self, question: str, reference: str | None, responses: Sequence[str]) -> list[bool]:
        _check_responses(responses)
        if reference is None:
            raise ValueError("MathVerify needs a reference answer; use the 'majority' verifier for label-free rewards")
        gold = reference[-self.max_chars:]
        return [_WORKER.check(gold, r[-self.max_chars:], self.timeout_s) for r in responses]


_VERIFIERS: dict[str, Callable[..., Verifier]] = {
    "exact": ExactArithmetic,
    "math_verify": MathVerify,
    "majority": MajorityVote,
}
VERIFIER_NAMES: tuple[str, ...] = tuple(sorted(_VERIFIERS))


def make_verifier(name: str, **options: object) -> Verifier:
    """The verifier called ``name`` (``exact``, ``math_verify``, ``majority``), built with ``options``."""
    if name not in _VERIFIERS:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(VERIFIER_NAMES)}")
    return _VERIFIERS[name](**options)
