"""Benchmark: tournament throughput with games batched (one generate call per player and step of
play across all games of a batch) against one game at a time, in the same run.

Players: the embedded tiny model and a second copy of it (two model players, so each batch holds
two players' calls) and a scripted twin, round-robin on ``kuhn_poker-v0``. The same games (same
seeds) are played with ``batch_games`` = ``--batch`` and with ``batch_games`` = 1; the printed ratio
is games/s batched over games/s one at a time.

A keyed generate call of fewer than 16 prompts is filled up to 16 rows (``HFBackend``'s
``MIN_ROWS``, for batch-independent draws), so one game at a time pays for 16 rows a call. The
script also plays one at a time with that fill off and prints the speedup over it
(``speedup_vs_unfilled``), the ratio over the cheapest one-at-a-time play.

    python benchmarks/tournament_batching.py [--games-per-pairing 64] [--batch 256]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

from cogym.agents.backends import hf as backends
from cogym.agents.loading import tiny_model_path
from cogym.runners.tournament.players import resolve_players
from cogym.runners.tournament.run import run_tournament
from cogym.runners.tournament.spec import TournamentSpec


def _play(players, games_per_pairing: int, batch: int, out: Path) -> tuple[float, int]:
    spec = TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=games_per_pairing,
                          batch_games=batch, max_new_tokens=4, prompts={"first": "Poker.", "second": "Poker."})
    t0 = time.perf_counter()
    rows = run_tournament(spec, out, progress=False)
    return time.perf_counter() - t0, len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games-per-pairing", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        copy = tmp / "tiny_copy"
        shutil.copytree(tiny_model_path(), copy)
        players = resolve_players(["tiny", str(copy), "scripted:random"])
        _play(players, 2, args.batch, tmp / "warmup")  # load the models and warm the kernels
        batched_s, n = _play(players, args.games_per_pairing, args.batch, tmp / "batched")
        single_s, n1 = _play(players, args.games_per_pairing, 1, tmp / "single")
        fill, backends.MIN_ROWS = backends.MIN_ROWS, 1
        try:
            unfilled_s, n2 = _play(players, args.games_per_pairing, 1, tmp / "unfilled")
        finally:
            backends.MIN_ROWS = fill
    assert n == n1 == n2
    result = {"games": n, "batched_games_per_s": n / batched_s, "one_at_a_time_games_per_s": n1 / single_s,
              "speedup": (n / batched_s) / (n1 / single_s),
              "one_at_a_time_unfilled_games_per_s": n2 / unfilled_s, "speedup_vs_unfilled": unfilled_s / batched_s,
              "batch_games": args.batch}
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}, indent=1))


if __name__ == "__main__":
    main()
