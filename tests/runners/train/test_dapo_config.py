"""configs/dapo.yaml (cogym/configs/dapo.yaml) is DAPO: GRPO's advantages, clip-higher, token-mean
aggregation, dynamic sampling and overlong shaping; it loads and trains two small iterations."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train

pytestmark = pytest.mark.slow

PATH = Path(str(resources.files("cogym.configs").joinpath("dapo.yaml")))


def test_dapo_config_is_dapo():
    lc = load_config(PATH).learners["generator"]
    assert (lc.algorithm, lc.policy_loss, lc.clip_low, lc.clip_high, lc.loss_agg) == ("grpo", "vanilla", 0.2, 0.28,
                                                                                       "token-mean")
    assert lc.dynamic_sampling == "std_gt_0" and lc.max_sampling_rounds > 1
    assert lc.overlong_buffer > 0 and lc.overlong_penalty > 0
    assert lc.kl_in_loss == "off" and lc.kl_in_reward == "off" and lc.entropy_coef == 0


def test_dapo_config_trains_two_small_iterations(tmp_path):
    cfg = load_config(PATH, ["run.iterations=2", "game.num_games=16", f"run.out_dir={tmp_path}",
                             "run.tensorboard=false", "run.plot=false"])
    summary = train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "rollout_s" in r]
    assert summary["iterations"] == 2 and [r["iteration"] for r in rows] == [1, 2]
    for row in rows:
        assert "generator/loss" in row and row["generator/ds_rounds"] >= 1  # trained, with dynamic sampling
        assert "generator/overlong_penalty" in row and "generator/pg_clipfrac" in row
