"""``cogym games``: list the registered games."""

from __future__ import annotations

import argparse

from cogym.core.sandbox import isolation
from cogym.envs import make, registered, scripted_strategies
from cogym.envs.errors import GameError
from cogym.envs.openspiel import catalog, describe
from cogym.envs.reasoning_gym import catalog as rg_catalog
from cogym.envs.reasoning_gym import EXCLUDED as RG_EXCLUDED
from cogym.envs.textarena import ALLOWED, REFUSED
from cogym.runners.config.modules import import_game_modules
from cogym.runners.display import fill, format_catalog, format_games, terminal_width

DESCRIPTION = ("List registered games: roles, scripted twins, zero-sum, reward range, versions. "
               "--source openspiel / textarena lists the OpenSpiel / TextArena games cogym plays, reasoning_gym the "
               "reasoning-gym tasks proposer_solver-v0 poses (their extras).")
SOURCES = ("openspiel", "textarena", "reasoning_gym")


def add_arguments(g: argparse.ArgumentParser) -> None:
    g.add_argument("--module", action="append", metavar="MODULE_OR_FILE",
                   help="import a module or .py file that registers games first (repeatable)")
    g.add_argument("--source", choices=SOURCES, default=None,
                   help="list a catalog from another library instead (openspiel:<game>, textarena:<id> ids; reasoning_gym: "
                        "the tasks of proposer_solver-v0's source=reasoning_gym)")


def run(args: argparse.Namespace) -> int:
    if args.source == "openspiel":
        return _openspiel()
    if args.source == "textarena":
        return _textarena()
    if args.source == "reasoning_gym":
        return _reasoning_gym()
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
                       "make(id, granularity='token') or game.granularity: token in a config. More games: "
                       "cogym games --source openspiel, cogym games --source textarena (with their extras)."))
    return 0


def _openspiel() -> int:
    try:
        names = catalog()
    except GameError as exc:
        raise SystemExit(f"cogym games: {exc}") from None
    rows = [describe(n) for n in names]
    print(format_catalog("openspiel", rows, terminal_width(),
                         note="Play one as game.id: openspiel:<game> (OpenSpiel parameters: game.kwargs.params, or "
                              "openspiel:<game>(k=v) in the id). Seats player_0, player_1, ...; roles first, second, "
                              "...; scripted twins random and first. Refused games say why at make."))
    return 0


def _textarena() -> int:
    width = terminal_width()
    groups: dict[str, list[str]] = {}
    for env_id in ALLOWED:
        base, _, variant = env_id.partition("-v0")
        groups.setdefault(base, []).append(variant.lstrip("-") or "v0")
    out = fill(f"textarena games ({len(ALLOWED)} ids, {len(groups)} games; play one as textarena:<id>, two seats; "
               "textarena 0.7.4, checked offline):", width)
    for base, variants in groups.items():
        out += fill(f"{base}-v0" + (f"  (variants: {', '.join(v for v in variants if v != 'v0')})" if len(variants) > 1 else ""),
                    width, "  ")
    out += ["", *fill("Seats player_0 and player_1, roles first and second; scripted twins random and first (from the "
                      f"bracketed moves the game lists). {len(REFUSED)} other ids are refused at make with the reason "
                      "(one-player, more than two players, nltk downloads, an API key, Python 3.12 code, missing files).",
                      width)]
    print("\n".join(out))
    return 0


def _reasoning_gym() -> int:
    try:
        tasks = rg_catalog()
    except GameError as exc:
        raise SystemExit(f"cogym games: {exc}") from None
    width = terminal_width()
    graded = [t for t in tasks.values() if t.curriculum]
    out = fill(f"reasoning-gym tasks ({len(tasks)}, {len(graded)} with curriculum levels; reasoning-gym 0.1.25), posed "
               "by proposer_solver-v0 with source=reasoning_gym, tasks=[...], levels=[...]:", width)
    out += fill(", ".join(t.name + (f" ({_levels(t.usable)})" if t.curriculum else "") for t in tasks.values()), width, "  ")
    out += ["", *fill(f"{len(RG_EXCLUDED)} datasets are excluded ({', '.join(sorted(RG_EXCLUDED))}): a scorer that pays "
                      "an unrelated answer, no reference answer, or items that do not generate; make(...) names the "
                      "reason. docs/games.md, reasoning-gym tasks.", width)]
    out += ["", *fill(f"Answers are scored in a sandbox: {isolation().description}. docs/security.md says what "
                      "each kind guarantees.", width)]
    print("\n".join(out))
    return 0


def _levels(usable: tuple[int, ...]) -> str:
    """``levels 0-3`` for a contiguous run, else ``levels 1,3``."""
    if len(usable) > 2 and list(usable) == list(range(usable[0], usable[-1] + 1)):
        return f"levels {usable[0]}-{usable[-1]}"
    return "levels " + ",".join(map(str, usable))
