"""The worked example of docs/write_your_own_algorithm.md: examples/median_baseline.py, a user algorithm
that cogym trains through `cogym train` with no change to cogym's packages."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cogym.learners import registry
from cogym.runners.cli import main

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "median_baseline.yaml"


@pytest.fixture
def private_registry():
    """The example registers into a copy of the registry, and its module is unloaded afterwards."""
    saved, before = registry._REGISTRY, set(sys.modules)
    registry._REGISTRY = dict(saved)
    yield
    registry._REGISTRY = saved
    for name in [n for n in sys.modules if n not in before and n.startswith("cogym_user_games.median_baseline")]:
        del sys.modules[name]


def test_median_baseline_by_hand(private_registry):
    from cogym.runners.config.modules import import_game_modules

    import_game_modules([str(ROOT / "examples" / "median_baseline.py")])
    module = sys.modules[registry.get("median_baseline").__module__]
    scores = torch.tensor([0.0, 0.0, 10.0, 1.0, 3.0, 0.5])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    adv, stats = module.median_baseline_advantages(scores, mask, torch.tensor([0, 0, 0, 1, 1, 2]), scale=2.0)
    # group 0: median 0 -> 2*(0, 0, 10); group 1: median (1+3)/2 = 2 -> 2*(-1, 1); group 2 alone -> 0
    assert adv.tolist() == [[0, 0], [0, 0], [20, 20], [-2, -2], [2, 0], [0, 0]]
    assert stats == {"median_singleton_groups": 1.0}


def test_cogym_train_trains_the_example_algorithm(private_registry, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["train", str(CONFIG), "--run-dir", str(run_dir), "run.iterations=3", "run.checkpoint_every=3",
                 "run.tensorboard=false", "run.plot=false", "eval.declared=false", "game.num_games=4"])
    assert code == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    trained = [r for r in rows if "solver/median_singleton_groups" in r]
    assert len(trained) == 3 and all(r["solver/median_singleton_groups"] == 0.0 for r in trained)
    assert any(r.get("solver/adv_abs_mean", 0) > 0 for r in trained)
    start = load_file(str(next((ROOT / "cogym" / "agents" / "tiny").glob("*.safetensors"))))
    final = load_file(str(next((run_dir / "checkpoints").glob("step_*/policies/solver/*.safetensors"))))
    assert any(not torch.equal(start[k], final[k]) for k in start if k in final), "the solver's weights changed"
    assert "median_scale: 1.0" in (run_dir / "config.yaml").read_text()  # its key is written back flat
