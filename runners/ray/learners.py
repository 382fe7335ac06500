"""Learners in Ray actors (``ray.learners: colocated | separate``): the actor, the driver's handle on
it (used by the training loop as it uses a learner), and one batch's updates across actors."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cogym.core.errors import LearnerDied
from cogym.runners.config.schema import Config
from cogym.runners.ray.pool import enter, node_ip, ray  # ray through pool: if missing, the error names the extra
from cogym.runners.ray.wire import nbytes, state_of, to_wire
from cogym.runners.train.build import build_learner


class LearnerWorker:
    """A Ray actor (``ray.learners``: colocated or separate): one trained policy and its learner. After
    each update it puts the new weights in the object store itself, so they go from here to the rollout
    workers without passing through the driver."""

    def __init__(self, cfg: Config, pid: str, cwd: str, env: dict[str, str], threads: int,
                 policy_dir: str | None, critic_dir: str | None) -> None:
        enter(cwd, env, threads)

        self.pid = pid
        self.policy, self.learner = build_learner(cfg, pid, Path(policy_dir) if policy_dir else None,
                                                  Path(critic_dir) if critic_dir else None)

    def ping(self) -> dict:
        return {"pid": os.getpid(), "node": node_ip(), "steps": self.learner.steps,
                "engine": self.learner.engine.name}

    def update(self, turns: list) -> tuple[dict, int, list]:
        """The learner's step on ``turns``: its metrics, its step count and :meth:`weights`."""
        rec = self.learner.update(turns)
        return rec, self.learner.steps, self.weights()

    def weights(self) -> list:
        """``[object ref of the weights (to_wire form), their bytes]`` (a list, so the caller gets the ref)."""
        state = state_of(self.policy)
        return [ray.put(to_wire(state)), nbytes(state)]

    def group_decisions(self, turns: list) -> dict:
        return self.learner.group_decisions(turns)

    def save(self, directory: str) -> None:
        self.learner.save(Path(directory))

    def load(self, directory: str) -> int:
        self.learner.load(Path(directory))
        return self.learner.steps


class RemoteLearner:
    """The driver's handle on a :class:`LearnerWorker`, with the surface of
    :class:`~cogym.learners.learner.Learner` the training loop uses (``steps``, ``cfg``, ``engine.name``,
    ``save``, ``load``, ``group_decisions``), and ``start_update``/``finish_update`` in place of
    ``update`` (:class:`RemoteUpdates`), so that several learner actors update at once. A learner actor is
    not restarted in place (its optimizer state is lost with it): one that dies raises :class:`LearnerDied`,
    and the run resumes from its last checkpoint with new actors."""

    def __init__(self, ray, handle, pid: str, cfg, info: dict, bundle: int = 0) -> None:
        self.ray, self.handle, self.pid, self.cfg, self.info = ray, handle, pid, cfg, info
        self.bundle = bundle  # its placement bundle: learners that share one update one after another
        self.steps = int(info["steps"])
        self.engine = SimpleNamespace(name=info["engine"])
        self._weights: tuple[int, Any, int] | None = None  # (version, object ref, bytes) of the newest weights

    def _get(self, ref, what: str):
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            raise LearnerDied(f"the learner actor of policy {self.pid!r} (pid {self.info.get('pid')}) died during "
                              f"{what}") from exc

    def start_update(self, turns: list):
        return self.handle.update.remote(list(turns))

    def finish_update(self, ref) -> dict[str, float]:
        rec, self.steps, (wref, size) = self._get(ref, f"update {self.steps + 1}")
        self._weights = (self.steps, wref, size)
        return rec

    def weights(self) -> tuple[Any, int]:
        """The object ref and bytes of the weights of version ``steps``."""
        if self._weights is None or self._weights[0] != self.steps:
            wref, size = self._get(self.handle.weights.remote(), "a weight fetch")
            self._weights = (self.steps, wref, size)
        return self._weights[1], self._weights[2]

    def group_decisions(self, turns: list) -> dict:
        return self._get(self.handle.group_decisions.remote(list(turns)), "dynamic sampling")

    def save(self, directory: Path) -> None:  # a path the actor's node sees: one machine, or a shared file system
        self._get(self.handle.save.remote(str(directory)), "a checkpoint")

    def load(self, directory: Path) -> None:
        self.steps = self._get(self.handle.load.remote(str(directory)), "a resume")


class RemoteUpdates:
    """One batch's updates on learner actors: every actor starts at once, except actors that share a
    placement bundle (``colocated``: one worker's CPUs or GPU), which take turns, since two updates at
    once on the same cores or GPU only slow each other down. :meth:`finish` must be called in the
    learners' order."""

    def __init__(self, learners: dict, batches: dict[str, list]) -> None:
        self.remote = {pid: lr for pid, lr in learners.items() if isinstance(lr, RemoteLearner)}
        self.batches, self.turns, self.refs = batches, {}, {}
        for pid, lr in self.remote.items():
            self.turns.setdefault(lr.bundle, []).append(pid)
        for pids in self.turns.values():
            self.refs[pids[0]] = self.remote[pids[0]].start_update(batches[pids[0]])

    def __contains__(self, pid: str) -> bool:
        return pid in self.remote

    def finish(self, pid: str) -> dict[str, float]:
        """``pid``'s update metrics (waiting for it); starts the next update in its bundle."""
        rec = self.remote[pid].finish_update(self.refs.pop(pid))
        queue = self.turns[self.remote[pid].bundle]
        nxt = queue.index(pid) + 1
        if nxt < len(queue):
            self.refs[queue[nxt]] = self.remote[queue[nxt]].start_update(self.batches[queue[nxt]])
        return rec
