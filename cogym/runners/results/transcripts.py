"""Transcripts: what the models wrote, game by game, kept by ``cogym train`` and ``cogym tournament``
and shown by ``cogym show``.

A transcript is one game's every move in order of play (scripted seats too), taken from a rollout's
:attr:`~cogym.runners.rollout.loop.RolloutResult.moves`, with each seat's total reward. Both sources write
the same row format, one JSON object per line of ``transcripts.jsonl`` in the run (or tournament)
directory::

    {"source": "train" | "tournament",
     "iteration": int | null,      # train: the iteration whose rollout played the game
     "pairing": [a, b] | null,     # tournament: the two players
     "game": int | str,            # train: the game's place in the iteration's list (0, 1, ...);
                                   # tournament: the game's id in results.jsonl
     "seed": int,                  # the seed the game was reset with
     "episode": str,               # the episode id of the game's Turns (e.g. "it10-0")
     "max_chars": int,             # the bound on a stored message (MAX_CHARS)
     "moves": [{"seat": str, "role": str, "policy": str,
                "shown": str,      # what the seat was given to answer (the game's observation text);
                                   # absent from transcripts written before the rollout recorded it
                "text": str,
                "chars": int,      # only on a message cut at max_chars: its full length
                "shown_chars": int,  # only on a "shown" cut at max_chars: its full length
                "error": str}],    # only when the agent made no move (an endpoint that failed): why
     "returns": {seat: float}}     # each seat's total reward in the game

``shown`` is there so a reader can judge a move: a message means little without what the seat saw
when it wrote it. ``policy`` is the policy id behind the seat in training (``scripted:<twin>`` for a
scripted seat, a league member's id for a league opponent) and the player's name in a tournament
(or the fixed agent of a seat outside the two sides).

Which games: training keeps the first ``run.transcripts_games`` games of iteration 1, of every
``run.transcripts_every``-th iteration and of the last (0: none); a resumed run drops the rows of the
iterations it replays. A tournament (``--transcripts K``) keeps the first K games of each pairing
(seed index k, seat order o: game ``2k + o``); games already in ``results.jsonl`` are not played
again, so only games played with the option have transcripts. Only rank 0 (and the tournament
driver) writes. Messages are model output of any length and observations can hold whole documents:
each is cut at ``MAX_CHARS`` characters.

This module reads and formats without torch (``cogym show`` starts fast).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Iterable, Sequence

from cogym.core.errors import DatasetError
from cogym.core.text import printable
from cogym.runners import rundir
from cogym.runners.results.transcript_check import row_problem

TRANSCRIPTS_FILE = "transcripts.jsonl"
MAX_CHARS = 4000  # a stored message is cut at this many characters
SHOWN_LINES = 6  # `cogym show` without --full: at most this many lines of a message
# `cogym show` without --full: at most this much of what a seat was shown. Less than of a message: the
# observation is context for the move (often a long, repeated prompt) and would otherwise bury it.
SHOWN_PROMPT_LINES = 3
SHOWN_PROMPT_CHARS = 200
SHOWN_LABEL = "shown: "


# ------------------------------------------------------------------------------------------- rows
def bound_moves(moves: Sequence[dict], max_chars: int = MAX_CHARS) -> list[dict]:
    """The moves as stored: seat, role, policy, ``shown`` (when the rollout recorded it) and text, each
    message and observation cut at ``max_chars`` (``chars``, ``shown_chars``: their lengths)."""
    out = []
    for m in moves:
        text = str(m.get("text", ""))
        row = {"seat": m["seat"], "role": m.get("role", ""), "policy": m.get("policy", "")}
        shown = m.get("shown")
        if shown is not None:
            shown = str(shown)
            row["shown"] = shown[:max_chars]
        row["text"] = text[:max_chars]
        if len(text) > max_chars:
            row["chars"] = len(text)
        if shown is not None and len(shown) > max_chars:
            row["shown_chars"] = len(shown)
        if m.get("error") is not None:  # the agent made no move (an endpoint that failed): why
            row["error"] = str(m["error"])[:max_chars]
        out.append(row)
    return out


def transcript_row(source: str, moves: Sequence[dict], returns: dict, seed: int, episode: str, game,
                   iteration: int | None = None, pairing: Sequence[str] | None = None,
                   max_chars: int = MAX_CHARS) -> dict:
    """One game's transcript row (the format of the module docstring)."""
    return {"source": source, "iteration": iteration, "pairing": list(pairing) if pairing is not None else None,
            "game": game, "seed": int(seed), "episode": episode, "max_chars": max_chars,
            "moves": bound_moves(moves, max_chars), "returns": {s: float(r) for s, r in returns.items()}}


def transcripts_due(iteration: int, every: int, last: int) -> bool:
    """Whether training keeps transcripts of ``iteration``: never when ``every`` is 0, else at the
    first iteration, every ``every``-th and the last."""
    return every > 0 and (iteration == 1 or iteration % every == 0 or iteration == last)


def train_rows(res, iteration: int, seeds: Sequence[int], games: int, episode_prefix: str | None = None) -> list[dict]:
    """Rows of the first ``games`` games of a training rollout (``res``: its RolloutResult; ``seeds``:
    the seeds the iteration's games were reset with, in game order)."""
    prefix = episode_prefix or f"it{iteration}"
    n = min(games, len(res.moves))
    return [transcript_row("train", res.moves[g], res.returns[g], seeds[g], f"{prefix}-{g}", g, iteration=iteration)
            for g in range(n)]


def tournament_keeps(k: int, order: int, keep: int) -> bool:
    """Whether a tournament game (seed index ``k``, seat ``order``) is one of its pairing's first ``keep``."""
    return 2 * k + order < keep


def split_transcripts(rows: Iterable[dict], key: str = "transcript") -> tuple[list[dict], list[dict]]:
    """(result rows without their ``key`` entry, the transcript rows they carried): a tournament
    worker returns a game's transcript inside its result row; results.jsonl does not keep it."""
    results, transcripts = [], []
    for row in rows:
        t = row.pop(key, None)
        if t is not None:
            transcripts.append(t)
        results.append(row)
    return results, transcripts


# ------------------------------------------------------------------------------------ the writer
class TranscriptWriter:
    """Appends rows to ``transcripts.jsonl``, flushed per call. With ``start_iteration`` > 1 (a
    resumed run) the training rows of iterations from ``start_iteration`` on are dropped first."""

    def __init__(self, path: Path, start_iteration: int = 1) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if start_iteration > 1 and self.path.is_file():  # through the run directory's guard (runners/rundir.py)
            keep = [row for row in rundir.read_jsonl(self.path)
                    if isinstance(row.get("iteration") or 0, int) and (row.get("iteration") or 0) < start_iteration]
            rundir.write_jsonl(self.path, keep)
        self.file = None

    def write(self, rows: Sequence[dict]) -> None:
        if not rows:
            return
        if self.file is None:
            self.file = rundir.open_append(self.path)  # never through a symbolic link out of the directory
        self.file.write("".join(json.dumps(r) + "\n" for r in rows))
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def append_transcripts(path: Path, rows: Sequence[dict]) -> None:
    """Append rows to a transcripts file (a tournament's, batch by batch)."""
    writer = TranscriptWriter(path)
    try:
        writer.write(rows)
    finally:
        writer.close()


# ------------------------------------------------------------------------------------ the reader
def _read_rows(path: Path) -> list[dict]:
    """The rows of a transcripts file that may come from anyone: a line that is not JSON is skipped (a
    line cut by a kill mid-write), one that is JSON but not a transcript row (:mod:`.transcript_check`)
    is a one-line DatasetError naming the line, and so is a file with no row among its lines."""
    rows, lines = [], 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            lines += 1
            try:
                row = rundir.parse_json(line)  # nesting and number size bounded (runners/rundir.py)
            except json.JSONDecodeError:
                continue  # a line cut by a kill mid-write
            except (ValueError, RecursionError):  # valid JSON past the reader's bounds: too deep, huge integers
                raise DatasetError(f"{path} line {number} is not a transcript row: nested too deeply or a number "
                                   "too long to read") from None
            problem = row_problem(row)
            if problem is not None:
                raise DatasetError(f"{path} line {number} is not a transcript row: {problem}")
            rows.append(row)
    if lines and not rows:
        raise DatasetError(f"{path} holds no transcript rows ({lines} line{'s' if lines > 1 else ''}, none of them JSON)")
    return rows


def transcripts_path(where: str | Path) -> Path:
    """The transcripts file of a run or tournament directory (or the file itself); a clear
    FileNotFoundError, saying how to get transcripts, when there is none."""
    where = Path(where)
    if where.is_file():
        return where
    if not where.is_dir():
        raise FileNotFoundError(f"{where}: no such run or tournament directory")
    path = where / TRANSCRIPTS_FILE
    if path.is_file() and path.stat().st_size:
        return path
    if (where / "results.jsonl").is_file() or (where / "tournament.json").is_file():
        how = ("play the tournament with --transcripts K (the first K games of each pairing) into a new --out: "
               "games already in results.jsonl are not played again")
    elif (where / "metrics.jsonl").is_file() or (where / "config.yaml").is_file():
        how = ("train with run.transcripts_every=N (e.g. 10; 0 turns them off) and run.transcripts_games=K; "
               "a run writes them from iteration 1")
    else:
        how = ("give a directory made by cogym train (run.transcripts_every=N) or by cogym tournament "
               "(--transcripts K)")
    raise FileNotFoundError(f"{where} has no transcripts ({TRANSCRIPTS_FILE}); {how}")


def read_transcripts(where: str | Path) -> list[dict]:
    """Every transcript row of a run or tournament directory (or a transcripts file), in the order
    written; a game written twice (a tournament batch replayed after a kill) appears once, at its
    last place."""
    rows = _read_rows(transcripts_path(where))
    last = {}
    for i, row in enumerate(rows):
        last[_identity(row)] = i
    return [row for i, row in enumerate(rows) if last[_identity(row)] == i]


def _identity(row: dict) -> str:
    return json.dumps([row.get("source"), row.get("iteration"), row.get("pairing"), row.get("game")])


def select(rows: Sequence[dict], iteration: int | None = None, player: str | None = None, last: int | None = None,
           seat: str | None = None, role: str | None = None) -> list[dict]:
    """The rows of ``iteration`` (train), of games ``player`` played in (a pairing's player, or a
    move's policy), with only the moves of ``seat`` / ``role``, then the last ``last`` of them. Games
    left with no move are dropped. A filter that leaves nothing raises ValueError naming what exists."""
    out = list(rows)
    if iteration is not None:
        out = [r for r in out if r.get("iteration") == iteration]
        if not out:
            its = sorted({r["iteration"] for r in rows if r.get("iteration") is not None})
            raise ValueError(f"no transcripts of iteration {iteration} (iterations with transcripts: "
                             f"{', '.join(map(str, its)) or 'none'})")
    if player is not None:
        out = [r for r in out if player in (r.get("pairing") or []) or any(m.get("policy") == player for m in r["moves"])]
        if not out:
            names = sorted({p for r in rows for p in (r.get("pairing") or [])} | {m.get("policy", "") for r in rows
                                                                                   for m in r["moves"]})
            raise ValueError(printable(f"no transcripts with player {player!r} (players: {', '.join(names)})"))
    if seat is not None or role is not None:
        kept = []
        for r in out:
            moves = [m for m in r["moves"] if (seat is None or m["seat"] == seat) and (role is None or m["role"] == role)]
            if moves:
                kept.append({**r, "moves": moves})
        if not kept:
            seats = sorted({m["seat"] for r in out for m in r["moves"]})
            roles = sorted({m["role"] for r in out for m in r["moves"]})
            what = " and ".join(f"{k} {v!r}" for k, v in (("seat", seat), ("role", role)) if v is not None)
            raise ValueError(printable(f"no moves of {what} (seats: {', '.join(seats)}; roles: {', '.join(roles)})"))
        out = kept
    if last is not None:
        out = out[-last:] if last > 0 else []
    return out


# ---------------------------------------------------------------------------------- the printer
def _number(x: float) -> str:
    return f"{x:+.3f}".rstrip("0").rstrip(".") if x else "0"


def header_parts(row: dict) -> tuple[str, str]:
    """(where the game comes from: source and iteration or pairing, which game: id, seed, episode)."""
    game = f"game {row.get('game')}"
    if row.get("source") == "tournament" and row.get("pairing"):
        a, b = row["pairing"][0], row["pairing"][1]
        where = f"tournament  {a} vs {b}" if a != b else f"tournament (paired)  {a}"
        try:  # a tournament game's id: [a, b, seed index, seat order(, round)] or ["paired", player, seed index(, round)]
            key = json.loads(row["game"])
            if key[0] == "paired":
                game = f"seed index {key[2]}" + (f", round {key[3]}" if len(key) > 3 else "")
            else:
                game = f"seed index {key[2]}, seat order {key[3]}" + (f", round {key[4]}" if len(key) > 4 else "")
        except (TypeError, ValueError, IndexError, KeyError):
            pass
    elif row.get("iteration") is not None:
        where = f"{row.get('source', 'train')}  iteration {row['iteration']}"
    else:
        where = str(row.get("source", "?"))
    return printable(where), printable(f"{game}  seed {row.get('seed')}  episode {row.get('episode')}")


def header(row: dict) -> str:
    """One line naming a game: its source, iteration or pairing, id, seed and episode."""
    return "  ".join(header_parts(row))


def message_lines(text: str, width: int, full: bool = False, max_lines: int = SHOWN_LINES) -> list[str]:
    """A message wrapped to ``width`` (its own line breaks kept); without ``full`` at most
    ``max_lines`` lines, the last saying how much more there is."""
    text = printable(text)
    if not text.strip():
        return ["(empty message)"]
    lines: list[str] = []
    for para in text.replace("\t", "    ").split("\n"):
        lead = para[: len(para) - len(para.lstrip(" "))][: width // 2]  # a line's indent (code, lists) is kept
        lines.extend(textwrap.wrap(para.strip(" "), width, initial_indent=lead, subsequent_indent=lead,
                                   break_on_hyphens=False) or [""])
    while lines and not lines[-1].strip():
        lines.pop()
    if full or len(lines) <= max_lines:
        return lines
    rest = len(lines) - (max_lines - 1)
    return lines[: max_lines - 1] + [f"... {rest} more lines ({len(text)} characters; --full shows all)"]


def shown_lines(text: str, width: int, full: bool = False, max_lines: int = SHOWN_PROMPT_LINES,
                max_chars: int = SHOWN_PROMPT_CHARS) -> list[str]:
    """What a seat was shown, labelled ``shown:`` and wrapped to ``width`` under the label; without
    ``full`` its first ``max_chars`` characters in at most ``max_lines`` lines, then a line saying it
    was cut. The start is what is kept: the question or state that a game's observations open with."""
    pad = " " * len(SHOWN_LABEL)
    if not text.strip():
        return [SHOWN_LABEL + "(empty)"]
    lines = message_lines(text if full else text[:max_chars], width - len(pad), full=True)
    cut = not full and (len(text) > max_chars or len(lines) > max_lines)
    if cut:
        lines = lines[:max_lines]
    out = [(SHOWN_LABEL if i == 0 else pad) + line for i, line in enumerate(lines)]
    if cut:
        out.extend(pad + line for line in textwrap.wrap(f"... cut ({len(text)} characters; --full shows all)",
                                                        max(10, width - len(pad))))
    return out


def _body(row: dict, width: int, full: bool) -> list[str]:
    """A game's moves (who, what the seat was shown, then its message, indented) and its rewards."""
    out = []
    recorded = any("shown" in m for m in row["moves"])
    if not recorded:  # a transcript written before the rollout recorded observations: said once, not per move
        out.extend(textwrap.wrap("what each seat was shown: (not recorded)", width, subsequent_indent="  "))
    for n, m in enumerate(row["moves"], 1):
        who = f"{n:>3}  {m['seat']}"
        if m.get("role") and m["role"] != m["seat"]:
            who += f"  role {m['role']}"
        if m.get("policy"):
            who += f"  policy {m['policy']}"
        who = printable(who)  # seat and policy names come from configs and checkpoints: escaped too
        out.extend(textwrap.wrap(who, width, subsequent_indent="       ", break_on_hyphens=False) or [who])
        if "shown" in m:
            out.extend("       " + line for line in shown_lines(str(m["shown"]), width - 7, full))
            if full and "shown_chars" in m:
                out.append(printable(f"       [observation stored cut at {row.get('max_chars', MAX_CHARS)} of "
                                 f"{m['shown_chars']} characters]"))
        elif recorded:
            out.append("       " + SHOWN_LABEL + "(not recorded)")
        out.extend("       " + line for line in message_lines(m["text"], width - 7, full))
        if "chars" in m:
            out.append(printable(f"       [stored cut at {row.get('max_chars', MAX_CHARS)} of {m['chars']} characters]"))
        if m.get("error"):  # the agent made no move: the game was stepped with the empty message
            out.extend("       " + line for line in message_lines(f"[no move: {m['error']}]", width - 7, full))
    returns = row.get("returns") or {}
    if returns:
        text = printable("rewards: " + ", ".join(f"{seat} {_number(r)}" for seat, r in returns.items()))
        out.extend(textwrap.wrap(text, width, subsequent_indent="         ", break_on_hyphens=False))
    return out


def format_transcript(row: dict, width: int = 80, full: bool = False) -> str:
    """One game as text at most ``width`` columns wide (a word longer than a line is broken)."""
    width = max(30, width)
    top = f"== {header(row)} "
    if len(top) <= width:
        out = [top.ljust(width, "=")]
    else:  # a long header (tournament players' paths) wraps between rules
        out = ["=" * width] + [line for part in header_parts(row)
                               for line in textwrap.wrap(part, width, break_on_hyphens=False)] + ["-" * width]
    return "\n".join(out + _body(row, width, full))


def format_transcripts(rows: Sequence[dict], width: int = 80, full: bool = False, title: str = "") -> str:
    """Games one after another, a blank line between them, under ``title``."""
    blocks = ["\n".join(textwrap.wrap(title, max(30, width), break_on_hyphens=False))] if title else []
    blocks += [format_transcript(r, width, full) for r in rows]
    return "\n\n".join(blocks)


def markdown(row: dict) -> str:
    """One game for TensorBoard's text tab (markdown): the header, then the text as a code block."""
    return f"**{header(row)}**\n\n" + "\n".join("    " + line for line in _body(row, 100, True))
