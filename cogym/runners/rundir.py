"""The guarded run directory: every file cogym writes into a run (``cogym train``) or tournament
(``cogym tournament --out``) directory goes through this module.

What it guarantees:

- **Claim before writing.** :func:`claim` refuses a directory that holds files and was not made by
  cogym (no :data:`MARKER` file), was made by another command, or holds an earlier training run,
  unless the user says ``--overwrite`` (or, for a training run, ``--resume``); a path that is a file, or a directory that
  cannot be written, is refused too. :func:`create` makes the directory and its marker when the
  first file is about to be written (a run that cannot start leaves nothing behind).
- **Own names only.** cogym writes only the names it owns (:data:`TRAIN_FILES`, :data:`TOURNAMENT_FILES`)
  and deletes nothing else; a checkpoint directory is replaced only when it carries
  :data:`CHECKPOINT_MARKER` (cogym wrote it).
- **Atomic files.** :func:`write_text` (and :func:`atomic_open`, :func:`save_figure`) write a temporary
  file in the same directory and ``os.replace`` it: a kill leaves the old file or the new one, and a
  symbolic link at the name is replaced, never written through.
- **No symbolic links out.** Nothing is read or appended through a symbolic link whose target leaves
  the directory (:func:`inside`): a one-line :class:`RunDirError` names the link.
- **Torn lines.** :func:`read_jsonl` drops a last line cut short by a kill and says so in one line;
  a bad line elsewhere is a :class:`RunDirError`. :func:`drop_torn_tail` applies the same rule to a
  file about to be appended to, and rewrites it without the torn line.
- **Bounded parsing.** Every JSON text cogym reads from a directory goes through :func:`parse_json`:
  nesting deeper than :data:`MAX_JSON_DEPTH` or a number Python will not convert is a ``ValueError``
  like any other text that is not JSON, never a ``RecursionError`` or a traceback.

Races with another process that swaps files while cogym runs are outside this guard: it protects a
user's files from cogym, and cogym from a directory someone else prepared, not from a concurrent attacker.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path
from typing import IO, Iterator

from cogym.core.errors import CogymError
from cogym.core.text import brief, printable

MARKER = ".cogym-run"  # in a directory cogym made: {"kind": "train" | "tournament"}
CHECKPOINT_MARKER = ".cogym-checkpoint"  # in a checkpoint directory cogym wrote (checkpoints/step_N/)
# The names cogym writes at the top of a directory of each kind (a symbolic link at one that leaves the
# directory is refused before anything is written).
TRAIN_FILES = ("config.yaml", "metrics.jsonl", "transcripts.jsonl", "game_errors.jsonl", "summary.json",
               "learning_curve.png", "tb", "checkpoints", MARKER)
TOURNAMENT_FILES = ("results.jsonl", "transcripts.jsonl", "tournament.json", "schedule.json", "leaderboard.json",
                    "leaderboard.csv", "matrix.csv", "results.csv", "heatmap.png", "ratings.png", MARKER)
KIND_FILES = {"train": TRAIN_FILES, "tournament": TOURNAMENT_FILES}
# Deeper than any file cogym writes (a transcript row nests a handful of levels), and far below the
# depth at which json's reader (or a later json.dumps of the row) runs out of stack.
MAX_JSON_DEPTH = 100
# A string to its closing quote, or to the end of a cut line: always matching, so a line is scanned once
# (a required closing quote would rescan an unterminated string from each escaped quote in it).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?')
_BRACKET = re.compile(r"[\[\]{}]")


class RunDirError(CogymError, ValueError):
    """A run or tournament directory (or a file in it) that cogym will not use as it is: not its own,
    not writable, a symbolic link out of it, or a checkpoint file that cannot be trusted."""


class JSONLimitError(ValueError):
    """JSON text past what cogym reads: nested deeper than :data:`MAX_JSON_DEPTH`, or a number
    Python will not convert (an integer of thousands of digits)."""


def _too_deep(text: str) -> bool:
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False  # the common case, at C speed
    depth = 0
    for bracket in _BRACKET.findall(_STRING.sub('""', text)):  # brackets inside strings do not nest
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            return True
    return False


def parse_json(text: str):
    """``json.loads(text)`` for text from a file anyone may have written (a run or tournament directory,
    a checkpoint): every way it can fail is a ``ValueError`` (:class:`json.JSONDecodeError` for text that
    is not JSON, :class:`JSONLimitError` for nesting deeper than :data:`MAX_JSON_DEPTH` or a number
    too long to convert), never a ``RecursionError``."""
    if _too_deep(text):
        raise JSONLimitError(f"nested more than {MAX_JSON_DEPTH} deep")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise JSONLimitError("nested too deeply to read") from None
    except ValueError as exc:  # int()'s digit limit: "Exceeds the limit (4300 digits) ..."
        raise JSONLimitError(f"a number too long to read ({str(exc)[:80]})") from None


def _flags(kind: str) -> str:
    return "--overwrite or --resume" if kind == "train" else "--overwrite"


def marker_kind(path: Path) -> str | None:
    """The kind of cogym directory ``path`` is (``train``, ``tournament``), or None when it has no
    readable marker (a symbolic link is no marker)."""
    marker = Path(path) / MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        data = parse_json(marker.read_text())
    except (OSError, ValueError):
        return None
    return data.get("kind") if isinstance(data, dict) and isinstance(data.get("kind"), str) else None


def claim(path: Path, kind: str, flag: str = "--run-dir", *, overwrite: bool = False, resume: bool = False) -> None:
    """Check that ``path`` may hold a directory of ``kind`` (``train`` or ``tournament``); nothing is written.

    Accepted: a path that does not exist yet (under a writable directory), an empty directory, a
    directory cogym made for a tournament (a rerun plays what is missing), and, with ``overwrite`` or
    ``resume``, any other directory (an earlier training run's too: a new run beside its checkpoints
    would mix with them on a later resume).
    ``flag`` is the option that named it (for messages). Raises :class:`RunDirError` otherwise, and
    for a symbolic link among cogym's names that leaves the directory (even with ``overwrite``)."""
    path = Path(path)
    try:
        _claim(path, kind, flag, overwrite, resume)
    except OSError as exc:  # a name too long, a loop of links, a folder we may not list: the path itself is wrong
        raise RunDirError(f"{flag} {printable(brief(str(path)))}: {exc.strerror or type(exc).__name__}") from None


def _claim(path: Path, kind: str, flag: str, overwrite: bool, resume: bool) -> None:
    if path.exists() and not path.is_dir():
        raise RunDirError(f"{flag} {path} is a file, not a directory; give a directory (a new one is created)")
    if not path.exists():
        parent = next((p for p in path.absolute().parents if p.exists()), Path("/"))
        if not parent.is_dir():
            raise RunDirError(f"{flag} {path}: {parent} is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise RunDirError(f"{flag} {path}: cannot create it, {parent} is not writable")
        return
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunDirError(f"{flag} {path} is not writable; give a directory cogym may write to")
    found = marker_kind(path)
    try:
        entries = [e.name for e in os.scandir(path) if e.name != MARKER]
    except OSError as exc:
        raise RunDirError(f"{flag} {path}: cannot list it ({exc.strerror or exc})") from exc
    if entries and not (overwrite or resume):
        if found is None:
            raise RunDirError(f"{flag} {path} holds files and was not made by cogym (no {MARKER}); cogym would "
                              f"overwrite them: give a new or empty directory, or add {_flags(kind)} to use it anyway "
                              f"(cogym then replaces only the files it writes itself)")
        if found != kind:
            raise RunDirError(f"{flag} {path} was made by cogym {found}, not cogym {kind}; give another directory, or "
                              f"add --overwrite to use it anyway")
        if kind == "train":  # a new run beside an earlier one's checkpoints: a later --resume would mix the two
            raise RunDirError(f"{flag} {path} holds an earlier cogym train run; add --resume to continue it, or "
                              "--overwrite to start a new run there (its checkpoints, metrics and transcripts are "
                              "removed)")
    for name in KIND_FILES[kind]:
        inside(path, path / name)
    checkpoints = path / "checkpoints"
    if kind == "train" and checkpoints.is_dir():
        for entry in sorted(checkpoints.iterdir()):
            inside(path, entry)
            # (a temporary directory of someone else's is left alone: the checkpoint is built beside it)
            if not resume and entry.name.startswith("step_") and not owned_checkpoint(entry):
                raise RunDirError(f"{entry} was not written by cogym (no {CHECKPOINT_MARKER} in it) and a new run "
                                  "may replace it; move it out of the run directory, or give another --run-dir")


def create(path: Path, kind: str, flag: str = "--run-dir") -> None:
    """Make directory ``path`` (and its parents) and mark it as a cogym directory of ``kind``; an
    existing marker is kept."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if marker_kind(path) != kind:
            write_text(path / MARKER, json.dumps({"kind": kind}) + "\n")
    except OSError as exc:
        raise RunDirError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from exc


def owned_checkpoint(path: Path) -> bool:
    """Whether cogym wrote checkpoint directory ``path`` and may replace it: it carries
    :data:`CHECKPOINT_MARKER`, or it is an empty directory (one a kill left before its marker)."""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return False
    marker = path / CHECKPOINT_MARKER
    return (marker.is_file() and not marker.is_symlink()) or not any(path.iterdir())


def inside(root: Path, path: Path) -> Path:
    """``path``, after checking that it resolves inside ``root`` (a symbolic link, at it or above it
    under ``root``, whose target leaves ``root`` is a :class:`RunDirError`)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise RunDirError(f"{path} is a symbolic link to {real}, outside {root}; cogym neither reads nor writes "
                          "through it: remove the link")
    return Path(path)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w", newline: str | None = None) -> Iterator[IO]:
    """A file to write ``path`` with: written under a temporary name in the same directory and renamed
    over ``path`` when the block ends without an error (then removed)."""
    path = Path(path)
    tmp = _tmp_name(path)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a temporary file of this process, left by a kill (the pid was reused)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as exc:
        raise RunDirError(f"{path}: cannot write it ({exc.strerror or exc})") from exc
    try:
        with os.fdopen(fd, mode, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # replaces a symbolic link at ``path``, never writes through it
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):  # a directory at the name, a full disk: one line
            raise RunDirError(f"{path}: cannot write it ({exc.strerror or exc})") from exc
        raise


def write_text(path: Path, text: str) -> None:
    """Write ``path`` atomically (a kill leaves the old file or the new one)."""
    with atomic_open(path) as f:
        f.write(text)


def write_json(path: Path, data, indent: int | None = 1) -> None:
    write_text(path, json.dumps(data, indent=indent))


def save_figure(fig, path: Path, **kwargs) -> None:
    """``fig.savefig`` to ``path``, atomically (the format is taken from the name's suffix)."""
    path = Path(path)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=path.suffix.lstrip(".") or "png", **kwargs)


def open_append(path: Path, root: Path | None = None) -> IO:
    """``path`` opened to append text, refusing a symbolic link that leaves ``root`` (default: the
    file's directory); the last component is opened without following a link that appears meanwhile."""
    path = Path(path)
    inside(path.parent if root is None else root, path)
    real = os.path.realpath(path)
    try:
        fd = os.open(real, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as exc:
        raise RunDirError(f"{path}: cannot append to it ({exc.strerror or exc})") from exc
    return os.fdopen(fd, "a")


def read_text(path: Path, root: Path | None = None) -> str:
    """The text of ``path`` (a file of a run directory), refusing a symbolic link that leaves ``root``."""
    path = Path(path)
    inside(path.parent if root is None else root, path)
    try:
        return path.read_text()
    except UnicodeDecodeError as exc:
        raise RunDirError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _rows(path: Path, text: str, warn: bool) -> tuple[list[dict], int | None]:
    """The rows of JSONL ``text`` and the number of the last line when it was dropped as torn (else None).

    The one rule for every JSONL file cogym reads back: blank lines are skipped; the last line, when it
    is not a JSON object, was cut short by a kill while it was written and is dropped (one line on
    stderr when ``warn``); any other line that is not a JSON object means the file is damaged (a
    :class:`RunDirError`)."""
    numbered = [(i, line) for i, line in enumerate(text.split("\n"), 1) if line.strip()]
    rows: list[dict] = []
    for n, (i, line) in enumerate(numbered):
        try:
            row = parse_json(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            if n == len(numbered) - 1:
                if warn:
                    print(f"cogym: dropped the last line of {path} (line {i}), cut short by a kill while it was "
                          "written", file=sys.stderr)
                return rows, i
            raise RunDirError(f"{path}: line {i} is not a JSON object; the file is damaged (move it away to start "
                              "it again)")
        rows.append(row)
    return rows, None


def read_jsonl(path: Path, root: Path | None = None, warn: bool = True) -> list[dict]:
    """The rows of a JSONL file of a run directory; none when it does not exist. A last line that is
    cut short (a kill while it was written) is dropped, with one line on stderr when ``warn``; a line
    elsewhere that is not a JSON object is a :class:`RunDirError`."""
    path = Path(path)
    if not path.is_file():
        inside(path.parent if root is None else root, path)
        return []
    return _rows(path, read_text(path, root), warn)[0]


def drop_torn_tail(path: Path, root: Path | None = None) -> list[dict]:
    """Before appending to a JSONL file: its rows, read as :func:`read_jsonl` reads them; a torn last
    line is cut from the file (and a missing final newline added), atomically, so the next row starts
    a line of its own."""
    path = Path(path)
    if not path.is_file():
        inside(path.parent if root is None else root, path)
        return []
    text = read_text(path, root)
    rows, torn = _rows(path, text, warn=True)
    if torn is not None:
        kept = "\n".join(text.split("\n")[:torn - 1])
        write_text(path, kept + "\n" if kept else "")
    elif text and not text.endswith("\n"):
        write_text(path, text + "\n")
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Replace ``path`` with these rows, atomically."""
    write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
