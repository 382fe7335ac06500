"""Seed problems of proposer_solver-v0: the shipped files or a user's, read bounded and checked against
the game's domain (a proposer's few-shot examples and the novelty filter's pool start from them)."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

from cogym.envs.arithmetic import Domain
from cogym.envs.errors import DatasetError

MAX_SEEDS = 10_000  # problems a seed file may hold


def shipped_or_path(name: str | os.PathLike[str]) -> Path | None:
    """The file ``name`` names: a path, or else the name of a file shipped in ``cogym/envs/data``; None if neither."""
    p = Path(name)
    if p.is_file():
        return p
    shipped = resources.files("cogym.envs").joinpath("data", p.name)
    if p.name == str(name) and shipped.is_file():
        return Path(str(shipped))
    return None


def seed_path(seeds: str | os.PathLike[str]) -> Path:
    """The seed file ``seeds`` names: a path, or else the name of a file shipped in ``cogym/envs/data``."""
    found = shipped_or_path(seeds)
    if found is not None:
        return found
    raise DatasetError(f"seed file {str(seeds)!r} does not exist (neither a path nor a file shipped in cogym/envs/data, "
                       "such as 'serl_seeds.jsonl'); pass a JSONL file of {\"question\": \"12+7\"} objects or a text file, one problem a line")


def load_seeds(seeds: str | os.PathLike[str], domain: Domain) -> list[str]:
    """The distinct problems of a seed file, in canonical form and file order.

    A ``.jsonl`` file holds one JSON object with a string ``"question"`` a line (other keys, such as
    ``"answer"``, are ignored); any other file one problem a line, ``#`` starting a comment line.
    Blank lines are skipped. Every problem must be a problem of ``domain``.
    """
    p = seed_path(seeds)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"seed file {str(p)!r} cannot be read as UTF-8 text ({exc})") from None
    jsonl = p.suffix == ".jsonl"
    out: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or (not jsonl and line.lstrip().startswith("#")):
            continue
        where = f"seed file {str(p)!r} line {lineno}"
        if jsonl:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where}: not valid JSON ({exc.msg}); each line must be an object like {{\"question\": \"12+7\"}}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("question"), str):
                raise DatasetError(f"{where}: each line must be an object with a string 'question', like {{\"question\": \"12+7\"}}")
            line = obj["question"]
        problem = domain.parse(line)
        if problem is None:
            raise DatasetError(f"{where}: {line[:40]!r} is not a problem of this game (operands 0..{domain.max_operand}, "
                               f"operators {domain.ops!r}, written like '12+7')")
        if problem.text not in out:
            out.append(problem.text)
        if len(out) > MAX_SEEDS:
            raise DatasetError(f"seed file {str(p)!r} holds more than {MAX_SEEDS} problems; a few dozen examples are enough")
    if not out:
        raise DatasetError(f"seed file {str(p)!r} has no problems; write one per line")
    return out
