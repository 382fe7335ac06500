"""Package-level names loaded on first use.

A package ``__init__`` that imported every public name eagerly would load torch and transformers
for ``import cogym.runners.cli`` and would make each submodule import its whole package. Instead::

    __getattr__, __dir__ = lazy_exports(__name__, {"train": "loop", "Run": "build"}, __all__)

maps each public name to the submodule (relative to the package, or absolute when it starts with
``cogym.``) that defines it; the first lookup imports that submodule and caches the value.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str], public: list[str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    missing = sorted(set(exports) ^ set(public))
    if missing:
        raise ImportError(f"{package}: __all__ and the lazy exports differ in {missing}")

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        target = module if module.startswith("cogym.") else f"{package}.{module}"
        value = getattr(importlib.import_module(target), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__
