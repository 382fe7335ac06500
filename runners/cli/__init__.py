"""The ``cogym`` command: train, eval, games, tournament, show, build-tiny-model. Each has ``--help``."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from pathlib import Path

from cogym.runners.tournament.transcripts import MAX_CHARS, SHOWN_LINES, SHOWN_PROMPT_CHARS, SHOWN_PROMPT_LINES


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors a user causes (any :class:`~cogym.core.errors.CogymError`: config, game, model path,
    dataset; or a missing file): one line, exit 2. Anything else is a bug and keeps its traceback."""
    from cogym.core.errors import CogymError

    return (CogymError, FileNotFoundError)


def _train(args: argparse.Namespace) -> int:
    from cogym.runners.config.schema import load_config

    if args.resume:
        run_path = Path(args.resume)
        config_path = run_path / "config.yaml"
        if not config_path.is_file():
            raise FileNotFoundError(f"--resume {run_path}: no config.yaml there; give a run directory made by cogym train")
        cfg = load_config(config_path, args.overrides)
    else:
        run_path = Path(args.run_dir) if args.run_dir else None
        cfg = load_config(args.config, args.overrides)
    if args.nproc > 1:  # the launcher: N workers run this command without --nproc
        from cogym.runners.train.launch import launch_train

        return launch_train(args, cfg)
    from cogym.learners import torch_dist as dist

    from cogym.runners.train.loop import train

    started = dist.init_from_env()  # a worker of `--nproc N` (or of torchrun): join the process group
    main = dist.is_main()
    try:
        summary = train(cfg, run_path=run_path, resume=bool(args.resume), progress=not args.no_progress)
    finally:
        if started:
            import torch.distributed

            torch.distributed.destroy_process_group()
    if main:
        print_summary(summary)
    return 0


def print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from cogym.runners.train.metrics import reward_rows
    from cogym.runners.train.sinks import HELDOUT_LABELS

    table = Table(title="cogym train: summary", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, label in HELDOUT_LABELS.items():  # greedy, and sampled with eval.temperature > 0
        before, after = summary.get(f"{key}_before"), summary.get(f"{key}_after")
        if before is not None and after is not None:
            table.add_row(label, f"{before:.1%} -> {after:.1%} ({(after - before) * 100:+.1f} pts)")
    for key in summary:  # declared evaluators (eval.evaluators): eval/<name>/<metric>, before -> after
        if key.startswith("eval/") and key.endswith("_before") and f"{key[:-7]}_after" in summary:
            first, last = summary[key], summary[f"{key[:-7]}_after"]
            table.add_row(f"{key[5:-7]} (before -> after)", f"{first:.3f} -> {last:.3f} ({last - first:+.3f})")
    for label, value in reward_rows(summary):  # first -> last window of this process's iterations
        table.add_row(label, value)
    if summary.get("tokens_per_s"):
        table.add_row("rollout tokens/s", f"{summary['tokens_per_s']:.0f}")
    table.add_row("engine", ", ".join(summary.get("engines", [])))
    if "ray_workers" in summary:
        restarts = summary.get("ray_worker_restarts", 0)
        table.add_row("Ray rollout workers", f"{summary['ray_workers']} ({restarts} restart{'s' if restarts != 1 else ''})")
    table.add_row("iterations", str(summary.get("iterations", "-")))
    table.add_row("wall time", f"{summary['wall_s']:.0f} s")
    table.add_row("run directory", summary["run_dir"])
    Console().print(table)
    if summary.get("league"):
        league = Table(title="league (openskill ratings; win rate = the learner's against the member)")
        for col in ("member", "iteration", "mu", "sigma", "games", "learner win rate"):
            league.add_column(col, justify="left" if col == "member" else "right")
        for row in summary["league"]:
            rate = row["learner_win_rate"]
            league.add_row(row["member"] + ("" if row["active"] else " (dropped)"),
                           "-" if row["iteration"] is None else str(row["iteration"]), f"{row['mu']:.2f}",
                           f"{row['sigma']:.2f}", str(row["games"]), "-" if rate is None else f"{rate:.3f}")
        Console().print(league)


def _eval(args: argparse.Namespace) -> int:
    from cogym.agents.policy import Policy
    from cogym.envs.arithmetic import load_heldout

    from cogym.runners.config.schema import load_config
    from cogym.runners.evaluation.evaluators import HeldoutArithmetic

    cfg = load_config(args.config)
    policy = Policy.from_pretrained(args.model, dtype=args.dtype, attn_implementation=args.attn_implementation)
    n = len(load_heldout()[: args.size])
    # The training evaluator, with the config's settings and draws unless a flag says otherwise: its pass@1 is
    # the run's heldout_sampled_acc.
    ev = HeldoutArithmetic(size=args.size, max_new_tokens=args.max_new_tokens or cfg.eval.max_new_tokens,
                           batch_size=args.batch_size,
                           temperature=cfg.eval.temperature if args.temperature is None else args.temperature,
                           samples=args.samples or cfg.eval.samples,
                           **({} if args.seed is None else {"seed": args.seed}))
    acc = ev.accuracies(policy, cfg.prompts["solver"].system if "solver" in cfg.prompts else "")
    print(f"held-out greedy accuracy of {args.model}: {acc['heldout_acc']:.3f} on {n} problems")
    if "heldout_sampled_acc" in acc:
        print(f"held-out pass@1 of {args.model} at temperature {ev.temperature:g}: {acc['heldout_sampled_acc']:.3f} "
              f"({ev.samples} samples of each of {n} problems)")
    return 0


def _games(args: argparse.Namespace) -> int:
    from cogym.envs import make, registered, scripted_strategies

    from cogym.runners.train.build import import_game_modules
    from cogym.runners.display import format_games, terminal_width

    import_game_modules(args.module or [])
    versions: dict[str, list[str]] = {}
    for gid in sorted(registered()):
        name, version = gid.rsplit("-v", 1)
        versions.setdefault(name, []).append(version)
    games = []
    for name, vs in versions.items():
        latest = f"{name}-v{max(vs, key=int)}"
        spec = make(latest).spec
        twins = scripted_strategies(latest)
        games.append({"id": latest, "versions": [f"v{v}" for v in sorted(vs, key=int)], "zero_sum": spec.zero_sum,
                      "reward_range": f"[{spec.reward_range[0]:g}, {spec.reward_range[1]:g}]",
                      "max_turns": spec.max_turns, "description": spec.description,
                      "roles": {r: list(twins.get(r, {})) for r in spec.roles}})
    print(format_games(games, terminal_width(), note="Every game also plays one token per step: "
                       "make(id, granularity='token') or game.granularity: token in a config."))
    return 0


def _key_values(items: list[str] | None, what: str) -> dict:
    import yaml

    from cogym.runners.config.schema import ConfigError

    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"{what} {item!r} must look like key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value) if what == "--kwarg" else value
    return out


def _tournament(args: argparse.Namespace) -> int:
    import glob

    import yaml

    from cogym.runners.config.schema import ConfigError
    from cogym.runners.train.build import import_game_modules
    from cogym.runners.tournament.run import (TournamentSpec, print_leaderboard, print_matrix, report, resolve_players, results_title,
                             run_tournament, settings_notes, split_binding)

    tree: dict = {}
    if args.config:
        tree = yaml.safe_load(Path(args.config).read_text()) or {}
        if not isinstance(tree, dict):
            raise ConfigError(f"{args.config} must hold a mapping")
        known = {"game", "game_kwargs", "players", "policy", "sides", "fixed", "schedule", "games_per_pairing", "pool",
                 "swiss_rounds", "anchor", "seed", "batch_games", "max_loaded", "max_new_tokens", "modules", "temperature", "prompts", "out",
                 "transcripts", "role", "scoring"}
        unknown = sorted(set(tree) - known)
        if unknown:
            raise ConfigError(f"{args.config}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    specs = []
    for p in args.players or tree.get("players") or []:  # globs expanded; a binding (@ROLE) kept on each match
        head, bind = split_binding(p) if not glob.glob(p) else (p, None)
        suffix = f"@{','.join(bind)}" if bind else ""
        specs += [m + suffix for m in sorted(glob.glob(head))] or [p]
    game = args.game or tree.get("game")
    if not game:
        raise ConfigError("cogym tournament needs --game (e.g. --game kuhn_poker-v0) or game: in --config")
    players = resolve_players(specs, args.policy or tree.get("policy"), role=args.role or tree.get("role"))
    modules = [*(tree.get("modules") or []), *(args.module or [])]
    import_game_modules(modules)
    prompts = {**tree.get("prompts", {}), **_key_values(args.system, "--system")}  # over each checkpoint's own
    spec = TournamentSpec(
        game=game, players=players, game_kwargs={**tree.get("game_kwargs", {}), **_key_values(args.kwarg, "--kwarg")},
        sides=[s.split(",") for s in args.sides] if args.sides else tree.get("sides"),
        fixed={**tree.get("fixed", {}), **_key_values(args.fixed, "--fixed")},
        schedule=args.schedule or tree.get("schedule", "round_robin"),
        games_per_pairing=args.games_per_pairing or tree.get("games_per_pairing", 100),
        pool=args.pool or tree.get("pool", []), swiss_rounds=args.swiss_rounds or tree.get("swiss_rounds", 0),
        anchor=args.anchor or tree.get("anchor"), seed=args.seed if args.seed is not None else tree.get("seed", 0),
        batch_games=args.batch_games or tree.get("batch_games", 256),
        max_loaded=args.max_loaded or tree.get("max_loaded", 0),
        max_new_tokens=args.max_new_tokens or tree.get("max_new_tokens", 0),
        temperature=args.temperature if args.temperature is not None else tree.get("temperature", 1.0), prompts=prompts,
        scoring=args.scoring or tree.get("scoring"),
        modules=modules, transcripts=args.transcripts if args.transcripts is not None else tree.get("transcripts", 0))
    out = Path(args.out or tree.get("out") or f"tournaments/{game}")
    ray = None
    if args.ray is not None:
        from cogym.runners.config.schema import RayConfig

        if args.workers is not None and args.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {args.workers}")
        ray = RayConfig(address=None if args.ray == "local" else args.ray, num_rollout_workers=args.workers or 2)
    elif args.workers is not None:
        raise ConfigError("--workers sets the Ray workers of --ray; add --ray (or drop --workers)")
    rows = run_tournament(spec, out, progress=not args.no_progress, ray=ray)
    board = report(rows, [p.name for p in players], out, anchor=spec.anchor, n_boot=args.bootstrap, seed=spec.seed,
                   plots=not args.no_plots)
    print_leaderboard(board, title=results_title(game, rows, out), notes=settings_notes(out))
    print_matrix(rows, board)
    return 0


def _show(args: argparse.Namespace) -> int:
    import json

    from cogym.core.errors import ConfigError

    from cogym.runners.display import terminal_width
    from cogym.runners.tournament.transcripts import format_transcripts, read_transcripts, select, transcripts_path

    rows = read_transcripts(args.path)
    try:
        shown = select(rows, iteration=args.iteration, player=args.player, last=args.last, seat=args.seat, role=args.role)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if args.json:
        sys.stdout.write("".join(json.dumps(r) + "\n" for r in shown))
        return 0
    its = sorted({r["iteration"] for r in rows if r.get("iteration") is not None})
    what = f", iteration{'s' if len(its) > 1 else ''} {', '.join(map(str, its))}" if its else ""
    title = f"{transcripts_path(args.path)}: {len(shown)} of {len(rows)} games{what}"
    print(format_transcripts(shown, args.width or terminal_width(), full=args.full, title=title))
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    import json
    import time

    from cogym.runners.config.schema import ConfigError
    from cogym.runners.display import terminal_width
    from cogym.runners.research.reproduce import all_claims, claim_named, format_list, format_results, plot_results, reproduce

    if args.list:
        print(format_list(all_claims(), terminal_width()))
        return 0
    if not args.claim:
        raise ConfigError("name a claim (cogym reproduce --list shows them)")
    claim = claim_named(args.claim)
    out = Path(args.out) if args.out else Path("runs") / "reproduce" / f"{claim.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {str(out)!r} is not empty; name a new directory")
    out.mkdir(parents=True, exist_ok=True)
    results = reproduce(claim, args.seeds, out, args.overrides,
                        progress=None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True)))
    (out / "results.json").write_text(json.dumps(results.as_json(claim), indent=1) + "\n")
    plot_results(claim, results, out / "results.png")
    print(format_results(claim, results))
    print(f"\nwritten: {out / 'results.json'}, {out / 'results.png'}")
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _nonnegative_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cogym", description="LLM co-training setups as multi-agent games.")
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train the policies of a config",
                       description="Train the policies behind a game's seats. With no config, co-trains the embedded "
                                   "tiny model as proposer and solver (configs/proposer_solver.yaml).")
    t.add_argument("config", nargs="?", default=None, help="YAML config (default: the shipped proposer_solver.yaml)")
    t.add_argument("overrides", nargs="*", help="dotted overrides, e.g. learners.solver.lr=1e-4 run.iterations=10")
    t.add_argument("--run-dir", help="where to write the run (default: <run.out_dir>/<run.name>-<time>)")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last complete checkpoint")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--nproc", type=_positive_int, default=1, metavar="N",
                   help="data parallel: run N processes (torch.distributed, gloo on CPU) that each play "
                        "game.num_games / N games and train on the gathered batch; num_games must be divisible by N "
                        "(default 1)")
    t.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="play rollouts on Ray workers (run.backend=ray): with no ADDRESS start a local cluster, "
                        "'auto' joins the cluster `ray start` runs on this machine, host:port another one; "
                        "ray.num_rollout_workers=N sets the workers, ray.learners=colocated|separate puts the "
                        "learners in Ray actors (needs: pip install 'cogym[ray]'; docs/ray.md)")
    t.set_defaults(fn=_train)
    e = sub.add_parser("eval", help="greedy solver accuracy of a model on the 500-problem held-out set "
                       "(and pass@1 with --temperature)")
    e.add_argument("--model", default="tiny",
                   help="HF model directory, a Hub id in the local cache, or 'tiny' (default)")
    e.add_argument("--config", default=None, help="config whose solver prompt to use (default: shipped)")
    e.add_argument("--size", type=_positive_int, default=500, help="how many held-out problems (1-500)")
    e.add_argument("--max-new-tokens", type=_positive_int, default=None, metavar="N",
                   help="longest answer read (default: the config's eval.max_new_tokens, 8 in the shipped one; "
                   "tiny-reasoner writes out its working and needs 32)")
    e.add_argument("--temperature", type=_nonnegative_float, default=None, metavar="T",
                   help="above 0, also pass@1: the mean accuracy of --samples answers a problem sampled at this "
                   "temperature (default: the config's eval.temperature, 0 in the shipped one: greedy only)")
    e.add_argument("--samples", type=_positive_int, default=None, metavar="K",
                   help="answers a problem for pass@1 (default: the config's eval.samples, 4)")
    e.add_argument("--seed", type=int, default=None,
                   help="torch seed of the sampled answers (default: the training evaluator's, so a run's "
                   "heldout_sampled_acc is reproduced)")
    e.add_argument("--batch-size", type=_positive_int, default=500,
                   help="prompts per generate call (default 500; lower it for a real model's memory)")
    e.add_argument("--dtype", default="float32", choices=["float32", "fp32", "bfloat16", "bf16", "float16", "fp16"],
                   help="dtype the model runs in (default float32)")
    e.add_argument("--attn-implementation", default=None, metavar="KERNEL",
                   help="transformers' attention kernel, e.g. sdpa or eager (default: transformers' choice)")
    e.set_defaults(fn=_eval)
    g = sub.add_parser("games", help="list registered games: roles, scripted twins, zero-sum, reward range, versions")
    g.add_argument("--module", action="append", metavar="MODULE_OR_FILE",
                   help="import a module or .py file that registers games first (repeatable)")
    g.set_defaults(fn=_games)
    tt = sub.add_parser(
        "tournament", help="rate checkpoints, models and scripted agents against each other",
        description="Play every scheduled pairing of the players (both seat orders, paired seeds), log each game to "
                    "OUT/results.jsonl (a rerun skips finished games), and write a Bradley-Terry leaderboard with 95% "
                    "bootstrap intervals, the cross-play matrix, heatmap.png, ratings.png and CSV/JSON files to OUT.")
    tt.add_argument("--config", help="YAML with any of the options below (command-line options win)")
    tt.add_argument("--game", help="game id, e.g. kuhn_poker-v0")
    tt.add_argument("--players", nargs="+", metavar="PLAYER",
                    help="checkpoint dirs (runs/x/checkpoints/step_N), run dirs (all their checkpoints), HF model dirs, "
                         "'tiny', or scripted:<twin>; globs are expanded; PATH:POLICY picks a checkpoint's policy; "
                         "PLAYER@ROLE (or @SEAT,SEAT) binds a player to a role or seats (paired scoring)")
    tt.add_argument("--policy", help="which policy of a checkpoint plays (needed when it holds several)")
    tt.add_argument("--sides", nargs=2, metavar="SEATS", help="the seats of each side, comma-separated, e.g. "
                    "--sides player_0 player_1 (default: the two seats, or the halves of the one role with several seats)")
    tt.add_argument("--fixed", action="append", metavar="SEAT_OR_ROLE=AGENT",
                    help="who plays a seat outside the sides (or, paired, outside the rated seats), e.g. --fixed "
                         "judge=scripted:oracle; a scripted twin, a model directory or one checkpoint[:POLICY] "
                         "(repeatable; naming a seat a player takes is an error)")
    tt.add_argument("--role", metavar="ROLE_OR_SEATS",
                    help="bind every player without its own @ROLE to this role (or comma-separated seats): each plays "
                         "only those seats, with --fixed agents in all others; implies --scoring paired")
    tt.add_argument("--scoring", choices=("competitive", "paired"),
                    help="competitive: a game's result is the sign of the two sides' return difference; paired: each "
                         "player plays the same seeds in the same seats with the same fixed partners, and a pairing's "
                         "result on a seed is the sign of the difference of the players' own returns (default: the "
                         "game's; paired when players are bound to a role; else competitive)")
    tt.add_argument("--schedule", choices=("round_robin", "gauntlet", "swiss"), help="default round_robin")
    tt.add_argument("--games-per-pairing", type=_positive_int, help="even; half the seeds, each in both seat orders (100)")
    tt.add_argument("--pool", nargs="+", metavar="NAME", help="gauntlet: the fixed pool the other players face "
                    "(pool players do not meet each other)")
    tt.add_argument("--swiss-rounds", type=_positive_int, help="swiss: rounds (default ceil(log2 players) + 1)")
    tt.add_argument("--anchor", metavar="NAME", help="player whose rating is 0 (default: the mean rating is 0)")
    tt.add_argument("--seed", type=int, help="seeds of the games (default 0)")
    tt.add_argument("--out", help="output directory (default tournaments/<game>); rerunning resumes it")
    tt.add_argument("--batch-games", type=_positive_int, help="games played at once (default 256)")
    tt.add_argument("--max-loaded", type=_positive_int, help="hold at most N model players in memory at once "
                    "(batches then hold the games of at most N; default: all loaded)")
    tt.add_argument("--max-new-tokens", type=_positive_int,
                    help="model players' message limit (default: each checkpoint's run's; a model with no run "
                         "config, tiny or an HF dir, takes the limit the checkpoints share, else this is required)")
    tt.add_argument("--temperature", type=float, help="model players' sampling temperature (default 1.0)")
    tt.add_argument("--system", action="append", metavar="ROLE=TEXT",
                    help="system message of a role for model players (default: each checkpoint's run's prompts; a "
                         "model with no run config takes the prompts the checkpoints share, else this is required)")
    tt.add_argument("--module", action="append", metavar="MODULE_OR_FILE",
                    help="import a module or .py file that registers games first (repeatable)")
    tt.add_argument("--kwarg", action="append", metavar="KEY=VALUE", help="a game argument (repeatable)")
    tt.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                    help="play the games on Ray workers: with no ADDRESS start a local cluster, 'auto' joins the one "
                         "`ray start` runs here, host:port another (needs: pip install 'cogym[ray]')")
    tt.add_argument("--workers", type=int, metavar="N", help="--ray: tournament workers, 1 CPU each (default 2)")
    tt.add_argument("--bootstrap", type=int, default=1000,
                    help="bootstrap resamples for the 95%% intervals (default %(default)s; 0: none)")
    tt.add_argument("--no-progress", action="store_true", help="no progress bar")
    tt.add_argument("--no-plots", action="store_true", help="no heatmap.png / ratings.png")
    tt.add_argument("--transcripts", type=_positive_int, metavar="K",
                    help="keep the messages of the first K games of each pairing in OUT/transcripts.jsonl "
                         "(cogym show OUT prints them; only games played now: finished ones are not replayed)")
    tt.set_defaults(fn=_tournament)
    sh = sub.add_parser("show", help="print the games a run or tournament kept (transcripts.jsonl): each move and "
                        "what its seat was shown",
                        description="Print the transcripts of a cogym train run (run.transcripts_every, "
                                    "run.transcripts_games) or of a cogym tournament (--transcripts K): per game its "
                                    "source, iteration or pairing, id and seed, then every move (seat, role, policy, "
                                    "what the seat was shown, its message) and each seat's reward.")
    sh.add_argument("path", metavar="RUN_OR_TOURNAMENT", help="a run or tournament directory, or a transcripts.jsonl")
    sh.add_argument("--iteration", type=int, metavar="N", help="only the games of training iteration N")
    sh.add_argument("--player", metavar="NAME", help="only the games NAME played (a tournament player or a policy id)")
    sh.add_argument("--seat", help="only the moves of this seat")
    sh.add_argument("--role", help="only the moves of this role")
    sh.add_argument("--last", type=_positive_int, metavar="K", help="only the last K games (after the filters)")
    sh.add_argument("--full", action="store_true",
                    help=f"whole messages and observations (default: at most {SHOWN_LINES} lines of a message and "
                         f"{SHOWN_PROMPT_CHARS} characters in {SHOWN_PROMPT_LINES} lines of what its seat was shown; "
                         f"both are stored cut at {MAX_CHARS} characters)")
    sh.add_argument("--json", action="store_true", help="the selected rows as JSON lines (the transcripts.jsonl format)")
    sh.add_argument("--width", type=_positive_int, metavar="COLUMNS", help="wrap to this width (default: the terminal's, "
                    "80 in a pipe)")
    sh.set_defaults(fn=_show)
    rp = sub.add_parser("reproduce", help="run a paper's claim in miniature over seeds and give the verdict",
                        description="Train every arm of a claim (a method and its baselines, equal budgets) once per "
                                    "seed, then print mean ± std and the per-seed values of its measures and the "
                                    "verdict; results.json and results.png go to --out. The claims and their "
                                    "measured tables: docs/claims.md.")
    rp.add_argument("claim", nargs="?", help="the claim (see --list)")
    rp.add_argument("overrides", nargs="*", help="dotted overrides applied to every arm, e.g. run.iterations=50")
    rp.add_argument("--list", action="store_true", help="list the claims with their measured CPU time")
    rp.add_argument("--seeds", type=_positive_int, default=3, metavar="N", help="seeds 0..N-1 per arm (default 3)")
    rp.add_argument("--out", metavar="DIR", help="where to write the runs and results (default: "
                    "runs/reproduce/<claim>-<time>)")
    rp.add_argument("--quiet", action="store_true", help="no line per run on stderr")
    rp.set_defaults(fn=_reproduce)
    # Listed here for `cogym --help`; main() hands everything after `build-tiny-model` to its own parser.
    sub.add_parser("build-tiny-model", help="rebuild the embedded tiny model or, with --verifier, tiny-verifier "
                   "or, with --reasoner, tiny-reasoner (see its --help)", add_help=False)
    return ap


class _NoAutoCPUNotice(logging.Filter):
    """Drops DeepSpeed's "Setting accelerator to CPU. If you have GPU ..." warning: transformers imports
    DeepSpeed in every run, also those that train with torch, and on a CPU machine the notice is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Setting accelerator to CPU" not in record.getMessage()


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("DeepSpeed").addFilter(_NoAutoCPUNotice())  # the logger DeepSpeed creates on import
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-file load/save bars would bury the training bar
    raw = sys.argv[1:] if argv is None else list(argv)
    if raw[:1] == ["build-tiny-model"]:  # its own parser reads everything after it, options and --help included
        from cogym.runners.research.build_tiny_model import main as build_main

        return build_main(raw[1:])
    ap = parser()
    args, extra = ap.parse_known_args(argv)
    if extra:
        # `cogym train cfg.yaml --run-dir d a=b`: overrides after an option are still overrides.
        if args.command in ("train", "reproduce") and all("=" in x and not x.startswith("-") for x in extra):
            args.overrides.extend(extra)
        else:
            ap.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "train" and args.ray is not None:
        # `cogym train --ray cfg.yaml` / `--ray key=value`: that was a positional, not an address.
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
    if args.command == "train" and args.config and "=" in args.config:
        # `cogym train key=value`: the first positional is an override, not a file.
        args.overrides.insert(0, args.config)
        args.config = None
    try:
        return args.fn(args)
    except _user_errors() as exc:
        print(f"cogym {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cogym {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # a pipe of our own (a worker, a socket) broke: a real failure
        # The reader of our output went away (`cogym games | head`): stop quietly, as other CLI tools do,
        # and point stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _stdout_closed() -> bool:
    """Whether the reader of stdout has gone away: writing to it (one newline, harmless when it has
    not) breaks the pipe again."""
    try:
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    return False


if __name__ == "__main__":
    raise SystemExit(main())
