"""Every shipped config loads, builds and trains one iteration (on a small random model, torch engine).

The full runs (``cogym train configs/<game>.yaml`` on the embedded model, each within 5 minutes)
are measured by hand and reported; this keeps every config runnable as the code changes.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
import yaml

from cogym.envs import registered
from cogym.runners.config import load_config
from cogym.runners.train import train

CONFIGS = sorted(p.name for p in resources.files("cogym.configs").iterdir() if p.name.endswith(".yaml"))


def test_every_shipped_game_but_the_example_has_a_config() -> None:
    games = {yaml.safe_load(resources.files("cogym.configs").joinpath(c).read_text())["game"]["id"] for c in CONFIGS}
    assert set(registered()) <= games, f"games without a config under configs/: {sorted(set(registered()) - games)}"


@pytest.mark.parametrize("name", CONFIGS)
def test_config_trains_one_iteration(name: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    path = Path(str(resources.files("cogym.configs").joinpath(name)))
    tree = yaml.safe_load(path.read_text())
    overrides = ["run.iterations=1", "run.checkpoint_every=0", "run.eval_every=0", "run.tensorboard=false",
                 "eval.heldout=false", "game.num_games=2", f"run.out_dir={tmp_path}"]
    for pid in tree.get("policies", {}):
        overrides.append(f"policies.{pid}.model={tiny_model_dir}")
    for pid in tree.get("learners", {}):
        overrides.append(f"learners.{pid}.engine=torch")
    cfg = load_config(path, overrides)
    summary = train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1]
    trained = [pid for pid, lc in cfg.learners.items() if lc.algorithm != "frozen"]
    # A policy whose seats never moved (e.g. solvers after two invalid proposals) has nothing to learn from.
    played = [pid for pid in trained if f"{pid}/retokenize_mismatch" in rows[0]]
    assert played or not trained, f"no trained policy played in {name}"
    for pid in played:
        assert f"{pid}/loss" in rows[0], f"learner {pid} played but did not update"
    assert any(k.endswith("/reward") for k in rows[0])
    assert summary["iterations"] == 1 and (tmp_path / "run" / "learning_curve.png").is_file()
