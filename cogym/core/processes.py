"""What a process takes from its surroundings: a free TCP port, and code loaded by name or from a file.

``free_port()`` is a port nothing listens on now (for a process group's rendezvous, or a worker's
server). ``load_object("package.module:attribute")`` imports the module and returns the attribute:
how the registries name the shipped games, algorithms and evaluator kinds without importing them
first. ``import_file(path, name)`` runs a ``.py`` file as the module ``name`` (a user's game module).
"""

from __future__ import annotations

import importlib
import importlib.util
import socket
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the system's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_object(ref: str) -> Any:
    """The attribute ``ref`` names as ``"package.module:attribute"``, its module imported."""
    module, sep, attribute = ref.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"expected 'package.module:attribute', got {ref!r}")
    return getattr(importlib.import_module(module), attribute)


def register_builtin(table: Mapping[str, Any], builtin: Mapping[str, str], lock: Any,
                     store: Callable[[str, str], Any]) -> None:
    """The lazy half of a registry with a table of shipped entries: ``store(name, ref)`` each entry of
    ``builtin`` (name -> ``"package.module:attribute"``) not in ``table`` yet. Called on a registry's first
    lookup (and again after a test put back a table saved before it); ``lock`` (an RLock) makes a second
    thread wait instead of seeing half the table."""
    if builtin.keys() <= table.keys():
        return
    with lock:
        for name, ref in builtin.items():
            if name not in table:
                store(name, ref)


def import_file(path: Path, name: str) -> ModuleType:
    """Run the ``.py`` file at ``path`` as the module ``name`` (kept in ``sys.modules``, so another
    process that imports it by the same name can unpickle its classes); a file that fails leaves no
    module behind."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
