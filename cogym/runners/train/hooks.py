"""Training hooks: parts of training that act at fixed points of the loop (a league is one).

The loop in :mod:`cogym.runners.train.loop` knows no feature by name: it asks its hooks who plays the
seats of a rollout, tells them what the rollout and the update did, and lets them save into
checkpoints and add to the summary. A new training feature (a league, a curriculum, an opponent
pool) is a new hook, not a branch in the loop. Where rollouts and updates run (this process,
``--nproc`` ranks, Ray) is the same kind of seam: an :class:`~cogym.runners.train.execution.Execution`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence


class TrainHook:
    """Every method is optional; the defaults do nothing."""

    def start(self, iteration: int, checkpoint: Path | None) -> None:
        """Training starts after ``iteration`` (0, or the resumed checkpoint's) from ``checkpoint``."""

    def seat_maps(self, seat_map, iteration: int, n_games: int, group_size: int, round_: int = 0) -> tuple[Any, Any] | None:
        """Who plays each game of one rollout: ``(seat maps, context)``, or None to leave the config's
        seat map. ``context`` comes back in :meth:`after_rollout`. At most one hook may seat players."""
        return None

    def after_rollout(self, result, context, iteration: int) -> dict[str, float]:
        """A rollout was played (``context`` from :meth:`seat_maps`); return metrics to log."""
        return {}

    def after_update(self, iteration: int) -> None:
        """The learners have stepped on ``iteration``'s batch."""

    def before_log(self, iteration: int, record: dict) -> dict[str, float]:
        """``iteration``'s row (rollout and update metrics), about to be logged; return entries to add.
        A hook that finds the run cannot go on raises here (a :class:`~cogym.core.errors.CogymError`)."""
        return {}

    def reads_policies(self, iteration: int) -> bool:
        """Whether :meth:`after_update` of ``iteration`` reads the policies' weights (then the loop first
        gives the driver's copies the newest weights of learners that train elsewhere, e.g. Ray's
        learner actors: :meth:`~cogym.runners.train.execution.Execution.refresh`). The default says
        yes, the safe answer."""
        return True

    def save(self, checkpoint: Path) -> None:
        """Add this hook's state to the checkpoint being written in ``checkpoint``."""

    def summary(self) -> dict:
        """Entries for the run's summary."""
        return {}


def seat_maps(hooks: Sequence[TrainHook], seat_map, iteration: int, n_games: int, group_size: int,
              round_: int = 0) -> tuple[Any, list]:
    """The seat map(s) of one rollout and every hook's context (None for hooks that seat no one)."""
    contexts: list = []
    seated = False
    for hook in hooks:
        out = hook.seat_maps(seat_map, iteration, n_games, group_size, round_)
        if out is not None:
            if seated:
                raise ValueError("two training hooks both seat players in one rollout; at most one may")
            seated, (seat_map, context) = True, out
            contexts.append(context)
        else:
            contexts.append(None)
    return seat_map, contexts


def after_rollout(hooks: Sequence[TrainHook], result, contexts: Sequence, iteration: int) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for hook, context in zip(hooks, contexts):
        metrics.update(hook.after_rollout(result, context, iteration))
    return metrics
