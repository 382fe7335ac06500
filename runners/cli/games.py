"""``cogym games``: list the registered games."""

from __future__ import annotations

import argparse

from cogym.envs import make, registered, scripted_strategies
from cogym.runners.config.modules import import_game_modules
from cogym.runners.display import format_games, terminal_width

DESCRIPTION = "List registered games: roles, scripted twins, zero-sum, reward range, versions."


def add_arguments(g: argparse.ArgumentParser) -> None:
    g.add_argument("--module", action="append", metavar="MODULE_OR_FILE",
                   help="import a module or .py file that registers games first (repeatable)")


def run(args: argparse.Namespace) -> int:
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
