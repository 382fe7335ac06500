"""Explicit trust for a run directory's code: before ``cogym train --resume RUN`` imports the modules
``RUN/config.yaml`` lists (``game.modules``: they register its games and algorithms, and importing them
runs their code), :func:`check_run_modules` prints them and refuses every one that the command line
does not name itself, unless it is part of Python's installation, or the user says
``--trust-run-modules`` (as ``trust_remote_code`` does in transformers). A config.yaml is whatever its
author wrote: a path there may point into the run directory, beside it, or anywhere else."""

from __future__ import annotations

import importlib.util
import os
import shlex
import site
import sys
import sysconfig
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
    """Whether the code of ``module`` (a resolved path or a dotted name) is inside ``directory``."""
    root = os.path.realpath(directory)
    return any(os.path.realpath(w) == root or os.path.realpath(w).startswith(root.rstrip(os.sep) + os.sep)
               for w in _where(module))


def _where(module: str) -> list[str]:
    """The files or folders ``module``'s code comes from (a dotted name: its top-level package, looked up
    on the path without importing anything; none when it is built in or not found)."""
    if module.endswith(".py"):
        return [module]
    try:
        spec = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    # Only paths on disk: not "built-in" or "frozen", nor the path hook of a package pip installed editable.
    return [w for w in [*(spec.submodule_search_locations or []), spec.origin] if w and os.path.isabs(w)]


def _installed(module: str) -> bool:
    """Whether dotted ``module`` comes from Python's installation: the standard library, site-packages,
    cogym itself, or nothing on disk (built in, or only an import hook; or not found, which its import
    then says). Anything else on the path (the working directory, a PYTHONPATH entry)
    may be a folder someone else's archive unpacked."""
    if module.split(".")[0] == "cogym":
        return True
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {os.path.realpath(p) for p in site.getsitepackages() + [site.getusersitepackages()]}
    return all(any(os.path.realpath(w).startswith(r.rstrip(os.sep) + os.sep) for r in roots) for w in _where(module))


def _listed(tree: dict) -> list[str]:
    game = tree.get("game")
    modules = game.get("modules") if isinstance(game, dict) else None
    return [m for m in modules if isinstance(m, str)] if isinstance(modules, list) else []


def check_run_modules(run_path: Path, config: str | Path | None, overrides: list[str], trust: bool = False) -> list[str]:
    """Before ``cogym train --resume RUN`` imports the game/algorithm modules of RUN/config.yaml (its
    ``game.modules``, after the command line's overrides): print them in one line, and refuse, unless
    ``trust``, each that the command line does not name itself (``CONFIG`` given next to ``--resume``
    names its ``game.modules``, and a ``game.modules=[...]`` override names its own) and that is

    - a ``.py`` file, wherever it lives: a path in someone's config.yaml may point anywhere, into the
      run directory, beside it in the same archive (``../evil.py``) or at ``/tmp``; or
    - a dotted name whose code is not part of Python's installation (the standard library, site-packages,
      cogym): one found in the working directory or on PYTHONPATH, inside RUN or not.

    When the command line names modules, every other module of the run is refused too. A module the
    command line names is accepted wherever it lives. Returns the modules."""
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
    again = shlex.join(["cogym", "train", *([str(config)] if config is not None else []), "--resume", str(run_path),
                        *overrides])
    go_on = (f"if you trust the run's author, add --trust-run-modules to the command (`{again} --trust-run-modules`), "
             f"or name the modules yourself (`{again} {shlex.quote('game.modules=[' + ', '.join(modules) + ']')}`)")
    for m in modules:
        if named is not None and m in named:
            continue
        if _lives_in(m, run_path):
            raise RunDirError(f"--resume {run_path}: game.modules {m!r} lives inside the run directory; importing it "
                              f"runs its code as yours: {go_on}")
        if named is not None:
            raise RunDirError(f"--resume {run_path}: game.modules {m!r} of its config.yaml is not among the modules the "
                              f"command line names ({', '.join(sorted(named)) or 'none'}); add --trust-run-modules to "
                              "import it anyway")
        if m.endswith(".py") or not _installed(m):
            what = "a file" if m.endswith(".py") else "a module outside Python's installation"
            raise RunDirError(f"--resume {run_path}: its config.yaml names game.modules {m!r}, {what} that cogym would "
                              f"import, running its code as yours, and the command line does not name it: {go_on}")
    return modules
