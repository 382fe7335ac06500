"""Token-level play: any turn-level cogym game, one token per step.

``cogym.envs.make("debate-v0", granularity="token")`` wraps the turn-level game in
:class:`TokenLevelEnv`, so a game is written once and played at either granularity.

Action
    ``gymnasium.spaces.Discrete(codec.vocab_size)``: one token id. A seat's message is the tokens
    it emits until it emits an end id (not part of the message): ``codec.eos_id``, or any id of
    ``codec.eos_ids`` when the codec has that attribute (a chat model that ends on either of two
    ids), or until it reaches ``max_turn_tokens`` tokens (the message is then submitted as it is).
    The decoded message is stepped into the turn-level game, whose rules judge it exactly as at
    turn level.

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``(context_tokens,)``, the seat's context, the ids it conditions on:
    ``codec.prompt_ids(role, text)`` of the turn-level observation text, followed by the tokens it
    has emitted so far in the current message, padded with ``-1``. ``context_tokens`` is a bound
    computed from the game's declared text length, so a context is never cut.
    ``"length"``: int64 ``[context length, tokens emitted in the current message]``.

Interruption
    After every token that does not end a message, the wrapper asks the game
    ``interrupt(agent, partial_text)``. A game returns True to stop the message at that token (a
    verifier that cuts a wrong answer short); the partial text is then stepped as the message.
    ``CogymEnv.interrupt`` returns False, so ordinary games never interrupt.

Rewards, terminations, infos and seat order are the turn-level game's: a token that does not end
a message gives every seat 0. ``spec`` is the game's with ``max_turns`` counted in tokens
(``max_turns * max_turn_tokens``). The wrapper draws no random numbers of its own.

Codecs
    The wrapper turns text into ids through a :class:`Codec`. The default :class:`ByteCodec` (UTF-8
    bytes plus an end-of-message id) needs no model; the runner passes a codec built on a policy's
    tokenizer and chat template so the ids are exactly the model's (token in, token out).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import gymnasium
import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, Text
from pettingzoo import AECEnv

from cogym.envs.base import CogymEnv, GameSpec, seed_spaces, seeded_space

GRANULARITIES = ("turn", "token")
DEFAULT_MAX_TURN_TOKENS = 64
PAD = -1


@runtime_checkable
class Codec(Protocol):
    """Text <-> token ids for token-level play."""

    vocab_size: int
    eos_id: int

    def encode(self, text: str) -> list[int]:
        """Ids of a message's text (no special tokens)."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a message's ids (``eos_id`` never included)."""

    def prompt_ids(self, role: str, text: str) -> list[int]:
        """The ids a seat of ``role`` conditions on for observation ``text``, before its reply."""

    def max_prompt_tokens(self, role: str, max_chars: int) -> int:
        """An upper bound of ``len(prompt_ids(role, t))`` over texts of at most ``max_chars`` characters."""


class ByteCodec:
    """UTF-8 bytes as ids 0..255 and id 256 as end of message; the prompt is the text's bytes."""

    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8", errors="replace"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def prompt_ids(self, role: str, text: str) -> list[int]:
        return self.encode(text)

    def max_prompt_tokens(self, role: str, max_chars: int) -> int:
        return 4 * max_chars  # at most 4 UTF-8 bytes a character


class TokenLevelEnv(AECEnv):
    """The token-level view of a turn-level game; see the module docstring."""

    def __init__(self, env: CogymEnv, codec: Codec | None = None, max_turn_tokens: int = DEFAULT_MAX_TURN_TOKENS) -> None:
        super().__init__()
        if not isinstance(env, CogymEnv):
            raise TypeError(f"TokenLevelEnv wraps a turn-level CogymEnv, got {type(env).__name__}")
        if isinstance(max_turn_tokens, bool) or not isinstance(max_turn_tokens, int) or max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be an int >= 1, got {max_turn_tokens!r}")
        codec = ByteCodec() if codec is None else codec
        if not isinstance(codec, Codec):
            raise TypeError(f"codec must implement the Codec protocol (vocab_size, eos_id, encode, decode, prompt_ids, max_prompt_tokens), got {type(codec).__name__}")
        ends = frozenset(int(e) for e in getattr(codec, "eos_ids", ())) | {int(codec.eos_id)}
        outside = sorted(e for e in ends if not 0 <= e < codec.vocab_size)
        if outside:
            raise ValueError(f"end-of-message id(s) {outside} of the codec are outside the vocabulary [0, {codec.vocab_size})")
        self.env, self.codec, self.max_turn_tokens = env, codec, max_turn_tokens
        self.end_ids = ends  # any of them ends a message
        self.metadata = {**env.metadata, "name": f"{env.metadata.get('name', 'cogym_env')}_token"}
        self.render_mode = env.render_mode
        self.possible_agents = list(env.possible_agents)
        inner = env.spec
        self.spec = GameSpec(id=inner.id, roles=inner.roles, reward_range=inner.reward_range, zero_sum=inner.zero_sum,
                             max_turns=inner.max_turns * max_turn_tokens, description=inner.description,
                             outcomes=inner.outcomes, conversation=inner.conversation, evaluators=inner.evaluators)
        self.context_tokens: dict[str, int] = {}
        self.observation_spaces: dict[str, Dict] = {}
        self.action_spaces: dict[str, Discrete] = {}
        for agent in self.possible_agents:
            text = env.observation_space(agent)["text"]
            if not isinstance(text, Text):
                raise TypeError(f"{inner.id}: observation_space({agent!r})['text'] must be a Text space to bound token contexts")
            n = codec.max_prompt_tokens(env.role_of(agent), text.max_length) + max_turn_tokens
            self.context_tokens[agent] = n
            self.observation_spaces[agent] = Dict({
                "observation": Box(low=PAD, high=codec.vocab_size - 1, shape=(n,), dtype=np.int64),
                "length": Box(low=0, high=n, shape=(2,), dtype=np.int64),
            })
            self.action_spaces[agent] = Discrete(codec.vocab_size)
        self._message: dict[str, list[int]] = {}  # tokens emitted so far in each seat's current message
        self._prompt: dict[str, list[int]] = {}  # context at the start of each seat's current message

    # ------------------------------------------------ the turn-level game's AEC state
    # PettingZoo reads these as attributes; they live in the wrapped game.
    def _inner(name: str):  # noqa: N805 - a property factory used in the class body
        return property(lambda self: getattr(self.env, name), lambda self, value: setattr(self.env, name, value))

    agents = _inner("agents")
    rewards = _inner("rewards")
    _cumulative_rewards = _inner("_cumulative_rewards")
    terminations = _inner("terminations")
    truncations = _inner("truncations")
    infos = _inner("infos")
    agent_selection = _inner("agent_selection")
    del _inner

    @property
    def unwrapped(self) -> CogymEnv:
        return self.env

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.np_random

    def role_of(self, agent: str) -> str:
        return self.env.role_of(agent)

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        self.env._check_seat(agent)
        return seeded_space(self, agent)

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        self.env._check_seat(agent)
        return self.action_spaces[agent]

    def ready_agents(self) -> list[str]:
        """One seat at a time: simultaneous seats of the game emit their messages one after another."""
        return self.env.ready_agents()[:1]

    def in_message(self, agent: str) -> bool:
        """Whether ``agent`` has emitted tokens of a message it has not finished."""
        return bool(self._message.get(agent))

    def encode_message(self, text: str) -> list[int]:
        """The tokens that emit ``text`` as one message: its ids (of a prefix long enough to fill
        ``max_turn_tokens``) and the end-of-message id. What a scripted seat plays at token level."""
        return self.codec.encode(text[: 4 * self.max_turn_tokens]) + [self.codec.eos_id]

    def message_tokens(self, agent: str) -> list[int]:
        """The tokens ``agent`` has emitted so far in its current message."""
        return list(self._message.get(agent, []))

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.env.reset(seed=seed, options=options)
        if seed is not None:
            seed_spaces(self, [int(seed), 1])  # own streams, apart from the ones the game gave its text spaces
        self._message, self._prompt = {}, {}

    def context_ids(self, agent: str) -> list[int]:
        """The ids ``agent`` conditions on now: its prompt, then its unfinished message."""
        if agent not in self._prompt or not self._message.get(agent):
            self._prompt[agent] = self.codec.prompt_ids(self.env.role_of(agent), self.env.observe(agent)["text"])
        return self._prompt[agent] + self._message.get(agent, [])

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        self.env._check_seat(agent)
        ids = self.context_ids(agent)
        n = self.context_tokens[agent]
        if len(ids) > n:  # a codec broke its max_prompt_tokens promise; fail loudly rather than cut
            raise RuntimeError(f"context of {agent!r} has {len(ids)} ids, more than the declared bound {n}; "
                               f"{type(self.codec).__name__}.max_prompt_tokens underestimates")
        obs = np.full(n, PAD, dtype=np.int64)
        obs[: len(ids)] = ids
        return {"observation": obs, "length": np.array([len(ids), len(self._message.get(agent, []))], dtype=np.int64)}

    def step(self, action: Any) -> None:
        agent = getattr(self.env, "agent_selection", None)
        if agent is None or agent not in self.env.agents:
            raise RuntimeError("step() called before reset() or after every seat left the game; call reset() first")
        if self.env.terminations[agent] or self.env.truncations[agent]:
            self.env.step(None)  # the game removes the finished seat (AEC protocol)
            return
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
            raise TypeError(f"the action of seat {agent!r} must be one token id (an int), got {type(action).__name__}")
        token = int(action)
        if not 0 <= token < self.codec.vocab_size:
            raise ValueError(f"token id {token} of seat {agent!r} is outside the vocabulary [0, {self.codec.vocab_size})")
        if not self._message.get(agent):
            self.context_ids(agent)  # fix the prompt this message answers
        message = self._message.setdefault(agent, [])
        done = token in self.end_ids
        if not done:
            message.append(token)
            # The game sees every token, the last one a message may have included.
            done = self.env.interrupt(agent, self.codec.decode(message)) or len(message) >= self.max_turn_tokens
        if done:
            text = self.codec.decode(message)
            self._message[agent] = []
            self.env.step(text)
            return
        # A token inside a message: nobody is rewarded; the acting seat has seen its cumulative reward.
        self.env._cumulative_rewards[agent] = 0.0
        self.env.rewards = {a: 0.0 for a in self.env.agents}

    def render(self) -> str | None:
        out = self.env.render()
        if out is None:
            return None
        partial = {a: self.codec.decode(m) for a, m in self._message.items() if m}
        return out + (f" | unfinished: {partial}" if partial else "")

    def close(self) -> None:
        self.env.close()


def wrap(env: CogymEnv, granularity: str, codec: Codec | None = None, max_turn_tokens: int | None = None) -> CogymEnv | TokenLevelEnv:
    """``env`` at ``granularity`` ("turn" returns it unchanged; "token" wraps it)."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if granularity == "turn":
        if codec is not None or max_turn_tokens is not None:
            raise ValueError("codec and max_turn_tokens only apply to granularity='token'")
        return env
    return TokenLevelEnv(env, codec=codec, max_turn_tokens=DEFAULT_MAX_TURN_TOKENS if max_turn_tokens is None else max_turn_tokens)
