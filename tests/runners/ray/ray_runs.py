"""What the Ray test modules share (tests/runners/ray/test_ray_*.py): the default config shrunk, its rows
without wall-clock and Ray bookkeeping, and the one-thread settings learner actors are compared under."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from cogym.runners.config.load import load_config

ROUNDED = ("/loss", "/grad_norm", "/ppo_kl", "/logprob_drift")  # metrics built on behaviour log-probs
# The default config (proposer and 8 solvers, GRPO), shrunk: 8 games an iteration, 3 iterations.
SMALL = ["run.iterations=3", "game.num_games=8", "run.eval_every=0", "run.checkpoint_every=0",
         "run.tensorboard=false", "run.plot=false", "eval.declared=false", "learners.solver.engine=torch",
         "learners.proposer.engine=torch"]
DEFAULT = Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml")))
# One torch thread in every process: a learner actor runs with its bundle's CPUs as threads, and the
# in-process learner it is compared with must round the same way. Half a CPU per actor: two workers and
# two learner actors fit the module's 2-CPU cluster in either placement.
ONE_THREAD = ["run.threads=1", "ray.num_cpus=0.5", "ray.learner_num_cpus=0.5"]


def small_config(tmp_path: Path, *extra: str):
    """SMALL, writing under ``tmp_path``, then ``extra``."""
    return load_config(DEFAULT, SMALL + [f"run.out_dir={tmp_path}", *extra])


def metric_rows(run_dir: Path) -> list[dict]:
    """A run's metrics rows without wall-clock figures (``*_s``) and Ray's bookkeeping (``ray/*``), which
    differ between backends; everything else must not."""
    out = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_s") and not k.startswith("ray/")} for r in out]


def raw_rows(run_dir: Path) -> list[dict]:
    """A run's metrics rows as written."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
