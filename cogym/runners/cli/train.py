"""``cogym train``: train the policies behind a game's seats."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch.distributed
from rich.console import Console
from rich.table import Table

from cogym.learners import torch_dist as dist
from cogym.runners.cli.args import positive_int
from cogym.runners.display import plain
from cogym.runners import rundir
from cogym.runners.config.load import load_config
from cogym.runners.config.trust import check_run_modules
from cogym.runners.train.launch import launch_train
from cogym.runners.train.loop import train
from cogym.runners.train.metrics import reward_rows
from cogym.runners.train.sinks import HELDOUT_LABELS

DESCRIPTION = ("Train the policies behind a game's seats. With no config, co-trains the embedded tiny model as "
               "proposer and solver (configs/proposer_solver.yaml).")
OVERRIDES_AFTER_OPTIONS = True  # `cogym train cfg.yaml --run-dir d a=b`: a=b is still an override


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("config", nargs="?", default=None, help="YAML config (default: the shipped proposer_solver.yaml)")
    t.add_argument("overrides", nargs="*", help="dotted overrides, e.g. learners.solver.lr=1e-4 run.iterations=10")
    t.add_argument("--run-dir", help="where to write the run (default: <run.out_dir>/<run.name>-<time>); a directory "
                   "that holds files (yours, or an earlier run's) is refused unless --overwrite or --resume")
    t.add_argument("--overwrite", action="store_true",
                   help="use a --run-dir that holds files: cogym replaces only the files it writes itself "
                        "(config.yaml, metrics.jsonl, summary.json, an earlier run's checkpoints, ...) and deletes "
                        "nothing else")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last complete checkpoint (a finished "
                   "run is left as it is); it prints the game modules RUN_DIR/config.yaml names and refuses each one "
                   "the command line (CONFIG or game.modules=[...]) does not name, unless it is part of Python's "
                   "installation or --trust-run-modules is given")
    t.add_argument("--trust-run-modules", action="store_true",
                   help="--resume: import the game/algorithm modules RUN_DIR/config.yaml names although the command "
                        "line does not name them (they run as your code: trust the run's author)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--strict", action="store_true",
                   help="warnings about the run are errors (run.strict=true): a policy that got no turns, or only "
                        "zero advantages, in its first iterations stops the run in one line (exit 2)")
    t.add_argument("--nproc", type=positive_int, default=1, metavar="N",
                   help="data parallel: run N processes (torch.distributed, gloo on CPU) that each play "
                        "game.num_games / N games and train on the gathered batch; num_games must be divisible by N "
                        "(default 1)")
    t.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="play rollouts on Ray workers (run.backend=ray): with no ADDRESS start a local cluster, "
                        "'auto' joins the cluster `ray start` runs on this machine, host:port another one; "
                        "ray.num_rollout_workers=N sets the workers, ray.learners=colocated|separate puts the "
                        "learners in Ray actors (needs: pip install 'cogym[ray]'; docs/ray.md)")


def normalise(args: argparse.Namespace) -> None:
    """Positionals the parser put in the wrong place: `cogym train --ray cfg.yaml` (a config, not an
    address), `--ray key=value` and `cogym train key=value` (an override, not a file)."""
    if args.ray is not None:
        if args.ray.endswith((".yaml", ".yml")) or "=" in args.ray:
            moved = [args.config] if args.config and "=" in args.config else []  # an override, not a file
            if moved:
                args.config = None
            if "=" in args.ray:
                moved.insert(0, args.ray)
            elif args.config is None:
                args.config = args.ray
            args.overrides[:0] = moved
            args.ray = "local"
        args.overrides.append("run.backend=ray")
        if args.ray != "local":
            args.overrides.append(f"ray.address={args.ray}")
    if args.config and "=" in args.config:
        args.overrides.insert(0, args.config)
        args.config = None
    if getattr(args, "strict", False):  # a config key, so --nproc workers and --resume keep it
        args.overrides.append("run.strict=true")


def run(args: argparse.Namespace) -> int:
    if args.resume:
        run_path = Path(args.resume)
        config_path = run_path / "config.yaml"
        if not config_path.is_file():
            raise FileNotFoundError(f"--resume {run_path}: no config.yaml there; give a run directory made by cogym train")
        rundir.claim(run_path, "train", "--resume", resume=True)  # no symbolic link out of it is read
        check_run_modules(run_path, args.config, args.overrides, trust=args.trust_run_modules)
        cfg = load_config(config_path, args.overrides)
    else:
        run_path = Path(args.run_dir) if args.run_dir else None
        cfg = load_config(args.config, args.overrides)
    if args.nproc > 1:  # the launcher: N workers run this command without --nproc
        return launch_train(args, cfg)
    started = dist.init_from_env()  # a worker of `--nproc N` (or of torchrun): join the process group
    main = dist.is_main()
    try:
        summary = train(cfg, run_path=run_path, resume=bool(args.resume), progress=not args.no_progress,
                        overwrite=args.overwrite)
    finally:
        if started:
            torch.distributed.destroy_process_group()
    if main and not summary.get("already_finished"):
        print_summary(summary)
    return 0


def print_summary(summary: dict) -> None:
    table = Table(title="cogym train: summary", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")

    def add(*cells: str) -> None:  # cells shown as written: a run directory may hold [..] or an escape sequence
        table.add_row(*map(plain, cells))

    for key, label in HELDOUT_LABELS.items():  # greedy, and sampled with eval.temperature > 0
        before, after = summary.get(f"{key}_before"), summary.get(f"{key}_after")
        if before is not None and after is not None:
            add(label, f"{before:.1%} -> {after:.1%} ({(after - before) * 100:+.1f} pts)")
    for key in summary:  # declared evaluators (eval.evaluators): eval/<name>/<metric>, before -> after
        if key.startswith("eval/") and key.endswith("_before") and f"{key[:-7]}_after" in summary:
            first, last = summary[key], summary[f"{key[:-7]}_after"]
            add(f"{key[5:-7]} (before -> after)", f"{first:.3f} -> {last:.3f} ({last - first:+.3f})")
    for label, value in reward_rows(summary):  # first -> last window of this process's iterations
        add(label, value)
    if summary.get("tokens_per_s"):
        add("rollout tokens/s", f"{summary['tokens_per_s']:.0f}")
    add("engine", ", ".join(summary.get("engines", [])))
    if "ray_workers" in summary:
        restarts = summary.get("ray_worker_restarts", 0)
        add("Ray rollout workers", f"{summary['ray_workers']} ({restarts} restart{'s' if restarts != 1 else ''})")
    add("iterations", str(summary.get("iterations", "-")))
    add("wall time", f"{summary['wall_s']:.0f} s")
    add("run directory", summary["run_dir"])
    Console().print(table)
    if summary.get("league"):
        league = Table(title="league (openskill ratings; win rate = the learner's against the member)")
        for col in ("member", "iteration", "mu", "sigma", "games", "learner win rate"):
            league.add_column(col, justify="left" if col == "member" else "right")
        for row in summary["league"]:
            rate = row["learner_win_rate"]
            league.add_row(*map(plain, (row["member"] + ("" if row["active"] else " (dropped)"),
                           "-" if row["iteration"] is None else str(row["iteration"]), f"{row['mu']:.2f}",
                           f"{row['sigma']:.2f}", str(row["games"]), "-" if rate is None else f"{rate:.3f}")))
        Console().print(league)
