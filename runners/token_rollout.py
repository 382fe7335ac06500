"""The token-level rollout: games wrapped in ``TokenLevelEnv``, one token per step, KV caches reused.

Every LLM seat of every game keeps a :class:`~cogym.agents.kv_session.KVSession`: at each step it
reads only the ids its context gained since its last step (usually the one token it just emitted),
so within a message the cost of a token does not grow with the transcript; each new message
starts with one prefill of its (re-rendered) prompt, and the session is dropped when the message
ends. A scripted seat answers its whole message from the turn-level text and emits it one token
per step. A model seat's message becomes one :class:`Turn` (prompt ids, the ids it emitted, their
behaviour log-probs) when the message ends: at its end-of-message token (``finished`` True), when
the game interrupts it, at the game's ``max_turn_tokens``, or at the policy's own
``max_new_tokens`` (the rollout then ends the message with the end id, which is not part of the
response: the model did not choose it). The result has the same shape as the turn-level
rollout's, so training is unchanged.

Seats step one at a time, each LLM step a batch-one forward on its own cache; the turn-level
rollout (one batched generate per policy per step) is the fast path for games that do not need
token-level control.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from cogym.agents.kv_session import KVSession, sample_token
from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy
from cogym.agents.scripted import ScriptedAgent
from cogym.agents.types import Request, Turn
from cogym.envs.token_level import TokenLevelEnv

from .rollout import RolloutResult, SeatMap, _collect, _skip_dead, chat_messages, credit, seat_map_of


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
    """A message being emitted."""

    policy_id: str
    prompt_ids: list[int]
    session: KVSession
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def token_rollout(games: Sequence[TokenLevelEnv], seat_map: SeatMap | Sequence[SeatMap], system_prompts: dict[str, str], seeds: Sequence[int],
                  episode_prefix: str = "ep", group_size: int = 1, max_steps: int = 1_000_000,
                  game_indices: Sequence[int] | None = None) -> RolloutResult:
    """Play one episode in every token-level game; return its turns (one per LLM message).
    ``game_indices``: as in :func:`~cogym.runners.rollout.rollout` (a data-parallel rank's share)."""
    if len(seeds) != len(games):
        raise ValueError(f"need one seed per game: {len(games)} games, {len(seeds)} seeds")
    for env in games:
        if not isinstance(env, TokenLevelEnv):
            raise TypeError(f"token_rollout plays token-level games (make(..., granularity='token')), got {type(env).__name__}")
    t0 = time.perf_counter()
    returns: list[dict[str, float]] = [dict() for _ in games]
    infos: list[dict[str, dict]] = [dict() for _ in games]
    seat_turns: list[dict[str, list[Turn]]] = [defaultdict(list) for _ in games]
    index = list(game_indices) if game_indices is not None else list(range(len(games)))
    episode_ids = [f"{episode_prefix}-{i}" for i in index]
    stats = {"fed_tokens": 0, "prefills": 0}
    queues: dict[tuple[int, str], list[int]] = {}
    open_: dict[tuple[int, str], _Open] = {}
    gen_tokens, gen_seconds, steps = 0, 0.0, 0
    for g, (env, seed) in enumerate(zip(games, seeds)):
        env.reset(seed=int(seed))
        _skip_dead(env, returns[g], infos[g])

    def close(g: int, seat: str, role: str, finished: bool) -> None:
        msg = open_.pop((g, seat))
        stats["fed_tokens"] += msg.session.fed_tokens  # the cache is freed with the message
        stats["prefills"] += msg.session.prefills
        text = games[g].codec.decode(msg.response_ids)
        seat_turns[g][seat].append(Turn(
            game_index=index[g], episode_id=episode_ids[g], seat=seat, role=role, policy_id=msg.policy_id,
            prompt_ids=msg.prompt_ids, response_ids=msg.response_ids, logprobs=msg.logprobs, text=text,
            finished=finished, group_key=(f"{episode_prefix}-{index[g] // group_size}", role)))

    while True:
        live = [g for g, env in enumerate(games) if env.agents]
        if not live:
            break
        for g in live:
            steps += 1
            if steps > max_steps:
                raise RuntimeError(f"token rollout exceeded {max_steps} steps; a game never ended")
            env = games[g]
            ready = env.ready_agents()
            if not ready:
                raise RuntimeError(f"game {g} ({env.spec.id}) has live seats {env.agents} but none is ready")
            seat = ready[0]
            role = env.role_of(seat)
            policy_id, agent = seat_map_of(seat_map, g)(seat, role)
            key = (g, seat)
            if isinstance(agent, LLMAgent):
                msg = open_.get(key)
                if msg is not None and len(msg.response_ids) >= agent.sampling.max_new_tokens:
                    # The policy's own length limit: end the message with an id the model did not choose.
                    env.step(env.codec.eos_id)
                    close(g, seat, role, finished=False)
                else:
                    context = env.context_ids(seat)
                    if msg is None:
                        msg = open_[key] = _Open(policy_id, list(context), KVSession(agent.policy))
                    tg = time.perf_counter()
                    token, logprob = sample_token(msg.session.next_logits(context), agent.sampling)
                    gen_seconds += time.perf_counter() - tg
                    gen_tokens += 1
                    msg.response_ids.append(token)
                    msg.logprobs.append(logprob)
                    is_eos = token in getattr(env.codec, "eos_ids", (env.codec.eos_id,))
                    env.step(env.codec.eos_id if is_eos else token)
                    if not env.in_message(seat):
                        close(g, seat, role, finished=is_eos)
            elif isinstance(agent, ScriptedAgent):
                queue = queues.setdefault(key, [])
                if not env.in_message(seat):  # a new message; the tail of a cut one is dropped
                    request = Request(messages=chat_messages(system_prompts.get(role), env.env.observe(seat)["text"]),
                                      role=role, seat=seat)
                    queue[:] = env.encode_message(agent.act([request])[0].text)
                env.step(queue.pop(0))
            else:
                raise TypeError(f"token-level play drives LLMAgent and ScriptedAgent seats; seat {seat!r} has a "
                                f"{type(agent).__name__}")
            _collect(env, returns[g], infos[g])
            _skip_dead(env, returns[g], infos[g])
    return RolloutResult(turns=credit(seat_turns, returns, infos), returns=returns, infos=infos, generated_tokens=gen_tokens,
                         generate_seconds=gen_seconds, seconds=time.perf_counter() - t0, stats=stats)
