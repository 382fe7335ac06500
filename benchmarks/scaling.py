"""Benchmark: how cogym's cost grows with the work, so a larger run can be planned from a small one.

Four curves, each varying one thing and keeping the rest of the default config
(``configs/proposer_solver.yaml``: the embedded tiny model, 32 games an iteration, a proposer and 8
solvers a game, GRPO solver and REINFORCE++ proposer on deepspeed):

* ``games``: games per iteration (``game.num_games``) 8, 16, 32, 64, 128, 256.
* ``seats``: seats per game 2, 3, 4, 6, 8. No shipped game has a "number of players" argument; the
  closest is proposer_solver's ``game.kwargs.num_solvers`` (seats = 1 proposer + k solvers, so k =
  1..7). Every seat plays a turn, so this also grows the turns per game. GRPO refuses one solver a
  game (its groups are a game's solver turns, so a group of one has only zero advantages), so along
  this curve the solver learns with REINFORCE++ (``learners.solver.algorithm: reinforce_pp``, a
  batch baseline), at every point alike: the same forwards and backwards as GRPO, another advantage.
* ``policies``: distinct trained policies behind the same 9 seats, 1 to 4. 1: one model plays the
  proposer and the solvers (``learners.<id>.role_algorithms``: GRPO for the solvers, REINFORCE++ for
  the proposer, as in the default); 2: the default config (a proposer policy and a solver policy);
  3 and 4: the proposer's policy and the 8 solver seats split round-robin over 2 or 3 solver policies
  (``seats.solver_<i>``), each with the solver's learner. The games and turns stay the same: the curve
  is what more models and learners cost for the same work.
* ``players``: tournament players 4, 8, 16, 32 (``runners/tournament``, as ``benchmarks/
  tournament_batching.py`` builds one): copies of the tiny model, each its own directory, round-robin
  on ``kuhn_poker-v0`` with ``--games-per-pairing`` games a pairing (default 2), batched as
  ``cogym tournament`` does by default (256 games at once). The figure is the whole tournament's
  wall time (loading every player, playing, rating), the median of its plays (three a round, the
  same games: a short tournament's time jumps more from play to play). The games grow as players x
  (players - 1) (the schedule alone would give an exponent of 2); the table also prints ms per game.

Every point is measured ``--rounds`` times (default 3), in rounds: each round runs a curve's points
once, in order, so a slow spell of a shared machine spreads over the points instead of bending the
curve at one. A training point's figure is the median ``iteration_s`` (an iteration's wall time:
rollout and update) of iterations 2..``--iterations`` (default 8; the first compiles and warms
caches) of every round's run, pooled, with no held-out evaluation, checkpoints, transcripts, plots or
TensorBoard. Every run and tournament is in this process (``cogym.runners.train.train``,
``run_tournament``), one after another, after one import (one tournament of 2 players first warms
its play). The fitted exponent b is the least-squares
slope of log(seconds) on log(x): time ~ a * x^b. Where a fixed cost is a large part of a point's time
the exponent reads low, so the table also gives the least-squares line seconds = fixed + per_unit * x.
Two points hold the default config itself (games = 32 and policies = 2): their difference is the
run-to-run noise.

Threads: the default thread policy (``run.threads`` is not set, so ``train`` picks the torch
threads as ``cogym train`` does, and the tournament runs as ``cogym tournament`` does), since the
point is what a user's default run costs. That policy takes fewer threads while other processes use
the cores (it says so on stderr), so on a machine with other work running the curves move with it:
take them under no other load.

Prints a table (curve, x values, seconds, fitted exponent), writes a log-log PNG (one panel a curve,
the fitted line drawn) to ``--out`` and a JSON of the numbers beside it (same name, ``.json``), and
prints both paths; the JSON also holds each point's rollout and update medians and each round's
wall time, the cores and the load average before and after. Progress (which point and round, and its
result) goes to stderr. Run directories live in a temporary directory removed at the end. The
default run took 190 to 260 s on a 2-core machine (the longer with another process's load coming
and going beside it; docs/performance.md).

    python benchmarks/scaling.py [--curves games,seats,policies,players] [--iterations 8]
                                 [--games-per-pairing 2] [--rounds 3] [--out scaling.png] [--quick]

``--quick``: two small points a curve, 2 iterations and one round (the test's size;
seconds, not a measurement).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "cogym" / "configs" / "proposer_solver.yaml"
# No evaluation, checkpoints, transcripts, plots or TensorBoard: an iteration's time is rollout + update.
QUIET = ["run.eval_every=0", "run.checkpoint_every=0", "eval.declared=false", "run.plot=false",
         "run.tensorboard=false", "run.transcripts_every=0"]
CURVES = ("games", "seats", "policies", "players")
FULL = {"games": [8, 16, 32, 64, 128, 256], "seats": [2, 3, 4, 6, 8], "policies": [1, 2, 3, 4],
        "players": [4, 8, 16, 32]}
QUICK = {"games": [4, 8], "seats": [2, 3], "policies": [1, 2], "players": [3, 4]}
LABELS = {"games": "games per iteration", "seats": "seats per game", "policies": "trained policies",
          "players": "tournament players"}
UNITS = {"games": "s / iteration", "seats": "s / iteration", "policies": "s / iteration",
         "players": "s / tournament"}


def _loadavg() -> str | None:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])  # 1, 5 and 15-minute load
    except OSError:
        return None


def _log(msg: str) -> None:
    print(f"[scaling] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ the configs
def base_tree() -> dict:
    """The default config as a mapping (the shipped YAML, read with cogym's own bounded reader)."""
    from cogym.runners.config.safe_yaml import read_yaml_file

    return read_yaml_file(CONFIG, "config")


def games_tree(n: int) -> dict:
    tree = base_tree()
    tree["game"]["num_games"] = n
    return tree


def seats_tree(seats: int) -> dict:
    """proposer_solver with ``seats - 1`` solvers (the proposer is the other seat)."""
    if seats < 2:
        raise ValueError(f"seats: proposer_solver has a proposer and at least one solver (>= 2 seats), got {seats}")
    tree = base_tree()
    tree["game"].setdefault("kwargs", {})["num_solvers"] = seats - 1
    tree["learners"]["solver"]["algorithm"] = "reinforce_pp"  # GRPO needs two solvers a game (docstring)
    return tree


def policies_tree(n: int) -> dict:
    """The default game and seats behind ``n`` trained policies (see the module docstring)."""
    tree = base_tree()
    if n == 2:
        return tree
    solvers = int(tree["game"].get("kwargs", {}).get("num_solvers", 8))
    proposer_pol, solver_pol = tree["policies"]["proposer"], tree["policies"]["solver"]
    proposer_learner, solver_learner = tree["learners"]["proposer"], tree["learners"]["solver"]
    if n == 1:
        tree["seats"] = {"proposer": "shared", "solver": "shared"}
        tree["policies"] = {"shared": copy.deepcopy(solver_pol)}
        tree["learners"] = {"shared": {**copy.deepcopy(solver_learner),
                                       "role_algorithms": {"proposer": proposer_learner["algorithm"]}}}
        return tree
    k = n - 1  # solver policies beside the proposer's
    if not 1 <= k <= solvers:
        raise ValueError(f"policies: 1 to {solvers + 1} with {solvers} solver seats, got {n}")
    names = [f"solver_p{j}" for j in range(k)]
    tree["seats"] = {"proposer": "proposer", **{f"solver_{i}": names[i % k] for i in range(solvers)}}
    tree["policies"] = {"proposer": proposer_pol, **{nm: copy.deepcopy(solver_pol) for nm in names}}
    tree["learners"] = {"proposer": proposer_learner, **{nm: copy.deepcopy(solver_learner) for nm in names}}
    return tree


TOURNAMENT_PLAYS = 3  # a tournament is short and its time jumps more from play to play: 3 plays a round

TREES: dict[str, Callable[[int], dict]] = {"games": games_tree, "seats": seats_tree, "policies": policies_tree}


# ------------------------------------------------------------------------------------- measuring
def _median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if key in r]
    return statistics.median(vals) if vals else None


def train_point(tree: dict, iterations: int, work: Path) -> dict:
    """Train ``tree`` for ``iterations`` in this process: the metrics of its iterations 2.. (of its only
    one when ``iterations`` is 1) and the run's wall time."""
    import yaml

    from cogym.runners import load_config
    from cogym.runners.train import train

    work.mkdir(parents=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    cfg = load_config(path, [f"run.iterations={iterations}", *QUIET])
    t0 = time.perf_counter()
    train(cfg, work / "run", progress=False)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "iteration_s" in r]
    return {"rows": [r for r in rows if r["iteration"] >= 2] or rows, "run_wall_s": wall}


def train_summary(rows: list[dict]) -> dict:
    """A training point's figures: the medians of its steady iterations (every round's, pooled)."""
    return {"seconds": _median(rows, "iteration_s"), "rollout_s": _median(rows, "rollout_s"),
            "update_s": _median(rows, "update_s"), "iterations_timed": len(rows)}


def tournament_point(players: int, games_per_pairing: int, work: Path, plays: int = 1) -> dict:
    """A round-robin of ``players`` copies of the tiny model on kuhn_poker-v0, played ``plays`` times
    (the same games): each play's whole wall time."""
    from cogym.agents.loading import tiny_model_path
    from cogym.runners.tournament.players import resolve_players
    from cogym.runners.tournament.run import run_tournament
    from cogym.runners.tournament.spec import TournamentSpec

    models = work / "models"
    models.mkdir(parents=True)
    dirs = []
    for i in range(players):
        dirs.append(models / f"tiny_{i:02d}")
        shutil.copytree(tiny_model_path(), dirs[-1])
    spec = TournamentSpec(game="kuhn_poker-v0", players=resolve_players([str(d) for d in dirs]),
                          games_per_pairing=games_per_pairing, max_new_tokens=4,
                          prompts={"first": "Poker.", "second": "Poker."})
    walls = []
    for k in range(plays):
        t0 = time.perf_counter()
        rows = run_tournament(spec, work / f"out{k}", progress=False)
        walls.append(time.perf_counter() - t0)
    return {"walls_s": walls, "games": len(rows)}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(a, b) of the least-squares line log y = log a + b log x."""
    import numpy as np

    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    b, log_a = np.polyfit(lx, ly, 1)
    return float(math.exp(log_a)), float(b)


def fit_linear(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(c0, c1) of the least-squares line y = c0 + c1 x: a fixed cost and the cost of one more unit
    (often the better planning rule where the fixed cost is a large part, as the exponent then reads low)."""
    import numpy as np

    c1, c0 = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(c0), float(c1)


def measure(curves: list[str], sizes: dict[str, list[int]], iterations: int, games_per_pairing: int,
            work: Path, rounds: int = 1) -> dict:
    """Every point of every curve, one at a time, in ``rounds`` rounds (each round runs a curve's points
    once, in order, so a slow spell of the machine spreads over the points rather than landing on one);
    {curve: {"x", "seconds", "a", "b", "fixed_s", "per_unit_s", "points"}}."""
    out: dict = {}
    if "players" in curves:  # the training model is warm; warm the tournament's play before its first point
        tournament_point(2, 2, work / "players_warmup")
    for curve in curves:
        xs = list(sizes[curve])
        got: dict[int, list[dict]] = {x: [] for x in xs}
        for r in range(rounds):
            for k, x in enumerate(xs):
                _log(f"{curve} {k + 1}/{len(xs)}, round {r + 1}/{rounds}: {LABELS[curve]} = {x}")
                where = work / f"{curve}_{x}_{r}"
                if curve == "players":
                    p = tournament_point(x, games_per_pairing, where, TOURNAMENT_PLAYS)
                    w = statistics.median(p["walls_s"])
                    _log(f"{curve} = {x}: {w:.2f} s for {p['games']} games ({w / max(p['games'], 1) * 1e3:.1f} ms a "
                         f"game; {len(p['walls_s'])} plays)")
                else:
                    p = train_point(TREES[curve](x), iterations, where)
                    t = train_summary(p["rows"])
                    _log(f"{curve} = {x}: {t['seconds']:.3f} s an iteration (rollout {t['rollout_s']:.3f}, update "
                         f"{t['update_s']:.3f}; run {p['run_wall_s']:.1f} s)")
                shutil.rmtree(where, ignore_errors=True)
                got[x].append(p)
        points = []
        for x in xs:
            if curve == "players":
                walls = [w for p in got[x] for w in p["walls_s"]]
                games = got[x][0]["games"]
                points.append({"x": x, "seconds": statistics.median(walls), "games": games,
                               "s_per_game": statistics.median(walls) / max(games, 1), "walls_s": walls})
            else:
                points.append({"x": x, **train_summary([row for p in got[x] for row in p["rows"]]),
                               "run_walls_s": [p["run_wall_s"] for p in got[x]]})
        secs = [p["seconds"] for p in points]
        a, b = fit(xs, secs)
        c0, c1 = fit_linear(xs, secs)
        out[curve] = {"label": LABELS[curve], "unit": UNITS[curve], "x": xs, "seconds": secs, "a": a, "b": b,
                      "fixed_s": c0, "per_unit_s": c1, "points": points}
    return out


def table(results: dict) -> str:
    """curve, x values, seconds, the exponent b, and the linear fit's fixed and per-unit seconds."""
    lines = [f"{'curve':<10} {'x':<26} {'seconds':<46} {'exponent b':>10}  {'linear: fixed + per unit':>24}"]
    for curve, r in results.items():
        xs = ", ".join(str(x) for x in r["x"])
        secs = ", ".join(f"{s:.3g}" for s in r["seconds"])
        lin = f"{r['fixed_s']:+.3g} s + {r['per_unit_s']:.3g} s/unit"
        lines.append(f"{curve:<10} {xs:<26} {secs:<46} {r['b']:>10.2f}  {lin:>24}")
        if curve == "players":
            per = ", ".join(f"{p['s_per_game'] * 1e3:.3g}" for p in r["points"])
            games = ", ".join(str(p["games"]) for p in r["points"])
            lines.append(f"{'':<10} {'(games: ' + games + ')':<26} {'ms / game: ' + per:<46}")
    return "\n".join(lines)


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    n = len(results)
    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    for ax, (curve, r) in zip(axes.flat, results.items()):
        xs, ys = np.asarray(r["x"], float), np.asarray(r["seconds"], float)
        ax.loglog(xs, ys, "o", color="C0", label="measured (median)")
        grid = np.geomspace(xs.min(), xs.max(), 50)
        ax.loglog(grid, r["a"] * grid ** r["b"], "-", color="C1", label=f"fit: {r['a']:.3g} x^{r['b']:.2f}")
        if curve == "players":
            for k, p in enumerate(r["points"]):
                last = k == len(r["points"]) - 1  # its label goes left, inside the panel
                ax.annotate(f"{p['games']} games", (p["x"], p["seconds"]), textcoords="offset points",
                            xytext=(-8 if last else 6, -10), ha="right" if last else "left", fontsize=7, color="0.35")
        ax.set_xticks(xs)
        ax.set_xticklabels([str(int(x)) for x in xs])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(xs.min() / 1.15, xs.max() * 1.15)
        ax.set_ylim(ys.min() / 1.25, ys.max() * 1.25)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(r["label"])
        ax.set_ylabel(r["unit"])
        ax.set_title(f"{r['label']}: exponent {r['b']:.2f}")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("cogym scaling: tiny model, configs/proposer_solver.yaml (tournament: kuhn_poker-v0), log-log",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--curves", default=",".join(CURVES),
                    help=f"comma-separated subset of {', '.join(CURVES)} (default: all)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="training iterations a point; the first is a warm-up, the figure is the median of the rest "
                         "(default 8; --quick: 2)")
    ap.add_argument("--games-per-pairing", type=int, default=2, help="tournament games a pairing (even, >= 2; default 2)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="times each point is measured, in rounds; a training point's figure is the median of "
                         "every round's timed iterations, a tournament's the median of its wall times "
                         "(default 3; --quick: 1)")
    ap.add_argument("--out", default="scaling.png", help="the PNG to write (the JSON goes beside it; default scaling.png)")
    ap.add_argument("--quick", action="store_true", help="two small points a curve and 2 iterations (for the test)")
    args = ap.parse_args(argv)
    curves = [c.strip() for c in args.curves.split(",") if c.strip()]
    unknown = [c for c in curves if c not in CURVES]
    if unknown or not curves:
        ap.error(f"--curves: {', '.join(unknown) or 'none given'}; choose from {', '.join(CURVES)}")
    iterations = args.iterations or (2 if args.quick else 8)
    rounds = args.rounds or (1 if args.quick else 3)
    if iterations < 1 or rounds < 1:
        ap.error("--iterations and --rounds must be >= 1")
    sizes = QUICK if args.quick else FULL
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no weight-loading bar for every run and player
    load_before = _loadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cogym_scaling_") as tmp:
        results = measure(curves, sizes, iterations, args.games_per_pairing, Path(tmp), rounds)
    wall = time.perf_counter() - t0
    print(table(results))
    plot(results, out)
    report = {"iterations": iterations, "games_per_pairing": args.games_per_pairing, "rounds": rounds,
              "quick": args.quick, "cores": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": _loadavg(),
              "wall_s": wall, "curves": results}
    json_path = out.with_suffix(".json")
    json_path.write_text(json.dumps(report, indent=1))
    print(f"{len(curves)} curves in {wall:.0f} s; plot: {out}; numbers: {json_path}")
    return report


if __name__ == "__main__":
    main()
