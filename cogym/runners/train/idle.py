"""A training hook that names a policy which trains on nothing: one that got no turns, or whose turns
all had an advantage of 0, in each of its run's first iterations.

A game that ends before a seat moves, a seat the game never asks, or an estimator whose groups all have
one return leave a policy with nothing to learn from, and the run ends with rc 0 as if it had learned.
After the first :data:`IDLE_WINDOW` iterations of a run (or of a resumed run; fewer when the run is
shorter) every such policy gets one warning line on stderr, naming it, its seats and what it lacked;
with ``run.strict`` (``cogym train --strict``) the run stops there with a
:class:`IdleError` instead (one line at the CLI, exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, Mapping

from tqdm import tqdm

from cogym.core.errors import CogymError
from cogym.learners import torch_dist as dist

from cogym.runners.config.schema import RunConfig
from cogym.runners.train.hooks import TrainHook

IDLE_WINDOW = 3  # iterations: long enough for one unlucky rollout, short enough to stop a doomed run early


class IdleError(CogymError, RuntimeError):
    """``run.strict``: a policy trained on nothing in the run's first iterations (the warning, as an error)."""


class IdlePolicies(TrainHook):
    """Counts each trained policy's turns per rollout and reads its ``<policy>/adv_abs_mean`` from the
    iteration's row; a learner that reports no advantages (SPIN, DPO-style) is judged by its turns alone."""

    def __init__(self, settings: RunConfig, seats: Mapping[str, tuple], trained: Iterable[str],
                 window: int = IDLE_WINDOW) -> None:
        """``settings``: the config's ``run`` section; ``seats``: seat -> (policy id, agent), as a run
        seats its games; ``trained``: the policies that learn."""
        self.strict = bool(settings.strict)
        self.last = settings.iterations
        self.window = window
        self.seats = {pid: sorted(s for s, (p, _) in seats.items() if p == pid) for pid in trained}
        self.first = 1
        self.turns: dict[int, dict[str, int]] = {}  # iteration -> policy -> turns in its rollouts
        self.totals = {pid: 0 for pid in self.seats}  # turns in the window so far
        self.active: set[str] = set()  # policies that had turns with a nonzero advantage in the window
        self.done = False

    def start(self, iteration: int, checkpoint: Path | None) -> None:
        self.first = iteration + 1

    def after_rollout(self, result, context, iteration: int) -> dict[str, float]:
        if not self.done:  # dynamic sampling's extra rounds count too: they are trained on
            counts = self.turns.setdefault(iteration, {})
            for t in result.turns:
                counts[t.policy_id] = counts.get(t.policy_id, 0) + 1
        return {}

    def reads_policies(self, iteration: int) -> bool:
        return False

    def before_log(self, iteration: int, record: dict) -> dict[str, float]:
        if self.done:
            return {}
        counts = self.turns.pop(iteration, {})
        for pid in self.seats:
            n = counts.get(pid, 0)
            self.totals[pid] += n
            adv = record.get(f"{pid}/adv_abs_mean")
            if n and (adv is None or adv != 0):
                self.active.add(pid)
        if iteration < min(self.first + self.window - 1, self.last):
            return {}
        self.done = True
        idle = dist.broadcast_object(self._idle(iteration)) if dist.world_size() > 1 else self._idle(iteration)
        if idle and self.strict:
            raise IdleError("; ".join(idle) + " (run.strict / --strict: this is an error)")
        if dist.is_main():
            for line in idle:
                tqdm.write(f"cogym train: warning: {line} (--strict makes this an error)", file=sys.stderr)
        return {}

    def _idle(self, iteration: int) -> list[str]:
        span = f"iteration {iteration}" if iteration == self.first else f"iterations {self.first}-{iteration}"
        lines = []
        for pid, seats in self.seats.items():
            if pid in self.active:
                continue
            if not self.totals[pid]:
                lines.append(f"policy {pid!r} got no turns in {span}: its seats ({', '.join(seats) or 'none'}) never "
                             "moved (does the game end before their turn, or never ask them?), so it trains on nothing")
            else:
                lines.append(f"policy {pid!r} had {self.totals[pid]} turns in {span}, every one with advantage 0 (its "
                             "returns never differed from its baseline), so it learns nothing")
        return lines
