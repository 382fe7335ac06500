from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Callable

import pytest

from cogym.envs import registry


@pytest.fixture
def heldout_path() -> str:
    return str(resources.files("cogym.envs").joinpath("data", "arithmetic_heldout.jsonl"))


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., str]:
    """Write lines (dicts become JSON, strings are written as they are) to a fresh .jsonl file."""

    def write(lines: list, name: str = "problems.jsonl") -> str:
        path = tmp_path / name
        path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines), encoding="utf-8")
        return str(path)

    return write


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Games registered inside the test are forgotten after it (the real ones stay visible)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
