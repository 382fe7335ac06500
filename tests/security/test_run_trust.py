"""Explicit trust for other people's code (issue 49, item 3): `cogym train --resume RUN` prints the game
modules RUN/config.yaml makes it import, and refuses one that lives inside RUN, or one that the CONFIG
given on the command line does not name, unless --trust-run-modules."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from cogym.envs import registry
from cogym.runners.cli import main
from cogym.runners.config.trust import check_run_modules
from cogym.runners.rundir import RunDirError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = ["--no-progress", "game.num_games=2", "run.checkpoint_every=1", "run.tensorboard=false", "run.plot=false"]


@pytest.fixture
def fresh_registry(monkeypatch):
    """``reset()``: the registry as it was before the test, and no user game module imported yet."""
    original = dict(registry._REGISTRY)

    def reset() -> None:
        monkeypatch.setattr(registry, "_REGISTRY", dict(original))
        for name in [m for m in sys.modules if m.startswith("cogym_user_games.")]:
            monkeypatch.delitem(sys.modules, name)  # imported once per process: forgotten, it is imported again

    reset()
    return reset


def _shipped_run(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """A run someone sent: trained with their game, which they put inside the run directory and named in
    its config.yaml. Importing the copy leaves a file behind (so a test sees whether it ran)."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("number_guess.py", "number_guess.yaml"):
        shutil.copy(EXAMPLES / name, project / name)
    monkeypatch.chdir(project)
    run = tmp_path / "run"
    assert main(["train", "number_guess.yaml", "--run-dir", str(run), "run.iterations=1", *SMALL]) == 0
    shipped = run / "their_game.py"
    shipped.write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n" + (project / "number_guess.py").read_text())
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["game"]["modules"] = [str(shipped)]
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return run, shipped


def test_a_module_inside_the_run_is_refused_without_the_flag(tmp_path, monkeypatch, capsys, fresh_registry):
    run, shipped = _shipped_run(tmp_path, monkeypatch)
    fresh_registry()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "run.iterations=2", *SMALL]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[0] == f"cogym train --resume {run}: imports the game/algorithm modules {shipped}"  # shown first
    assert len(lines) == 2 and "Traceback" not in lines[1]
    assert lines[1].startswith("cogym train: error:") and "inside the run directory" in lines[1]
    assert "--trust-run-modules" in lines[1]
    assert not (tmp_path / "imported").exists()  # not one line of it ran
    assert not (run / "checkpoints" / "step_000002").exists()

    fresh_registry()
    assert main(["train", "--resume", str(run), "run.iterations=2", "--trust-run-modules", *SMALL]) == 0
    assert (tmp_path / "imported").exists()
    assert (run / "checkpoints" / "step_000002").is_dir()
    assert f"imports the game/algorithm modules {shipped} (--trust-run-modules)" in capsys.readouterr().err


def test_modules_the_command_line_config_does_not_name_are_refused(tmp_path, monkeypatch, capsys, fresh_registry):
    run, shipped = _shipped_run(tmp_path, monkeypatch)
    mine = tmp_path / "project" / "number_guess.yaml"
    fresh_registry()
    capsys.readouterr()
    # CONFIG next to --resume names the modules the user expects the run to import: the project's game.
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["game"]["modules"] = [str(tmp_path / "project" / "other.py")]
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (tmp_path / "project" / "other.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    assert main(["train", str(mine), "--resume", str(run), "run.iterations=2", *SMALL]) == 2
    err = capsys.readouterr().err
    assert "not among the modules the command line names" in err and str(tmp_path / "project" / "other.py") in err
    assert not (tmp_path / "imported").exists()
    # The same module named by CONFIG: accepted (an override naming it would be too).
    cfg["game"]["modules"] = [str(tmp_path / "project" / "number_guess.py")]
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert main(["train", str(mine), "--resume", str(run), "run.iterations=2", *SMALL]) == 0
    assert not (tmp_path / "imported").exists()


def test_a_module_named_on_the_command_line_is_trusted_wherever_it_lives(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "game.py").write_text("")
    (run / "config.yaml").write_text(yaml.safe_dump({"game": {"modules": ["game.py"]}}))
    with pytest.raises(RunDirError, match="inside the run directory"):
        check_run_modules(run, None, [])
    assert check_run_modules(run, None, [f"game.modules=[{run / 'game.py'}]"]) == [str(run / "game.py")]
    assert check_run_modules(run, None, [], trust=True) == [str(run / "game.py")]
    assert check_run_modules(run, None, ["game.modules=[]"]) == []
    assert "game.py" in capsys.readouterr().err
