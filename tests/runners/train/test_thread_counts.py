"""Another torch thread count changes float rounding, not what is played: the default config at 1 and 2
threads samples the same tokens and earns the same rewards (docs/performance.md, "Threads"), which is what
lets the thread policy follow the load."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
import torch

from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train

PLAYED = ("reward", "correct", "invalid", "distinct_problems", "trained_rows", "response_tokens", "turns")


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _played(tmp_path: Path, threads: int) -> tuple[list[dict], list[int]]:
    cfg = load_config(Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml"))),
                      ["run.iterations=3", f"run.threads={threads}", "eval.declared=false", "run.checkpoint_every=0",
                       "run.plot=false", "run.tensorboard=false", f"run.out_dir={tmp_path}"])
    run = tmp_path / f"t{threads}"
    train(cfg, run, progress=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "rollout_s" in r]
    return [{k: v for k, v in r.items() if k.split("/")[-1] in PLAYED} for r in rows], [r["threads"] for r in rows]


def test_one_and_two_threads_play_the_same_games(tmp_path: Path) -> None:
    one, t1 = _played(tmp_path, 1)
    two, t2 = _played(tmp_path, 2)
    assert t1 == [1, 1, 1] and t2 == [2, 2, 2]  # pinned: the load does not move them
    assert len(one) == 3 and all(len(r) >= 8 for r in one)
    assert one == two
