"""Pure rules of the arithmetic domain: problem sampling, bounded parsing and exact scoring.

A *problem* is two integer operands joined by one operator, written ``"37+45"``; its answer is
an integer. Everything that reads model output here is bounded in size and time: parsing is a
single anchored regular expression over at most ``MAX_PROBLEM_CHARS`` characters (no ``eval``,
no big-integer arithmetic on unbounded inputs), so ``9**9**9**9``, ten thousand nested
parentheses or a megabyte of digits are rejected in microseconds.

No PettingZoo and no model in this module: the game (``proposer_solver.py``), the verifiers,
the tiny-model builder and the tests all share it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Iterator

import numpy as np

from cogym.core import seeding

MAX_PROBLEM_CHARS = 32
MAX_ANSWER_CHARS = 64
OPS = ("+", "-", "*")
MAX_OPERAND = 999_999  # operands are read with at most 6 digits
# What the proposer seat is asked; the tiny model is trained on exactly this request.
PROPOSER_REQUEST = "Propose a problem."

_PROBLEM_RE = re.compile(r"\s*(\d{1,6})\s*([+\-*])\s*(\d{1,6})\s*=?\s*")
# An answer is the last signed integer of at most 12 digits in the (truncated) response.
_ANSWER_RE = re.compile(r"-?\d{1,12}")
_STRICT_ANSWER_RE = re.compile(r"\s*-?\d{1,12}\s*")


@dataclass(frozen=True)
class Problem:
    """A two-operand integer problem."""

    a: int
    op: str
    b: int

    @property
    def text(self) -> str:
        return f"{self.a}{self.op}{self.b}"

    @property
    def answer(self) -> int:
        if self.op == "+":
            return self.a + self.b
        if self.op == "-":
            return self.a - self.b
        return self.a * self.b


@dataclass(frozen=True)
class Domain:
    """Which problems are well formed: operators and the largest operand allowed.

    ``mul_max_operand`` keeps multiplication to times tables when sampling; a proposer may
    still write any product whose operands are at most ``max_operand``.
    """

    max_operand: int = 99
    ops: str = "+-*"
    mul_max_operand: int = 12

    def __post_init__(self) -> None:
        if isinstance(self.max_operand, bool) or not isinstance(self.max_operand, int) or not 1 <= self.max_operand <= MAX_OPERAND:
            raise ValueError(f"max_operand must be an int in [1, {MAX_OPERAND}] (operands are read with at most 6 digits), "
                             f"got {self.max_operand!r}")
        if not self.ops or any(op not in OPS for op in self.ops):
            raise ValueError(f"ops must be a non-empty string over {''.join(OPS)!r}, got {self.ops!r}")

    def sample(self, rng: np.random.Generator) -> Problem:
        op = self.ops[int(rng.integers(len(self.ops)))]
        hi = min(self.mul_max_operand, self.max_operand) if op == "*" else self.max_operand
        return Problem(int(rng.integers(hi + 1)), op, int(rng.integers(hi + 1)))

    def parse(self, text: str) -> Problem | None:
        """The problem written in ``text``, or None if it is not a well-formed problem."""
        if not isinstance(text, str) or len(text) > MAX_PROBLEM_CHARS:
            return None
        m = _PROBLEM_RE.fullmatch(text)
        if m is None:
            return None
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        if op not in self.ops or a > self.max_operand or b > self.max_operand:
            return None
        return Problem(a, op, b)


def extract_answer(text: str) -> int | None:
    """The last integer in a response, reading at most ``MAX_ANSWER_CHARS`` characters."""
    if not isinstance(text, str):
        return None
    found = _ANSWER_RE.findall(text[:MAX_ANSWER_CHARS])
    return int(found[-1]) if found else None


def is_strict_answer(text: str) -> bool:
    """True when the response is exactly one integer (the format the format bonus asks for)."""
    return isinstance(text, str) and len(text) <= MAX_ANSWER_CHARS and _STRICT_ANSWER_RE.fullmatch(text) is not None


def heldout_problems(n: int = 500, seed: int = 20261121, domain: Domain | None = None) -> list[Problem]:
    """The fixed held-out evaluation set: ``n`` distinct problems drawn with ``seed``."""
    domain = domain or Domain()
    rng = seeding.rng("arithmetic.heldout", seed)
    seen: set[str] = set()
    out: list[Problem] = []
    while len(out) < n:
        p = domain.sample(rng)
        if p.text not in seen:
            seen.add(p.text)
            out.append(p)
    return out


# Every problem the parser can read, whatever a game's own domain: what oracles and verifiers use
# to recompute an answer from a problem's text.
ANY_PROBLEM = Domain(max_operand=MAX_OPERAND, ops="".join(OPS))


def answer_of(text: str) -> int | None:
    """The value of the problem written in ``text`` (any operands up to 6 digits), or None."""
    problem = ANY_PROBLEM.parse(text)
    return problem.answer if problem is not None else None


HELDOUT_FILE = "arithmetic_heldout.jsonl"
# The evaluator the arithmetic games declare (GameSpec.evaluators): greedy accuracy of the solver role's
# policy on the 500 held-out problems (heldout_acc), cogym.envs.arithmetic_eval.
HELDOUT_EVALUATORS = {"heldout": {"kind": "heldout_arithmetic"}}


def load_heldout() -> list[dict]:
    """The shipped held-out set as ``{"question", "answer"}`` records (500 lines)."""
    path = resources.files("cogym.envs").joinpath("data", HELDOUT_FILE)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def iter_records(problems: list[Problem]) -> Iterator[dict]:
    for p in problems:
        yield {"question": p.text, "answer": str(p.answer)}
