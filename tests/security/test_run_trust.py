"""Explicit trust for other people's code (issue 49, item 3): `cogym train --resume RUN` prints the game
modules RUN/config.yaml makes it import, and refuses each that the command line does not name (a .py
file anywhere: inside RUN, beside it in the same archive, under /tmp; a dotted name outside Python's
installation; any module when the command line names others), unless --trust-run-modules."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from cogym.envs import registry
from cogym.runners.cli import main
from cogym.runners.config.trust import check_run_modules
from cogym.runners import rundir
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


def _archive(tmp_path: Path, module: str) -> tuple[Path, Path]:
    """A shared archive unpacked: ``archive/run/`` (a cogym run directory) beside ``archive/evil.py``,
    whose import leaves a file behind. The run's config.yaml names ``module``."""
    run = tmp_path / "archive" / "run"
    rundir.create(run, "train")
    marker = tmp_path / "imported"
    (tmp_path / "archive" / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (run / "config.yaml").write_text(yaml.safe_dump({"game": {"modules": [module]}}))
    return run, marker


@pytest.mark.parametrize("where", ["beside the run", "an absolute path"])
def test_a_module_outside_the_run_is_refused_without_the_flag(tmp_path, monkeypatch, capsys, fresh_registry, where):
    if where == "beside the run":
        run, marker = _archive(tmp_path, "../evil.py")
    else:  # /tmp/...: anywhere the author expects a file
        run, marker = _archive(tmp_path, str(tmp_path / "x.py"))
        (tmp_path / "x.py").write_text((tmp_path / "archive" / "evil.py").read_text())
    module = str((tmp_path / ("archive/evil.py" if where == "beside the run" else "x.py")).resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[0] == f"cogym train --resume {run}: imports the game/algorithm modules {module}"
    assert len(lines) == 2 and lines[1].startswith("cogym train: error:") and module in lines[1]
    # the exact command to go on, either way
    assert f"cogym train --resume {run} --trust-run-modules" in lines[1]
    assert f"'game.modules=[{module}]'" in lines[1]
    assert not marker.exists()  # not one line of it ran
    # Named on the command line: accepted (checked only; importing it is the run's business).
    assert check_run_modules(run, None, [f"game.modules=[{module}]"]) == [module]
    # Trusted: imported (the run then stops, having no checkpoint: this is a stand-in run directory).
    fresh_registry()
    assert main(["train", "--resume", str(run), "--no-progress", "--trust-run-modules"]) == 2
    assert marker.exists()


def test_a_dotted_module_found_outside_pythons_installation_is_refused(tmp_path, monkeypatch, capsys):
    run, _ = _archive(tmp_path, "evilpkg.games")
    package = tmp_path / "archive" / "evilpkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.chdir(tmp_path / "archive")
    monkeypatch.syspath_prepend(str(tmp_path / "archive"))  # the working directory on the path (python -m, PYTHONPATH=.)
    with pytest.raises(RunDirError, match="outside Python's installation"):
        check_run_modules(run, None, [])
    assert check_run_modules(run, None, [], trust=True) == ["evilpkg.games"]
    # A module of the standard library or an installed package is not someone else's code.
    (run / "config.yaml").write_text(yaml.safe_dump({"game": {"modules": ["json.decoder", "yaml"]}}))
    assert check_run_modules(run, None, []) == ["json.decoder", "yaml"]
