"""``cogym tournament``: rate checkpoints, models and scripted agents against each other."""

from __future__ import annotations

import argparse
import dataclasses
import glob
import re
from pathlib import Path
from typing import Any

from cogym.core.text import brief
from cogym.runners.cli.args import positive_int, UsageError
from cogym.runners.config.modules import import_game_modules
from cogym.runners.config.load import build_section, load_tree, set_dotted
from cogym.runners.config.schema import SCHEDULES, SCORINGS, TournamentConfig, TournamentSection
from cogym.runners.config.safe_yaml import parse_yaml
from cogym.runners.config.validate import check_tournament_layout, validate_tournament
from cogym.runners.tournament.players import ENDPOINT_PREFIX, resolve_players, split_binding
from cogym.runners.results.leaderboard import print_leaderboard, print_matrix, report, results_title, settings_notes
from cogym.runners.tournament.run import run_tournament
from cogym.runners.tournament.spec import TournamentSpec

OVERRIDES_AFTER_OPTIONS = True
DESCRIPTION = ("Play every scheduled pairing of the players (both seat orders, paired seeds), log each game to "
               "OUT/results.jsonl (a rerun skips finished games), and write a Bradley-Terry leaderboard with 95% "
               "bootstrap intervals, the cross-play matrix, heatmap.png, ratings.png and CSV/JSON files to OUT.")


def add_arguments(tt: argparse.ArgumentParser) -> None:
    tt.add_argument("overrides", nargs="*", help="dotted overrides of the --config keys, e.g. sampling.temperature=0.5 "
                    "(cogym config --command tournament lists them)")
    tt.add_argument("--config", help="YAML with the sections tournament, game, sampling, prompts and ray "
                    "(cogym config --command tournament lists their keys); a flag given wins")
    tt.add_argument("--game", help="game id, e.g. kuhn_poker-v0")
    tt.add_argument("--players", nargs="+", metavar="PLAYER",
                    help="checkpoint dirs (runs/x/checkpoints/step_N), run dirs (all their checkpoints), HF model dirs, "
                         "'tiny', scripted:<twin>, or a chat endpoint, endpoint:BASE_URL?model=M&api_key_env=VAR&name=N "
                         "(quote it); globs are expanded; PATH:POLICY picks a checkpoint's policy; "
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
    tt.add_argument("--scoring", choices=SCORINGS,
                    help="competitive: a game's result is the sign of the two sides' return difference; paired: each "
                         "player plays the same seeds in the same seats with the same fixed partners, and a pairing's "
                         "result on a seed is the sign of the difference of the players' own returns (default: the "
                         "game's; paired when players are bound to a role; else competitive)")
    tt.add_argument("--schedule", choices=SCHEDULES, help="default round_robin")
    tt.add_argument("--games-per-pairing", type=positive_int, help="even; half the seeds, each in both seat orders (100)")
    tt.add_argument("--pool", nargs="+", metavar="NAME", help="gauntlet: the fixed pool the other players face "
                    "(pool players do not meet each other)")
    tt.add_argument("--swiss-rounds", type=positive_int, help="swiss: rounds (default ceil(log2 players) + 1)")
    tt.add_argument("--anchor", metavar="NAME", help="player whose rating is 0 (default: the mean rating is 0)")
    tt.add_argument("--seed", type=int, help="seeds of the games (default 0)")
    tt.add_argument("--out", help="output directory (default tournaments/<game>); rerunning resumes it; a directory "
                    "that holds files cogym tournament did not write is refused unless --overwrite")
    tt.add_argument("--overwrite", action="store_true",
                    help="use an --out that holds other files, or start an earlier tournament's over: cogym replaces "
                         "only the files it writes itself (results.jsonl, leaderboard.*, ...) and deletes nothing else")
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
            raise UsageError(f"{what} {brief(item)} must look like key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = parse_yaml(value, f"{what} {brief(item)}: its value") if what == "--kwarg" else value
    return out


OVERRIDE = re.compile(r"[A-Za-z_][\w.]*=.*")
# A tournament: key's flag bears its name (--games-per-pairing sets tournament.games_per_pairing), read from the
# section's declaration; these keys' flags say it another way (--sides SEATS,SEATS; --fixed added entry by entry;
# --ray sets the backend).
OTHER_FLAGS = {"sides", "fixed", "backend"}


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """dotted key -> value of each flag given (None: not given)."""
    given = vars(args)
    flags = {f"tournament.{f.name}": given[f.name] for f in dataclasses.fields(TournamentSection)
             if f.name in given and f.name not in OTHER_FLAGS}
    return {**flags, "game.id": args.game,
            "tournament.sides": [side.split(",") for side in args.sides] if args.sides else None,
            "sampling.max_new_tokens": args.max_new_tokens, "sampling.temperature": args.temperature,
            "tournament.backend": None if args.ray is None else "ray", "ray.address": args.ray,
            "ray.num_rollout_workers": args.workers}


def _merge(tree: dict, dotted: str, extra: Any) -> None:
    """Add a repeatable flag's entries to the mapping (or list) at ``dotted``."""
    section, key = dotted.split(".", 1)
    node = tree.setdefault(section, {})
    if isinstance(node, dict):
        old = node.get(key)
        if isinstance(extra, list):
            node[key] = [*(old if isinstance(old, list) else []), *extra]
        else:
            node[key] = {**(old if isinstance(old, dict) else {}), **extra}


def tournament_config(args: argparse.Namespace) -> TournamentConfig:
    """The --config YAML, then the dotted overrides, then the flags (a flag wins), read by the config loader."""
    # `--players a b key=value`: argparse gives the override to --players; it is an override
    overrides = [*args.overrides, *(p for p in args.players or [] if OVERRIDE.fullmatch(p) and not Path(p).exists())]
    args.players = [p for p in args.players or [] if p not in overrides] or None
    tree = load_tree(args.config, overrides, what="--config")
    check_tournament_layout(tree)
    for key, value in _flags(args).items():
        if value is not None:
            set_dotted(tree, key, value)
    if args.kwarg:
        _merge(tree, "game.kwargs", key_values(args.kwarg, "--kwarg"))
    if args.fixed:
        _merge(tree, "tournament.fixed", key_values(args.fixed, "--fixed"))
    if args.module:
        _merge(tree, "game.modules", args.module)
    for role, text in key_values(args.system, "--system").items():
        _merge(tree, f"prompts.{role}", {"system": text})
    tc = build_section(TournamentConfig, tree, "")
    if tc.ray.address in ("", "local"):
        tc.ray.address = None  # Ray's own word for a new local cluster: cogym's null
    return tc


def run(args: argparse.Namespace) -> int:
    tc = tournament_config(args)
    ray_backend = tc.tournament.backend == "ray"
    if ray_backend and args.workers is not None and args.workers < 1:  # named as given, not as ray.num_rollout_workers
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    validate_tournament(tc)
    if not ray_backend and args.workers is not None:
        raise UsageError("--workers sets the Ray workers of --ray; add --ray (or drop --workers)")
    t, game = tc.tournament, tc.game
    ray = tc.ray if t.backend == "ray" else None
    specs = []
    for p in t.players:  # globs expanded; a binding (@ROLE) kept on each match
        if isinstance(p, dict) or p.startswith(ENDPOINT_PREFIX):  # an endpoint player: no files to match
            specs.append(p)
            continue
        head, bind = split_binding(p) if not glob.glob(p) else (p, None)
        suffix = f"@{','.join(bind)}" if bind else ""
        specs += [m + suffix for m in sorted(glob.glob(head))] or [p]
    players = resolve_players(specs, t.policy, role=t.role)
    import_game_modules(game.modules)
    spec = TournamentSpec.of(tc, players)
    out = Path(t.out or f"tournaments/{game.id}")
    rows = run_tournament(spec, out, progress=not args.no_progress, ray=ray, overwrite=args.overwrite)
    board = report(rows, [p.name for p in players], out, anchor=spec.anchor, n_boot=args.bootstrap, seed=spec.seed,
                   plots=not args.no_plots)
    print_leaderboard(board, title=results_title(game.id, rows, out), notes=settings_notes(out))
    print_matrix(rows, board)
    return 0
