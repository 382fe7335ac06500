"""Checkpoints: ``checkpoints/step_N/`` written atomically, found again, and checked before resume.

A checkpoint holds ``policies/<id>/`` (HF directories), ``learners/<id>/`` (optimizer, algorithm
state, step count), what each training hook saves (``league/`` for a league) and
``trainer_state.json``. It is built in a temporary directory and renamed, so a kill while saving
never leaves a half checkpoint; :func:`last_checkpoint` only sees complete ones. Every directory
cogym makes here carries ``.cogym-checkpoint`` (:mod:`~cogym.runners.rundir`): only such a directory
is ever deleted or replaced, so a ``step_N`` someone else put in the run directory is refused, never removed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

from cogym.learners import torch_dist as dist
from cogym.learners.engines import ZERO_FILE

from cogym.runners import rundir
from cogym.runners.rundir import RunDirError
from cogym.runners.train.build import Run
from cogym.core.text import brief


def save_checkpoint(run: Run, checkpoints: Path, iteration: int, hooks: Sequence = ()) -> Path:
    """Write checkpoints/step_N atomically: build it in a temp dir, then rename.

    In a data-parallel run every rank calls this: rank 0 writes the checkpoint; rank r > 0 saves its
    learners into a scratch dir and moves what only it holds (its ZeRO optimizer partitions,
    ``zero_optimizer.rank{r}.pt``) into rank 0's temp dir; rank 0 renames after a barrier. (Policy
    weights are the same on every rank; ZeRO-3, whose saves would gather, is refused with W > 1.)
    """
    final = checkpoints / f"step_{iteration:06d}"
    rank = dist.rank()
    tmp = None
    if rank == 0:
        tmp = _scratch(checkpoints / f".tmp_step_{iteration:06d}")
        _fresh(tmp)
    tmp = Path(dist.broadcast_object(str(tmp)))
    out = tmp if rank == 0 else _scratch(checkpoints / f".tmp_step_{iteration:06d}.rank{rank}")
    if rank == 0:
        for pid, policy in run.policies.items():
            policy.save(tmp / "policies" / pid)
        for hook in hooks:
            hook.save(tmp)  # e.g. a league: its members (HF dirs), win counts and ratings
    else:
        _fresh(out)
    for pid, learner in run.learners.items():
        learner.save(out / "learners" / pid)  # optimizer, critic, PRM, RAE baselines, step count
    if rank:
        for part in sorted(out.rglob(ZERO_FILE.format(rank=rank))):
            dest = tmp / part.relative_to(out)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, dest)
        _remove(out)
    dist.barrier()
    if rank == 0:
        state = {"iteration": iteration, "seed": run.cfg.run.seed, "world_size": dist.world_size()}
        if run.cfg.run.backend == "ray" and run.cfg.ray.learner_workers > 1:
            state["learner_workers"] = run.cfg.ray.learner_workers
        rundir.write_json(tmp / "trainer_state.json", state, indent=None)
        if final.exists() or final.is_symlink():
            _remove(final)
        os.replace(tmp, final)
    dist.barrier()
    return final


def _remove(path: Path) -> None:
    """Delete a checkpoint directory cogym wrote; anything else at its name is a :class:`RunDirError`."""
    if not rundir.owned_checkpoint(path):
        raise RunDirError(f"{path} exists and was not written by cogym (no {rundir.CHECKPOINT_MARKER} in it); cogym "
                          "deletes only its own checkpoints: move it out of the run directory and resume")
    shutil.rmtree(path)


def _scratch(path: Path) -> Path:
    """``path``, or, when something cogym did not write is there (e.g. a half save of an earlier cogym
    version), the first free ``path.<k>``: a temporary directory is never someone else's."""
    k = 0
    candidate = path
    while (candidate.exists() or candidate.is_symlink()) and not rundir.owned_checkpoint(candidate):
        k += 1
        candidate = path.with_name(f"{path.name}.{k}")
    return candidate


def unowned_after(run_path: Path, ckpt: Path) -> None:
    """On resume: a ``checkpoints/step_N`` after the last complete checkpoint ``ckpt`` that cogym did not
    write would have to be replaced when iteration N is saved: a :class:`RunDirError` now, before training."""
    for entry in sorted((run_path / "checkpoints").glob("step_*")):
        if entry.name > ckpt.name and not rundir.owned_checkpoint(entry):
            raise RunDirError(f"{entry} was not written by cogym (no {rundir.CHECKPOINT_MARKER} in it) and resuming "
                              "would replace it; cogym deletes only its own checkpoints: move it out of the run "
                              "directory and resume")


def remove_checkpoints(checkpoints: Path) -> None:
    """A new run where an earlier one was (``--overwrite``): the checkpoints cogym wrote there, whole or
    temporary, are removed, so no later ``--resume`` picks one of the earlier run's; a directory cogym
    did not write stays."""
    if not checkpoints.is_dir() or checkpoints.is_symlink():
        return
    for entry in sorted(checkpoints.iterdir()):
        if entry.name.startswith(("step_", ".tmp_step_")) and rundir.owned_checkpoint(entry):
            shutil.rmtree(entry)


def _fresh(path: Path) -> None:
    """An empty checkpoint directory at ``path`` (cogym's own, replaced), marked as cogym's."""
    if path.exists() or path.is_symlink():
        _remove(path)
    path.mkdir(parents=True)
    (path / rundir.CHECKPOINT_MARKER).write_text("written by cogym train; its directory may be replaced by it\n")


def read_trainer_state(ckpt: Path) -> dict:
    """``trainer_state.json`` of a checkpoint, checked: ``iteration`` an integer >= 0, and ``seed``,
    ``world_size`` and ``learner_workers`` (when present) integers (the counts >= 1). Anything else is a
    :class:`RunDirError` naming the file and the key."""
    path = Path(ckpt) / "trainer_state.json"
    try:
        state = rundir.parse_json(rundir.read_text(path, Path(ckpt).parent.parent))
    except ValueError as exc:  # not JSON, nested too deeply, a number too long to read
        raise RunDirError(f"{path} is not JSON that cogym reads ({str(exc)[:120]})") from None
    if not isinstance(state, dict):
        raise RunDirError(f"{path} must hold a JSON object, got {type(state).__name__}")

    def check(key: str, low: int | None, required: bool = False) -> None:
        if key not in state and not required:
            return
        value = state.get(key)
        if key == "seed" and value is None:
            return
        if type(value) is not int or (low is not None and value < low):
            raise RunDirError(f"{path}: {key} must be an integer{f' >= {low}' if low is not None else ''}, got "
                              f"{brief(value)}")

    check("iteration", 0, required=True)
    check("seed", None)
    check("world_size", 1)
    check("learner_workers", 1)
    return state


def check_resume_world(ckpt: Path, world: int, learner_workers: int = 1) -> None:
    """Resume with as many processes as wrote the checkpoint: ZeRO optimizer state is one file per
    rank, and each rank's sampling stream depends on the process count (a replay needs the same).
    ``learner_workers``: the learner actors of each policy on Ray (``ray.learner_workers``), whose ZeRO
    state is one file per actor of its group."""
    prefix, suffix = ZERO_FILE.split("{rank}")
    ranks = {int(p.name[len(prefix):-len(suffix)]) for p in ckpt.rglob(ZERO_FILE.format(rank="*"))}
    state = read_trainer_state(ckpt)
    if learner_workers > 1 or int(state.get("learner_workers", 1)) > 1:  # Ray learner groups wrote or resume it
        if ranks and len(ranks) != learner_workers:
            raise RunDirError(f"--resume: {ckpt} holds the ZeRO optimizer state of learner groups of {len(ranks)} "
                              f"actors, and this run has ray.learner_workers = {learner_workers}; resume it with "
                              f"ray.learner_workers={len(ranks)}")
        ranks = set()
    count = len(ranks) or int(state.get("world_size", 1))
    if count != world:
        how = f"--nproc {count}" if count > 1 else "no --nproc"
        raise RunDirError(f"--resume: {ckpt} was written by {count} process(es), and this run has {world}; resume it "
                          f"with {how} (ZeRO partitions and each rank's sampling stream depend on the count)")


def last_checkpoint(run_path: Path) -> Path | None:
    ckpts = sorted(p for p in (run_path / "checkpoints").glob("step_*") if (p / "trainer_state.json").is_file())
    return ckpts[-1] if ckpts else None
