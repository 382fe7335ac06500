"""A game's result for a pairing: competitive (the sign of the two sides' return difference) or paired
(the players' own returns on the same seed), and the score matrix of a tournament's results."""

from __future__ import annotations

import json
from typing import Sequence

import numpy as np


def side_returns(returns: dict[str, float], *sides: Sequence[str]) -> list[float]:
    """Each side's return: the sum of its seats' returns."""
    return [sum(returns.get(seat, 0.0) for seat in side) for side in sides]


def game_score(returns: dict[str, float], side_a: Sequence[str], side_b: Sequence[str]) -> float:
    """The result for side a: 1 if its seats made more than side b's, 0 if less, 0.5 on a tie."""
    ra, rb = side_returns(returns, side_a, side_b)
    return 1.0 if ra > rb else 0.0 if ra < rb else 0.5


def paired_rows(games: Sequence[dict], rounds: Sequence[Sequence[Sequence[str]]], n_seeds: int, swiss: bool
                ) -> list[dict]:
    """Paired scoring's results: for each pairing (a, b) of each round and each seed index below
    ``n_seeds`` that both played, one row in the format of a competitive game's (``a``, ``b``, ``k``,
    ``round``, ``seed``, ``return_a``, ``return_b``, ``score``): ``score`` is 1 if a's own return on
    that seed beat b's, 0 if it fell short, 0.5 if equal. ``games``: the players' game rows."""
    played = {(r["player"], r["k"], r.get("round")): r for r in games if "player" in r}
    out = []
    for round_no, pairs in enumerate(rounds):
        rnd = round_no if swiss else None
        for a, b in pairs:
            for k in range(n_seeds):
                ga, gb = played.get((a, k, rnd)), played.get((b, k, rnd))
                if ga is None or gb is None:
                    continue
                ra, rb = ga["return"], gb["return"]
                out.append({"id": json.dumps([a, b, k] + ([rnd] if rnd is not None else [])), "a": a, "b": b, "k": k,
                            "order": None, "round": rnd, "seed": ga["seed"], "return_a": ra, "return_b": rb,
                            "score": 1.0 if ra > rb else 0.0 if ra < rb else 0.5})
                failed = sorted({*ga.get("failed_players", ()), *gb.get("failed_players", ())} & {a, b})
                if failed:  # an endpoint that made no move in its own game (the leaderboard counts them)
                    out[-1]["failed_players"] = failed
    return out


# ------------------------------------------------------------------------------------------- report
def score_matrix(rows: Sequence[dict], names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(mean score of row player against column player, games) over every game between them; NaN
    where they did not meet."""
    index = {n: i for i, n in enumerate(names)}
    points = np.zeros((len(names), len(names)))
    games = np.zeros((len(names), len(names)))
    for r in rows:
        i, j = index[r["a"]], index[r["b"]]
        points[i, j] += r["score"]
        points[j, i] += 1.0 - r["score"]
        games[i, j] += 1
        games[j, i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(games > 0, points / np.maximum(games, 1), np.nan), games
