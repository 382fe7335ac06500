"""A run in stages (``stages``): which iterations each trains, with which config, and what carries over.

A config without ``stages`` is one stage, the config itself, over iterations 1 to ``run.iterations``.
With stages, stage k trains the global iterations after stage k - 1's (iteration numbers run on across
stages), with :func:`~cogym.runners.config.load.stage_configs`' config: the run's, each learner's keys
overlaid by the stage's. The train loop (:mod:`~cogym.runners.train.loop`) runs them in order, and a
stage boundary is a checkpoint and a resume: the stage that ends writes ``checkpoints/step_N`` (N its
last iteration, whatever ``run.checkpoint_every`` says), and the next stage builds its run from it,
as ``cogym train --resume`` would. So a run resumed at a boundary, or inside a stage, replays what the
uninterrupted run did. At the boundary:

- every policy's weights carry over (the checkpoint's);
- a learner whose keys are the previous stage's goes on as it was (optimizer, algorithm state, step
  count, KL reference);
- a learner whose keys differ (another algorithm, another lr, ...) starts fresh: a new optimizer and
  algorithm state, step 0, and, for a full model, the policy at the stage's start as its KL reference
  (and PRIME's pi_ref), read from that checkpoint, which must stay in the run directory (a LoRA
  policy's reference stays its base model, the run's start).

The execution is told each stage's config and fresh learners
(:meth:`~cogym.runners.train.execution.Execution.stage`) and opened anew from the boundary checkpoint: on Ray,
new rollout workers and learner actors (an actor of a fresh learner builds from the checkpoint's policy, not
its critic or state); with ``--nproc``, every rank restores its own share of the checkpoint.

Each checkpoint a staged run writes holds ``stage.json`` (the stage's index, name and iterations, the
learners it restarted and their KL anchors), and ``--resume`` refuses a config that puts the checkpoint's
iteration in another stage, or whose earlier stages would restart other learners or anchor them elsewhere.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from cogym.core import seeding
from cogym.runners import rundir
from cogym.runners.config.load import stage_configs
from cogym.runners.config.schema import Config
from cogym.runners.rundir import RunDirError
from cogym.runners.train.hooks import TrainHook

STAGE_FILE = "stage.json"  # in each checkpoint of a staged run


def step_dir(checkpoints: Path, iteration: int) -> Path:
    """The checkpoint directory of ``iteration`` (``step_N``, as :func:`~cogym.runners.train.checkpoint.save_checkpoint` names it)."""
    return checkpoints / f"step_{iteration:06d}"


@dataclass(frozen=True)
class Stage:
    """One stage: iterations ``first`` to ``last`` (global), trained with ``cfg``. ``name`` is "" for a run
    without stages (its rows carry no stage). ``fresh``: the policies whose learner starts fresh at
    ``first``; ``anchors``: policy -> the iteration whose checkpoint holds its KL reference (the start of
    the stage where its learner last started fresh; absent: the config's model)."""

    index: int
    name: str
    first: int
    last: int
    cfg: Config
    fresh: frozenset = frozenset()
    anchors: dict = field(default_factory=dict)

    @property
    def row(self) -> dict:
        """What each of the stage's metrics rows carries."""
        return {"stage": self.name} if self.name else {}

    def config(self, checkpoints: Path) -> Config:
        """The config the stage builds its run from: ``cfg``, with the model of each anchored full-model
        policy the checkpoint of its anchor (build() takes a policy's config model as its KL reference)."""
        if not self.anchors:
            return self.cfg
        cfg = dataclasses.replace(self.cfg, policies=copy.deepcopy(self.cfg.policies))
        for pid, iteration in self.anchors.items():
            if not cfg.policies[pid].lora.enabled:
                cfg.policies[pid].model = str(step_dir(checkpoints, iteration) / "policies" / pid)
        return cfg

    def seed_build(self) -> None:
        """:func:`seed_build` of this stage, before the driver builds its run."""
        seed_build(self.cfg.run.seed, self.index)


def seed_build(seed: int, index: int) -> None:
    """Seed torch's generator before stage ``index`` (a later one: > 0) builds its learners (a fresh critic's
    head, say), so the uninterrupted run and a run resumed at the boundary draw the same; a Ray learner actor
    does the same before it builds its learner (:class:`~cogym.runners.ray.learners.LearnerWorker`)."""
    if index:
        seeding.torch_seed("stage.build", seed, index)


def plan(cfg: Config) -> list[Stage]:
    """The run's stages, in order (one for a config without ``stages``), up to ``run.iterations``: a run that
    ends before the stages' sum trains the stages up to it, the last of them cut there."""
    if not cfg.stages:
        return [Stage(0, "", 1, cfg.run.iterations, cfg)]
    stages: list[Stage] = []
    anchors: dict[str, int] = {}
    first = 1
    for k, (section, staged) in enumerate(zip(cfg.stages, stage_configs(cfg))):
        before = stages[-1].cfg.learners if stages else {}
        fresh = frozenset(pid for pid, lc in staged.learners.items() if pid in before and lc.flat() != before[pid].flat())
        anchors = {**anchors, **{pid: first - 1 for pid in fresh}}
        last = min(first + section.run.iterations - 1, cfg.run.iterations)
        stages.append(Stage(k, section.name, first, last, staged, fresh, anchors))
        if last == cfg.run.iterations:
            break
        first = last + 1
    return stages


class StageHook(TrainHook):
    """Writes the stage into each checkpoint (:data:`STAGE_FILE`), for :func:`check_resume`."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage

    def reads_policies(self, iteration: int) -> bool:
        return False

    def save(self, checkpoint: Path) -> None:
        s = self.stage
        rundir.write_json(checkpoint / STAGE_FILE, {"index": s.index, "name": s.name, "first": s.first, "last": s.last,
                                                    **restarts(s)}, indent=None)


def restarts(stage: Stage) -> dict:
    """What a checkpoint records of the learners ``stage`` restarted and the checkpoints of their KL references."""
    return {"fresh": sorted(stage.fresh), "anchors": dict(sorted(stage.anchors.items()))}


def check_resume(ckpt: Path, iteration: int, stages: list[Stage]) -> None:
    """A :class:`RunDirError` unless checkpoint ``ckpt`` (of ``iteration``) was written in the stage in which
    ``stages`` put ``iteration`` (a run without stages: by a run without stages)."""
    path = ckpt / STAGE_FILE
    staged = bool(stages[0].name)
    if not path.is_file():
        if staged:
            raise RunDirError(f"--resume: {ckpt} was written by a run without stages, and this config has stages; "
                              "resume it with the config it was started with")
        return
    try:
        written = rundir.parse_json(rundir.read_text(path, ckpt.parent.parent))
    except ValueError as exc:
        raise RunDirError(f"{path} is not JSON that cogym reads ({str(exc)[:120]})") from None
    if not isinstance(written, dict):
        raise RunDirError(f"{path} must hold a JSON object, got {type(written).__name__}")
    if not staged:
        raise RunDirError(f"--resume: {ckpt} was written in stage {written.get('name')!r} of a run with stages, and this "
                          "config has none; resume it with the config it was started with")
    now = next((s for s in stages if s.first <= iteration <= s.last), stages[-1])
    if (written.get("name"), written.get("first")) != (now.name, now.first):
        raise RunDirError(f"--resume: {ckpt} (iteration {iteration}) was written in stage {written.get('name')!r} (from "
                          f"iteration {written.get('first')}), and this config puts iteration {iteration} in stage "
                          f"{now.name!r} (iterations {now.first}-{now.last}); resume it with the stages it was started "
                          "with (the stages not trained yet, and the current one's length, may change)")
    wrote = {key: written[key] for key in ("fresh", "anchors") if key in written}
    if wrote and wrote != {key: value for key, value in restarts(now).items() if key in wrote}:
        raise RunDirError(f"--resume: {ckpt} was written when stage {now.name!r} restarted the learners of "
                          f"{wrote.get('fresh')} (KL references from the checkpoints of iterations {wrote.get('anchors')}), "
                          f"and this config restarts {sorted(now.fresh)} ({dict(now.anchors)}): a stage trained already "
                          "changed its learner keys; resume it with the stages it was started with")
