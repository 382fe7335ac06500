"""Importing the user modules a config lists in ``game.modules``: they register games and algorithms,
so they are imported before the config's game and algorithm names are checked (a run directory's
are checked first: :mod:`~cogym.runners.config.trust`)."""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path

from cogym.core.errors import ConfigError
from cogym.core.processes import import_file


def import_game_modules(modules: list[str]) -> None:
    """Import the modules (dotted names or ``.py`` paths) that register a config's games and
    algorithms; once each."""

    for name in modules:
        if name.endswith(".py"):
            path = Path(name).resolve()
            if not path.is_file():
                raise ConfigError(f"game.modules: {name!r} is not a file (paths are relative to the working directory "
                                  "or to the config file)")
            # A name fixed by the path, the same in every process (workers can unpickle its classes).
            mod_name = f"cogym_user_games.{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"
            if mod_name in sys.modules:
                continue
            import_file(path, mod_name)
        else:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and not (name == exc.name or name.startswith(exc.name + ".")):
                    raise  # the module exists but needs a package that is missing: its own error says which
                raise ConfigError(f"game.modules: cannot import {name!r} ({exc}); give a module on the Python path "
                                  "or a .py file") from exc

