"""Pure rules shared by the judging games: verdicts and scores read from model output, and the
``problem=answer`` text a verifier or judge is shown.

Used by ``generator_verifier-v0`` (a verifier seat says whether an answer is right) and
``proposer_solver_judge-v0`` (a judge seat scores a solver's answer). No PettingZoo here, so the
rules are tested alone. Everything that reads model output is bounded: a plain verdict or a score
is at most ``MAX_VERDICT_CHARS`` characters (anything longer is rejected before it is scanned), a
critique is read only in its last ``CRITIQUE_TAIL_CHARS`` characters, and an answer is shown
truncated to ``SHOWN_ANSWER_CHARS``. A megabyte of text or ``9**9**9**9`` costs microseconds.

Verdict vocabulary (case-insensitive, surrounding whitespace and trailing ``.``/``!`` ignored):
accept = ``yes``, ``correct``, ``true`` (and ``1`` where digits are verdicts); reject = ``no``,
``wrong``, ``incorrect``, ``false`` (and ``0``).
"""

from __future__ import annotations

import re

from cogym.envs.arithmetic import ANY_PROBLEM, MAX_ANSWER_CHARS, Problem, extract_answer
from cogym.envs.base import PRINTABLE_CHARSET

ACCEPT_WORDS: frozenset[str] = frozenset({"yes", "correct", "true"})
REJECT_WORDS: frozenset[str] = frozenset({"no", "wrong", "incorrect", "false"})
ACCEPT_DIGIT, REJECT_DIGIT = "1", "0"
MAX_VERDICT_CHARS = 32  # a plain verdict or score message longer than this is not one
CRITIQUE_TAIL_CHARS = 64  # a critique's verdict is its last word, read from this many final characters
MAX_SCORE = 10
# The verifier/judge sees the answer cut to what ExactArithmetic reads, so an oracle that sees
# only the text agrees with the exact ground truth.
SHOWN_ANSWER_CHARS = MAX_ANSWER_CHARS
SEPARATOR = "="

_SCORE_RE = re.compile(r"(10|[0-9])(?:/10)?")


def _normalise(text: str) -> str:
    return text.strip().rstrip(".!").strip().casefold()


def _vocabulary(digits: bool) -> str:
    accept = sorted(ACCEPT_WORDS) + ([ACCEPT_DIGIT] if digits else [])
    reject = sorted(REJECT_WORDS) + ([REJECT_DIGIT] if digits else [])
    return f"accept: {'/'.join(accept)}; reject: {'/'.join(reject)}"


def _word_verdict(word: str, digits: bool) -> bool | None:
    if word in ACCEPT_WORDS or (digits and word == ACCEPT_DIGIT):
        return True
    if word in REJECT_WORDS or (digits and word == REJECT_DIGIT):
        return False
    return None


def _last_word(text: str) -> tuple[str | None, str | None]:
    """The last ASCII-alphanumeric word of ``text``, read from its last ``CRITIQUE_TAIL_CHARS``."""
    tail = text[-CRITIQUE_TAIL_CHARS:]
    end = len(tail)
    while end > 0 and not (tail[end - 1].isascii() and tail[end - 1].isalnum()):
        end -= 1
    if end == 0:
        return None, f"no verdict word in the last {CRITIQUE_TAIL_CHARS} characters of the critique"
    start = end
    while start > 0 and tail[start - 1].isascii() and tail[start - 1].isalnum():
        start -= 1
    if start == 0 and len(text) > len(tail):
        return None, f"the critique's last word is longer than {CRITIQUE_TAIL_CHARS} characters"
    return tail[start:end].casefold(), None


def parse_verdict(text: str, critique: bool = False, digits: bool = True) -> tuple[bool | None, str | None]:
    """``(accepted, None)`` for a verdict, ``(None, reason)`` when ``text`` holds none.

    Plain mode: the whole message is the verdict (at most ``MAX_VERDICT_CHARS`` characters).
    Critique mode (GenRM): the verdict is the last word of the message, so a critique may come
    first; e.g. ``"82 is 37+45. Verdict: yes."`` accepts. ``digits``: ``1``/``0`` count as verdicts.
    """
    if critique:
        word, reason = _last_word(text)
        if word is None:
            return None, reason
    else:
        if len(text) > MAX_VERDICT_CHARS:
            return None, f"verdict has {len(text)} characters; a verdict is one word (at most {MAX_VERDICT_CHARS}), {_vocabulary(digits)}"
        word = _normalise(text)
    accepted = _word_verdict(word, digits)
    if accepted is None:
        where = "the critique's last word" if critique else "verdict"
        return None, f"{where} {word[:MAX_VERDICT_CHARS]!r} is not a verdict ({_vocabulary(digits)})"
    return accepted, None


def parse_score(text: str) -> tuple[int | None, str | None]:
    """``(score, None)`` with a score in ``0..MAX_SCORE``, or ``(None, reason)``.

    The message (at most ``MAX_VERDICT_CHARS`` characters, normalised like a verdict) is an
    integer ``0``..``10``, optionally written ``7/10``; a verdict word counts as 10 (accept) or 0
    (reject). Digits are scores here, never verdicts: ``1`` is 1/10.
    """
    if len(text) > MAX_VERDICT_CHARS:
        return None, f"score has {len(text)} characters; a score is an integer 0..{MAX_SCORE} or a verdict word (at most {MAX_VERDICT_CHARS})"
    word = _normalise(text)
    accepted = _word_verdict(word, digits=False)
    if accepted is not None:
        return (MAX_SCORE if accepted else 0), None
    m = _SCORE_RE.fullmatch(word)
    if m is None:
        return None, f"score {word!r} is not an integer 0..{MAX_SCORE} (e.g. '7' or '7/10') nor a verdict word ({_vocabulary(False)})"
    return int(m.group(1)), None


def show_answer(problem: str, answer: str) -> str:
    """What a verifier or judge reads: ``problem=answer``, the answer cut to
    ``SHOWN_ANSWER_CHARS`` and every character outside printable ASCII shown as ``?``."""
    shown = "".join(c if c in PRINTABLE_CHARSET else "?" for c in answer[:SHOWN_ANSWER_CHARS])
    return f"{problem}{SEPARATOR}{shown}"


def _problem_and_answer(observation: str) -> tuple[Problem | None, int | None]:
    """The problem before the first ``=`` of a ``show_answer`` text (None unless it is a two-operand
    arithmetic problem) and the answer after it, read like ``ExactArithmetic`` reads it."""
    head, sep, tail = observation.partition(SEPARATOR)
    problem = ANY_PROBLEM.parse(head) if sep else None
    return problem, (extract_answer(tail) if problem is not None else None)


def oracle_accepts(observation: str) -> bool:
    """Whether the answer in a ``show_answer`` text is right, recomputed from the text alone.

    The problem is what precedes the first ``=`` and must be a two-operand arithmetic problem
    (``37+45``); anything else is rejected. The answer is read like ``ExactArithmetic`` reads it.
    """
    problem, answer = _problem_and_answer(observation)
    return problem is not None and answer == problem.answer


def units_digit_accepts(observation: str) -> bool:
    """A weak but checkable verdict: the answer's last digit (and sign) match the true answer's.

    It catches most of a near-miss answer's errors and none of the errors in the other digits, so a
    generator paid by it can learn to be accepted while wrong (docs/claims.md, reward_hacking)."""
    problem, answer = _problem_and_answer(observation)
    return problem is not None and answer is not None and (answer < 0) == (problem.answer < 0) and abs(answer) % 10 == abs(problem.answer) % 10
