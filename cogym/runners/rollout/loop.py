"""The rollout core shared by both granularities: many live games, one batched call per agent per step.

At every step each live game names the seats that may act now (``ready_agents()``); the seats of
every game are grouped by the agent behind them and a :class:`Mover` answers each agent's group
in one call: a whole message per seat at turn level (``Agent.act``), one token per seat at token
level (``TokenStreaming.advance``). Then every game is stepped with its moves in AEC order.
:class:`Episodes` is the bookkeeping both share: resets, returns and infos, the :class:`Turn`
records with their episode ids and group keys, and the :class:`RolloutResult`.

The core speaks only the ``Agent`` protocol (and its token-level capability): which concrete
class plays a seat is never asked, so a wrapper that delegates the protocol plays anywhere.
"""

from __future__ import annotations

import inspect
import shlex
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Protocol, Sequence

import numpy as np

from cogym.agents.conversation import Conversation
from cogym.core import seeding
from cogym.core.types import Agent, Request, Turn
from cogym.core.errors import GameContractError, GameStepError
from cogym.core.text import printable
from cogym.envs.base import CogymEnv, check_messages
from cogym.envs.contract import ContractViolation, check_infos, check_rewards
from cogym.envs.contract import shown as shown_value
from cogym.envs.registry import module_of


@dataclass
class RolloutResult:
    turns: list[Turn]  # LLM moves only (the ones a learner can train on)
    returns: list[dict[str, float]]  # per game: seat -> total reward
    infos: list[dict[str, dict]]  # per game: seat -> last info
    generated_tokens: int = 0
    generate_seconds: float = 0.0
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)
    # per game: every move in order of play, {"seat", "role", "policy", "text", "shown"} (scripted seats
    # too; "shown": the text the seat was asked about): what transcripts show
    moves: list[list[dict]] = field(default_factory=list)
    # games that raised and were skipped (game.on_error: skip): GameStepError.record of each, and the
    # games' places in this result's lists (their returns and infos are empty: no game result to rate)
    errors: list[dict] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)  # per game: the seed it was reset with (transcripts show it)


SeatMap = Callable[[str, str], tuple[str, Agent]]  # (seat, role) -> (policy id, agent)
ON_ERROR = ("stop", "skip")  # what a rollout does when a game raises (GameConfig.on_error)
MAX_ACTION_SHOWN = 200  # characters of the move shown in a game failure's report
# Characters of what one seat is asked (its system message and the game's text, or its conversation so
# far): GameConfig.max_prompt_chars' default. A length is all that is measured, so a game that shows a
# seat megabytes is refused before any tokenizer or model reads them (a 10 MB prompt otherwise asks the
# model for tens of GB); 256 Ki characters is far above every shipped game and most models' contexts.
MAX_PROMPT_CHARS = 1 << 18


class PlayLimit(ContractViolation):
    """A limit the play loop holds every game to (its declared turn limit, the prompt size): reported in
    one line, since no single move of the game's is at fault and ``check_game`` need not reproduce it."""


class Chars(int):
    """A number of characters, shown with its unit in a report (a game failure's value)."""

    def __repr__(self) -> str:
        return f"{int(self)} characters"


def seat_map_of(seat_map: SeatMap | Sequence[SeatMap], g: int) -> SeatMap:
    """The seat map of game ``g``: one map for every game (training), or one per game (a tournament
    seats different players in each game; generation is still batched by agent across games)."""
    return seat_map if callable(seat_map) else seat_map[g]


def chat_messages(system: str | None, text: str) -> list[dict]:
    """What a seat is asked: the role's system message (when it has one), then the game's text."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


def skip_dead(env: CogymEnv, returns: dict[str, float], infos: dict[str, dict], checked: bool = False) -> None:
    """Step finished seats with None (the AEC protocol) until a live seat or no seat is left; ``checked``:
    each step's rewards and infos held to the contract (:func:`checked_collect`)."""
    while env.agents:
        sel = env.agent_selection
        if not (env.terminations.get(sel) or env.truncations.get(sel)):
            return
        env.step(None)
        (checked_collect if checked else collect)(env, returns, infos)


def collect(env: CogymEnv, returns: dict[str, float], infos: dict[str, dict]) -> None:
    """Add this step's rewards to each seat's return and keep each seat's latest info
    (PettingZoo drops a finished seat's entries once it is stepped with None)."""
    for seat, r in env.rewards.items():
        returns[seat] = returns.get(seat, 0.0) + float(r)
    for seat, info in env.infos.items():
        infos[seat] = info


def checked_collect(env: CogymEnv, returns: dict[str, float], infos: dict[str, dict]) -> None:
    """:func:`collect`, after holding the step's rewards to the game contract (:mod:`cogym.envs.contract`):
    a :class:`~cogym.envs.contract.ContractViolation` before any of them is added, so a NaN or
    out-of-range reward never reaches a learner. (The infos a learner reads, each seat's last, are
    checked once, when the game has ended: :meth:`Episodes.skip_dead`.)"""
    check_rewards(env.unwrapped)
    collect(env, returns, infos)


def credit(seat_turns: list[dict[str, list[Turn]]], returns: list[dict[str, float]],
           infos: list[dict[str, dict]]) -> list[Turn]:
    """Every move of a seat gets the seat's episode return and its last info (held to the game ->
    learner contract when the game ended: :meth:`Episodes.skip_dead`); all turns in game order."""
    turns: list[Turn] = []
    for g, by_seat in enumerate(seat_turns):
        for seat, ts in by_seat.items():
            info = infos[g].get(seat, {})
            for t in ts:
                t.reward = returns[g].get(seat, 0.0)
                t.info = info
            turns.extend(ts)
    return turns


@dataclass
class Seat:
    """A ready seat of one step: game ``g``, its ``k``-th ready seat, who plays it, what it is asked
    (None when the mover needs no request: a token-level message already under way)."""

    g: int
    k: int
    seat: str
    role: str
    policy_id: str
    agent: Agent
    request: Request | None


class Episodes:
    """One episode in every game: resets, returns, infos, and the Turns with their ids and group keys."""

    def __init__(self, games: Sequence[CogymEnv], seeds: Sequence[int], episode_prefix: str, group_size: int,
                 game_indices: Sequence[int] | None, sampling_key: int | None = None, on_error: str = "stop",
                 max_prompt_chars: int = MAX_PROMPT_CHARS) -> None:
        if len(seeds) != len(games):
            raise ValueError(f"need one seed per game: {len(games)} games, {len(seeds)} seeds")
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        if isinstance(max_prompt_chars, bool) or not isinstance(max_prompt_chars, int) or max_prompt_chars < 1:
            raise ValueError(f"max_prompt_chars must be an int >= 1, got {max_prompt_chars!r}")
        self.max_prompt_chars = max_prompt_chars
        self.games, self.prefix, self.group_size = games, episode_prefix, group_size
        self.seeds, self.on_error = [int(s) for s in seeds], on_error
        self.failed: set[int] = set()  # games that raised and were skipped
        self.errors: list[dict] = []
        self.returns: list[dict[str, float]] = [dict() for _ in games]
        self.infos: list[dict[str, dict]] = [dict() for _ in games]
        self.seat_turns: list[dict[str, list[Turn]]] = [defaultdict(list) for _ in games]
        self.index = list(game_indices) if game_indices is not None else list(range(len(games)))
        self.episode_ids = [f"{episode_prefix}-{i}" for i in self.index]
        self.sampling_key = sampling_key
        self.moves = [0] * len(games)  # per game: the steps at which it had ready seats so far
        self.turns = [0] * len(games)  # per game: its acting turns so far (as check_game counts them)
        self.conversations: dict[tuple[int, str], Conversation] = {}  # (game, seat) of conversation roles
        self.log: list[list[dict]] = [[] for _ in games]  # per game: its moves, for transcripts
        self.shown: dict[tuple[int, str], str] = {}  # (game, seat) -> the text the seat was asked about, until it answers
        self.agent_errors: dict[tuple[int, str], str] = {}  # (game, seat) -> why its agent last made no move
        for g, env in enumerate(games):
            try:
                env.reset(seed=int(seeds[g]))
                self.skip_dead(g)
            except Exception as exc:  # noqa: BLE001 - any failure of the game's own code is reported
                self.game_failed(g, None, None, "", None, exc)

    def request_key(self, g: int, k: int) -> int | None:
        """The sampling key of the ``k``-th ready seat of game ``g`` at its current move: a pure function
        of (rollout key, the game's place in the iteration's list, move, k), whoever plays the game."""
        if self.sampling_key is None:
            return None
        return seeding.key("rollout.move", self.sampling_key, self.index[g], self.moves[g], k)

    def live(self) -> list[int]:
        return [g for g, env in enumerate(self.games) if env.agents and g not in self.failed]

    def game_failed(self, g: int, seat: str | None, role: str | None, policy_id: str, action: Any,
                    exc: BaseException) -> None:
        """Game ``g`` raised: a :class:`GameStepError` naming everything needed to reproduce it, or, with
        ``on_error="skip"``, the game is dropped (no turns, returns or infos) and the failure recorded."""
        error = game_failure(self.games[g], self.seeds[g], f"game {self.index[g]} of rollout {self.prefix}", seat,
                             role, policy_id, action, exc)
        if self.on_error == "stop":
            raise error from exc
        self.failed.add(g)
        self.errors.append(error.record)
        self.seat_turns[g].clear()
        self.returns[g], self.infos[g] = {}, {}

    def skip_dead(self, g: int) -> None:
        env = self.games[g]
        try:  # steps finished seats with None: the game's code runs
            skip_dead(env, self.returns[g], self.infos[g], checked=True)
        except Exception as exc:  # noqa: BLE001 - the game's own code failed (or broke the contract)
            self.game_failed(g, env.agent_selection, None, "", None, exc)
            return
        if not env.agents:  # the game ended: its seats' last infos are the outcomes the learners read
            try:
                check_infos(self.infos[g])
            except ContractViolation as exc:
                self.game_failed(g, None, None, "", None, exc)

    def collect(self, g: int, s: "Seat", move: Any) -> bool:
        """Take game ``g``'s rewards and infos after seat ``s`` played ``move``, held to the contract;
        False when they broke it (the game is reported by :meth:`game_failed`)."""
        try:
            checked_collect(self.games[g], self.returns[g], self.infos[g])
        except ContractViolation as exc:
            self.game_failed(g, s.seat, s.role, s.policy_id, move, exc)
            return False
        return True

    def over_turns(self, g: int, seat: str, role: str | None, policy_id: str) -> bool:
        """Whether game ``g``, asking ``seat`` for another acting turn, would pass its ``spec.max_turns``
        (counted at the game's granularity, as ``check_game`` counts them): then it is reported as a
        contract break (:meth:`game_failed`), so a game that never ends stops within its own limit."""
        limit = getattr(getattr(self.games[g], "spec", None), "max_turns", None)
        if not isinstance(limit, int) or self.turns[g] < limit:
            return False
        self.game_failed(g, seat, role, policy_id, None, PlayLimit(
            seat, "was asked for acting turn", self.turns[g] + 1,
            f"an episode ends within spec.max_turns = {limit} acting turns (does step() end the game, with "
            "_end_game, after the last move and on every invalid move? is max_turns the most an episode takes?)"))
        return True

    def oversized(self, g: int, s: "Seat") -> bool:
        """Whether what ``s`` is asked is longer than ``max_prompt_chars``: then it is reported like a
        contract break (:meth:`game_failed`), before any tokenizer or model reads it. Only lengths are summed."""
        request = s.request
        messages = request.conversation if request.conversation is not None else request.messages
        size = sum(len(m["content"]) for m in messages)
        if size <= self.max_prompt_chars:
            return False
        self.game_failed(g, s.seat, s.role, s.policy_id, None, PlayLimit(
            s.seat, "was asked a prompt of", Chars(size),
            f"what a seat is asked (its system message and the game's text, or its conversation so far) may have "
            f"at most {self.max_prompt_chars} characters (game.max_prompt_chars)"))
        return True

    def converse(self, g: int, seat: str, system: str | None, request: Request) -> None:
        """Give ``request`` (a conversation role's) the seat's conversation, with the game's new messages."""
        conv = self.conversations.get((g, seat))
        if conv is None:
            conv = self.conversations[(g, seat)] = Conversation([{"role": "system", "content": system}] if system else [])
        env = self.games[g].unwrapped
        conv.ask(request, check_messages(env.messages(seat), f"{env.spec.id} seat {seat!r}"))

    def answered(self, g: int, seat: str, text: str, prompt_ids: list[int] | None = None,
                 response_ids: list[int] | None = None, role: str = "", policy_id: str = "",
                 error: str | None = None) -> None:
        """A seat answered: the game's move log and a conversation's history (and ids, for a model) take the answer.
        ``error``: why the agent made no move (:attr:`Action.error`): kept in the move and, when the game
        ends, in the seat's outcome (:meth:`agent_failures`)."""
        entry = {"seat": seat, "role": role, "policy": policy_id, "text": text}
        if error is not None:
            entry["error"] = error
            self.agent_errors[(g, seat)] = error
        shown = self.shown.pop((g, seat), None)  # popped: at token level it was asked at the message's start
        if shown is not None:
            entry["shown"] = shown
        self.log[g].append(entry)
        conv = self.conversations.get((g, seat))
        if conv is not None:
            conv.answered(text, prompt_ids, response_ids)

    def add_turn(self, g: int, seat: str, role: str, policy_id: str, prompt_ids: list[int], response_ids: list[int],
                 logprobs: list[float], text: str, finished: bool, policy_version: int = 0) -> None:
        self.answered(g, seat, text, prompt_ids, response_ids, role, policy_id)
        self.seat_turns[g][seat].append(Turn(
            game_index=self.index[g], episode_id=self.episode_ids[g], seat=seat, role=role, policy_id=policy_id,
            prompt_ids=prompt_ids, response_ids=response_ids, logprobs=logprobs, text=text, finished=finished,
            group_key=(f"{self.prefix}-{self.index[g] // self.group_size}", role), policy_version=policy_version,
            conversation=(g, seat) in self.conversations))

    def agent_failures(self) -> None:
        """A seat whose agent made no move (an endpoint that failed: :attr:`Action.error`) ends the game with
        an invalid move: the game judged the empty message it was stepped with by its own rules (and its
        penalty); its last info says ``invalid``, the agent's reason (then the game's) in ``reason``, and
        the agent's alone in ``agent_error``, whatever the game made of the empty message."""
        for (g, seat), error in self.agent_errors.items():
            if g in self.failed:
                continue
            info = dict(self.infos[g].get(seat) or {})
            game_reason = info.get("reason")
            reason = error if not game_reason or game_reason == error else f"{error}; the game: {game_reason}"
            self.infos[g][seat] = {**info, "invalid": True, "reason": reason, "agent_error": error}

    def result(self, t0: float, generated_tokens: int, generate_seconds: float, stats: dict) -> RolloutResult:
        self.agent_failures()
        if self.on_error == "skip":
            stats = {**stats, "game_errors": len(self.errors)}
        return RolloutResult(turns=credit(self.seat_turns, self.returns, self.infos), returns=self.returns,
                             infos=self.infos, generated_tokens=generated_tokens, generate_seconds=generate_seconds,
                             seconds=time.perf_counter() - t0, stats=stats, moves=self.log, errors=self.errors,
                             failed=sorted(self.failed), seeds=list(self.seeds))


class Mover(Protocol):
    """How one granularity answers ready seats. ``answer`` takes one agent's seats (every live game)
    and returns each seat's action, in order; ``after_step`` sees the game just stepped with it;
    ``abort`` frees what agents still hold when the rollout ends."""

    generated_tokens: int
    generate_seconds: float
    stats: dict

    def request_text(self, env: CogymEnv, g: int, seat: str) -> str | None:
        """The game's text ``seat`` is asked about now; None when it needs no request."""

    def answer(self, agent: Agent, seats: list[Seat]) -> list[Any]: ...

    def after_step(self, episodes: Episodes, s: Seat) -> None: ...

    def drop(self, g: int) -> None:
        """Forget what is under way in game ``g`` (it raised and is skipped)."""

    def abort(self) -> None: ...


def play(games: Sequence[CogymEnv], seat_map: SeatMap | Sequence[SeatMap], system_prompts: dict[str, str],
         seeds: Sequence[int], mover: Mover, episode_prefix: str, group_size: int, max_steps: int,
         game_indices: Sequence[int] | None, sampling_key: int | None = None, on_error: str = "stop",
         max_prompt_chars: int = MAX_PROMPT_CHARS) -> RolloutResult:
    """Play one episode in every game with ``mover``; see the module docstring. ``sampling_key``
    (when given) keys every request's draws (:meth:`Episodes.request_key`), so each game samples the
    same tokens however the games are split into batches, processes or workers. A game that raises
    (in reset, observe, ready_agents, messages or step, or breaking the turn contract) stops the
    rollout with a :class:`GameStepError` that names the game, seed, seat and move (``on_error="stop"``)
    or is dropped from it and reported in ``RolloutResult.errors`` (``"skip"``). So does a game that
    asks for more acting turns than its ``spec.max_turns`` (:meth:`Episodes.over_turns`) and one that
    asks a seat more than ``max_prompt_chars`` characters (:meth:`Episodes.oversized`): both are caught
    before the move is generated."""
    t0 = time.perf_counter()
    ep = Episodes(games, seeds, episode_prefix, group_size, game_indices, sampling_key, on_error, max_prompt_chars)
    steps = 0
    try:
        while live := ep.live():
            steps += 1
            if steps > max_steps:
                raise RuntimeError(f"rollout exceeded {max_steps} steps; a game never ended (check its max_turns)")
            pending, by_agent = _ready(ep, live, seat_map, system_prompts, mover)
            moves: dict[tuple[int, int], Any] = {}
            for agent, seats in by_agent.values():
                tg = time.perf_counter()
                answers = mover.answer(agent, seats)
                mover.generate_seconds += time.perf_counter() - tg
                moves.update(((s.g, s.k), a) for s, a in zip(seats, answers))
            for g, seats in pending.items():  # step every game with its moves, in the order it declared
                env = games[g]
                for s in seats:
                    _check_move(env, s, moves[(g, s.k)])  # an agent's bug is not the game's
                    if ep.over_turns(g, s.seat, s.role, s.policy_id):  # simultaneous seats passing the limit
                        mover.drop(g)
                        break
                    try:
                        if env.agent_selection != s.seat:
                            raise RuntimeError(f"ready_agents() listed {s.seat!r}, but after the moves before it "
                                               f"agent_selection is {env.agent_selection!r} (the seats a game declares "
                                               "ready must be the ones step() takes, in that order)")
                        env.step(moves[(g, s.k)])
                    except Exception as exc:  # noqa: BLE001 - the game's own code failed
                        ep.game_failed(g, s.seat, s.role, s.policy_id, moves[(g, s.k)], exc)
                        mover.drop(g)
                        break
                    ep.turns[g] += 1
                    if not ep.collect(g, s, moves[(g, s.k)]):
                        mover.drop(g)
                        break
                    mover.after_step(ep, s)
                    ep.skip_dead(g)
                    if not env.agents or g in ep.failed:
                        if g in ep.failed:
                            mover.drop(g)
                        break
    finally:
        mover.abort()  # an agent keeps no state of a rollout that ended (or failed)
    return ep.result(t0, mover.generated_tokens, mover.generate_seconds, mover.stats)


def _ready(ep: Episodes, live: list[int], seat_map: SeatMap | Sequence[SeatMap], system_prompts: dict[str, str],
           mover: Mover) -> tuple[dict[int, list[Seat]], dict[Hashable, tuple[Agent, list[Seat]]]]:
    """The ready seats of every live game, per game and grouped by the agent behind them."""
    pending: dict[int, list[Seat]] = {}
    by_agent: dict[Hashable, tuple[Agent, list[Seat]]] = {}
    for g in live:
        seats = _ready_seats(ep, g, seat_map, system_prompts, mover)
        if seats is None:
            continue
        pending[g] = seats
        for s in seats:
            by_agent.setdefault(id(s.agent), (s.agent, []))[1].append(s)
        ep.moves[g] += 1
    return pending, by_agent


def _ready_seats(ep: Episodes, g: int, seat_map: SeatMap | Sequence[SeatMap], system_prompts: dict[str, str],
                 mover: Mover) -> list[Seat] | None:
    """Game ``g``'s ready seats with their requests; None if the game raised (reported by ``ep``)."""
    env = ep.games[g]
    seats: list[Seat] = []
    try:
        ready = env.ready_agents()
        if not ready:
            raise RuntimeError(f"the game has live seats {env.agents} but ready_agents() lists none")
        roles = [env.role_of(seat) for seat in ready]
    except Exception as exc:  # noqa: BLE001 - the game's own code failed
        ep.game_failed(g, None, None, "", None, exc)
        mover.drop(g)
        return None
    for seat, role in zip(ready, roles):
        policy_id, agent = seat_map_of(seat_map, g)(seat, role)  # the caller's map: its errors are its own
        if not seats and ep.over_turns(g, seat, role, policy_id):  # the first ready seat always moves
            mover.drop(g)
            return None
        request = None
        try:
            text = mover.request_text(env, g, seat)
            if text is not None:
                ep.shown[(g, seat)] = text
                request = Request(messages=chat_messages(system_prompts.get(role), text), role=role, seat=seat,
                                  key=ep.request_key(g, len(seats)))
                if role in env.spec.conversation:
                    ep.converse(g, seat, system_prompts.get(role), request)
        except Exception as exc:  # noqa: BLE001 - observe or messages failed
            ep.game_failed(g, seat, role, policy_id, None, exc)
            mover.drop(g)
            return None
        s = Seat(g, len(seats), seat, role, policy_id, agent, request)
        if request is not None and ep.oversized(g, s):
            mover.drop(g)
            return None
        seats.append(s)
    return seats


def _check_move(env: Any, s: Seat, move: Any) -> None:
    """A move of the type the game takes (a str message; at token level an id of the vocabulary), else
    a TypeError naming the agent: a bad move is the agent's bug, not the game's."""
    space = getattr(env, "action_spaces", {}).get(s.seat)
    if hasattr(space, "n"):  # token level: Discrete(vocab)
        ok = isinstance(move, (int, np.integer)) and not isinstance(move, bool) and 0 <= int(move) < int(space.n)
    else:
        ok = isinstance(move, str)
    if not ok:
        raise TypeError(f"agent {getattr(s.agent, 'name', type(s.agent).__name__)!r} (policy {s.policy_id!r}) gave seat "
                        f"{s.seat!r} the move {move!r:.80}, not a {'token id of the vocabulary' if hasattr(space, 'n') else 'str'}")


def game_failure(env: Any, seed: int, where: str, seat: str | None, role: str | None, policy_id: str, action: Any,
                 exc: BaseException) -> GameStepError:
    """The one-block report of a game that raised or broke the game contract: game and version, seed,
    seat, role, policy, the move (cut to MAX_ACTION_SHOWN characters), the exception and the line of the
    game's code that raised it (or, for a :class:`~cogym.envs.contract.ContractViolation`, the value and
    the rule it broke: a :class:`~cogym.core.errors.GameContractError`), and the ``check_game`` call
    that holds the game to cogym's contract, importing the user's module that registered it."""
    game = env.unwrapped
    game_id, kwargs = getattr(game, "made_with", (getattr(getattr(env, "spec", None), "id", type(game).__name__), {}))
    shown = _move_text(env, seat, action)
    broke = isinstance(exc, ContractViolation)
    at = "" if broke else _raised_at(exc, game)
    error = f"{type(exc).__name__}: {exc}" if not broke else str(exc)
    record = {"game": game_id, "kwargs": kwargs, "seed": seed, "where": where, "seat": seat, "role": role,
              "policy": policy_id, "action": shown, "error": printable(error[:500], keep=""), "at": at}
    who = f"seat {seat!r} (role {role!r}{f', policy {policy_id!r}' if policy_id else ''})" if seat else "no seat (reset)"
    if broke:  # a report may hold model output: each part escaped to one line
        what, value, rule = (printable(x, keep="") for x in (exc.what, shown_value(exc.value), exc.rule))
        if isinstance(exc, PlayLimit):  # one line: the game, the seat, the size and the limit
            return GameContractError(
                f"game {game_id} (seed {seed}, {where}): {who} {what} {value}, "
                f"over the limit: {rule}; game.on_error=skip drops such games and counts them", record)
        faulty = who if exc.seat == seat else f"seat {exc.seat!r} (role {_role_of(game, exc.seat)!r})"
        lines = [f"game {game_id} broke the game contract during play ({where}, seed {seed}):",
                 f"  {faulty} {what} {value}",
                 f"  rule: {rule}"]
        if action is not None:
            lines.append(f"  after the move of {who}: {shown!r}" if exc.seat != seat else f"  after its move: {shown!r}")
        elif seat is None:
            lines.append("  in the seat's last info, when the game ended (the outcome a learner reads)")
    else:
        lines = [f"game {game_id} raised during play ({where}, seed {seed}):",
                 f"  {who}",
                 f"  move: {shown!r}" if action is not None else "  move: none (the game failed before any move)",
                 f"  error: {record['error']}"]
        if at:
            lines.append(f"  raised at {at}")
    lines += ["Reproduce it against cogym's game contract:",
              f"  {reproduce_command(game_id, kwargs)}",
              "or skip such games and count them: game.on_error=skip (logged as rollout/game_errors)."]
    return (GameContractError if broke else GameStepError)("\n".join(lines), record)


def _role_of(game: Any, seat: str) -> str | None:
    try:
        return game.role_of(seat)
    except Exception:  # noqa: BLE001 - a report must not fail on a broken game
        return None


def reproduce_command(game_id: str, kwargs: dict) -> str:
    """A shell command that holds ``game_id`` (built with ``kwargs``) to cogym's contract with
    ``check_game``, importing first the user's module that registered it (a ``.py`` file by its
    absolute path, or a dotted module), so it runs as printed from any directory."""
    code = ""
    module = module_of(game_id)
    if module and not module.startswith("cogym."):
        target = getattr(sys.modules.get(module), "__file__", None) if module.startswith("cogym_user_games.") else module
        if target:
            code = f"from cogym.runners.config.modules import import_game_modules; import_game_modules([{str(target)!r}]); "
    code += f"from cogym.envs.checks import check_game; check_game({game_id!r}, {kwargs!r})"
    if any(c in code for c in '"$`\\!'):
        return f"python -c {shlex.quote(code)}"
    return f'python -c "{code}"'


def _move_text(env: Any, seat: str | None, action: Any) -> str:
    """The move as text, cut: a message, or at token level the message so far with this token."""
    if isinstance(action, str):
        text = action
    else:
        try:  # token level: the id that ended (or continued) the message, after those before it
            text = env.codec.decode([*env.message_tokens(seat), int(action)])
        except Exception:  # noqa: BLE001 - a report must not fail on a broken game
            text = repr(action)
    return text if len(text) <= MAX_ACTION_SHOWN else text[:MAX_ACTION_SHOWN] + f"... ({len(text)} characters)"


def _raised_at(exc: BaseException, game: Any) -> str:
    """``file:line in function`` of the innermost frame of the game's own module (else the innermost)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    try:
        mine = inspect.getfile(type(game))
    except (TypeError, OSError):
        mine = ""
    frame = next((f for f in reversed(frames) if f.filename == mine), frames[-1])
    return f"{frame.filename}:{frame.lineno} in {frame.name}"
