"""The execution seam: where a training run's rollouts and updates run.

The loop (:mod:`~cogym.runners.train.loop`) calls one :class:`Execution` at fixed points and never
asks which one it has, as it calls its training hooks (:mod:`~cogym.runners.train.hooks`). Two exist:

- :class:`InProcess`: this process plays and updates; with ``--nproc`` (torch.distributed) each rank
  plays its share of the games and every rank gets the whole result (:func:`~cogym.runners.train.iteration.data_parallel`);
- :class:`~cogym.runners.ray.execution.RayExecution` (``run.backend: ray``): rollout workers play,
  learners update in the driver or in learner actors, new weights go to the workers after each update.

:func:`~cogym.runners.train.backends.execution_for` picks one from ``run.backend``. One training run
calls its execution in this order (tests/runners/train/test_execution_seam.py checks it)::

    per stage (one for a run without stages):
    stage(cfg, fresh, index)         the config the stage builds from, the learners it starts anew
    open(checkpoint)                 start workers and actors (again after a resume or at a stage boundary)
    learners                         learners it made elsewhere, which the run uses instead of building them
    attach(trained)                  the run is built: e.g. workers get a resumed run's weights
    per iteration:
        rollouts().submit/collect    the iteration's games (the sampler may submit one iteration ahead)
        batch_metrics(trained, batches)  e.g. how stale the batch's weights are
        updates(trained, batches)    each learner's step: .finish(pid) in the learners' order
        after_update(trained)        the new weights to where the next rollout plays
        refresh(trained)             before the driver reads its policies (evaluation, checkpoint, a hook)
    summary()                        entries for the run's summary (after the last stage)
    close()

``trained`` (:class:`Trained`) is what an execution sees of the run: its policies and their learners,
not its config (an execution gets the sections it needs when it is made).

And, when a learner that lives elsewhere died (:class:`~cogym.core.errors.LearnerDied`),
``lost_learner`` decides whether the run resumes from its last checkpoint (then ``open`` again).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from cogym.core.errors import LearnerDied
from cogym.runners.config.schema import Config
from cogym.runners.rollout.tokens import token_rollout
from cogym.runners.rollout.turns import rollout
from cogym.runners.train.iteration import data_parallel, Played


@dataclass(frozen=True)
class Trained:
    """What an execution sees of a run: its policies (id -> Policy) and the learners that train some
    of them (id -> Learner, or a learner actor's handle)."""

    policies: dict
    learners: dict


class Updates:
    """One batch's updates, learner by learner: :meth:`finish` steps ``pid``'s learner here and returns
    its metrics. The policy's backend generates with the trained model itself, so the new weights are in
    place: it takes only their version (the next rollout's turns carry it)."""

    def __init__(self, trained: Trained, batches: dict[str, list]) -> None:
        self.trained, self.batches = trained, batches

    def finish(self, pid: str) -> dict[str, float]:
        learner = self.trained.learners[pid]
        rec = learner.update(self.batches[pid])
        self.trained.policies[pid].backend.load_weights(None, version=learner.steps)
        return rec


class Execution:
    """Where rollouts and updates run. The defaults are those of a run whose learners are in this process."""

    learner_world = 1  # processes per learner: a checkpoint's optimizer partitions need as many to resume
    max_resumes = 0  # resumes after a lost learner (lost_learner)

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.fresh: frozenset = frozenset()  # the learners the stage being opened starts anew
        self.index = 0  # the stage being opened (0: the first, or a run without stages)
        self.resumes = 0  # resumes used so far

    def stage(self, cfg: Config, fresh: frozenset, index: int = 0) -> None:
        """The next :meth:`open` starts a stage (:mod:`~cogym.runners.train.stages`), the run's ``index``-th
        (from 0): ``cfg`` is the config its run builds from (the stage's learner keys, its KL references'
        models), and the learners of ``fresh`` start anew at its first iteration, not from the checkpoint's
        state. The run's sections other than ``learners`` and ``policies.<id>.model`` are the same in every stage."""
        self.cfg, self.fresh, self.index = cfg, fresh, index

    def cores_beside(self) -> float:
        """The cores this execution's own workers keep busy while the driver updates (its torch threads
        leave them free)."""
        return 0.0

    def open(self, checkpoint: Path | None) -> None:
        """Start what runs elsewhere (from ``checkpoint`` when resuming)."""

    @property
    def learners(self) -> dict:
        """Learners this execution made (policy -> a handle with a learner's surface); the run builds the others."""
        return {}

    def attach(self, trained: Trained) -> None:
        """The run is built (its policies hold a resumed run's weights)."""

    def rollouts(self):
        """What plays the rollouts: ``submit`` starts one, ``collect`` waits for it, ``play`` does both
        (the signature of :func:`~cogym.runners.rollout.turns.rollout`)."""
        raise NotImplementedError

    def batch_metrics(self, trained: Trained, batches: dict[str, list]) -> dict[str, float]:
        """Metrics of the batch about to train (or an error when it cannot)."""
        return {}

    def updates(self, trained: Trained, batches: dict[str, list]) -> Updates:
        """Start the learners' updates on ``batches``."""
        return Updates(trained, batches)

    def after_update(self, trained: Trained) -> dict[str, float]:
        """The learners stepped: the next rollout samples with their new weights; returns metrics."""
        return {}

    def refresh(self, trained: Trained) -> None:
        """The driver's policies are about to be read: give them the learners' newest weights."""

    def lost_learner(self, exc: LearnerDied, run_path: Path, checkpoint: Path | None) -> None:
        """A learner living elsewhere died: return to resume from ``checkpoint`` (None: from the start)
        with :meth:`open` again, or raise to stop the run. No learner lives elsewhere here."""
        raise exc

    def summary(self) -> dict:
        """Entries for the run's summary."""
        return {}

    def close(self) -> None:
        """Stop what :meth:`open` started."""


class InProcess(Execution):
    """This process plays the games and its learners update; with ``--nproc`` each rank plays its share
    and gathers the whole result."""

    def rollouts(self) -> Played:
        cfg = self.cfg
        play = functools.partial(token_rollout if cfg.game.granularity == "token" else rollout,
                                 on_error=cfg.game.on_error, max_prompt_chars=cfg.game.max_prompt_chars)
        return Played(data_parallel(play))

