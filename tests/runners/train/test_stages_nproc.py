"""A run in stages with ``cogym train --nproc 2`` (configs/sft_then_grpo.yaml, shrunk): both ranks restart the
changed learner at the boundary from its checkpoint, so the rows are the one-process run's (tokens and
rewards exactly, losses to float rounding: each rank sums its share of the rows), and a run stopped inside
stage 2 and resumed with --nproc 2 logs what the uninterrupted one did. In-process stages:
tests/runners/train/test_stages.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train
from tests.rounding import same

COGYM = Path(sys.executable).with_name("cogym")
CONFIG = "configs/sft_then_grpo.yaml"
# Two SFT iterations (1-2), then three GRPO iterations (3-5); 2 games, one a rank.
SMALL = ["game.num_games=2", "game.kwargs.num_solvers=2", "policies.solver.sampling.max_new_tokens=4",
         "policies.proposer.sampling.max_new_tokens=4", "eval.declared=false", "run.tensorboard=false",
         "run.plot=false", "run.checkpoint_every=1", "run.eval_every=0", "stages.0.run.iterations=2",
         "stages.0.learners.solver.sft_batch_size=4", "stages.1.run.iterations=3"]
ROUNDED = ("/loss", "/grad_norm", "/ppo_kl", "/logprob_drift", "/sft_nll", "/kl_loss", "/mismatch_abs", "/mismatch_k3")


def _cogym(args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update(TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    proc = subprocess.run([str(COGYM), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"cogym failed:\n{proc.stderr[-3000:]}"


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.endswith("_s") and k != "threads"} for r in rows]


def test_two_ranks_train_through_the_boundary_and_resume_inside_stage_2(tmp_path: Path) -> None:
    one = tmp_path / "one"
    train(load_config(CONFIG, [*SMALL, "run.threads=1"]), one, progress=False)
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    _cogym(["train", CONFIG, "--nproc", "2", "--run-dir", str(straight), "--no-progress", *SMALL])
    rows = _rows(straight)
    assert [(r["iteration"], r["stage"]) for r in rows] == [(1, "sft"), (2, "sft"), (3, "grpo"), (4, "grpo"), (5, "grpo")]
    assert all("solver/sft_rows" in r for r in rows[:2]) and all("solver/kl_loss" in r for r in rows[2:])
    exact = lambda rs: [{k: v for k, v in r.items() if not k.endswith(ROUNDED)} for r in rs]  # noqa: E731
    assert exact(rows) == exact(_rows(one))  # the games, tokens and rewards of one process
    assert same(rows, _rows(one))  # and its losses, to float rounding
    boundary = straight / "checkpoints" / "step_000002"
    assert json.loads((boundary / "trainer_state.json").read_text())["world_size"] == 2
    # Stopped after iteration 4 (inside the GRPO stage), resumed with the same two ranks.
    _cogym(["train", CONFIG, "--nproc", "2", "--run-dir", str(stopped), "--no-progress", *SMALL, "run.iterations=4"])
    assert [r["iteration"] for r in _rows(stopped)] == [1, 2, 3, 4]
    _cogym(["train", "--resume", str(stopped), "--nproc", "2", "--no-progress", "run.iterations=null"])
    assert _rows(stopped) == rows  # every metric of every iteration, exactly
    steps = {pid: json.loads((stopped / "checkpoints" / "step_000005" / "learners" / pid / "state.json").read_text())
             ["steps"] for pid in ("solver", "proposer")}
    assert steps == {"solver": 3, "proposer": 5}  # the solver's learner started again at the boundary
