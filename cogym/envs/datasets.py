"""Problem files: JSONL with one ``{"question": str, "answer": str}`` object per line.

Everything wrong with a file is found when it is loaded (at game construction), never in the
middle of an episode, and reported as a one-line ``DatasetError`` naming the file, the line,
what is wrong and how to fix it.
"""

from __future__ import annotations

import codecs
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cogym.envs.arithmetic import is_strict_answer
from cogym.envs.errors import DatasetError

# Questions become observation text; a bound keeps the observation space finite and catches
# a file that is not a problem set (e.g. a whole document on one line).
MAX_QUESTION_CHARS = 4096
_EXAMPLE = '{"question": "2+3", "answer": "5"}'


def text_lines(text: str) -> list[str]:
    """``text`` split into the lines an editor numbers: at ``\n``, ``\r\n`` and a lone ``\r`` only.

    Not ``str.splitlines``: that also breaks at U+2028, U+0085 and other separators that JSON allows
    raw inside a string (``json.dumps(..., ensure_ascii=False)`` writes them so), which would split a
    record in two and shift the line number of every error after it."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def read_utf8_lines(path: Path, where: Callable[[int], str]) -> list[str]:
    """The lines of the UTF-8 file at ``path`` (a leading byte-order mark, which some editors write
    when saving "UTF-8", is dropped).

    A file in another encoding (a Latin-1 or Windows-1252 export) raises a one-line DatasetError, as
    every other malformed file does: ``where(line)`` names the place in the caller's style, followed by
    the bad byte, its offset in the file and the fix. ``OSError`` is the caller's to report."""
    data = path.read_bytes()
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = start + exc.start
        line = len(text_lines(data[start:at].decode("utf-8")))  # everything before the bad byte is valid UTF-8
        raise DatasetError(f"{where(line)}: not UTF-8 text (byte 0x{data[at]:02x} at byte offset {at}: {exc.reason}); "
                           "save it as UTF-8 (e.g. iconv -f cp1252 -t utf-8 FILE > NEW)") from None
    return text_lines(text)


@dataclass(frozen=True)
class ProblemRecord:
    question: str
    answer: str
    line: int  # 1-based line number in the file, for messages


def load_problems(path: str | os.PathLike[str], integer_answers_for: str | None = None) -> list[ProblemRecord]:
    """All records of the JSONL file at ``path``; blank lines are skipped.

    ``integer_answers_for`` names what needs integer answers (e.g. ``"verifier='exact'"``);
    when given, an answer that is not one integer is an error that names it.
    """
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "does not exist"
        raise DatasetError(f"dataset {str(p)!r} {what}; pass the path of a JSONL file with one object like {_EXAMPLE} per line")
    try:
        lines = read_utf8_lines(p, lambda line: f"dataset {str(p)!r} line {line}")
    except OSError as exc:
        raise DatasetError(f"dataset {str(p)!r} cannot be read ({exc.strerror}); check that the file is readable") from None

    records: list[ProblemRecord] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"dataset {str(p)!r} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); each line must be one JSON object like {_EXAMPLE}") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: a JSON {type(obj).__name__}, not an object; each line must be one JSON object like {_EXAMPLE}")
        missing = [key for key in ("question", "answer") if key not in obj]
        if missing:
            names = " and ".join(repr(k) for k in missing)
            raise DatasetError(f"{where}: missing key {names}; each line needs both 'question' and 'answer', like {_EXAMPLE}")
        for key in ("question", "answer"):
            if not isinstance(obj[key], str):
                raise DatasetError(f"{where}: {key!r} is a {type(obj[key]).__name__}, not a string; write it as a JSON string, e.g. \"{key}\": \"{str(obj[key])[:40]}\"")
        question, answer = obj["question"], obj["answer"]
        if not question.strip():
            raise DatasetError(f"{where}: 'question' is empty; write the problem text, or delete the line")
        if len(question) > MAX_QUESTION_CHARS:
            raise DatasetError(f"{where}: 'question' has {len(question)} characters, more than the limit {MAX_QUESTION_CHARS}; shorten it or split the file")
        if integer_answers_for is not None and not is_strict_answer(answer):
            raise DatasetError(f"{where}: 'answer' {answer[:40]!r} is not an integer, which {integer_answers_for} needs; write one integer such as \"-18\", or use verifier='math_verify'")
        records.append(ProblemRecord(question=question, answer=answer, line=lineno))
    if not records:
        raise DatasetError(f"dataset {str(p)!r} has no problems (the file is empty); add one JSON object like {_EXAMPLE} per line")
    return records


def check_source(source: str, dataset: object, sources: tuple[str, ...], needs: str = "") -> None:
    """Validate a game's (source, dataset) pair: ``sources[0]`` generates problems, ``"dataset"`` reads a file."""
    if source not in sources:
        raise ValueError(f"source must be one of {sources}, got {source!r}")
    if source == "dataset" and dataset is None:
        raise ValueError(f"source='dataset' needs dataset=<path of a JSONL file of {{\"question\", \"answer\"}} lines{needs}>")
    if source != "dataset" and dataset is not None:
        raise ValueError(f"dataset={str(dataset)!r} is only read with source='dataset'; pass source='dataset' or drop dataset")
