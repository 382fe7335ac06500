"""A game module named relative to the working directory or the config is stored in the run's
config.yaml by its absolute path, so `cogym train --resume RUN --trust-run-modules` works from any
directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from cogym.envs import registry
from cogym.runners.cli import main
from cogym.runners.config.load import load_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _user_dir(tmp_path: Path) -> Path:
    """A user's project: the example game and its config, side by side."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("number_guess.py", "number_guess.yaml"):
        shutil.copy(EXAMPLES / name, project / name)
    return project


def test_a_relative_module_is_stored_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    project = _user_dir(tmp_path)
    monkeypatch.chdir(project)  # `game.modules: [number_guess.py]` is found in the working directory
    cfg = load_config("number_guess.yaml")
    assert cfg.game.modules == [str((project / "number_guess.py").resolve())]
    monkeypatch.chdir(tmp_path)  # and next to the config, from elsewhere
    assert load_config(project / "number_guess.yaml").game.modules == cfg.game.modules
    assert load_config(project / "number_guess.yaml", ["game.modules=[os.path]"]).game.modules == ["os.path"]


def test_resume_from_another_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    project = _user_dir(tmp_path)
    run = tmp_path / "run"
    monkeypatch.chdir(project)
    small = ["game.num_games=4", "run.checkpoint_every=1", "run.tensorboard=false", "run.plot=false"]
    assert main(["train", "number_guess.yaml", "--no-progress", "--run-dir", str(run), "run.iterations=1", *small]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())["game"]["modules"]
    assert saved == [str((project / "number_guess.py").resolve())]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # A path in a run's config.yaml may point anywhere (issue 49): the user names it, or trusts the run.
    assert main(["train", "--resume", str(run), "--no-progress", "run.iterations=2"]) == 2
    assert not (run / "checkpoints" / "step_000002").exists()
    assert main(["train", "--resume", str(run), "--no-progress", "run.iterations=2", "--trust-run-modules"]) == 0
    assert (run / "checkpoints" / "step_000002").is_dir()
