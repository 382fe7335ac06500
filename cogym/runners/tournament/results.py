"""The append-only results log (results.jsonl): one line per finished game, read back on a rerun."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

from cogym.runners import rundir

RESULTS_FILE = "results.jsonl"


def write_json(path: Path, data) -> None:
    """Write a small JSON file atomically (a kill leaves the old file or the new one; a symbolic link
    at ``path`` is replaced, never written through: :mod:`cogym.runners.rundir`)."""
    rundir.write_json(path, data)


class ResultsLog:
    """``results.jsonl``: one line per finished game, appended and flushed batch by batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict] = []
        if path.is_file() or path.is_symlink():
            # A line cut by a kill mid-write is dropped (that game is played again), so the next append
            # starts on a line of its own; any other line that is not a JSON object is a damaged file.
            rows = rundir.drop_torn_tail(path)  # never through a symbolic link out of the directory
            self.rows = [r for r in rows if isinstance(r.get("id"), str)]
            if len(self.rows) != len(rows):
                rundir.write_jsonl(path, self.rows)  # a row without a game id is no finished game
        self.done = {r["id"] for r in self.rows}

    def append(self, rows: Iterable[dict]) -> None:
        rows = [r for r in rows if r["id"] not in self.done]
        if not rows:
            return
        with rundir.open_append(self.path) as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
            f.flush()
            os.fsync(f.fileno())
        self.rows += rows
        self.done |= {r["id"] for r in rows}


def count(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= 2 else f"{len(names)} players"
