"""The scripts of benchmarks/ as modules, for the tests of their tables, modes and helpers."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_path(stem: str) -> Path:
    return BENCHMARKS / f"{stem}.py"


@contextlib.contextmanager
def benchmark_module(stem: str, name: str | None = None) -> Iterator[ModuleType]:
    """benchmarks/``stem``.py imported as module ``name`` (default ``stem``), in sys.modules while the block
    runs (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name or stem, benchmark_path(stem))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
