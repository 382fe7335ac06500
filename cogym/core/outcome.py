"""The game -> learner contract: the end-of-game facts a game reports for a seat, typed.

A game reports them in the seat's ``infos`` (PettingZoo's per-seat dict). Some keys have one
meaning in every game, and learners and metrics read them:

==============  =====================  ==========================================================
key             type                   meaning
==============  =====================  ==========================================================
``role``        str                    the seat's role
``correct``     bool or None           the seat's answer was right; None: it never answered (1/0 read as bools)
``invalid``     bool                   the seat's last move broke the rules (``reason`` says why; 1/0 too)
``reason``      str or None            why a move was invalid, or why the game ended early
``reference``   str, number or None    the right answer or a canonical right response for the
                                       seat's last prompt (SPIN's "real" response: a str)
``task``        hashable or None       the kind of task the seat was given (TRR++ whitens per task)
``metrics``     {str: float|bool|None} game-declared metrics, averaged per role (None: undefined)
==============  =====================  ==========================================================

Every other key is the game's own and lands in :attr:`SeatOutcome.extra`. A game declares which
of these keys it reports for each role at the end of an episode (``GameSpec.outcomes``);
``check_game`` holds it to that and to the types above, and the builder refuses a learner that
needs a fact the game does not declare (SPIN needs ``reference``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping

from .errors import GameError

KEYS = ("role", "correct", "invalid", "reason", "reference", "task", "metrics")


@dataclass(frozen=True)
class SeatOutcome:
    """One seat's end-of-game facts (its last info), checked and typed."""

    role: str | None = None
    correct: bool | None = None
    invalid: bool = False
    reason: str | None = None
    reference: str | int | float | None = None
    task: Hashable | None = None
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A fact by its info key: a typed field, or one of the game's own keys."""
        if key in KEYS:
            value = getattr(self, key)
            return default if value is None else value
        return self.extra.get(key, default)

    @classmethod
    def from_info(cls, info: Mapping[str, Any] | None, where: str = "info") -> "SeatOutcome":
        """Check ``info`` against the contract; a :class:`GameError` names the key that breaks it."""
        info = info or {}
        for key, ok, want in _CHECKS:
            if key in info and not ok(info[key]):
                raise GameError(f"{where}[{key!r}] must be {want}, got {info[key]!r}")
        metrics = info.get("metrics") or {}
        for name, value in metrics.items():
            if not isinstance(name, str) or not _metric_value(value):
                raise GameError(f"{where}['metrics'][{name!r}] must be a finite number, a bool or None, got {value!r}")
        return cls(role=info.get("role"), correct=_opt_bool(info.get("correct")), invalid=bool(info.get("invalid", False)),
                   reason=info.get("reason"), reference=info.get("reference"), task=info.get("task"),
                   metrics={k: (None if v is None else float(v)) for k, v in metrics.items()},
                   extra={k: v for k, v in info.items() if k not in KEYS})


def _is_bool(v: Any) -> bool:
    """True/False (Python's or numpy's), or the integers 0 and 1 that games written before the
    contract report."""
    if type(v).__name__ in ("bool", "bool_"):
        return True
    return isinstance(v, numbers.Integral) and v in (0, 1)


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and type(v).__name__ not in ("bool", "bool_")


def _opt_bool(v: Any) -> bool | None:
    return None if v is None else bool(v)


def _metric_value(v: Any) -> bool:
    if v is None or _is_bool(v):
        return True
    try:
        return math.isfinite(float(v)) and not isinstance(v, str)
    except (TypeError, ValueError):
        return False


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


_CHECKS = (
    ("role", lambda v: isinstance(v, str), "a str"),
    ("correct", lambda v: v is None or _is_bool(v), "True, False (or 1, 0) or None"),
    ("invalid", _is_bool, "True or False (or 1, 0)"),
    ("reason", lambda v: v is None or isinstance(v, str), "a str or None"),
    ("reference", lambda v: v is None or isinstance(v, str) or _is_number(v), "a str, a number or None"),
    ("task", _hashable, "hashable"),
    ("metrics", lambda v: v is None or isinstance(v, Mapping), "a mapping of metric names to values"),
)
