"""The base every cogym game builds on: a PettingZoo ``AECEnv`` whose actions are whole messages.

Contract shared by all games (checked by ``cogym.envs.checks.check_game``):

* **Observation**: a ``gymnasium.spaces.Dict`` with a numeric ``"observation"`` entry (a small
  int64 vector such as ``[phase, seat]``) and a ``"text"`` entry (``gymnasium.spaces.Text``)
  holding the message the seat must answer. The runner adds per-role system instructions from
  config; the game never sees a model.
* **Action**: one whole message, ``gymnasium.spaces.Text``. Any ``str`` is accepted and judged by
  the game's rules (the space's charset only says what random sampling draws: model output may
  hold any character). A non-``str`` action is a caller bug and raises ``TypeError``.
* **Invalid actions** are a declared policy (a penalty and the end of the game), reported in
  ``infos[agent]["invalid"]`` and ``infos[agent]["reason"]``, never an exception.
* **Simultaneous seats**: ``ready_agents()`` lists the seats that may act now without seeing each
  other's moves, in the order ``step`` will take them; the runner generates their messages in
  one batch, then steps each. A game guarantees that acting does not change the observation of
  the other ready seats.
* **RNG**: ``reset(seed=...)`` seeds a ``numpy.random.Generator`` owned by this instance
  (``self.np_random``); no game touches the global ``random`` or numpy state, so resetting one
  copy never changes another copy's draws.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import gymnasium
import numpy as np
from gymnasium.spaces import Text
from pettingzoo import AECEnv

from cogym.core import seeding
from cogym.core.outcome import KEYS as ALL_OUTCOME_KEYS

OUTCOME_KEYS = tuple(k for k in ALL_OUTCOME_KEYS if k != "role")  # every seat's info names its role

# Printable ASCII, whitespace included: what random text actions are drawn from.
PRINTABLE_CHARSET: frozenset[str] = frozenset(string.printable)


@dataclass(frozen=True)
class GameSpec:
    """What a game declares about itself; ``check_game`` holds it to every field."""

    id: str
    roles: tuple[str, ...]
    reward_range: tuple[float, float]
    zero_sum: bool
    max_turns: int
    description: str
    # role -> the contract keys (cogym.core.outcome: correct, invalid, reason, reference, task, metrics)
    # every seat of that role has in its last info of an episode; check_game holds the game to it.
    outcomes: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # Roles whose seats play a conversation: each move's context is the seat's whole exchange so far
    # (its earlier prompts and answers verbatim, then the game's new messages, CogymEnv.messages);
    # every other role gets a fresh context each move (the system message and the game's text now).
    conversation: tuple[str, ...] = ()
    # name -> {kind: <evaluator kind>, ...its settings}: what a run of this game measures before and after
    # training (cogym.runners.evaluation; cogym eval --game runs them too). A config's eval.evaluators
    # overrides an entry key by key, eval.evaluators.<name>: null drops it, eval.declared: false drops all.
    evaluators: Mapping[str, Mapping] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.roles:
            raise ValueError(f"GameSpec {self.id!r}: roles must not be empty")
        object.__setattr__(self, "conversation", tuple(self.conversation))
        stray = [r for r in self.conversation if r not in self.roles]
        if stray:
            raise ValueError(f"GameSpec {self.id!r}: conversation names {stray}, which are not in roles {self.roles}")
        # A copy of its own (a wrapper that passes the spec's outcomes on shares nothing mutable);
        # a plain dict, so specs and games still deep-copy and pickle.
        object.__setattr__(self, "outcomes", {r: tuple(k) for r, k in self.outcomes.items()})
        object.__setattr__(self, "evaluators", {str(n): dict(e) for n, e in self.evaluators.items()})
        for name, ev in self.evaluators.items():
            if "kind" not in ev:
                raise ValueError(f"GameSpec {self.id!r}: evaluators[{name!r}] needs a kind, got {ev}")
        for role, keys in self.outcomes.items():
            if role not in self.roles:
                raise ValueError(f"GameSpec {self.id!r}: outcomes names role {role!r}, which is not in roles {self.roles}")
            unknown = [k for k in keys if k not in OUTCOME_KEYS]
            if unknown:
                raise ValueError(f"GameSpec {self.id!r}: outcomes[{role!r}] has {unknown}, not contract keys {OUTCOME_KEYS}")
        lo, hi = self.reward_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ValueError(f"GameSpec {self.id!r}: reward_range must be finite (low, high) with low <= high, got {self.reward_range}")
        if self.max_turns < 1:
            raise ValueError(f"GameSpec {self.id!r}: max_turns must be >= 1, got {self.max_turns}")


def seed_spaces(env: Any, entropy: int | list[int]) -> None:
    """Seed every seat's action and observation space of ``env`` from its own child of ``entropy``
    (children ``2i`` and ``2i + 1`` of seat ``i``, as ``SeedSequence(entropy).spawn`` numbers them).

    Action spaces are seeded here. Observation spaces (Dicts, whose seeding seeds every part and
    cost more than a whole rollout's resets are worth; training never samples them) are seeded when
    first asked for through ``env.observation_space(agent)`` (:func:`seeded_space`): sample them
    through that call, not through a space object fetched before the reset.
    """
    env._space_entropy, env._unseeded = entropy, set(env.possible_agents)
    for i, agent in enumerate(env.possible_agents):
        env.action_spaces[agent].seed(seeding.seed("game.spaces", entropy, 2 * i))


def seeded_space(env: Any, agent: str) -> gymnasium.spaces.Space:
    """``env.observation_spaces[agent]``, seeded first if :func:`seed_spaces` ran since it was last seeded."""
    if agent in getattr(env, "_unseeded", ()):
        env._unseeded.discard(agent)
        env.observation_spaces[agent].seed(seeding.seed("game.spaces", env._space_entropy, 2 * list(env.possible_agents).index(agent) + 1))
    return env.observation_spaces[agent]


def int_arg(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (no upper bound when ``high`` is None), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an int {bound}, got {value!r}")
    return int(value)


def finite_arg(name: str, value: Any) -> float:
    """``value`` as a finite float, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def penalty_arg(name: str, value: Any) -> float:
    """A penalty: a finite number <= 0, else ValueError."""
    value = finite_arg(name, value)
    if value > 0:
        raise ValueError(f"{name} must be <= 0 (it is a penalty), got {value}")
    return value


def text_space(max_length: int, extra_chars: str | frozenset[str] = "") -> Text:
    """A Text space of printable ASCII plus ``extra_chars``, empty string allowed."""
    return Text(max_length=max_length, min_length=0, charset=PRINTABLE_CHARSET | frozenset(extra_chars))


class CogymEnv(AECEnv[str, dict[str, Any], str]):
    """Base class for cogym games (turn level: an action is one message).

    Subclasses set ``self.spec``, ``self.possible_agents``, ``self.observation_spaces``,
    ``self.action_spaces`` and ``self._seat_roles`` in ``__init__``, implement ``reset``,
    ``step``, ``observe`` and ``_render_text``, and use the ``_start_episode`` / ``_begin_turn``
    / ``_end_game`` helpers so the AEC bookkeeping (cumulative rewards, removal of finished
    seats) is the same in every game.
    """

    metadata: dict[str, Any] = {"name": "cogym_env", "render_modes": ["ansi"], "is_parallelizable": False}
    spec: GameSpec

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        self._np_random: np.random.Generator | None = None
        self._seat_roles: dict[str, str] = {}
        self._skip_agent_selection: str | None = None
        self.agents: list[str] = []

    # ----------------------------------------------------------------- RNG
    @property
    def np_random(self) -> np.random.Generator:
        """This game's own generator; created from fresh entropy if ``reset`` had no seed yet."""
        if self._np_random is None:
            self._np_random = seeding.rng("game.unseeded", None)
        return self._np_random

    def _seed(self, seed: int | None) -> None:
        """Reseed on an explicit seed; without one keep drawing from the current generator."""
        if seed is None:
            return
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        self._np_random = seeding.rng("game.reset", int(seed))
        # The spaces get their own streams (children of the seed) so that sampling random
        # actions never shifts the game's draws, and api_test's samples are reproducible.
        seed_spaces(self, int(seed))

    # -------------------------------------------------------------- seats
    def _check_seat(self, agent: str) -> None:
        if agent not in self._seat_roles:
            raise ValueError(f"unknown seat {agent!r}; this game's seats are {list(self.possible_agents)}")

    def role_of(self, agent: str) -> str:
        """The role played by seat ``agent`` (e.g. ``"solver"`` for ``"solver_3"``)."""
        self._check_seat(agent)
        return self._seat_roles[agent]

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        self._check_seat(agent)
        return seeded_space(self, agent)

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        self._check_seat(agent)
        return self.action_spaces[agent]

    def ready_agents(self) -> list[str]:
        """Seats that may act now without seeing each other's moves, in the order to step them."""
        agent = getattr(self, "agent_selection", None)
        if agent is None or agent not in self.agents:
            return []
        if self.terminations[agent] or self.truncations[agent]:
            return []
        return [agent]

    def _yet_to_answer(self, seats: Sequence[str], answered: Mapping[str, Any] | set[str]) -> list[str]:
        """Simultaneous seats: those of ``seats`` still in the game that have not answered, in seat order.

        A game whose seats answer one shared observation independently returns this from
        ``ready_agents()`` during that phase.
        """
        return [s for s in seats if s in self.agents and s not in answered and not self.terminations[s]]

    def messages(self, agent: str) -> list[dict[str, str]]:
        """The messages new to ``agent`` since its last move, for a seat of a conversation role
        (``spec.conversation``): chat messages ``{"role": "user" | "tool", "content": str}``, at
        least one. Its first move gets everything it must know; a later one, what happened since
        (a tool's result as a ``tool`` message, another seat's move as a ``user`` one). The default
        repeats the whole observation text as one user message, which is right for any game but
        grows the context by the whole text each move; a game made for conversations overrides it.
        Only called when the seat is about to act; it must not change the game."""
        return [{"role": "user", "content": self.observe(agent)["text"]}]

    def interrupt(self, agent: str, partial: str) -> bool:
        """Token level: called after each token of ``agent``'s unfinished message with its text so far.

        Return True to end the message at this token (the partial text is then stepped as the whole
        message). Only a game in which token-level play matters overrides this; the default never
        interrupts. It must not change what ``observe`` returns. ``partial`` is the codec's decoding
        of the tokens so far, so a character cut between tokens (a multi-byte character half
        written) may show as U+FFFD until its last token arrives.
        """
        return False

    # ------------------------------------------------------ AEC bookkeeping
    def _start_episode(self, infos: Mapping[str, dict[str, Any]]) -> None:
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: dict(infos[a]) for a in self.agents}
        # _was_dead_step keeps this across calls; a stale value would select a removed seat.
        self._skip_agent_selection = None
        self.agent_selection = self.agents[0]

    def _begin_turn(self, action: Any) -> str | None:
        """Common start of ``step``: returns the acting seat, or None if a finished seat was removed."""
        agent = getattr(self, "agent_selection", None)
        if agent is None or agent not in self.agents:
            raise RuntimeError("step() called before reset() or after every seat left the game; call reset() first")
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return None
        if not isinstance(action, str):
            raise TypeError(f"the action of seat {agent!r} must be a str (one whole message), got {type(action).__name__}")
        # The acting seat has seen its cumulative reward through last(); start it again from 0.
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        return agent

    def _end_game(self, rewards: Mapping[str, float]) -> None:
        """Give the final rewards, end every seat, and hand the turn to the first finished seat."""
        for agent in self.agents:
            self.rewards[agent] = float(rewards.get(agent, 0.0))
            self.terminations[agent] = True
        self._accumulate_rewards()
        self.agent_selection = self.agents[0]

    # ----------------------------------------------------------- rendering
    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; create the game with render_mode='ansi'")
            return None
        return self._render_text()

    def _render_text(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release: games hold no windows, processes or connections."""


ROLES = ("user", "tool")  # what a game may say to a seat (its own answers are the assistant's)
MAX_MESSAGES = 64  # new messages a game may give a seat at one move
MAX_CHARS = 1 << 20  # characters of one move's new messages


def check_messages(messages: object, where: str) -> list[dict]:
    """``messages`` checked to be what :meth:`CogymEnv.messages` promises: a non-empty list of at most
    ``MAX_MESSAGES`` ``{"role": "user" | "tool", "content": str}`` with at most ``MAX_CHARS`` in all."""
    if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
        raise TypeError(f"{where}: messages() must return a list of 1..{MAX_MESSAGES} chat messages, got {messages!r:.200}")
    size = 0
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise TypeError(f"{where}: each message must be {{'role': 'user' | 'tool', 'content': str}}, got {m!r:.200}")
        size += len(m["content"])
    if size > MAX_CHARS:
        raise ValueError(f"{where}: messages() returned {size} characters, more than {MAX_CHARS}")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def seat_names(role: str, count: int) -> Sequence[str]:
    """``role_0`` ... ``role_{count-1}``: PettingZoo's recommended seat naming."""
    return [f"{role}_{i}" for i in range(count)]
