"""`kill -9` during training, then `cogym train --resume`: the per-iteration metrics equal an uninterrupted run's.

Both runs are real `cogym train` processes (CPU, fixed seed, the solver on DeepSpeed ZeRO-1 so the
optimizer state goes through the ZeRO checkpoint path). The interrupted run is killed with SIGKILL
as soon as its first checkpoint is complete, so it dies mid-training, possibly while writing the
next checkpoint; a half-written checkpoint directory left behind must be ignored on resume.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import sigkill_once_written

COGYM = Path(sys.executable).with_name("cogym")
TIMING = ("rollout_s", "update_s", "iteration_s", "tokens_per_s")  # wall-clock measurements differ between any two runs
ITERATIONS = 30  # slack: the killed run must still be training when its first checkpoint appears


def _overrides(model_dir: Path) -> list[str]:
    return [f"policies.proposer.model={model_dir}", f"policies.solver.model={model_dir}",
            "seats.proposer=scripted:random", "learners.solver.engine=deepspeed", "learners.solver.zero_stage=1",
            "learners.solver.lr=1e-3", "game.num_games=2", "game.kwargs.num_solvers=2",
            "policies.solver.sampling.max_new_tokens=4", "eval.declared=false", "run.tensorboard=false", "run.plot=false",
            f"run.iterations={ITERATIONS}", "run.checkpoint_every=2", "run.seed=3"]


def _env() -> dict:
    # Not the rendezvous of this pytest process (set by earlier in-process DeepSpeed tests, whose gloo
    # group still holds that port): each `cogym train` is its own single-process job.
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


def _run(args: list[str]) -> None:
    proc = subprocess.run([str(COGYM), *args], env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"cogym {' '.join(args[:3])} failed:\n{proc.stderr[-3000:]}"


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows if "rollout_s" in r]


@pytest.mark.slow
def test_kill_9_then_resume_equals_an_uninterrupted_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    assert COGYM.is_file(), f"console script not installed at {COGYM}"
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    _run(["train", "--run-dir", str(straight), "--no-progress", *_overrides(tiny_model_dir)])

    proc = subprocess.Popen([str(COGYM), "train", "--run-dir", str(killed), "--no-progress", *_overrides(tiny_model_dir)],
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sigkill_once_written(proc, killed / "checkpoints" / "step_000002" / "trainer_state.json", timeout=300)
    done_before = len(_rows(killed))
    assert 2 <= done_before < ITERATIONS

    # A save cut short by the kill: a checkpoint directory without its trainer state must be skipped.
    half = killed / "checkpoints" / "step_000099"
    shutil.copytree(killed / "checkpoints" / "step_000002", half)
    (half / "trainer_state.json").unlink()

    _run(["train", "--resume", str(killed), "--no-progress"])
    a, b = _rows(straight), _rows(killed)
    assert [r["iteration"] for r in b] == list(range(1, ITERATIONS + 1))  # each iteration once, none lost or repeated
    assert a == b  # every metric of every iteration, exactly
