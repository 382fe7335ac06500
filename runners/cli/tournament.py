"""``cogym tournament``: rate checkpoints, models and scripted agents against each other."""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

import yaml

from cogym.core.errors import ConfigError
from cogym.runners.cli.args import positive_int
from cogym.runners.config.modules import import_game_modules
from cogym.runners.config.schema import RayConfig
from cogym.runners.tournament.players import resolve_players, split_binding
from cogym.runners.tournament.leaderboard import print_leaderboard, print_matrix, report, results_title, settings_notes
from cogym.runners.tournament.run import run_tournament
from cogym.runners.tournament.spec import TournamentSpec

DESCRIPTION = ("Play every scheduled pairing of the players (both seat orders, paired seeds), log each game to "
               "OUT/results.jsonl (a rerun skips finished games), and write a Bradley-Terry leaderboard with 95% "
               "bootstrap intervals, the cross-play matrix, heatmap.png, ratings.png and CSV/JSON files to OUT.")


def add_arguments(tt: argparse.ArgumentParser) -> None:
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
    tt.add_argument("--games-per-pairing", type=positive_int, help="even; half the seeds, each in both seat orders (100)")
    tt.add_argument("--pool", nargs="+", metavar="NAME", help="gauntlet: the fixed pool the other players face "
                    "(pool players do not meet each other)")
    tt.add_argument("--swiss-rounds", type=positive_int, help="swiss: rounds (default ceil(log2 players) + 1)")
    tt.add_argument("--anchor", metavar="NAME", help="player whose rating is 0 (default: the mean rating is 0)")
    tt.add_argument("--seed", type=int, help="seeds of the games (default 0)")
    tt.add_argument("--out", help="output directory (default tournaments/<game>); rerunning resumes it")
    tt.add_argument("--batch-games", type=positive_int, help="games played at once (default 256)")
    tt.add_argument("--max-loaded", type=positive_int, help="hold at most N model players in memory at once "
                    "(batches then hold the games of at most N; default: all loaded)")
    tt.add_argument("--max-new-tokens", type=positive_int,
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
    tt.add_argument("--transcripts", type=positive_int, metavar="K",
                    help="keep the messages of the first K games of each pairing in OUT/transcripts.jsonl "
                         "(cogym show OUT prints them; only games played now: finished ones are not replayed)")


def key_values(items: list[str] | None, what: str) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"{what} {item!r} must look like key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value) if what == "--kwarg" else value
    return out


def run(args: argparse.Namespace) -> int:
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
    prompts = {**tree.get("prompts", {}), **key_values(args.system, "--system")}  # over each checkpoint's own
    spec = TournamentSpec(
        game=game, players=players, game_kwargs={**tree.get("game_kwargs", {}), **key_values(args.kwarg, "--kwarg")},
        sides=[s.split(",") for s in args.sides] if args.sides else tree.get("sides"),
        fixed={**tree.get("fixed", {}), **key_values(args.fixed, "--fixed")},
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
