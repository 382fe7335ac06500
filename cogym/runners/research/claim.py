"""What a claim is: arms (a shipped config plus overrides), measures read off each run, and a judge.

A :class:`Claim` is a few *arms* (the method and its baselines at equal budget), the *measures* read
off each run (a summary value, a gain from before to after, or a training metric averaged over the
last iterations) and a *judge* that turns the per-seed values into a verdict: ``reproduced``,
``partially`` or ``not reproduced``, with the reason in one line. ``register_claim`` adds one to
``CLAIMS``; the shipped ones are in :mod:`cogym.runners.research.claims`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

VERDICTS = ("reproduced", "partially", "not reproduced")

# A run's record: its summary (summary.json) and its metrics rows (metrics.jsonl).
Record = tuple[dict, list[dict]]
Values = dict[str, dict[str, list[float]]]  # arm -> measure -> one value per seed


@dataclass(frozen=True)
class Arm:
    """One way of training: ``config`` (a file of ``configs/``) with ``overrides`` (``key=value``)."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    about: str = ""


@dataclass(frozen=True)
class Measure:
    """A number read off one run: ``read(summary, rows)``; ``better`` is "low", "high" or "" (neither: a
    description, such as a difficulty), for the plot's titles."""

    name: str
    about: str
    read: Callable[[dict, list[dict]], float]
    better: str = "high"


def after(key: str) -> Callable[[dict, list[dict]], float]:
    """The evaluation ``key`` after training (summary ``<key>_after``)."""
    return lambda summary, rows: float(summary[f"{key}_after"])


def before(key: str) -> Callable[[dict, list[dict]], float]:
    """The evaluation ``key`` before training (summary ``<key>_before``)."""
    return lambda summary, rows: float(summary[f"{key}_before"])


def gain(key: str) -> Callable[[dict, list[dict]], float]:
    """The change of evaluation ``key`` from before to after training."""
    return lambda summary, rows: float(summary[f"{key}_after"]) - float(summary[f"{key}_before"])


def _series(rows: list[dict], metric: str) -> list[float]:
    return [r[metric] for r in rows if isinstance(r.get(metric), (int, float))]


def last(metric: str, k: int = 20) -> Callable[[dict, list[dict]], float]:
    """The mean of training metric ``metric`` over its last ``k`` logged iterations (NaN if never logged)."""
    return lambda summary, rows: mean(_series(rows, metric)[-k:])


def first(metric: str, k: int = 20) -> Callable[[dict, list[dict]], float]:
    """The mean of training metric ``metric`` over its first ``k`` logged iterations (NaN if never logged)."""
    return lambda summary, rows: mean(_series(rows, metric)[:k])


def rise(metric: str, k: int = 20) -> Callable[[dict, list[dict]], float]:
    """How much training metric ``metric`` rose: its last ``k`` iterations' mean less its first ``k``'s."""
    return lambda summary, rows: last(metric, k)(summary, rows) - first(metric, k)(summary, rows)


@dataclass(frozen=True)
class Claim:
    """A paper's statement, the arms that test it, what is measured and how the verdict is reached."""

    name: str
    paper: str
    statement: str
    arms: tuple[Arm, ...]
    measures: tuple[Measure, ...]
    judge: Callable[[Values], tuple[str, str]]
    minutes: float | None = None  # measured CPU-minutes of 3 seeds on the 2-core development machine
    notes: str = ""
    curve: str = ""  # a training metric plotted over iterations, per arm (mean over seeds)


def mean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def std(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0


CLAIMS: dict[str, Claim] = {}


def register_claim(claim: Claim) -> Claim:
    if claim.name in CLAIMS:
        raise ValueError(f"claim {claim.name!r} is already registered")
    CLAIMS[claim.name] = claim
    return claim
