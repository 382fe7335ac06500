"""Every catalog game under load (cogym.envs.stress): seeded episodes with the random twin in every seat and
the whole hostile-move corpus at the first move and in mid-game; a line per game, a summary, exit 1 on a failure.

CI plays a share of this (tests/envs/test_catalog.py: 2 episodes and an eighth of the corpus per game); the
whole run takes about 20 minutes on one core (bridge alone 5)::

    python scripts/stress_catalog.py                      # openspiel and textarena, 50 episodes per game
    python scripts/stress_catalog.py --source textarena --episodes 10
    python scripts/stress_catalog.py --game openspiel:kuhn_poker textarena:TicTacToe-v0
"""

from __future__ import annotations

import argparse
import time

from cogym.envs.stress import HOSTILE_MOVES, stress_game


def catalog_ids(source: str) -> list[str]:
    ids: list[str] = []
    if source in ("openspiel", "all"):
        from cogym.envs.openspiel import catalog

        ids += [f"openspiel:{name}" for name in catalog()]
    if source in ("textarena", "all"):
        from cogym.envs.textarena import ALLOWED

        ids += [f"textarena:{name}" for name in ALLOWED]
    return ids


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=("openspiel", "textarena", "all"), default="all", help="which catalog (default all)")
    ap.add_argument("--game", nargs="+", help="these game ids instead of a catalog")
    ap.add_argument("--episodes", type=int, default=50, help="seeded episodes per game (default 50)")
    ap.add_argument("--step-limit", type=float, default=1.0, help="the longest a step may take, in seconds (default 1)")
    args = ap.parse_args(argv)
    ids = args.game or catalog_ids(args.source)
    failures, slowest, start = [], (0.0, ""), time.perf_counter()
    print(f"{len(ids)} games, {args.episodes} episodes each + {len(HOSTILE_MOVES)} hostile moves x 2 positions", flush=True)
    for i, game in enumerate(ids, 1):
        t = time.perf_counter()
        try:
            report = stress_game(game, episodes=args.episodes, step_limit_s=args.step_limit)
        except (AssertionError, ValueError) as exc:
            failures.append(game)
            print(f"[{i}/{len(ids)}] FAIL {str(exc)[:400]}", flush=True)
            continue
        if report.slowest_step_s > slowest[0]:
            slowest = (report.slowest_step_s, f"{game}, {report.slowest_step}")
        print(f"[{i}/{len(ids)}] {time.perf_counter() - t:6.1f} s  {report}", flush=True)
    print(f"{len(ids) - len(failures)}/{len(ids)} games passed in {time.perf_counter() - start:.0f} s; slowest step "
          f"{slowest[0] * 1000:.1f} ms ({slowest[1]})" + (f"; failed: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
