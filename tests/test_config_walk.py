"""scripts/config_walk.py on a small tree: what it counts as a stay, a climb back up, an entry into build."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FILES = {
    "runners/cli/train.py": (
        "from cogym.runners.train.loop import train\n\n"
        "def run(args):\n"
        "    cfg = load(args)\n"
        "    return train(cfg)\n"),
    "runners/train/build.py": (
        "from dataclasses import dataclass\n\n"
        "@dataclass\n"
        "class Run:\n"
        "    cfg: 'Config'\n\n"
        "def build(cfg) -> Run:\n"
        "    return Run(cfg=cfg)\n"),
    "runners/train/loop.py": (
        "from cogym.runners.train.build import build\n"
        "from cogym.runners.ray.workers import start\n\n"
        "def train(cfg):\n"
        "    run = build(cfg)\n"
        "    log(cfg.run)\n"      # a section: no stay
        "    check(run)\n"        # the Config inside a Run: a stay
        "    start(cfg)\n\n"      # up to ray: a climb
        "def log(section):\n    pass\n\n"
        "def check(run):\n    pass\n\n"
        "def again(config):\n    pass\n"),
    "runners/ray/workers.py": (
        "from cogym.runners.train.loop import again\n"
        "from cogym.runners.train import build as b\n\n"
        "def start(cfg):\n"
        "    again(cfg)\n"        # back into train.loop, which the walk left: a climb
        "    b.build(cfg)\n"      # an entry into build
        "    cfg.pool.spawn(cfg)\n"),  # a method of some object: unresolved
}


def _script():
    spec = importlib.util.spec_from_file_location("config_walk", ROOT / "scripts" / "config_walk.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["config_walk"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("layout", ["cogym/", ""])  # the package folder, or the folders before the move
def test_the_walk_counts_stays_rooms_climbs_and_entries(tmp_path, capsys, layout):
    for rel, text in FILES.items():
        path = tmp_path / layout / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    module = _script()
    found = module.walk(module.load(tmp_path))
    assert sorted(found["stays"]) == [
        "cogym.runners.cli.train:run", "cogym.runners.ray.workers:start", "cogym.runners.train.build:Run",
        "cogym.runners.train.build:build", "cogym.runners.train.loop:again", "cogym.runners.train.loop:check",
        "cogym.runners.train.loop:train"]
    m = module.measure(found)
    assert [m[k] for k in ("stays", "rooms", "calls", "climbs back up", "entries into build", "unresolved")] == [7, 4, 7, 2, 2, 1]
    assert module.main(["--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"climb  {layout}runners/ray/workers.py:5: cogym.runners.ray.workers:start -> cogym.runners.train.loop:again" in out
    assert f"entry  {layout}runners/ray/workers.py:6: cogym.runners.ray.workers:start -> cogym.runners.train.build:build" in out
