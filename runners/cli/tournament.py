"""``cogym tournament``: rate checkpoints, models and scripted agents against each other."""

from __future__ import annotations

import argparse
import glob
import re
from pathlib import Path

import yaml

from cogym.core.errors import ConfigError
from cogym.runners.cli.args import positive_int
from cogym.runners.config.modules import import_game_modules
from cogym.runners.config.load import build_section, load_tree
from cogym.runners.config.schema import RayConfig, TournamentConfig
from cogym.runners.tournament.players import resolve_players, split_binding
from cogym.runners.tournament.leaderboard import print_leaderboard, print_matrix, report, results_title, settings_notes
from cogym.runners.tournament.run import run_tournament
from cogym.runners.tournament.spec import TournamentSpec

OVERRIDES_AFTER_OPTIONS = True
DESCRIPTION = ("Play every scheduled pairing of the players (both seat orders, paired seeds), log each game to "
               "OUT/results.jsonl (a rerun skips finished games), and write a Bradley-Terry leaderboard with 95% "
               "bootstrap intervals, the cross-play matrix, heatmap.png, ratings.png and CSV/JSON files to OUT.")


def add_arguments(tt: argparse.ArgumentParser) -> None:
    tt.add_argument("overrides", nargs="*", help="dotted overrides of the --config keys, e.g. sampling.temperature=0.5 "
                    "(cogym config --command tournament lists them)")
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


OVERRIDE = re.compile(r"[A-Za-z_][\w.]*=.*")
# Flat keys of the first tournament YAML format, now in the shared sampling section.
MOVED = {"max_new_tokens": "sampling.max_new_tokens", "temperature": "sampling.temperature"}


def tournament_config(args: argparse.Namespace) -> TournamentConfig:
    """The --config YAML, then the dotted overrides, then the flags (a flag wins), read by the config loader."""
    # `--players a b key=value`: argparse gives the override to --players; it is an override
    overrides = [*args.overrides, *(p for p in args.players or [] if OVERRIDE.fullmatch(p) and not Path(p).exists())]
    args.players = [p for p in args.players or [] if p not in overrides] or None
    tree = load_tree(args.config, overrides, what="--config")
    for old, new in MOVED.items():
        if old in tree:
            raise ConfigError(f"{old}: write {new} (the sampling section is shared with cogym train's configs)")
    flags = {"game": args.game, "policy": args.policy, "role": args.role, "schedule": args.schedule,
             "scoring": args.scoring, "games_per_pairing": args.games_per_pairing, "pool": args.pool,
             "swiss_rounds": args.swiss_rounds, "anchor": args.anchor, "seed": args.seed, "batch_games": args.batch_games,
             "max_loaded": args.max_loaded, "out": args.out, "transcripts": args.transcripts,
             "sides": [side.split(",") for side in args.sides] if args.sides else None}
    tree.update({key: value for key, value in flags.items() if value is not None})
    sampling = tree.setdefault("sampling", {})
    if isinstance(sampling, dict):
        if args.max_new_tokens is not None:
            sampling["max_new_tokens"] = args.max_new_tokens
        if args.temperature is not None:
            sampling["temperature"] = args.temperature
    for key, flag, what in (("game_kwargs", args.kwarg, "--kwarg"), ("fixed", args.fixed, "--fixed"),
                            ("prompts", args.system, "--system")):
        if flag:
            tree[key] = {**(tree.get(key) or {}), **key_values(flag, what)}
    if args.module:
        tree["modules"] = [*(tree.get("modules") or []), *args.module]
    if args.players:
        tree["players"] = args.players
    return build_section(TournamentConfig, tree, "")


def run(args: argparse.Namespace) -> int:
    tc = tournament_config(args)
    if not tc.game:
        raise ConfigError("cogym tournament needs --game (e.g. --game kuhn_poker-v0) or game: in --config")
    specs = []
    for p in tc.players:  # globs expanded; a binding (@ROLE) kept on each match
        head, bind = split_binding(p) if not glob.glob(p) else (p, None)
        suffix = f"@{','.join(bind)}" if bind else ""
        specs += [m + suffix for m in sorted(glob.glob(head))] or [p]
    players = resolve_players(specs, tc.policy, role=tc.role)
    import_game_modules(tc.modules)
    spec = TournamentSpec(
        game=tc.game, players=players, game_kwargs=tc.game_kwargs, sides=tc.sides, fixed=tc.fixed,
        schedule=tc.schedule, games_per_pairing=tc.games_per_pairing, pool=tc.pool, swiss_rounds=tc.swiss_rounds,
        anchor=tc.anchor, seed=tc.seed, batch_games=tc.batch_games, max_loaded=tc.max_loaded,
        max_new_tokens=tc.sampling.max_new_tokens, temperature=tc.sampling.temperature, prompts=tc.prompts,
        scoring=tc.scoring, modules=tc.modules, transcripts=tc.transcripts)
    out = Path(tc.out or f"tournaments/{tc.game}")
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
    print_leaderboard(board, title=results_title(tc.game, rows, out), notes=settings_notes(out))
    print_matrix(rows, board)
    return 0
