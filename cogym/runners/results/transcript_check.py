"""Whether a line of a ``transcripts.jsonl`` is a transcript row (the format in
:mod:`cogym.runners.results.transcripts`) that ``cogym show`` can print and filter.

A transcripts file may come from someone else's run directory, so every field the reader and the
printer touch is checked for its type before either does: a crafted row is refused in one line that
names the line and the field, instead of a traceback from deep inside the printer. Fields the
printer does not use are left alone, and fields that older versions did not write may be absent.
"""

from __future__ import annotations

from typing import Any

from cogym.core.text import brief

_MOVE_TEXT = ("seat", "role", "text")  # required strings of a move
_MOVE_OPTIONAL_TEXT = ("policy", "shown", "error")
_COUNTS = ("chars", "shown_chars")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def row_problem(row: Any) -> str | None:
    """Why ``row`` is not a transcript row (one short phrase naming the field), or None when it is."""
    if not isinstance(row, dict):
        return f"not a JSON object but {type(row).__name__}"
    for key in ("source", "episode"):
        if key in row and row[key] is not None and not isinstance(row[key], str):
            return f"{key} must be a string, got {brief(row[key])}"
    if row.get("iteration") is not None and not _is_int(row["iteration"]):
        return f"iteration must be an integer or null, got {brief(row['iteration'])}"
    if row.get("max_chars") is not None and not _is_int(row["max_chars"]):
        return f"max_chars must be an integer, got {brief(row['max_chars'])}"
    if row.get("seed") is not None and not _is_int(row["seed"]):
        return f"seed must be an integer, got {brief(row['seed'])}"
    if row.get("game") is not None and not (_is_int(row["game"]) or isinstance(row["game"], str)):
        return f"game must be an integer or a string, got {brief(row['game'])}"
    pairing = row.get("pairing")
    if pairing is not None and not (isinstance(pairing, list) and len(pairing) == 2
                                    and all(isinstance(p, str) for p in pairing)):
        return f"pairing must be two player names or null, got {brief(pairing)}"
    returns = row.get("returns")
    if returns is not None and not (isinstance(returns, dict) and all(_is_number(r) for r in returns.values())):
        return f"returns must map seats to numbers, got {brief(returns)}"
    moves = row.get("moves")
    if not isinstance(moves, list):
        return f"moves must be a list, got {brief(moves)}"
    for n, move in enumerate(moves, 1):
        if not isinstance(move, dict):
            return f"move {n} must be a JSON object, got {brief(move)}"
        for key in _MOVE_TEXT:
            if not isinstance(move.get(key), str):
                return f"move {n}: {key} must be a string, got {brief(move.get(key))}"
        for key in _MOVE_OPTIONAL_TEXT:
            if move.get(key) is not None and not isinstance(move[key], str):
                return f"move {n}: {key} must be a string, got {brief(move[key])}"
        for key in _COUNTS:
            if key in move and not _is_int(move[key]):
                return f"move {n}: {key} must be an integer, got {brief(move[key])}"
    return None
