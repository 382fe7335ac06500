"""``run.backend: ray`` behind the training loop's execution seam (:mod:`cogym.runners.train.execution`):
a :class:`~cogym.runners.ray.rollout.RayRollout` pool plays the rollouts, learners update in the driver
or in learner actors (:mod:`cogym.runners.ray.learners`), and after each update the new weights reach
the workers (:mod:`cogym.runners.ray.sync`). A learner actor that dies (its optimizer state with it)
makes the run resume from its last checkpoint with new actors, at most ``ray.max_restarts`` times."""

from __future__ import annotations

import sys
from pathlib import Path

from cogym.core.errors import LearnerDied
from cogym.runners.config.schema import Config
from cogym.runners.ray.learners import RemoteUpdates
from cogym.runners.ray.pool import actor_threads
from cogym.runners.ray.rollout import RayRollout
from cogym.runners.train.execution import Execution, Trained, Updates


def versions(trained: Trained) -> dict[str, int]:
    """Each trained policy's weight version: its learner's step count."""
    return {pid: learner.steps for pid, learner in trained.learners.items()}


def staleness(trained: Trained, batches: dict[str, list], bound: int) -> dict[str, float]:
    """How many updates behind the learner the weights that sampled each batch are (0: on-policy);
    more than ``bound`` is an error."""
    worst = 0
    for pid, learner in trained.learners.items():
        if batches[pid]:
            lag = learner.steps - min(t.policy_version for t in batches[pid])
            if lag > bound:
                raise RuntimeError(f"policy {pid!r}: turns sampled with weights {lag} updates old, more than "
                                   f"ray.max_staleness = {bound}")
            worst = max(worst, lag)
    return {"ray/staleness": float(worst)}


class ActorUpdates(Updates):
    """One batch's updates: learner actors' all start at once (:class:`RemoteUpdates`), before any is
    waited for; learners in the driver step here. A learner actor's weights reach the driver's copy
    when it evaluates or saves (:meth:`RayExecution.refresh`)."""

    def __init__(self, trained: Trained, batches: dict[str, list]) -> None:
        super().__init__(trained, batches)
        self.remote = RemoteUpdates(trained.learners, batches)

    def finish(self, pid: str) -> dict[str, float]:
        return self.remote.finish(pid) if pid in self.remote else super().finish(pid)


class RayExecution(Execution):
    """Rollout workers (and learner actors) on a Ray cluster; one driver process (config validation
    refuses ``--nproc`` with ``run.backend: ray``)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.learner_world = cfg.ray.learner_workers
        self.max_resumes = cfg.ray.max_restarts
        self.pool: RayRollout | None = None

    def cores_beside(self) -> float:
        """One-step off-policy on a local cluster with the learners in the driver and workers without GPUs:
        the driver updates while the workers roll out on this machine's cores (each with
        :func:`~cogym.runners.ray.pool.actor_threads` of ``ray.num_cpus``)."""
        rc = self.cfg.ray
        if self.cfg.run.async_ == "one_step" and not rc.address and rc.learners == "driver" and not rc.num_gpus:
            return float(rc.num_rollout_workers * actor_threads(rc.num_cpus))
        return 0.0

    def open(self, checkpoint: Path | None) -> None:
        """New workers and learner actors with the stage's config (:meth:`stage`): a stage boundary starts them
        anew from the checkpoint the stage before wrote, as a resume does."""
        self.pool = RayRollout(self.cfg, checkpoint, self.fresh, self.index)

    @property
    def learners(self) -> dict:
        return self.pool.learners if self.pool is not None else {}

    def attach(self, trained: Trained) -> None:
        """The workers get a resumed run's weights (nothing to send on a fresh one). In a stage after the
        first, every trained policy's are sent (a learner at version 0 there holds the weights of the stage's
        start, which workers that built the policy from its config may lack: a LoRA adapter); a worker
        restarted later in the stage gets them again (:meth:`~cogym.runners.ray.rollout.RayRollout.sync`)."""
        self.pool.sync(trained.policies, versions(trained))

    def rollouts(self) -> RayRollout:
        return self.pool

    def batch_metrics(self, trained: Trained, batches: dict[str, list]) -> dict[str, float]:
        return staleness(trained, batches, self.cfg.ray.max_staleness)

    def updates(self, trained: Trained, batches: dict[str, list]) -> Updates:
        return ActorUpdates(trained, batches)

    def after_update(self, trained: Trained) -> dict[str, float]:
        """The new weights reach every worker before it samples with them; one step ahead, the loads queue
        behind the rollout under way."""
        return self.pool.sync(trained.policies, versions(trained), wait=self.cfg.run.async_ != "one_step")

    def refresh(self, trained: Trained) -> None:
        self.pool.refresh(trained.policies)

    def lost_learner(self, exc: LearnerDied, run_path: Path, checkpoint: Path | None) -> None:
        """Resume from ``checkpoint`` (from the start without one) with new actors, unless
        ``ray.max_restarts`` resumes were used."""
        if self.resumes >= self.max_resumes:
            then = (f"`cogym train --resume {run_path}` continues from its last checkpoint" if checkpoint is not None
                    else "it had no checkpoint yet: run it again")
            raise LearnerDied(f"{exc}; ray.max_restarts = {self.max_resumes} resumes were used: the run "
                              f"stops ({then})") from exc
        self.resumes += 1
        where = "the beginning (no checkpoint yet)" if checkpoint is None else f"checkpoint {checkpoint.name}"
        print(f"[ray] {exc}: resuming from {where} with new actors (resume {self.resumes} of at "
              f"most {self.max_resumes})", file=sys.stderr, flush=True)

    def summary(self) -> dict:
        out = self.pool.summary()
        if self.pool.learners:
            out["ray_learner_restarts"] = self.resumes
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
