"""The report of a tournament: what it prints and writes after its games: the leaderboard, the cross-play matrix,
plots and the notes on the players' settings."""

from __future__ import annotations

import csv
import json
import math
import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np

from cogym.core.errors import CogymError
from cogym.core.text import printable
from cogym.runners import rundir
from cogym.runners.display import format_leaderboard, format_matrix, heatmap_figure, ratings_figure, terminal_width
from cogym.runners.results.ratings import leaderboard, Result
from cogym.runners.results.scoring import score_matrix


class RatingError(CogymError, ValueError):
    """Results that cannot be rated at all: nothing to rate, or players in groups that never met."""


NO_RUN_CONFIG = "model (no run config)"  # a leaderboard row's kind: a model directory without the run's config, marked *


def report(rows: Sequence[dict], names: Sequence[str], out_dir: Path, anchor: str | None = None,
           n_boot: int = 1000, seed: int = 0, plots: bool = True, prior: float = 1.0) -> list[dict]:
    """Leaderboard (Bradley–Terry, Elo scale, bootstrap intervals) and the cross-play matrix, written
    to ``out_dir`` as leaderboard.csv/.json, matrix.csv, results.csv and, with ``plots``,
    heatmap.png and ratings.png. Returns the leaderboard rows (best first).

    Every game has been played by now, so a rating that cannot be made finite is a flagged row, not
    an error: with ``prior=0`` (:func:`cogym.runners.results.ratings.leaderboard`) a player who never lost or
    never won is rated +-inf with a ``note`` (:func:`print_leaderboard` prints it; leaderboard.json
    writes the value as ``Infinity``), and a fit that does not converge keeps its last iterate with a
    RuntimeWarning. Only results that cannot be rated at all (nothing to rate, players in groups
    that never met) are a :class:`RatingError`."""
    played = [n for n in names if any(r["a"] == n or r["b"] == n for r in rows)]
    try:
        board = leaderboard([Result(r["a"], r["b"], r["score"]) for r in rows], played, n_boot=n_boot, seed=seed,
                            anchor=anchor, prior=prior)
    except ValueError as exc:  # nothing to rate, players that never met (a Swiss round too few)...
        raise RatingError(f"cannot rate these results: {exc}") from exc
    kinds = player_kinds(out_dir)
    if kinds:  # what each player is (scripted, checkpoint, model with no run config): tournament.json's word
        board = [{**row, "kind": kinds.get(row["name"], "")} for row in board]
    failed = failed_games(rows)
    if any(failed.values()):  # an endpoint that made no move: rated as played, and counted where it shows
        board = [{**row, "failed": failed.get(row["name"], 0)} for row in board]
    rundir.write_json(out_dir / "leaderboard.json", board)  # every file atomically, never through a link
    with rundir.atomic_open(out_dir / "leaderboard.csv", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(board[0]))
        w.writeheader()
        w.writerows(board)
    order = [row["name"] for row in board]
    matrix, games = score_matrix(rows, order)
    with rundir.atomic_open(out_dir / "matrix.csv", newline="") as f:
        w = csv.writer(f)
        w.writerow(["row scores against column", *order])
        for name, values in zip(order, matrix):
            w.writerow([name, *("" if math.isnan(v) else f"{v:.4f}" for v in values)])
    with rundir.atomic_open(out_dir / "results.csv", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["a", "b", "k", "order", "seed", "return_a", "return_b", "score"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if plots:
        _plots(board, matrix, order, out_dir)
    return board


def _plots(board: list[dict], matrix: np.ndarray, order: list[str], out_dir: Path) -> None:
    """heatmap.png and ratings.png (:mod:`cogym.runners.display`: sized to the number of players,
    long names shown as P-labels with a key)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    # ratings.png has an axis of finite ratings: a flagged player rated +-inf is left out (the
    # leaderboard names it), and intervals are drawn only when every plotted player has a finite one.
    finite = [row for row in board if math.isfinite(row["rating"])]
    if any(row["lo"] is None or not (math.isfinite(row["lo"]) and math.isfinite(row["hi"])) for row in finite):
        finite = [{**row, "lo": None, "hi": None} for row in finite]
    figures = [("heatmap.png", heatmap_figure(matrix, order))]
    if finite:
        figures.append(("ratings.png", ratings_figure(finite)))
    for name, fig in figures:
        rundir.save_figure(fig, out_dir / name, bbox_inches="tight", pad_inches=0.1)
        plt.close(fig)


def print_matrix(rows: Sequence[dict], board: list[dict], max_players: int = 12) -> None:
    """The cross-play matrix (score of the row player against the column player) on stdout, players
    in leaderboard order as P1..Pn with a key; larger pools only go to matrix.csv / heatmap.png."""
    order = [row["name"] for row in board]
    matrix, _ = score_matrix(rows, order)
    print()
    print(format_matrix(matrix, order, terminal_width(), max_players=max_players))


def print_leaderboard(board: list[dict], title: str = "cogym tournament", notes: Sequence[str] = ()) -> None:
    """The leaderboard on stdout, every number in full at any width (names wrap, numbers never); a
    model player with no run config is marked ``*``, and a ``failed`` column counts a player's games
    without a move (an endpoint that failed). Then the rating notes of the rows (a player whose rating
    is infinite, intervals that could not be made: :func:`rating_notes`), the failed players
    (:func:`failure_notes`) and ``notes`` (:func:`settings_notes`)."""
    width = terminal_width()
    shown = [{**row, "name": row["name"] + " *"} if row.get("kind") == NO_RUN_CONFIG else row for row in board]
    print(format_leaderboard(shown, title, width))
    for note in [*rating_notes(board), *failure_notes(board), *notes]:  # they name players: escaped as the board does
        print("\n".join(textwrap.wrap(printable(note, keep=""), width, subsequent_indent="  ", break_on_hyphens=False)))


def rating_notes(board: Sequence[dict]) -> list[str]:
    """One line per distinct rating note of the leaderboard's rows (``note``), naming its players."""
    by_note: dict[str, list[str]] = {}
    for row in board:
        if row.get("note"):
            by_note.setdefault(row["note"], []).append(row["name"])
    return [f"note: {', '.join(names) if len(names) <= 3 else f'{len(names)} players'}: {note}"
            for note, names in by_note.items()]


def failed_games(rows: Sequence[dict]) -> dict[str, int]:
    """Per player, the games in which its agent made no move (an endpoint that failed: ``failed_players``)."""
    counts: dict[str, int] = {}
    for r in rows:
        for name in r.get("failed_players", ()):
            counts[name] = counts.get(name, 0) + 1
    return counts


def failure_notes(board: Sequence[dict]) -> list[str]:
    """One line per player with failed games (the ``failed`` column): how many, and what the rating means."""
    return [f"failed: {row['name']} made no move in {row['failed']} of its {row['games']} games (its endpoint failed; "
            "the reasons are in results.jsonl): rated as played, each such move invalid by the game's rules"
            for row in board if row.get("failed")]


def _tournament_info(out_dir: Path) -> dict:
    try:
        info = rundir.parse_json((Path(out_dir) / "tournament.json").read_text())  # depth and number size bounded
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def player_kinds(out_dir: Path) -> dict[str, str]:
    """Each player's kind as tournament.json records it (``scripted``, ``checkpoint``, or a model with
    no run config), {} for a directory without that record."""
    players = _tournament_info(out_dir).get("players") or {}
    return {name: info["kind"] for name, info in players.items() if isinstance(info, dict) and "kind" in info}


def settings_notes(out_dir: Path) -> list[str]:
    """The notes the leaderboard must carry about the players' settings (tournament.json): models
    with no run config, and prompts or limits that differ between model players."""
    return list(_tournament_info(out_dir).get("notes") or [])


def results_title(game: str, rows: Sequence[dict], out_dir: Path) -> str:
    """The leaderboard's title: the game, how many results (paired: per-seed comparisons) and where."""
    if any(r.get("order") is None for r in rows):
        return f"cogym tournament: {game}, paired, {len(rows)} per-seed comparisons ({out_dir})"
    return f"cogym tournament: {game}, {len(rows)} games ({out_dir})"
