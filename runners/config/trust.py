"""Explicit trust for a run directory's code: before ``cogym train --resume RUN`` imports the modules
``RUN/config.yaml`` lists (``game.modules``: they register its games and algorithms, and importing them
runs their code), :func:`check_run_modules` prints them and refuses the doubtful ones unless the user
says ``--trust-run-modules`` (as ``trust_remote_code`` does in transformers)."""

from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

from cogym.runners.config.load import load_tree, parse_override
from cogym.runners.rundir import RunDirError


def _resolve(module: str, config_dir: Path) -> str:
    """A ``.py`` module as the absolute path its config's loader imports (relative: to the working
    directory, else to ``config_dir``); a dotted name as written."""
    if not module.endswith(".py"):
        return module
    path = Path(module)
    if not path.is_absolute():
        path = next((c for c in (path, config_dir / path) if c.is_file()), path)
    return str(path.resolve())


def _lives_in(module: str, directory: Path) -> bool:
    """Whether the code of ``module`` (a resolved path or a dotted name) is inside ``directory``. A
    dotted name is looked up by its top-level package on the path, without importing anything."""
    root = os.path.realpath(directory)
    if module.endswith(".py"):
        where = [module]
    else:
        spec = importlib.machinery.PathFinder.find_spec(module.split(".")[0])
        where = [] if spec is None else [*(spec.submodule_search_locations or []), *([spec.origin] if spec.origin else [])]
    return any(os.path.realpath(w) == root or os.path.realpath(w).startswith(root.rstrip(os.sep) + os.sep) for w in where)


def _listed(tree: dict) -> list[str]:
    game = tree.get("game")
    modules = game.get("modules") if isinstance(game, dict) else None
    return [m for m in modules if isinstance(m, str)] if isinstance(modules, list) else []


def check_run_modules(run_path: Path, config: str | Path | None, overrides: list[str], trust: bool = False) -> list[str]:
    """Before ``cogym train --resume RUN`` imports the game/algorithm modules of RUN/config.yaml (its
    ``game.modules``, after the command line's overrides): print them in one line, and refuse, unless
    ``trust``, each that

    - lives inside RUN (a ``.py`` file there, or a package found there), or
    - is not named by the command line when the command line names modules: ``CONFIG`` given next to
      ``--resume`` names its ``game.modules``, and a ``game.modules=[...]`` override names its own.

    A module the command line names itself is accepted wherever it lives. Returns the modules."""
    run_path = Path(run_path)
    modules = [_resolve(m, run_path) for m in _listed(load_tree(run_path / "config.yaml", overrides))]
    if not modules:
        return []
    named: set[str] | None = None  # None: the command line names no modules
    if config is not None:
        named = {_resolve(m, Path(config).parent) for m in _listed(load_tree(config))}
    for text in overrides:
        key, value = parse_override(text)
        given = value if key == "game.modules" else value.get("modules") if key == "game" and isinstance(value, dict) else None
        if isinstance(given, list):
            named = (named or set()) | {_resolve(m, run_path) for m in given if isinstance(m, str)}
    print(f"cogym train --resume {run_path}: imports the game/algorithm modules " + ", ".join(modules)
          + (" (--trust-run-modules)" if trust else ""), file=sys.stderr)
    if trust:
        return modules
    for m in modules:
        if named is not None and m in named:
            continue
        if _lives_in(m, run_path):
            raise RunDirError(f"--resume {run_path}: game.modules {m!r} lives inside the run directory; importing it "
                              "runs its code as yours: add --trust-run-modules if you trust the run's author")
        if named is not None:
            raise RunDirError(f"--resume {run_path}: game.modules {m!r} of its config.yaml is not among the modules the "
                              f"command line names ({', '.join(sorted(named)) or 'none'}); add --trust-run-modules to "
                              "import it anyway")
    return modules
