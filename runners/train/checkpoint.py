"""Checkpoints: ``checkpoints/step_N/`` written atomically, found again, and checked before resume.

A checkpoint holds ``policies/<id>/`` (HF directories), ``learners/<id>/`` (optimizer, algorithm
state, step count), what each training hook saves (``league/`` for a league) and
``trainer_state.json``. It is built in a temporary directory and renamed, so a kill while saving
never leaves a half checkpoint; :func:`last_checkpoint` only sees complete ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Sequence

from cogym.learners import torch_dist as dist
from cogym.learners.engines import ZERO_FILE

from cogym.runners.train.build import Run
from cogym.core.errors import ConfigError


def save_checkpoint(run: Run, checkpoints: Path, iteration: int, hooks: Sequence = ()) -> Path:
    """Write checkpoints/step_N atomically: build it in a temp dir, then rename.

    In a data-parallel run every rank calls this: rank 0 writes the checkpoint; rank r > 0 saves its
    learners into a scratch dir and moves what only it holds (its ZeRO optimizer partitions,
    ``zero_optimizer.rank{r}.pt``) into rank 0's temp dir; rank 0 renames after a barrier. (Policy
    weights are the same on every rank; ZeRO-3, whose saves would gather, is refused with W > 1.)
    """
    final = checkpoints / f"step_{iteration:06d}"
    tmp = checkpoints / f".tmp_step_{iteration:06d}"
    rank = dist.rank()
    if rank == 0 and tmp.exists():
        shutil.rmtree(tmp)
    dist.barrier()
    out = tmp if rank == 0 else checkpoints / f".tmp_step_{iteration:06d}.rank{rank}"
    if rank == 0:
        for pid, policy in run.policies.items():
            policy.save(tmp / "policies" / pid)
        for hook in hooks:
            hook.save(tmp)  # e.g. a league: its members (HF dirs), win counts and ratings
    elif out.exists():
        shutil.rmtree(out)
    for pid, learner in run.learners.items():
        learner.save(out / "learners" / pid)  # optimizer, critic, PRM, RAE baselines, step count
    if rank:
        for part in sorted(out.rglob(ZERO_FILE.format(rank=rank))):
            dest = tmp / part.relative_to(out)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, dest)
        shutil.rmtree(out)
    dist.barrier()
    if rank == 0:
        state = {"iteration": iteration, "seed": run.cfg.run.seed, "world_size": dist.world_size()}
        if run.cfg.run.backend == "ray" and run.cfg.ray.learner_workers > 1:
            state["learner_workers"] = run.cfg.ray.learner_workers
        (tmp / "trainer_state.json").write_text(json.dumps(state))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    dist.barrier()
    return final


def check_resume_world(ckpt: Path, world: int, learner_workers: int = 1) -> None:
    """Resume with as many processes as wrote the checkpoint: ZeRO optimizer state is one file per
    rank, and each rank's sampling stream depends on the process count (a replay needs the same).
    ``learner_workers``: the learner actors of each policy on Ray (``ray.learner_workers``), whose ZeRO
    state is one file per actor of its group."""
    prefix, suffix = ZERO_FILE.split("{rank}")
    ranks = {int(p.name[len(prefix):-len(suffix)]) for p in ckpt.rglob(ZERO_FILE.format(rank="*"))}
    state = json.loads((ckpt / "trainer_state.json").read_text())
    if learner_workers > 1 or int(state.get("learner_workers", 1)) > 1:  # Ray learner groups wrote or resume it
        if ranks and len(ranks) != learner_workers:
            raise ConfigError(f"--resume: {ckpt} holds the ZeRO optimizer state of learner groups of {len(ranks)} "
                              f"actors, and this run has ray.learner_workers = {learner_workers}; resume it with "
                              f"ray.learner_workers={len(ranks)}")
        ranks = set()
    count = len(ranks) or int(state.get("world_size", 1))
    if count != world:
        how = f"--nproc {count}" if count > 1 else "no --nproc"
        raise ConfigError(f"--resume: {ckpt} was written by {count} process(es), and this run has {world}; resume it "
                          f"with {how} (ZeRO partitions and each rank's sampling stream depend on the count)")


def last_checkpoint(run_path: Path) -> Path | None:
    ckpts = sorted(p for p in (run_path / "checkpoints").glob("step_*") if (p / "trainer_state.json").is_file())
    return ckpts[-1] if ckpts else None
