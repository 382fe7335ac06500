"""A tournament's settings checked before the first game: those that need no game (:func:`check_spec`,
:func:`check_players`), then, against its game, the sides or rated seats, the fixed agents, each
player's roles, prompts and message limit (:func:`settle`)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Sequence

from cogym.agents.endpoint import DEFAULT_MAX_TOKENS
from cogym.core.errors import ConfigError
from cogym.envs import scripted_strategies
from cogym.runners.config.schema import SCHEDULES, SCORINGS
from cogym.runners.rollout.agents import twin_name
from cogym.runners.rollout.seating import key_of, seats_of
from cogym.runners.tournament.players import default_limit, fixed_player, Player
from cogym.runners.tournament.results import count
from cogym.runners.tournament.spec import TournamentSpec


def check_spec(spec: TournamentSpec) -> None:
    """The settings that need no game: a known schedule, an even ``games_per_pairing``, and a
    ``max_loaded`` that leaves room for a game's two players."""
    if spec.schedule not in SCHEDULES:
        raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {spec.schedule!r}")
    if spec.games_per_pairing < 2 or spec.games_per_pairing % 2:
        raise ConfigError(f"games_per_pairing must be even and >= 2 (each seed is played in both seat orders, or, "
                          f"paired, once by each player), got {spec.games_per_pairing}")
    if spec.max_loaded and spec.max_loaded < 2:
        raise ConfigError(f"max_loaded must be 0 (no limit) or >= 2 (the two players of a game), got {spec.max_loaded}")


def default_sides(env) -> list[list[str]]:
    """Two seats: one each. Otherwise the one role with several seats, split in halves."""
    seats = list(env.possible_agents)
    if len(seats) == 2:
        return [[seats[0]], [seats[1]]]
    by_role: dict[str, list[str]] = {}
    for s in seats:
        by_role.setdefault(env.role_of(s), []).append(s)
    multi = [r for r, ss in by_role.items() if len(ss) >= 2]
    if len(multi) != 1:
        raise ConfigError(f"{env.spec.id}: cannot guess the two sides (seats: {', '.join(seats)}); give --sides, "
                          "e.g. --sides player_0 player_1")
    ss = by_role[multi[0]]
    return [ss[: len(ss) // 2], ss[len(ss) // 2: 2 * (len(ss) // 2)]]


def _scoring(spec: TournamentSpec, probe) -> str:
    """The scoring rules: ``spec.scoring``, else paired when a player is bound to seats, else the
    game's ``tournament_scoring``, else competitive."""
    if spec.scoring is not None:
        if spec.scoring not in SCORINGS:
            raise ConfigError(f"scoring must be one of {', '.join(SCORINGS)}, got {spec.scoring!r}")
        return spec.scoring
    if any(p.bind is not None for p in spec.players):
        return "paired"
    declared = getattr(getattr(probe, "unwrapped", probe), "tournament_scoring", None)
    if declared is not None:
        if declared not in SCORINGS:
            raise ConfigError(f"{spec.game} declares tournament_scoring = {declared!r}, not one of {', '.join(SCORINGS)} "
                              "(fix the game, or give --scoring)")
        return declared
    return "competitive"


def sides_and_fixed(spec: TournamentSpec, probe) -> tuple[list[list[str]], dict[str, str]]:
    """Competitive scoring: the two sides' seats; paired: one list, the rated seats. And the fixed
    agent of every other seat. Checked against the game: bound roles and seats exist, every seat is
    played, and every ``fixed`` entry names seats or a role and is used (never one a player takes)."""
    seats = list(probe.possible_agents)
    scoring = spec.scoring or _scoring(spec, probe)
    by_key = {key: seats_of(probe, [key], f"--fixed {key}={who}") for key, who in spec.fixed.items()}
    if scoring == "competitive":
        bound = [p for p in spec.players if p.bind is not None]
        if bound:
            raise ConfigError(f"player {bound[0].name!r} is bound to {','.join(bound[0].bind)}, but competitive scoring "
                              "seats each player on a whole side; rate players bound to a role with --scoring paired "
                              "(every other seat fixed with --fixed)")
        sides = spec.sides or default_sides(probe)
        if len(sides) != 2 or not all(sides) or set(sides[0]) & set(sides[1]) or not set(sides[0] + sides[1]) <= set(seats):
            raise ConfigError(f"sides must be two disjoint, non-empty lists of seats of {spec.game} (seats: {', '.join(seats)})")
        played = sides[0] + sides[1]
    else:
        if spec.sides:
            raise ConfigError("--sides is for competitive scoring; with paired scoring the players play the seats they "
                              "are bound to (--role ROLE or PLAYER@ROLE) and --fixed gives every other seat")
        binds: dict[tuple[str, ...], list[str]] = {}
        for p in spec.players:
            if p.bind is not None:
                where = f"player {p.name!r} (bound to {','.join(p.bind)})"
                binds.setdefault(tuple(seats_of(probe, p.bind, where)), []).append(p.name)
        if len(binds) > 1:
            shown = "; ".join(f"{', '.join(names)} in {', '.join(s)}" for s, names in binds.items())
            raise ConfigError(f"paired scoring compares players in the same seats, but they are bound to different ones "
                              f"({shown}); rate each role in a tournament of its own (each with its own --out)")
        if binds:
            rated = list(next(iter(binds)))
        else:  # no binding: the players take every seat --fixed leaves
            taken = {s for ss in by_key.values() for s in ss}
            rated = [s for s in seats if s not in taken]
            if not rated:
                raise ConfigError(f"--fixed gives every seat of {spec.game} a fixed agent, so no seat is left for the "
                                  "players; drop the --fixed of the role to rate")
        if len(rated) == len(seats) > 1 and probe.spec.zero_sum:
            raise ConfigError(f"paired scoring with the players in every seat of {spec.game}, a zero-sum game: their "
                              "returns always sum to 0, so every comparison would be a draw; bind the players to a role "
                              "(--role ROLE) and fix the others (--fixed ROLE=AGENT), or use --scoring competitive")
        sides, played = [rated], rated
    fixed: dict[str, str] = {}
    used: set[str] = set()
    for seat in seats:
        if seat in played:
            continue
        key = key_of(probe, seat, spec.fixed)  # the seat's own --fixed, else its role's
        if key is None:
            where = "is on no side" if scoring == "competitive" else "is not a rated seat"
            raise ConfigError(f"seat {seat!r} (role {probe.role_of(seat)!r}) {where} and has no fixed agent; "
                              f"give --fixed {probe.role_of(seat)}=scripted:<twin> (or a model directory)")
        fixed[seat] = spec.fixed[key]
        used.add(key)
    for key in spec.fixed:
        if key in used:
            continue
        hit = [s for s in by_key[key] if s in played]
        what = f"--fixed {key}={spec.fixed[key]}"
        if not hit:  # a role whose every seat has a seat-specific --fixed
            raise ConfigError(f"{what} is never used: each of its seats has a --fixed of its own; drop one of them")
        if scoring == "competitive":
            raise ConfigError(f"{what}: {', '.join(hit)} {'is' if len(hit) == 1 else 'are'} on a side (sides: "
                              f"{','.join(sides[0])} vs {','.join(sides[1])}), so the players play it, not the fixed "
                              f"agent. To rate the other seats with {key} fixed: --scoring paired and bind the players "
                              "to them (--role ROLE or PLAYER@ROLE); or drop the --fixed")
        raise ConfigError(f"{what}: {', '.join(hit)} {'is' if len(hit) == 1 else 'are'} rated (the players play "
                          f"{','.join(played)}), so the fixed agent would never sit there; drop the --fixed, or bind the "
                          "players to other seats")
    return sides, fixed


def _played_roles(probe, sides: list[list[str]]) -> list[str]:
    """The roles the players play, in the game's order."""
    seats = {s for side in sides for s in side}
    return [r for r in probe.spec.roles if any(probe.role_of(s) == r for s in seats)]


def _settle_player(p: Player, roles: Sequence[str], spec: TournamentSpec, checkpoints: Sequence[Player],
                   where: str) -> Player:
    """``p`` with a system prompt for each role it plays and a message limit, and where each came from:
    ``--system`` / ``--max-new-tokens``, else its run's config, else (a model with no run config) the
    value the tournament's checkpoints' runs share for those roles (the role's prompt, the limit of
    the policy the run seated in the role); else a ConfigError naming the option to give."""
    if p.twin is not None:
        return p
    if p.endpoint is not None:
        return _settle_endpoint(p, roles, spec, checkpoints, where)
    prompts, sources = dict(p.prompts or {}), {}

    def shared(values: dict[str, object]) -> tuple[bool, str]:
        distinct: dict = {}
        for name, v in values.items():
            distinct.setdefault(json.dumps(v), []).append(name)
        if len(distinct) == 1:
            return True, ""
        if not distinct:
            return False, ""
        return False, " (the tournament's checkpoints differ: " + "; ".join(
            f"{v} in {count(names)}" for v, names in distinct.items()) + ")"

    for role in roles:
        if role in spec.prompts:
            prompts[role], sources[role] = spec.prompts[role], "--system"
        elif p.run_config:
            prompts[role], sources[role] = (p.prompts or {}).get(role, ""), "run config"
        else:
            values = {c.name: c.prompts[role] for c in checkpoints if role in (c.prompts or {})}
            ok, why = shared(values)
            if not ok:
                raise ConfigError(f"{where} has no run config (tiny or an HF model directory), so nothing says which "
                                  f"system prompt it plays role {role!r} with{why}: give --system {role}=TEXT "
                                  f"(--system {role}= for none)")
            prompts[role], sources[role] = next(iter(values.values())), "checkpoints"
    if spec.max_new_tokens:
        limit, limit_source = spec.max_new_tokens, "--max-new-tokens"
    elif p.run_config:
        limit, limit_source = p.max_new_tokens or default_limit(), "run config"
    else:
        values = {f"{c.name} ({role})": c.role_limits[role] for c in checkpoints for role in roles
                  if role in (c.role_limits or {})}
        ok, why = shared(values)
        if not ok:
            raise ConfigError(f"{where} has no run config (tiny or an HF model directory), so nothing says its message "
                              f"limit{why}: give --max-new-tokens N")
        limit, limit_source = next(iter(values.values())), "checkpoints"
    return replace(p, prompts=prompts, max_new_tokens=limit,
                   sources={"prompts": sources, "max_new_tokens": limit_source})


def _settle_endpoint(p: Player, roles: Sequence[str], spec: TournamentSpec, checkpoints: Sequence[Player],
                     where: str) -> Player:
    """An endpoint player: its API key variable set, and per role the ``--system`` prompt, else the one the
    tournament's checkpoints share, else none; its reply limit is its own ``max_tokens``, else
    ``--max-new-tokens``, else :data:`~cogym.agents.endpoint.DEFAULT_MAX_TOKENS`."""
    p.endpoint.require_key(where)
    prompts, sources = {}, {}
    for role in roles:
        values = {json.dumps(c.prompts[role]) for c in checkpoints if role in (c.prompts or {})}
        if role in spec.prompts:
            prompts[role], sources[role] = spec.prompts[role], "--system"
        elif len(values) == 1:
            prompts[role], sources[role] = json.loads(values.pop()), "checkpoints"
        else:
            prompts[role], sources[role] = "", "none"
    if p.endpoint.max_tokens:
        limit, limit_source = p.endpoint.max_tokens, "endpoint.max_tokens"
    elif spec.max_new_tokens:
        limit, limit_source = spec.max_new_tokens, "--max-new-tokens"
    else:
        limit, limit_source = DEFAULT_MAX_TOKENS, "endpoint default"
    return replace(p, prompts=prompts, max_new_tokens=limit, sources={"prompts": sources, "max_new_tokens": limit_source})


def settle(spec: TournamentSpec, probe) -> tuple[TournamentSpec, list[list[str]], dict[str, str]]:
    """Check everything before the first game, and fill in what the games need. Returns the spec
    with its scoring, its fixed model agents and each model player's prompts and limit resolved;
    the sides (paired scoring: one list, the rated seats); and each other seat's fixed agent.

    Refused here: an unknown scoring, a bound role or seat the game does not have, players bound to
    different seats, a ``fixed`` entry that names no seat or role or that a player's seat would
    override, a seat with no one to play it, a scripted twin missing for a role its player would
    play, a fixed model that is not one model, a ``--system`` role the game does not have, and a
    model with no run config for which nothing gives a prompt or limit."""
    spec = replace(spec, scoring=_scoring(spec, probe))
    sides, fixed = sides_and_fixed(spec, probe)
    roles = list(probe.spec.roles)
    stray = [r for r in spec.prompts if r not in roles]
    if stray:
        raise ConfigError(f"--system {stray[0]}=...: {spec.game} has no role {stray[0]!r} (roles: {', '.join(roles)})")
    played = _played_roles(probe, sides)
    twins = scripted_strategies(spec.game)
    for p in spec.players:
        for role in played if p.twin is not None else ():
            if p.twin not in twins.get(role, {}):
                seats = [s for side in sides for s in side if probe.role_of(s) == role]
                raise ConfigError(f"player {p.name!r}: {spec.game} has no scripted twin {p.twin!r} for role {role!r}, "
                                  f"which the player would play (seats {', '.join(seats)}); twins of {role}: "
                                  f"{', '.join(twins.get(role, {})) or 'none'}. Pick one of them, or bind the player "
                                  "to a role its twin plays (PLAYER@ROLE or --role ROLE)")
    fixed_roles: dict[str, list[str]] = {}
    for seat, who in fixed.items():
        rs = fixed_roles.setdefault(who, [])
        if probe.role_of(seat) not in rs:
            rs.append(probe.role_of(seat))
    models: dict[str, Player] = {}
    for who, rs in fixed_roles.items():
        key = next(k for k, v in spec.fixed.items() if v == who)
        where = f"--fixed {key}={who} (seats {', '.join(s for s, w in fixed.items() if w == who)})"
        if twin_name(who) is not None:
            missing = [r for r in rs if twin_name(who) not in twins.get(r, {})]
            if missing:
                raise ConfigError(f"{where}: {spec.game} has no scripted twin {twin_name(who)!r} for role {missing[0]!r}; "
                                  f"twins of {missing[0]}: {', '.join(twins.get(missing[0], {})) or 'none'}")
        else:
            models[who] = fixed_player(who, where)
    checkpoints = [p for p in [*spec.players, *models.values()] if p.run_config]
    players = [_settle_player(p, played, spec, checkpoints, f"player {p.name!r}") for p in spec.players]
    models = {who: _settle_player(p, fixed_roles[who], spec, checkpoints, f"--fixed agent {who!r}")
              for who, p in models.items()}
    return replace(spec, players=players, fixed_players=models), sides, fixed


def check_players(spec: TournamentSpec) -> None:
    """The players ``anchor`` and a gauntlet's ``pool`` name are players of the tournament."""
    names = [p.name for p in spec.players]
    if spec.anchor is not None and spec.anchor not in names:
        raise ConfigError(f"--anchor {spec.anchor!r} is not a player (players: {', '.join(names)})")
    if spec.schedule == "gauntlet":
        unknown = [p for p in spec.pool if p not in names]
        if not spec.pool or unknown or set(spec.pool) >= set(names):
            raise ConfigError(f"gauntlet needs --pool naming some, not all, players of the tournament"
                              f"{' (unknown: ' + ', '.join(unknown) + ')' if unknown else ''}")
