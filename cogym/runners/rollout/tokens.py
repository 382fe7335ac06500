"""The token-level rollout: games wrapped in ``TokenLevelEnv``, one token per seat per step, batched.

The loop is :func:`cogym.runners.rollout.loop.play`'s, the one the turn-level rollout uses. At every step
the ready seat of every live game is grouped by the agent behind it, and each agent advances all
its seats' messages in one call of its token-level capability
(:class:`~cogym.core.types.TokenStreaming`): a seat starting a message is asked with the same
request as at turn level (``begin``), then every open message gets its next token (``advance``;
an ``LLMAgent`` runs one batched forward over a batched KV cache: a new message prefills its
prompt once, less a prefix it shares with earlier prompts, and each further token reads only the
new id), and a message that ended is ``close``d.
A scripted seat answers its whole message from the turn-level text and streams it one token per
step. Any agent, or wrapper, that implements the capability plays; no concrete class is asked for.

A model seat's message becomes one :class:`Turn` (prompt ids, the ids it emitted, their behaviour
log-probs) when the message ends: at its end-of-message token (``finished`` True), when the game
interrupts it, at the game's ``max_turn_tokens``, or at the agent's own ``max_new_tokens`` (the
rollout then ends the message with the end id, which is not part of the response: the model did
not choose it). The result has the same shape as the turn-level rollout's, so training is
unchanged; ``stats`` adds ``fed_tokens`` (ids the models computed) and ``prefills`` (model messages started).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Hashable, Sequence

from cogym.agents.policy import Policy
from cogym.core.types import Agent, Token, TokenStreaming
from cogym.envs.contract import observed_text
from cogym.envs.token_level import TokenLevelEnv

from cogym.runners.rollout.agents import greedy_seats
from cogym.runners.rollout.loop import MAX_PROMPT_CHARS, Episodes, RolloutResult, Seat, SeatMap, chat_messages, play


class ChatCodec:
    """A policy's tokenizer and chat template as a token-level codec.

    A seat of role ``r`` conditions on the chat rendering of ``[system: prompts[r], user: text]``
    followed by the assistant generation prompt, exactly the prompt the turn-level rollout uses.
    """

    def __init__(self, policy: Policy, system_prompts: dict[str, str]) -> None:
        self.policy, self.system_prompts = policy, dict(system_prompts)
        self.vocab_size = max(len(policy.tokenizer), int(policy.model.get_output_embeddings().weight.shape[0]))
        self.eos_id = int(policy.eos_ids[0])
        self.eos_ids = frozenset(int(e) for e in policy.eos_ids)

    def encode(self, text: str) -> list[int]:
        return list(self.policy.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.policy.decode([i for i in ids if i not in self.eos_ids])

    def prompt_ids(self, role: str, text: str) -> list[int]:
        return self.policy.render(chat_messages(self.system_prompts.get(role), text))

    def max_prompt_tokens(self, role: str, max_chars: int) -> int:
        # A tokenizer never needs more ids than UTF-8 bytes (byte fallback is the worst case).
        return len(self.prompt_ids(role, "")) + 4 * max_chars


@dataclass
class _Open:
    """A message being written: who writes it, its handle in that agent, what it has emitted."""

    agent: Agent
    handle: Hashable
    prompt_ids: list[int] | None  # None: not a model's message (no Turn)
    response_ids: list[int] = field(default_factory=list)  # every id it emitted (a Turn's only for a model)
    logprobs: list[float] = field(default_factory=list)
    finished: bool = False  # ended by the agent's own end-of-message token
    version: int = 0  # the weight version of the policy that writes it (when the message opened)


class TokenMover:
    """Token level: each ready seat emits one token; each agent advances all its seats at once."""

    def __init__(self, games: Sequence[TokenLevelEnv]) -> None:
        self.games = games
        self.generated_tokens, self.generate_seconds = 0, 0.0
        self.stats = {"fed_tokens": 0, "prefills": 0}
        self.open: dict[tuple[int, str], _Open] = {}

    def request_text(self, env: TokenLevelEnv, g: int, seat: str) -> str | None:
        return None if (g, seat) in self.open else observed_text(env, seat)

    def answer(self, agent: Agent, seats: list[Seat]) -> list[int]:
        if not isinstance(agent, TokenStreaming):
            raise TypeError(f"token-level play needs agents with the TokenStreaming capability (begin, advance, close); "
                            f"seat {seats[0].seat!r} has a {type(agent).__name__}")
        self._begin(agent, [s for s in seats if s.request is not None])
        msgs = [self.open[(s.g, s.seat)] for s in seats]
        tokens = agent.advance([m.handle for m in msgs])
        if len(tokens) != len(msgs):
            raise RuntimeError(f"agent {agent.name!r} advanced {len(tokens)} messages, asked for {len(msgs)}")
        return [self._record(s, m, t) for s, m, t in zip(seats, msgs, tokens)]

    def _begin(self, agent: Agent, new: list[Seat]) -> None:
        """Open the new messages, one ``begin`` per codec (every game of a run usually shares one)."""
        by_codec: dict[tuple, list[Seat]] = {}
        for s in new:
            env = self.games[s.g]
            by_codec.setdefault((id(env.codec), env.max_turn_tokens), []).append(s)
        for group in by_codec.values():
            env = self.games[group[0].g]
            opened = agent.begin([s.request for s in group], _encoder(env))
            for s, m in zip(group, opened, strict=True):
                version = getattr(getattr(agent, "policy", None), "version", 0)
                self.open[(s.g, s.seat)] = _Open(agent, m.handle, m.prompt_ids, version=version)

    def _record(self, s: Seat, msg: _Open, token: Token) -> int:
        """Keep a model's token for its Turn; return the id to step the game with."""
        codec = self.games[s.g].codec
        if token.id is None:
            if not token.end:
                raise RuntimeError(f"agent {msg.agent.name!r} gave seat {s.seat!r} a step with no token that does not end the message")
            return codec.eos_id  # the agent's own limit ends the message; not a choice of the model
        if msg.prompt_ids is not None:
            if token.logprob is None:
                raise RuntimeError(f"agent {msg.agent.name!r} gave a model message a token without its log-prob")
            if not msg.response_ids and token.read > 0:
                self.stats["prefills"] += 1
            self.stats["fed_tokens"] += token.read
            self.generated_tokens += 1
            msg.logprobs.append(float(token.logprob))
        msg.response_ids.append(int(token.id))  # a scripted seat's ids too: its message's text for transcripts
        msg.finished = token.end
        return codec.eos_id if token.end else int(token.id)

    def after_step(self, episodes: Episodes, s: Seat) -> None:
        env = self.games[s.g]
        if env.in_message(s.seat):
            return
        msg = self.open.pop((s.g, s.seat))  # ended: its own end, the game's cut, or a length limit
        msg.agent.close([msg.handle])
        if msg.prompt_ids is not None:
            episodes.add_turn(s.g, s.seat, s.role, s.policy_id, list(msg.prompt_ids), msg.response_ids, msg.logprobs,
                              env.codec.decode(msg.response_ids), msg.finished, msg.version)
        else:
            episodes.answered(s.g, s.seat, env.codec.decode(msg.response_ids), role=s.role, policy_id=s.policy_id)

    def drop(self, g: int) -> None:
        for key in [k for k in self.open if k[0] == g]:
            msg = self.open.pop(key)
            msg.agent.close([msg.handle])

    def abort(self) -> None:
        for msg in self.open.values():
            msg.agent.close([msg.handle])
        self.open.clear()


def _encoder(env: TokenLevelEnv) -> Callable[[str], list[int]]:
    """The game's ids of a text message, cut to what ``max_turn_tokens`` can take (bounded work)."""
    return lambda text: env.encode_message(text)[:-1]  # without the end id: the stream's end says it


def token_rollout(games: Sequence[TokenLevelEnv], seat_map: SeatMap | Sequence[SeatMap], system_prompts: dict[str, str], seeds: Sequence[int],
                  episode_prefix: str = "ep", group_size: int = 1, max_steps: int = 1_000_000,
                  game_indices: Sequence[int] | None = None, sampling_key: int | None = None,
                  on_error: str = "stop", max_prompt_chars: int = MAX_PROMPT_CHARS,
                  greedy: Collection[str] = ()) -> RolloutResult:
    """Play one episode in every token-level game; return its turns (one per model message).
    ``game_indices``, ``sampling_key``, ``on_error``, ``max_prompt_chars`` and ``greedy``: as in
    :func:`~cogym.runners.rollout.turns.rollout` (``spec.max_turns`` counts tokens here, as the wrapper declares);
    ``max_steps`` counts steps of the whole batch (one token per live game each)."""
    for env in games:
        if not isinstance(env, TokenLevelEnv):
            raise TypeError(f"token_rollout plays token-level games (make(..., granularity='token')), got {type(env).__name__}")
    return play(games, greedy_seats(seat_map, greedy), system_prompts, seeds, TokenMover(games), episode_prefix, group_size, max_steps,
                game_indices, sampling_key, on_error, max_prompt_chars)
