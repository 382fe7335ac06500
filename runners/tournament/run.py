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

That is *competitive* scoring. A cooperative game, or a game whose roles do different jobs, is
rated with *paired* scoring (:data:`SCORINGS`; binding players to seats makes it the default, and a
game declares its own default with a class attribute ``tournament_scoring = "paired"``): every
player is bound to the same seats (``--role hinter``, or ``PLAYER@ROLE`` / ``PLAYER@SEAT,SEAT``),
every other seat has a fixed agent, and each player plays each of the ``games_per_pairing / 2``
seeds once in those seats with the same fixed partners. A player's game on a seed is shared by all
its pairings; a pairing's result on a seed is the sign of the difference of the two players' own
returns there, a win, draw or loss per seed, rated by the same Bradley–Terry fit.

Everything is checked before the first game (:func:`settle`): each player's twin exists for every
role it plays, bound roles and seats exist, ``fixed`` names only seats or roles and never a seat a
player takes, and every model player has a system prompt per role and a message limit: its run's
(``config.yaml`` next to a checkpoint), ``--system`` / ``--max-new-tokens``, or, for a model with no
run config (``tiny``, an HF directory), the ones the tournament's checkpoints share; anything else
is an error. ``tournament.json`` records each player's seats, prompts and limit and where they came
from, and the notes the CLI prints under the leaderboard (:func:`settings_notes`).

Every finished game is one line of ``results.jsonl`` in the output directory, written and flushed
as each batch of games ends; running the same tournament again skips the games already there, so
a killed run loses at most the batch in flight. Games of a batch run in parallel, and all games in
which the same player sits share one generate call (:func:`cogym.runners.rollout.turns.rollout` batches
by agent). Every draw of a game (tokens, scripted moves) derives from the tournament seed and the
game's id (:func:`game_index`), so a game ends the same in any batch, on a rerun, and on any of
``ray.num_rollout_workers`` Ray workers (``cogym tournament --ray``: the driver splits each batch
among them, restarts one that dies, replays its share, and alone writes ``results.jsonl``).
Ratings are Bradley–Terry by maximum likelihood with bootstrap intervals
(:mod:`cogym.runners.tournament.ratings`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from cogym.agents.embedded import EMBEDDED_MODELS
from cogym.agents.types import Agent

from cogym.runners.rollout.agents import AgentFactory, twin_name
from cogym.runners.config.schema import ConfigError
from cogym.runners.tournament.transcripts import TRANSCRIPTS_FILE, append_transcripts, split_transcripts

SCHEDULES = ("round_robin", "gauntlet", "swiss")
SCORINGS = ("competitive", "paired")  # the sign of the two sides' return difference; the players' own returns, seed by seed
RESULTS_FILE = "results.jsonl"


# ------------------------------------------------------------------------------------------ players
@dataclass(frozen=True)
class Player:
    """One entrant: ``path`` (an HF model directory) or ``twin`` (a scripted strategy name).
    A checkpoint's player also carries its run's per-role system prompts and message limit.
    ``bind``: the roles or seats it plays (paired scoring), None for a player that takes a side.
    ``sources``: where its prompts and limit came from, filled in by :func:`settle`.
    ``dtype`` / ``attn_implementation``: what its run loaded the policy with (``policies.<id>`` of
    the run's config.yaml), so a bf16 run's checkpoint plays in bf16, as it was trained; None for
    a model with no run config (``Policy.from_pretrained``'s defaults: float32, transformers' kernel)."""

    name: str
    path: Path | None = None
    twin: str | None = None
    prompts: dict | None = field(default=None, compare=False)
    max_new_tokens: int | None = None
    bind: tuple[str, ...] | None = None
    run_config: bool = field(default=False, compare=False)  # a checkpoint whose run's config.yaml was read
    role_limits: dict | None = field(default=None, compare=False)  # role -> the limit its run gave the role's policy
    sources: dict | None = field(default=None, compare=False)
    dtype: str | None = None
    attn_implementation: str | None = None

    def load_options(self) -> dict:
        """The keyword arguments of ``Policy.from_pretrained`` this player is loaded with."""
        return {"dtype": self.dtype or "float32", "attn_implementation": self.attn_implementation}


def _checkpoint_policy(step: Path, policy: str | None, seated: str | None = None) -> tuple[Path, bool]:
    """The policy directory that plays, and whether the checkpoint holds several. ``seated``: the
    policy the run seated in the player's bound role (picks it when no policy is named)."""
    policies = sorted(p.name for p in (step / "policies").iterdir() if p.is_dir())
    if policy is not None and policy in policies:
        return step / "policies" / policy, len(policies) > 1
    if len(policies) == 1:  # --policy names another run's policy: this checkpoint has one, it plays
        return step / "policies" / policies[0], False
    if policy is not None:
        raise ConfigError(f"checkpoint {step} has no policy {policy!r} (it has: {', '.join(policies)})")
    if seated in policies:
        return step / "policies" / seated, True
    raise ConfigError(f"checkpoint {step} holds policies {', '.join(policies)}; pick one with --policy "
                      "(or PATH:POLICY for this player, or bind it to a role its run seats one of them in: "
                      "--role ROLE or PATH@ROLE)")


def _run_tree(run: Path) -> dict | None:
    """The run's resolved config (``<run>/config.yaml``), None when there is none."""
    import yaml

    config = run / "config.yaml"
    if not config.is_file():
        return None
    return yaml.safe_load(config.read_text()) or {}


def _run_settings(run: Path, policy: str) -> tuple[dict | None, int | None]:
    """The run's per-role system prompts and the policy's max_new_tokens (``<run>/config.yaml``)."""
    tree = _run_tree(run)
    if tree is None:
        return None, None
    prompts = {role: (v or {}).get("system", "") for role, v in (tree.get("prompts") or {}).items()}
    return prompts, _policy_limit(tree, policy)


def _policy_limit(tree: dict, policy: str) -> int | None:
    return (((tree.get("policies") or {}).get(policy) or {}).get("sampling") or {}).get("max_new_tokens")


def _policy_loading(tree: dict | None, policy: str) -> tuple[str | None, str | None]:
    """The ``dtype`` and ``attn_implementation`` the run loaded policy ``policy`` with
    (``policies.<policy>`` of its config.yaml; None where it does not say)."""
    cfg = ((tree or {}).get("policies") or {}).get(policy) or {}
    dtype, attn = cfg.get("dtype"), cfg.get("attn_implementation")
    return (str(dtype) if dtype is not None else None), (str(attn) if attn is not None else None)


def _role_limits(run: Path) -> dict[str, int]:
    """The message limit the run gave each role (or seat) it seated a model policy in."""
    tree = _run_tree(run) or {}
    policies = tree.get("policies") or {}
    return {role: _policy_limit(tree, pid) or _default_limit() for role, pid in (tree.get("seats") or {}).items()
            if isinstance(pid, str) and pid in policies}


def split_binding(spec: str, role: str | None = None) -> tuple[str, tuple[str, ...] | None]:
    """``PLAYER@ROLE`` -> ``(PLAYER, (ROLE,))``; ``PLAYER@SEAT,SEAT`` binds seats. A spec without
    ``@`` takes ``role`` (``--role``, comma-separated seats allowed), or None: no binding. A path
    that exists as written is never split."""
    def names(text: str) -> tuple[str, ...]:
        return tuple(n.strip() for n in text.split(",") if n.strip())

    if "@" in spec and not Path(spec).exists():
        head, tail = spec.rsplit("@", 1)
        if not head or not names(tail):
            raise ConfigError(f"player {spec!r}: write PLAYER@ROLE or PLAYER@SEAT,SEAT, e.g. scripted:exact@hinter")
        return head, names(tail)
    if role is not None and not names(role):
        raise ConfigError(f"--role {role!r}: name a role or seats, e.g. --role hinter")
    return spec, names(role) if role is not None else None


def resolve_players(specs: Sequence[str], policy: str | None = None, role: str | None = None,
                    minimum: int = 2) -> list[Player]:
    """Players from command-line specs: ``scripted:<twin>``, an HF model directory, ``tiny``, a
    checkpoint directory (``.../checkpoints/step_N``) or a run directory (each of its complete
    checkpoints); ``PATH:POLICY`` picks a checkpoint's policy; ``SPEC@ROLE`` (or ``@SEAT,SEAT``)
    binds the player to a role or seats, and ``role`` binds every player without its own ``@``.
    A player bound to one role of a multi-policy checkpoint plays the policy its run seated there.
    Names are stable: ``<run>/step_N`` for checkpoints, the directory name for a model; a binding
    is not part of the name."""
    players: list[Player] = []
    for full in specs:
        spec, bind = split_binding(full, role)
        if twin_name(spec) is not None:
            if not twin_name(spec):
                raise ConfigError(f"player {full!r}: name the twin, e.g. scripted:random (`cogym games` lists them)")
            players.append(Player(name=spec, twin=twin_name(spec), bind=bind))
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
                raise ConfigError(f"player {full!r}: the run has no complete checkpoint under {path / 'checkpoints'}")
        elif (path / "config.json").is_file() or (path / "adapter_config.json").is_file() or spec in EMBEDDED_MODELS:
            players.append(Player(name=spec if spec in EMBEDDED_MODELS else path.name, path=path, bind=bind))
            continue
        else:
            raise ConfigError(f"player {full!r} is not scripted:<twin>, a model directory, 'tiny' or 'tiny-verifier', a checkpoint or a run "
                              "directory (optionally :POLICY, then @ROLE)")
        for step in steps:
            run = step.parent.parent
            tree = _run_tree(run)
            seats = (tree or {}).get("seats") or {}
            seated = seats.get(bind[0]) if bind is not None and len(bind) == 1 else None
            where, several = _checkpoint_policy(step, own_policy, seated if isinstance(seated, str) else None)
            prompts, limit = _run_settings(run, where.name)
            dtype, attn = _policy_loading(tree, where.name)
            name = f"{run.name}/{step.name}" + (f"/{where.name}" if several else "")
            players.append(Player(name=name, path=where, prompts=prompts, max_new_tokens=limit, bind=bind,
                                  run_config=prompts is not None, role_limits=_role_limits(run), dtype=dtype,
                                  attn_implementation=attn))
    names = [p.name for p in players]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"players named twice: {', '.join(dupes)} (each player must appear once)")
    if len(players) < minimum:
        raise ConfigError(f"a tournament needs at least 2 players, got {len(players)}")
    return players


class _Prompted:
    """A model player with its own system prompts: rewrites each request's system message for its
    role, then asks the agent (the rollout builds messages with the tournament's prompts)."""

    def __init__(self, agent: Agent, prompts: dict[str, str]) -> None:
        self.agent, self.prompts, self.name = agent, prompts, agent.name

    def _rewrite(self, requests):
        """Each request with this player's system message (its sampling key and conversation kept)."""
        from cogym.runners.rollout.loop import chat_messages

        out = []
        for r in requests:
            system = self.prompts.get(r.role, "")
            conversation = r.conversation
            if conversation is not None:  # a conversation role: its first prompt starts with the system message
                rest = conversation[1:] if conversation and conversation[0].get("role") == "system" else conversation
                conversation = ([{"role": "system", "content": system}] if system else []) + list(rest)
            out.append(replace(r, messages=chat_messages(system, r.messages[-1]["content"]), conversation=conversation))
        return out

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


@dataclass(frozen=True)
class SoloKey:
    """Paired scoring: one game of ``player`` in the rated seats on seed ``k`` (for Swiss, in a round:
    a rematch is new games), shared by every pairing of the player. ``a``, ``b`` and ``order`` let it
    stand where a :class:`GameKey` does (batching, loading, transcripts)."""

    player: str
    k: int
    round: int | None = None
    order: int = 0

    @property
    def a(self) -> str:
        return self.player

    @property
    def b(self) -> str:
        return self.player

    @property
    def id(self) -> str:
        return json.dumps(["paired", self.player, self.k] + ([self.round] if self.round is not None else []))


def side_returns(returns: dict[str, float], *sides: Sequence[str]) -> list[float]:
    """Each side's return: the sum of its seats' returns."""
    return [sum(returns.get(seat, 0.0) for seat in side) for side in sides]


def game_score(returns: dict[str, float], side_a: Sequence[str], side_b: Sequence[str]) -> float:
    """The result for side a: 1 if its seats made more than side b's, 0 if less, 0.5 on a tie."""
    ra, rb = side_returns(returns, side_a, side_b)
    return 1.0 if ra > rb else 0.0 if ra < rb else 0.5


def game_index(key: GameKey) -> int:
    """A game's number in the rollout that plays it (63 bits of a hash of its id): its draws derive
    from it and the tournament seed, so they do not depend on the batch or worker it lands in. A paired
    game's number leaves the player out: every player's game on a seed draws the same numbers, so the
    fixed partners (a random twin, a sampled model) play alike for each of them."""
    ident = json.dumps(["paired", key.k, key.round]) if isinstance(key, SoloKey) else key.id
    return int.from_bytes(hashlib.blake2b(ident.encode(), digest_size=8).digest(), "little") >> 1


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
    scoring: str | None = None  # competitive | paired; None: paired when players are bound to seats, else the
    # game's tournament_scoring, else competitive (resolved by settle)
    fixed_players: dict[str, Player] = field(default_factory=dict)  # fixed model agents, spec -> Player (settle)
    transcripts: int = 0  # the first N games of each pairing keep their messages in transcripts.jsonl (runners/transcripts.py)


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
            # A fixed model agent: as settle resolved it (a spec that bypassed settle: a bare model directory).
            own = who if isinstance(who, Player) else self.spec.fixed_players.get(who) or Player(name, path=Path(who))
            path = own.path
            limit = self.spec.max_new_tokens or own.max_new_tokens or SamplingParams.max_new_tokens
            sampling = SamplingParams(max_new_tokens=limit, temperature=self.spec.temperature)
            # A model plays with its own prompts (settle: its run's, --system, or the checkpoints' shared ones).
            wrap = (lambda agent: _Prompted(agent, {**own.prompts, **self.spec.prompts})) if own.prompts is not None else None
            # In the dtype and attention kernel its run used (a bare model directory: the defaults).
            self.factory.model(name, lambda: Policy.from_pretrained(path, name=name, **own.load_options()), sampling,
                               wrap=wrap)
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


def _pairings(spec: TournamentSpec, names: list[str], log: ResultsLog, rng: np.random.Generator,
              rounds: Sequence = ()) -> list[tuple[str, str]]:
    """This round's pairings (Swiss: from the results so far; paired scoring reads them from the
    players' games and the ``rounds`` already paired)."""
    if spec.schedule == "round_robin":
        return round_robin(names)
    if spec.schedule == "gauntlet":
        return gauntlet([n for n in names if n not in spec.pool], spec.pool)
    points: dict[str, float] = {}
    met: set[frozenset] = set()
    scored = log.rows if spec.scoring != "paired" else paired_rows(log.rows, rounds, spec.games_per_pairing // 2, True)
    for r in (r for r in scored if r.get("a") in names and r.get("b") in names):
        points[r["a"]] = points.get(r["a"], 0.0) + r["score"]
        points[r["b"]] = points.get(r["b"], 0.0) + 1.0 - r["score"]
        met.add(frozenset((r["a"], r["b"])))
    return swiss_round(names, points, met, rng)


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


def _seats_of(probe, names: Sequence[str], what: str) -> list[str]:
    """The seats that role or seat ``names`` stand for, in the game's seat order."""
    seats = list(probe.possible_agents)
    roles = list(probe.spec.roles)
    out: set[str] = set()
    for n in names:
        if n in seats:
            out.add(n)
        elif n in roles:
            out |= {s for s in seats if probe.role_of(s) == n}
        else:
            raise ConfigError(f"{what}: {probe.spec.id} has no role or seat {n!r} (roles: {', '.join(roles)}; "
                              f"seats: {', '.join(seats)})")
    return [s for s in seats if s in out]


def _seating(spec: TournamentSpec, probe) -> tuple[list[list[str]], dict[str, str]]:
    """Competitive scoring: the two sides' seats; paired: one list, the rated seats. And the fixed
    agent of every other seat. Checked against the game: bound roles and seats exist, every seat is
    played, and every ``fixed`` entry names seats or a role and is used (never one a player takes)."""
    seats = list(probe.possible_agents)
    scoring = spec.scoring or _scoring(spec, probe)
    by_key = {key: _seats_of(probe, [key], f"--fixed {key}={who}") for key, who in spec.fixed.items()}
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
                binds.setdefault(tuple(_seats_of(probe, p.bind, where)), []).append(p.name)
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
        key = seat if seat in spec.fixed else probe.role_of(seat) if probe.role_of(seat) in spec.fixed else None
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


def _fixed_player(who: str, where: str) -> Player:
    """A fixed model agent (a model directory, ``tiny``, or one checkpoint, ``PATH[:POLICY]``)."""
    try:
        found = resolve_players([who], minimum=1)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if len(found) != 1:
        raise ConfigError(f"{where}: {who} holds {len(found)} checkpoints; a fixed seat needs one "
                          "(e.g. RUN/checkpoints/step_N[:POLICY])")
    return replace(found[0], name=who, bind=None)


def _settle_player(p: Player, roles: Sequence[str], spec: TournamentSpec, checkpoints: Sequence[Player],
                   where: str) -> Player:
    """``p`` with a system prompt for each role it plays and a message limit, and where each came from:
    ``--system`` / ``--max-new-tokens``, else its run's config, else (a model with no run config) the
    value the tournament's checkpoints' runs share for those roles (the role's prompt, the limit of
    the policy the run seated in the role); else a ConfigError naming the option to give."""
    if p.twin is not None:
        return p
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
            f"{v} in {_count(names)}" for v, names in distinct.items()) + ")"

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
        limit, limit_source = p.max_new_tokens or _default_limit(), "run config"
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


def _default_limit() -> int:
    """The message limit a run without ``sampling.max_new_tokens`` trained with."""
    from cogym.agents.policy import SamplingParams

    return SamplingParams.max_new_tokens


def settle(spec: TournamentSpec, probe) -> tuple[TournamentSpec, list[list[str]], dict[str, str]]:
    """Check everything before the first game, and fill in what the games need. Returns the spec
    with its scoring, its fixed model agents and each model player's prompts and limit resolved;
    the sides (paired scoring: one list, the rated seats); and each other seat's fixed agent.

    Refused here: an unknown scoring, a bound role or seat the game does not have, players bound to
    different seats, a ``fixed`` entry that names no seat or role or that a player's seat would
    override, a seat with no one to play it, a scripted twin missing for a role its player would
    play, a fixed model that is not one model, a ``--system`` role the game does not have, and a
    model with no run config for which nothing gives a prompt or limit."""
    from cogym.envs import scripted_strategies

    spec = replace(spec, scoring=_scoring(spec, probe))
    sides, fixed = _seating(spec, probe)
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
            models[who] = _fixed_player(who, where)
    checkpoints = [p for p in [*spec.players, *models.values()] if p.run_config]
    players = [_settle_player(p, played, spec, checkpoints, f"player {p.name!r}") for p in spec.players]
    models = {who: _settle_player(p, fixed_roles[who], spec, checkpoints, f"--fixed agent {who!r}")
              for who, p in models.items()}
    return replace(spec, players=players, fixed_players=models), sides, fixed


def _player_info(p: Player, seats: Sequence[str]) -> dict:
    """What tournament.json records of a player: what it is, its seats, prompts and limit, and their sources."""
    kind = "scripted" if p.twin is not None else "checkpoint" if p.run_config else NO_RUN_CONFIG
    info = {"kind": kind, "path": str(p.path) if p.path else None, "seats": list(seats)}
    if p.twin is None:
        roles = list((p.sources or {}).get("prompts", {}))
        info |= {"prompts": {r: (p.prompts or {}).get(r, "") for r in roles}, "max_new_tokens": p.max_new_tokens,
                 "sources": p.sources}
    return info


def _notes(players: Sequence[Player]) -> list[str]:
    """What the leaderboard must say about the players' settings: models with no run config, and
    prompts or limits that differ between model players."""
    models = [p for p in players if p.twin is None and p.sources is not None]
    notes = []
    said = {"checkpoints": "the checkpoints' shared"}
    for p in models:
        if not p.run_config:
            roles = ", ".join(f"{r} with {p.prompts.get(r, '')!r} ({said.get(src, src)})"
                              for r, src in p.sources["prompts"].items())
            limit = p.sources["max_new_tokens"]
            notes.append(f"* {p.name}: a model with no run config; plays {roles}, limit {p.max_new_tokens} tokens "
                         f"({said.get(limit, limit)})")
    roles = list(dict.fromkeys(r for p in models for r in p.sources["prompts"]))
    for role in roles:
        seen: dict[str, list[str]] = {}
        for p in models:
            if role in p.sources["prompts"]:
                seen.setdefault(p.prompts.get(role, ""), []).append(p.name)
        if len(seen) > 1:
            notes.append(f"players see different system prompts for role {role}: " + "; ".join(
                f"{text!r} ({_count(names)})" for text, names in seen.items()) + "; ratings compare prompts too")
    limits: dict[int, list[str]] = {}
    for p in models:
        limits.setdefault(p.max_new_tokens, []).append(p.name)
    if len(limits) > 1:
        notes.append("players have different message limits: " + "; ".join(
            f"{n} tokens ({_count(names)})" for n, names in sorted(limits.items())))
    return notes


def _count(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= 2 else f"{len(names)} players"


def _check_players(spec: TournamentSpec) -> None:
    names = [p.name for p in spec.players]
    if spec.anchor is not None and spec.anchor not in names:
        raise ConfigError(f"--anchor {spec.anchor!r} is not a player (players: {', '.join(names)})")
    if spec.schedule == "gauntlet":
        unknown = [p for p in spec.pool if p not in names]
        if not spec.pool or unknown or set(spec.pool) >= set(names):
            raise ConfigError(f"gauntlet needs --pool naming some, not all, players of the tournament"
                              f"{' (unknown: ' + ', '.join(unknown) + ')' if unknown else ''}")


# Settings a tournament.json written before they existed was played with.
_SETTING_DEFAULTS = {"scoring": "competitive", "rated": None}


def _record_settings(spec: TournamentSpec, out_dir: Path, settings: dict, extra: dict | None = None) -> None:
    """Write tournament.json; refuse a directory whose games were played under other outcome-deciding
    settings. ``extra``: more to record (the players' settings, the notes)."""
    info_file = out_dir / "tournament.json"
    if info_file.is_file() and (out_dir / RESULTS_FILE).is_file():
        try:
            before = json.loads(info_file.read_text()).get("settings", {})
        except json.JSONDecodeError:
            before = {}
        changed = sorted(k for k in settings if json.dumps(before.get(k, _SETTING_DEFAULTS.get(k)), sort_keys=True)
                         != json.dumps(settings[k], sort_keys=True))
        if before and changed:
            raise ConfigError(f"{out_dir} holds games played with other settings ({', '.join(changed)} differ); "
                              "use another --out, or delete the directory to start over")
    _write_json(info_file, {"settings": settings, "schedule": spec.schedule, "games_per_pairing": spec.games_per_pairing,
                            "players": {p.name: str(p.path) if p.path else p.name for p in spec.players}, **(extra or {})})


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
        pairs = _pairings(self.spec, self.stamp["players"], log, np.random.default_rng([self.spec.seed, 1, round_no]),
                          self.rounds)
        self.rounds.append([list(p) for p in pairs])
        _write_json(self.file, {**self.stamp, "rounds": self.rounds})
        return pairs


def _play_batch(spec: TournamentSpec, batch: list[GameKey], envs: list, agents: _Agents, sides: list[list[str]],
                fixed: dict[str, str], seeds: list[int], batch_no: int) -> list[dict]:
    """Play one batch of games (generation shared across them) and return their result rows."""
    import torch

    from cogym.agents.sampling import derive_key

    from cogym.runners.rollout.turns import rollout

    by_name = {p.name: p for p in spec.players}
    agents.reseed(batch_no)
    maps = []
    for key in batch:
        seat_of = {s: (key.a if key.order == 0 else key.b) for s in sides[0]}  # paired: the rated seats, key.a = key.b
        seat_of |= {s: (key.b if key.order == 0 else key.a) for s in (sides[1] if len(sides) > 1 else [])}

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
        if isinstance(key, SoloKey):  # paired scoring: the player's own return, compared later seed by seed
            rows.append({"id": key.id, "player": key.player, "k": key.k, "round": key.round, "seed": seeds[key.k],
                         "return": side_returns(returns, sides[0])[0], "returns": dict(returns)})
            continue
        side_a, side_b = (sides[0], sides[1]) if key.order == 0 else (sides[1], sides[0])
        ra, rb = side_returns(returns, side_a, side_b)
        rows.append({"id": key.id, "a": key.a, "b": key.b, "k": key.k, "order": key.order, "round": key.round,
                     "seed": seeds[key.k], "return_a": ra, "return_b": rb, "score": game_score(returns, side_a, side_b)})
    _attach_transcripts(spec, batch, rows, res, batch_no)
    return rows


def _attach_transcripts(spec: TournamentSpec, batch: list[GameKey], rows: list[dict], res, batch_no: int) -> None:
    """Games among their pairing's first ``spec.transcripts`` carry their transcript in their row (under
    ``"transcript"``, which run_tournament moves to transcripts.jsonl): a Ray worker returns it the same way."""
    from cogym.runners.tournament.transcripts import tournament_keeps, transcript_row

    for key, row, moves, returns in zip(batch, rows, res.moves, res.returns):
        if tournament_keeps(key.k, key.order, spec.transcripts):
            row["transcript"] = transcript_row("tournament", moves, returns, row["seed"], f"t{batch_no}-{game_index(key)}",
                                               key.id, pairing=(key.a, key.b))


def paired_rows(games: Sequence[dict], rounds: Sequence[Sequence[Sequence[str]]], n_seeds: int, swiss: bool
                ) -> list[dict]:
    """Paired scoring's results: for each pairing (a, b) of each round and each seed index below
    ``n_seeds`` that both played, one row in the format of a competitive game's (``a``, ``b``, ``k``,
    ``round``, ``seed``, ``return_a``, ``return_b``, ``score``): ``score`` is 1 if a's own return on
    that seed beat b's, 0 if it fell short, 0.5 if equal. ``games``: the players' game rows."""
    played = {(r["player"], r["k"], r.get("round")): r for r in games if "player" in r}
    out = []
    for round_no, pairs in enumerate(rounds):
        rnd = round_no if swiss else None
        for a, b in pairs:
            for k in range(n_seeds):
                ga, gb = played.get((a, k, rnd)), played.get((b, k, rnd))
                if ga is None or gb is None:
                    continue
                ra, rb = ga["return"], gb["return"]
                out.append({"id": json.dumps([a, b, k] + ([rnd] if rnd is not None else [])), "a": a, "b": b, "k": k,
                            "order": None, "round": rnd, "seed": ga["seed"], "return_a": ra, "return_b": rb,
                            "score": 1.0 if ra > rb else 0.0 if ra < rb else 0.5})
    return out


def run_tournament(spec: TournamentSpec, out_dir: Path, progress: bool = True,
                   on_batch: Callable[[int], None] | None = None, ray=None) -> list[dict]:
    """Play every scheduled game not yet in ``out_dir/results.jsonl``; return all results.

    ``on_batch(i)`` is called after batch ``i`` is written (tests use it to simulate a kill).
    ``ray``: a :class:`~cogym.runners.config.schema.RayConfig`; its ``num_rollout_workers`` Ray actors play
    each batch's games (:class:`~cogym.runners.ray.rollout.RayTournament`) with the same results."""
    from tqdm.auto import tqdm

    from cogym.envs import make

    if spec.schedule not in SCHEDULES:
        raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {spec.schedule!r}")
    if spec.games_per_pairing < 2 or spec.games_per_pairing % 2:
        raise ConfigError(f"games_per_pairing must be even and >= 2 (each seed is played in both seat orders, or, "
                          f"paired, once by each player), got {spec.games_per_pairing}")
    try:
        probe = make(spec.game, **spec.game_kwargs)
    except (TypeError, ValueError) as exc:  # unknown game or argument: the registry's message names the fix
        raise ConfigError(f"--game: {exc}") from exc
    spec, sides, fixed = settle(spec, probe)  # every player and seat checked before the first game
    _check_players(spec)
    paired = spec.scoring == "paired"
    out_dir.mkdir(parents=True, exist_ok=True)
    # What decides a game's outcome: a rerun in the same directory must play under the same settings.
    seats_of = {**{p.name: [s for side in sides for s in side] for p in spec.players},
                **{who: [s for s, w in fixed.items() if w == who] for who in spec.fixed_players}}
    info = {"players": {p.name: _player_info(p, seats_of[p.name]) for p in spec.players},
            "fixed_models": {w: _player_info(p, seats_of[w]) for w, p in spec.fixed_players.items()},
            "notes": _notes([*spec.players, *spec.fixed_players.values()])}
    _record_settings(spec, out_dir, {"game": spec.game, "game_kwargs": spec.game_kwargs, "scoring": spec.scoring,
                                     "sides": None if paired else sides, "rated": sides[0] if paired else None,
                                     "fixed": fixed, "seed": spec.seed, "temperature": spec.temperature,
                                     "max_new_tokens": spec.max_new_tokens, "prompts": spec.prompts}, info)
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
        from cogym.runners.ray.rollout import RayTournament

        pool = RayTournament(spec, ray, spec.modules)
    else:
        pool = None
    batch_no = 0
    try:
        for round_no in range(rounds):
            pairs = schedule.pairs(round_no, log)
            if paired:  # each player of the round plays each seed once; its pairings share those games
                playing = [n for n in names if any(n in pair for pair in pairs)]
                keys = [SoloKey(n, k, round_no if swiss else None) for n in playing for k in range(len(seeds))]
            else:
                keys = [GameKey(a, b, k, o, round_no if swiss else None) for a, b in pairs
                        for k in range(len(seeds)) for o in (0, 1)]
            todo = [key for key in keys if key.id not in log.done]
            bar = tqdm(total=len(keys), initial=len(keys) - len(todo), disable=not progress, unit="game",
                       desc=f"{spec.game} round {round_no + 1}/{rounds}" if rounds > 1 else spec.game, dynamic_ncols=True)
            for batch in _batches(todo, spec.batch_games, spec.max_loaded, models):
                rows, transcripts = split_transcripts(play(batch, batch_no))
                append_transcripts(out_dir / TRANSCRIPTS_FILE, transcripts)  # first: a kill then replays, never loses, one
                log.append(rows)  # the driver alone writes results.jsonl
                bar.update(len(batch))
                if on_batch is not None:
                    on_batch(batch_no)
                batch_no += 1
            bar.close()
    finally:
        if pool is not None:
            pool.close()
    # Only this tournament's games (a directory reused with other players or more games keeps those too).
    if paired:
        return paired_rows(log.rows, schedule.rounds[:rounds], len(seeds), swiss)
    return [r for r in log.rows if r.get("a") in names and r.get("b") in names and r["k"] < len(seeds)
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
           n_boot: int = 1000, seed: int = 0, plots: bool = True, prior: float = 1.0) -> list[dict]:
    """Leaderboard (Bradley–Terry, Elo scale, bootstrap intervals) and the cross-play matrix, written
    to ``out_dir`` as leaderboard.csv/.json, matrix.csv, results.csv and, with ``plots``,
    heatmap.png and ratings.png. Returns the leaderboard rows (best first).

    Every game has been played by now, so a rating that cannot be made finite is a flagged row, not
    an error: with ``prior=0`` (:func:`cogym.runners.tournament.ratings.leaderboard`) a player who never lost or
    never won is rated +-inf with a ``note`` (:func:`print_leaderboard` prints it; leaderboard.json
    writes the value as ``Infinity``), and a fit that does not converge keeps its last iterate with a
    RuntimeWarning. Only results that cannot be rated at all (nothing to rate, players in groups
    that never met) are a ConfigError."""
    import csv

    from cogym.runners.tournament.ratings import Result, leaderboard

    played = [n for n in names if any(r["a"] == n or r["b"] == n for r in rows)]
    try:
        board = leaderboard([Result(r["a"], r["b"], r["score"]) for r in rows], played, n_boot=n_boot, seed=seed,
                            anchor=anchor, prior=prior)
    except ValueError as exc:  # nothing to rate, players that never met (a Swiss round too few)...
        raise ConfigError(f"cannot rate these results: {exc}") from exc
    kinds = player_kinds(out_dir)
    if kinds:  # what each player is (scripted, checkpoint, model with no run config): tournament.json's word
        board = [{**row, "kind": kinds.get(row["name"], "")} for row in board]
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

    from cogym.runners.display import heatmap_figure, ratings_figure

    # ratings.png has an axis of finite ratings: a flagged player rated +-inf is left out (the
    # leaderboard names it), and intervals are drawn only when every plotted player has a finite one.
    finite = [row for row in board if math.isfinite(row["rating"])]
    if any(row["lo"] is None or not (math.isfinite(row["lo"]) and math.isfinite(row["hi"])) for row in finite):
        finite = [{**row, "lo": None, "hi": None} for row in finite]
    figures = [("heatmap.png", heatmap_figure(matrix, order))]
    if finite:
        figures.append(("ratings.png", ratings_figure(finite)))
    for name, fig in figures:
        fig.savefig(out_dir / name, bbox_inches="tight", pad_inches=0.1)
        plt.close(fig)


def print_matrix(rows: Sequence[dict], board: list[dict], max_players: int = 12) -> None:
    """The cross-play matrix (score of the row player against the column player) on stdout, players
    in leaderboard order as P1..Pn with a key; larger pools only go to matrix.csv / heatmap.png."""
    from cogym.runners.display import format_matrix, terminal_width

    order = [row["name"] for row in board]
    matrix, _ = score_matrix(rows, order)
    print()
    print(format_matrix(matrix, order, terminal_width(), max_players=max_players))


def print_leaderboard(board: list[dict], title: str = "cogym tournament", notes: Sequence[str] = ()) -> None:
    """The leaderboard on stdout, every number in full at any width (names wrap, numbers never); a
    model player with no run config is marked ``*``. Then the rating notes of the rows (a player
    whose rating is infinite, intervals that could not be made: :func:`rating_notes`) and ``notes``
    (:func:`settings_notes`)."""
    import textwrap

    from cogym.runners.display import format_leaderboard, terminal_width

    width = terminal_width()
    shown = [{**row, "name": row["name"] + " *"} if row.get("kind") == NO_RUN_CONFIG else row for row in board]
    print(format_leaderboard(shown, title, width))
    for note in [*rating_notes(board), *notes]:
        print("\n".join(textwrap.wrap(note, width, subsequent_indent="  ", break_on_hyphens=False)))


def rating_notes(board: Sequence[dict]) -> list[str]:
    """One line per distinct rating note of the leaderboard's rows (``note``), naming its players."""
    by_note: dict[str, list[str]] = {}
    for row in board:
        if row.get("note"):
            by_note.setdefault(row["note"], []).append(row["name"])
    return [f"note: {', '.join(names) if len(names) <= 3 else f'{len(names)} players'}: {note}"
            for note, names in by_note.items()]


NO_RUN_CONFIG = "model (no run config)"


def _tournament_info(out_dir: Path) -> dict:
    try:
        return json.loads((Path(out_dir) / "tournament.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def player_kinds(out_dir: Path) -> dict[str, str]:
    """Each player's kind as tournament.json records it (``scripted``, ``checkpoint``, or a model with
    no run config), {} for a directory without that record."""
    players = _tournament_info(out_dir).get("players") or {}
    return {name: info["kind"] for name, info in players.items() if isinstance(info, dict) and "kind" in info}


def settings_notes(out_dir: Path) -> list[str]:
    """The notes the leaderboard must carry about the players' settings (tournament.json): models
    with no run config, and prompts or limits that differ between model players."""
    return list(_tournament_info(out_dir).get("notes") or [])


def results_title(game: str, rows: Sequence[dict], out_dir: Path) -> str:
    """The leaderboard's title: the game, how many results (paired: per-seed comparisons) and where."""
    if any(r.get("order") is None for r in rows):
        return f"cogym tournament: {game}, paired, {len(rows)} per-seed comparisons ({out_dir})"
    return f"cogym tournament: {game}, {len(rows)} games ({out_dir})"
