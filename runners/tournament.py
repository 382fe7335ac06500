"""Tournaments between checkpoints, models and scripted agents: schedules, an append-only results
log, ratings with confidence intervals, a leaderboard and plots.

A *player* is a checkpoint's policy (``runs/x/checkpoints/step_000200``, or a run directory: every
complete checkpoint in it), any HF model directory, or a scripted twin (``scripted:nash``). Two
players meet in a *pairing*: each takes one *side* of the game (a set of seats; by default, for a
game whose players are two seats, one seat each, and for a game with several seats of one role,
half of them each), and every other seat is played by a *fixed* agent (``fixed: {judge:
scripted:oracle}``). A pairing is ``games_per_pairing`` games: ``games_per_pairing / 2`` seeds, each
played once in each seat order, so both orders of a pair see the same problems and deals. A game's
result is the sign of the difference of the two sides' returns (a draw when equal).

Every finished game is one line of ``results.jsonl`` in the output directory, written and flushed
as each batch of games ends; running the same tournament again skips the games already there, so
a killed run loses at most the batch in flight. Games of a batch run in parallel, and all games in
which the same player sits share one generate call (:func:`cogym.runners.rollout.rollout` batches
by agent). Every draw of a game (tokens, scripted moves) derives from the tournament seed and the
game's id (:func:`game_index`), so a game ends the same in any batch, on a rerun, and on any of
``ray.num_rollout_workers`` Ray workers (``cogym tournament --ray``: the driver splits each batch
among them, restarts one that dies, replays its share, and alone writes ``results.jsonl``).
Ratings are Bradley–Terry by maximum likelihood with bootstrap intervals
(:mod:`cogym.runners.ratings`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from cogym.agents.types import Agent

from .agent_factory import AgentFactory, twin_name
from .config import ConfigError

SCHEDULES = ("round_robin", "gauntlet", "swiss")
RESULTS_FILE = "results.jsonl"


# ------------------------------------------------------------------------------------------ players
@dataclass(frozen=True)
class Player:
    """One entrant: ``path`` (an HF model directory) or ``twin`` (a scripted strategy name).
    A checkpoint's player also carries its run's per-role system prompts and message limit."""

    name: str
    path: Path | None = None
    twin: str | None = None
    prompts: dict | None = field(default=None, compare=False)
    max_new_tokens: int | None = None


def _checkpoint_policy(step: Path, policy: str | None) -> tuple[Path, bool]:
    """The policy directory that plays, and whether the checkpoint holds several."""
    policies = sorted(p.name for p in (step / "policies").iterdir() if p.is_dir())
    if policy is not None and policy in policies:
        return step / "policies" / policy, len(policies) > 1
    if len(policies) == 1:  # --policy names another run's policy: this checkpoint has one, it plays
        return step / "policies" / policies[0], False
    if policy is not None:
        raise ConfigError(f"checkpoint {step} has no policy {policy!r} (it has: {', '.join(policies)})")
    raise ConfigError(f"checkpoint {step} holds policies {', '.join(policies)}; pick one with --policy "
                      "(or PATH:POLICY for this player)")


def _run_settings(run: Path, policy: str) -> tuple[dict | None, int | None]:
    """The run's per-role system prompts and the policy's max_new_tokens (``<run>/config.yaml``)."""
    import yaml

    config = run / "config.yaml"
    if not config.is_file():
        return None, None
    tree = yaml.safe_load(config.read_text()) or {}
    prompts = {role: (v or {}).get("system", "") for role, v in (tree.get("prompts") or {}).items()}
    limit = (((tree.get("policies") or {}).get(policy) or {}).get("sampling") or {}).get("max_new_tokens")
    return prompts, limit


def resolve_players(specs: Sequence[str], policy: str | None = None) -> list[Player]:
    """Players from command-line specs: ``scripted:<twin>``, an HF model directory, a checkpoint
    directory (``.../checkpoints/step_N``) or a run directory (each of its complete checkpoints).
    Names are stable: ``<run>/step_N`` for checkpoints, the directory name for a model."""
    players: list[Player] = []
    for spec in specs:
        if twin_name(spec) is not None:
            players.append(Player(name=spec, twin=twin_name(spec)))
            continue
        path, own_policy = Path(spec), policy
        if ":" in spec and not path.exists():  # PATH:POLICY
            head, own_policy = spec.rsplit(":", 1)
            path = Path(head)
        if (path / "policies").is_dir() and (path / "trainer_state.json").is_file():
            steps = [path]
        elif (path / "checkpoints").is_dir():
            steps = sorted(p for p in (path / "checkpoints").glob("step_*") if (p / "trainer_state.json").is_file())
            if not steps:
                raise ConfigError(f"player {spec!r}: the run has no complete checkpoint under {path / 'checkpoints'}")
        elif (path / "config.json").is_file() or (path / "adapter_config.json").is_file() or spec == "tiny":
            players.append(Player(name=path.name if spec != "tiny" else "tiny", path=path))
            continue
        else:
            raise ConfigError(f"player {spec!r} is not scripted:<twin>, a model directory, a checkpoint or a run directory")
        for step in steps:
            run = step.parent.parent
            where, several = _checkpoint_policy(step, own_policy)
            prompts, limit = _run_settings(run, where.name)
            name = f"{run.name}/{step.name}" + (f"/{where.name}" if several else "")
            players.append(Player(name=name, path=where, prompts=prompts, max_new_tokens=limit))
    names = [p.name for p in players]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"players named twice: {', '.join(dupes)} (each player must appear once)")
    if len(players) < 2:
        raise ConfigError(f"a tournament needs at least 2 players, got {len(players)}")
    return players


class _Prompted:
    """A model player with its own system prompts: rewrites each request's system message for its
    role, then asks the agent (the rollout builds messages with the tournament's prompts)."""

    def __init__(self, agent: Agent, prompts: dict[str, str]) -> None:
        self.agent, self.prompts, self.name = agent, prompts, agent.name

    def _rewrite(self, requests):
        from cogym.runners.rollout import chat_messages

        return [type(r)(messages=chat_messages(self.prompts.get(r.role, ""), r.messages[-1]["content"]), role=r.role,
                        seat=r.seat) for r in requests]

    def act(self, requests):
        return self.agent.act(self._rewrite(requests))

    # Token level (TokenStreaming): the same rewrite when a message begins, the rest delegated.
    def begin(self, requests, encode):
        if not hasattr(self.agent, "begin"):
            raise TypeError(f"player {self.name!r} ({type(self.agent).__name__}) cannot play at token level")
        return self.agent.begin(self._rewrite(requests), encode)

    def advance(self, handles):
        return self.agent.advance(handles)

    def close(self, handles):
        self.agent.close(handles)


# ---------------------------------------------------------------------------------------- schedules
def round_robin(names: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair once (each pairing is then played in both seat orders)."""
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def gauntlet(new: Sequence[str], pool: Sequence[str]) -> list[tuple[str, str]]:
    """Each new player against each player of the (anchored) pool; pool players do not meet each other."""
    return [(n, p) for n in new for p in pool if n != p]


def swiss_round(names: Sequence[str], points: dict[str, float], met: set[frozenset], rng: np.random.Generator
                ) -> list[tuple[str, str]]:
    """One Swiss round: players sorted by points (ties broken by a seeded shuffle) are paired top
    down with the nearest player they have not met; with an odd count the lowest unpaired sits out."""
    order = list(names)
    rng.shuffle(order)
    order.sort(key=lambda n: -points.get(n, 0.0))
    pairs, left = [], list(order)
    while len(left) > 1:
        a = left.pop(0)
        k = next((i for i, b in enumerate(left) if frozenset((a, b)) not in met), 0)
        pairs.append((a, left.pop(k)))
    return pairs


# ------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class GameKey:
    """One game: pairing (a, b), the seed index k, the seat order (0: a on side 0), and for Swiss the
    round (a rematch in a later round is a new game)."""

    a: str
    b: str
    k: int
    order: int
    round: int | None = None

    @property
    def id(self) -> str:
        parts = [self.a, self.b, self.k, self.order] + ([self.round] if self.round is not None else [])
        return json.dumps(parts)


def side_returns(returns: dict[str, float], *sides: Sequence[str]) -> list[float]:
    """Each side's return: the sum of its seats' returns."""
    return [sum(returns.get(seat, 0.0) for seat in side) for side in sides]


def game_score(returns: dict[str, float], side_a: Sequence[str], side_b: Sequence[str]) -> float:
    """The result for side a: 1 if its seats made more than side b's, 0 if less, 0.5 on a tie."""
    ra, rb = side_returns(returns, side_a, side_b)
    return 1.0 if ra > rb else 0.0 if ra < rb else 0.5


def game_index(key: GameKey) -> int:
    """A game's number in the rollout that plays it (63 bits of a hash of its id): its draws derive
    from it and the tournament seed, so they do not depend on the batch or worker it lands in."""
    return int.from_bytes(hashlib.blake2b(key.id.encode(), digest_size=8).digest(), "little") >> 1


def game_seeds(seed: int, n: int) -> list[int]:
    """The seeds of a pairing's games: the same for every pairing (paired comparisons)."""
    return [int(x) for x in np.random.SeedSequence([seed, 0xC06]).generate_state(n)]


def _write_json(path: Path, data) -> None:
    """Write a small JSON file atomically (a kill leaves the old file or the new one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


class ResultsLog:
    """``results.jsonl``: one line per finished game, appended and flushed batch by batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict] = []
        if path.is_file():
            text = path.read_text()
            lines = text.splitlines()
            for line in lines:
                try:
                    self.rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a kill mid-write: that game is played again
            if len(self.rows) != len(lines) or (text and not text.endswith("\n")):
                # Drop the cut line, so the next append starts on a line of its own (atomically).
                tmp = path.with_suffix(".tmp")
                tmp.write_text("".join(json.dumps(r) + "\n" for r in self.rows))
                os.replace(tmp, path)
        self.done = {r["id"] for r in self.rows}

    def append(self, rows: Iterable[dict]) -> None:
        rows = [r for r in rows if r["id"] not in self.done]
        if not rows:
            return
        with open(self.path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
            f.flush()
            os.fsync(f.fileno())
        self.rows += rows
        self.done |= {r["id"] for r in rows}


# --------------------------------------------------------------------------------------- the runner
@dataclass
class TournamentSpec:
    """What to play; see :func:`run_tournament`."""

    game: str
    players: list[Player]
    game_kwargs: dict = field(default_factory=dict)
    sides: list[list[str]] | None = None  # seats of side 0 and side 1; None: the game's default
    fixed: dict[str, str] = field(default_factory=dict)  # seat or role -> scripted:<twin> or model dir
    schedule: str = "round_robin"
    games_per_pairing: int = 100
    pool: list[str] = field(default_factory=list)  # gauntlet: the fixed pool (player names)
    swiss_rounds: int = 0  # swiss: rounds (0: ceil(log2(players)) + 1, at most players - 1)
    anchor: str | None = None  # the player whose rating is fixed at 0 (default: the mean is 0)
    seed: int = 0
    batch_games: int = 256  # games played at once
    max_loaded: int = 0  # model players held in memory at once (0: all); batches then never need more
    max_new_tokens: int = 0  # model players' message limit; 0: each checkpoint's run's, else 8
    temperature: float = 1.0
    prompts: dict[str, str] = field(default_factory=dict)  # role -> system message (over the runs' own)
    modules: list[str] = field(default_factory=list)  # game modules imported first (Ray workers import them too)


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


class _Agents:
    """One agent per model player (loaded once), one per (scripted twin, role)."""

    def __init__(self, spec: TournamentSpec) -> None:
        self.spec, self.factory = spec, AgentFactory(spec.game, seed=spec.seed)
        self.cache = self.factory.agents
        self.players = {p.name for p in spec.players if p.twin is None}  # model players (fixed models are kept)
        self.loads = 0

    def get(self, who: str | Player, role: str) -> Agent:
        from cogym.agents.policy import Policy, SamplingParams

        name = who.name if isinstance(who, Player) else who
        twin = who.twin if isinstance(who, Player) else twin_name(who)
        if twin is not None:
            self.factory.check_twin(twin, role, where=name)
            return self.factory.scripted(twin, role, name=f"{name}@{role}")
        if name not in self.cache:
            path = who.path if isinstance(who, Player) else Path(who)
            own = who if isinstance(who, Player) else Player(name)
            limit = self.spec.max_new_tokens or own.max_new_tokens or 8
            sampling = SamplingParams(max_new_tokens=limit, temperature=self.spec.temperature)
            # A checkpoint plays with its run's prompts (--system still wins).
            wrap = (lambda agent: _Prompted(agent, {**own.prompts, **self.spec.prompts})) if own.prompts is not None else None
            self.factory.model(name, lambda: Policy.from_pretrained(path, name=name), sampling, wrap=wrap)
            self.loads += 1
        return self.cache[name]

    def keep_only(self, needed: set[str], max_loaded: int) -> None:
        """With a limit, unload the model players the next batch does not need (fixed seats stay)."""
        from cogym.agents.llm import LLMAgent

        loaded = [k for k, a in self.cache.items() if isinstance(a, (LLMAgent, _Prompted)) and k in self.players]
        if max_loaded and len(loaded) + len([n for n in needed if n in self.players and n not in self.cache]) > max_loaded:
            for name in loaded:
                if name not in needed:
                    del self.cache[name]
            import gc

            gc.collect()

    def reseed(self, batch: int) -> None:
        from cogym.agents.scripted import ScriptedAgent

        # Every agent loaded so far, scripted ones first, then by name (the order the streams were numbered in before).
        for k, (_, agent) in enumerate(sorted(self.cache.items(), key=lambda kv: (twin_name(kv[0]) is None, kv[0]))):
            if isinstance(agent, ScriptedAgent):
                agent.rng = np.random.default_rng([self.spec.seed, batch, k])


def _batches(todo: list[GameKey], size: int, max_loaded: int, models: set[str]) -> Iterable[list[GameKey]]:
    """Consecutive games of ``todo`` in batches of at most ``size``; with ``max_loaded`` > 0 a batch
    also holds games of at most ``max_loaded`` model players (the schedule keeps a pairing's games
    together, so a batch is a few pairings)."""
    batch: list[GameKey] = []
    players: set[str] = set()
    for key in todo:
        new = players | ({key.a, key.b} & models)
        if batch and (len(batch) == size or (max_loaded and len(new) > max_loaded)):
            yield batch
            batch, new = [], {key.a, key.b} & models
        batch.append(key)
        players = new
    if batch:
        yield batch


def _pairings(spec: TournamentSpec, names: list[str], log: ResultsLog, rng: np.random.Generator
              ) -> list[tuple[str, str]]:
    if spec.schedule == "round_robin":
        return round_robin(names)
    if spec.schedule == "gauntlet":
        return gauntlet([n for n in names if n not in spec.pool], spec.pool)
    points: dict[str, float] = {}
    met: set[frozenset] = set()
    for r in (r for r in log.rows if r["a"] in names and r["b"] in names):
        points[r["a"]] = points.get(r["a"], 0.0) + r["score"]
        points[r["b"]] = points.get(r["b"], 0.0) + 1.0 - r["score"]
        met.add(frozenset((r["a"], r["b"])))
    return swiss_round(names, points, met, rng)


def _seating(spec: TournamentSpec, probe) -> tuple[list[list[str]], dict[str, str]]:
    """The two sides' seats and the fixed agent of every other seat, checked against the game."""
    sides = spec.sides or default_sides(probe)
    seats = list(probe.possible_agents)
    if len(sides) != 2 or not all(sides) or set(sides[0]) & set(sides[1]) or not set(sides[0] + sides[1]) <= set(seats):
        raise ConfigError(f"sides must be two disjoint, non-empty lists of seats of {spec.game} (seats: {', '.join(seats)})")
    fixed: dict[str, str] = {}
    for seat in seats:
        if seat in sides[0] or seat in sides[1]:
            continue
        who = spec.fixed.get(seat, spec.fixed.get(probe.role_of(seat)))
        if who is None:
            raise ConfigError(f"seat {seat!r} (role {probe.role_of(seat)!r}) is on no side and has no fixed agent; "
                              f"give --fixed {probe.role_of(seat)}=scripted:<twin> (or a model directory)")
        fixed[seat] = who
    return sides, fixed


def _check_players(spec: TournamentSpec) -> None:
    names = [p.name for p in spec.players]
    if spec.anchor is not None and spec.anchor not in names:
        raise ConfigError(f"--anchor {spec.anchor!r} is not a player (players: {', '.join(names)})")
    if spec.schedule == "gauntlet":
        unknown = [p for p in spec.pool if p not in names]
        if not spec.pool or unknown or set(spec.pool) >= set(names):
            raise ConfigError(f"gauntlet needs --pool naming some, not all, players of the tournament"
                              f"{' (unknown: ' + ', '.join(unknown) + ')' if unknown else ''}")


def _record_settings(spec: TournamentSpec, out_dir: Path, settings: dict) -> None:
    """Write tournament.json; refuse a directory whose games were played under other outcome-deciding settings."""
    info_file = out_dir / "tournament.json"
    if info_file.is_file() and (out_dir / RESULTS_FILE).is_file():
        try:
            before = json.loads(info_file.read_text()).get("settings", {})
        except json.JSONDecodeError:
            before = {}
        changed = sorted(k for k in settings
                         if json.dumps(before.get(k), sort_keys=True) != json.dumps(settings[k], sort_keys=True))
        if before and changed:
            raise ConfigError(f"{out_dir} holds games played with other settings ({', '.join(changed)} differ); "
                              "use another --out, or delete the directory to start over")
    _write_json(info_file, {"settings": settings, "schedule": spec.schedule, "games_per_pairing": spec.games_per_pairing,
                            "players": {p.name: str(p.path) if p.path else p.name for p in spec.players}})


class _Schedule:
    """Each round's pairings, written down before the round is played, so a rerun replays the same
    schedule (Swiss pairings depend on the results so far, which a rerun would otherwise see more of)."""

    def __init__(self, spec: TournamentSpec, out_dir: Path) -> None:
        self.spec, self.file = spec, out_dir / "schedule.json"
        self.stamp = {"players": [p.name for p in spec.players], "schedule": spec.schedule, "pool": spec.pool}
        try:
            saved = json.loads(self.file.read_text()) if self.file.is_file() else {}
        except json.JSONDecodeError:
            saved = {}  # cut by a kill while written: the rounds not yet played are paired again
        self.rounds: list = saved.get("rounds", []) if all(saved.get(k) == v for k, v in self.stamp.items()) else []

    def pairs(self, round_no: int, log: ResultsLog) -> list[tuple[str, str]]:
        if round_no < len(self.rounds):
            return [tuple(p) for p in self.rounds[round_no]]
        pairs = _pairings(self.spec, self.stamp["players"], log, np.random.default_rng([self.spec.seed, 1, round_no]))
        self.rounds.append([list(p) for p in pairs])
        _write_json(self.file, {**self.stamp, "rounds": self.rounds})
        return pairs


def _play_batch(spec: TournamentSpec, batch: list[GameKey], envs: list, agents: _Agents, sides: list[list[str]],
                fixed: dict[str, str], seeds: list[int], batch_no: int) -> list[dict]:
    """Play one batch of games (generation shared across them) and return their result rows."""
    import torch

    from cogym.agents.sampling import derive_key

    from .rollout import rollout

    by_name = {p.name: p for p in spec.players}
    agents.reseed(batch_no)
    maps = []
    for key in batch:
        seat_of = {s: (key.a if key.order == 0 else key.b) for s in sides[0]}
        seat_of |= {s: (key.b if key.order == 0 else key.a) for s in sides[1]}

        def seat_map(seat, role, seat_of=seat_of):
            who = seat_of.get(seat)
            if who is None:
                return fixed[seat], agents.get(fixed[seat], role)
            return who, agents.get(by_name[who], role)
        maps.append(seat_map)
    torch.manual_seed(spec.seed * 1_000_003 + batch_no)
    res = rollout(envs[: len(batch)], maps, dict(spec.prompts), [seeds[key.k] for key in batch], episode_prefix=f"t{batch_no}",
                  game_indices=[game_index(key) for key in batch], sampling_key=derive_key(spec.seed))
    rows = []
    for key, returns in zip(batch, res.returns):
        side_a, side_b = (sides[0], sides[1]) if key.order == 0 else (sides[1], sides[0])
        ra, rb = side_returns(returns, side_a, side_b)
        rows.append({"id": key.id, "a": key.a, "b": key.b, "k": key.k, "order": key.order, "round": key.round,
                     "seed": seeds[key.k], "return_a": ra, "return_b": rb, "score": game_score(returns, side_a, side_b)})
    return rows


def run_tournament(spec: TournamentSpec, out_dir: Path, progress: bool = True,
                   on_batch: Callable[[int], None] | None = None, ray=None) -> list[dict]:
    """Play every scheduled game not yet in ``out_dir/results.jsonl``; return all results.

    ``on_batch(i)`` is called after batch ``i`` is written (tests use it to simulate a kill).
    ``ray``: a :class:`~cogym.runners.config.RayConfig`; its ``num_rollout_workers`` Ray actors play
    each batch's games (:class:`~cogym.runners.ray_rollout.RayTournament`) with the same results."""
    from tqdm.auto import tqdm

    from cogym.envs import make

    if spec.schedule not in SCHEDULES:
        raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {spec.schedule!r}")
    if spec.games_per_pairing < 2 or spec.games_per_pairing % 2:
        raise ConfigError(f"games_per_pairing must be even and >= 2 (each seed is played in both seat orders), "
                          f"got {spec.games_per_pairing}")
    try:
        probe = make(spec.game, **spec.game_kwargs)
    except (TypeError, ValueError) as exc:  # unknown game or argument: the registry's message names the fix
        raise ConfigError(f"--game: {exc}") from exc
    out_dir.mkdir(parents=True, exist_ok=True)
    sides, fixed = _seating(spec, probe)
    _check_players(spec)
    # What decides a game's outcome: a rerun in the same directory must play under the same settings.
    _record_settings(spec, out_dir, {"game": spec.game, "game_kwargs": spec.game_kwargs, "sides": sides, "fixed": fixed,
                                     "seed": spec.seed, "temperature": spec.temperature,
                                     "max_new_tokens": spec.max_new_tokens, "prompts": spec.prompts})
    if spec.max_loaded and spec.max_loaded < 2:
        raise ConfigError(f"max_loaded must be 0 (no limit) or >= 2 (the two players of a game), got {spec.max_loaded}")
    log, agents, schedule = ResultsLog(out_dir / RESULTS_FILE), _Agents(spec), _Schedule(spec, out_dir)
    seeds = game_seeds(spec.seed, spec.games_per_pairing // 2)
    names, models = [p.name for p in spec.players], {p.name for p in spec.players if p.twin is None}
    swiss = spec.schedule == "swiss"
    rounds = 1 if not swiss else (spec.swiss_rounds or min(math.ceil(math.log2(len(names))) + 1, len(names) - 1))
    envs: list = []

    def play(batch: list[GameKey], batch_no: int) -> list[dict]:
        if pool is not None:  # the workers hold their own agents and games
            return pool.play(batch, seeds, batch_no)
        agents.keep_only({k.a for k in batch} | {k.b for k in batch}, spec.max_loaded)
        envs.extend(make(spec.game, **spec.game_kwargs) for _ in range(len(batch) - len(envs)))
        return _play_batch(spec, batch, envs, agents, sides, fixed, seeds, batch_no)

    if ray is not None:
        from .ray_rollout import RayTournament

        pool = RayTournament(spec, ray, spec.modules)
    else:
        pool = None
    batch_no = 0
    try:
        for round_no in range(rounds):
            keys = [GameKey(a, b, k, o, round_no if swiss else None) for a, b in schedule.pairs(round_no, log)
                    for k in range(len(seeds)) for o in (0, 1)]
            todo = [key for key in keys if key.id not in log.done]
            bar = tqdm(total=len(keys), initial=len(keys) - len(todo), disable=not progress, unit="game",
                       desc=f"{spec.game} round {round_no + 1}/{rounds}" if rounds > 1 else spec.game, dynamic_ncols=True)
            for batch in _batches(todo, spec.batch_games, spec.max_loaded, models):
                log.append(play(batch, batch_no))  # the driver alone writes results.jsonl
                bar.update(len(batch))
                if on_batch is not None:
                    on_batch(batch_no)
                batch_no += 1
            bar.close()
    finally:
        if pool is not None:
            pool.close()
    # Only this tournament's games (a directory reused with other players or more games keeps those too).
    return [r for r in log.rows if r["a"] in names and r["b"] in names and r["k"] < len(seeds)
            and (r.get("round") is not None) == swiss]


# ------------------------------------------------------------------------------------------- report
def score_matrix(rows: Sequence[dict], names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(mean score of row player against column player, games) over every game between them; NaN
    where they did not meet."""
    index = {n: i for i, n in enumerate(names)}
    points = np.zeros((len(names), len(names)))
    games = np.zeros((len(names), len(names)))
    for r in rows:
        i, j = index[r["a"]], index[r["b"]]
        points[i, j] += r["score"]
        points[j, i] += 1.0 - r["score"]
        games[i, j] += 1
        games[j, i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(games > 0, points / np.maximum(games, 1), np.nan), games


def report(rows: Sequence[dict], names: Sequence[str], out_dir: Path, anchor: str | None = None,
           n_boot: int = 1000, seed: int = 0, plots: bool = True) -> list[dict]:
    """Leaderboard (Bradley–Terry, Elo scale, bootstrap intervals) and the cross-play matrix, written
    to ``out_dir`` as leaderboard.csv/.json, matrix.csv, results.csv and, with ``plots``,
    heatmap.png and ratings.png. Returns the leaderboard rows (best first)."""
    import csv

    from .ratings import Result, leaderboard

    played = [n for n in names if any(r["a"] == n or r["b"] == n for r in rows)]
    try:
        board = leaderboard([Result(r["a"], r["b"], r["score"]) for r in rows], played, n_boot=n_boot, seed=seed,
                            anchor=anchor)
    except ValueError as exc:  # nothing to rate, players that never met (a Swiss round too few)...
        raise ConfigError(f"cannot rate these results: {exc}") from exc
    (out_dir / "leaderboard.json").write_text(json.dumps(board, indent=1))
    with open(out_dir / "leaderboard.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(board[0]))
        w.writeheader()
        w.writerows(board)
    order = [row["name"] for row in board]
    matrix, games = score_matrix(rows, order)
    with open(out_dir / "matrix.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["row scores against column", *order])
        for name, values in zip(order, matrix):
            w.writerow([name, *("" if math.isnan(v) else f"{v:.4f}" for v in values)])
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["a", "b", "k", "order", "seed", "return_a", "return_b", "score"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if plots:
        _plots(board, matrix, order, out_dir)
    return board


def _plots(board: list[dict], matrix: np.ndarray, order: list[str], out_dir: Path) -> None:
    """heatmap.png and ratings.png (:mod:`cogym.runners.display`: sized to the number of players,
    long names shown as P-labels with a key)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .display import heatmap_figure, ratings_figure

    for name, fig in (("heatmap.png", heatmap_figure(matrix, order)), ("ratings.png", ratings_figure(board))):
        fig.savefig(out_dir / name, bbox_inches="tight", pad_inches=0.1)
        plt.close(fig)


def print_matrix(rows: Sequence[dict], board: list[dict], max_players: int = 12) -> None:
    """The cross-play matrix (score of the row player against the column player) on stdout, players
    in leaderboard order as P1..Pn with a key; larger pools only go to matrix.csv / heatmap.png."""
    from .display import format_matrix, terminal_width

    order = [row["name"] for row in board]
    matrix, _ = score_matrix(rows, order)
    print()
    print(format_matrix(matrix, order, terminal_width(), max_players=max_players))


def print_leaderboard(board: list[dict], title: str = "cogym tournament") -> None:
    """The leaderboard on stdout, every number in full at any width (names wrap, numbers never)."""
    from .display import format_leaderboard, terminal_width

    print(format_leaderboard(board, title, terminal_width()))
