"""Same seed, same numbers: the default config, run in separate processes, repeats bit for bit.

Each run is a real `cogym train` process with several torch threads (not one, which hides thread-order
effects), pinned with ``run.threads`` (by default the count follows the load, core/threads.py, and a run
whose count changed agrees with one whose did not only to float rounding), and the two straight runs play
at the same time, so each trains on a loaded machine: the conditions in which the packed training forward's backward once added a shared prompt's
gradient rows in thread order and two runs drifted apart from iteration 4 (learners/batch.py
``_positions``). A third run is killed with SIGKILL after its first checkpoint and resumed; it must
log what the uninterrupted runs log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import sigkill_once_written

pytestmark = pytest.mark.extended  # four `cogym train` processes of the full default config; docs/testing.md
COGYM = Path(sys.executable).with_name("cogym")
TIMING = ("rollout_s", "update_s", "iteration_s", "tokens_per_s", "threads")  # wall-clock measurements, the load
THREADS = max(2, min(4, os.cpu_count() or 1))
ITERATIONS = 5  # the drift this guards against showed from iteration 4
ARGS = ["--no-progress", f"run.iterations={ITERATIONS}", f"run.threads={THREADS}", "run.checkpoint_every=2",
        "eval.declared=false", "run.tensorboard=false", "run.plot=false"]  # the default config (configs/proposer_solver.yaml) otherwise


def _env() -> dict:
    # Each `cogym train` is its own single-process job (no launcher's variables, no thread cap but run.threads).
    drop = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}


def _start(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([str(COGYM), "train", "--run-dir", str(run_dir), *ARGS, *extra], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, f"cogym train failed:\n{err[-3000:]}"


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows if "rollout_s" in r]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    assert COGYM.is_file(), f"console script not installed at {COGYM}"
    root = tmp_path_factory.mktemp("repeat")
    dirs = {name: root / name for name in ("a", "b", "killed")}
    a, b = _start(dirs["a"]), _start(dirs["b"])  # at once: each trains on a machine the other loads
    _finish(a)
    _finish(b)

    sigkill_once_written(_start(dirs["killed"]), dirs["killed"] / "checkpoints" / "step_000002" / "trainer_state.json",
                         timeout=600)
    resume = subprocess.run([str(COGYM), "train", "--resume", str(dirs["killed"]), "--no-progress"], env=_env(),
                            capture_output=True, text=True, timeout=900)
    assert resume.returncode == 0, f"cogym train --resume failed:\n{resume.stderr[-3000:]}"
    return dirs


@pytest.mark.slow
def test_two_runs_of_the_default_config_log_the_same_numbers(runs: dict[str, Path]) -> None:
    a, b = _rows(runs["a"]), _rows(runs["b"])
    assert [r["iteration"] for r in a] == list(range(1, ITERATIONS + 1))
    assert "solver/grad_norm" in a[-1] and "proposer/loss" in a[-1]  # the learners' numbers are compared too
    for ra, rb in zip(a, b):
        diff = {k: (ra[k], rb.get(k)) for k in ra if ra[k] != rb.get(k)}
        assert not diff, f"iteration {ra['iteration']}: {diff}"  # every non-timing metric, exactly
    assert a == b


@pytest.mark.slow
def test_kill_9_and_resume_of_the_default_config_equals_the_uninterrupted_run(runs: dict[str, Path]) -> None:
    straight, resumed = _rows(runs["a"]), _rows(runs["killed"])
    assert [r["iteration"] for r in resumed] == list(range(1, ITERATIONS + 1))  # each iteration once
    assert resumed == straight
