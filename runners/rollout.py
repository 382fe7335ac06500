"""The vectorized rollout: many live games, one batched ``act`` per policy per step.

At every step each live game names the seats that may act now (``ready_agents()``: one seat in
a plain AEC game, all k solvers at once in proposer–solver). The requests of every game are
grouped by the agent behind each seat and each agent answers its whole group in one call; then
every game is stepped with its actions in AEC order. Each LLM move becomes a :class:`Turn` that
keeps the exact prompt and response token ids and the behaviour log-probabilities.

``rollout`` is a plain function of (games, seat assignment, prompts, seeds) so it runs unchanged
inside a worker process or a Ray actor.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from cogym.agents.types import Action, Agent, Request, Turn
from cogym.core.outcome import SeatOutcome
from cogym.envs.base import CogymEnv


@dataclass
class RolloutResult:
    turns: list[Turn]  # LLM moves only (the ones a learner can train on)
    returns: list[dict[str, float]]  # per game: seat -> total reward
    infos: list[dict[str, dict]]  # per game: seat -> last info
    generated_tokens: int = 0
    generate_seconds: float = 0.0
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)


SeatMap = Callable[[str, str], tuple[str, Agent]]  # (seat, role) -> (policy id, agent)


def seat_map_of(seat_map: SeatMap | Sequence[SeatMap], g: int) -> SeatMap:
    """The seat map of game ``g``: one map for every game (training), or one per game (a tournament
    seats different players in each game; generation is still batched by agent across games)."""
    return seat_map if callable(seat_map) else seat_map[g]


def chat_messages(system: str | None, text: str) -> list[dict]:
    """What a seat is asked: the role's system message (when it has one), then the game's text."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


def _skip_dead(env: CogymEnv, returns: dict[str, float], infos: dict[str, dict]) -> None:
    """Step finished seats with None (the AEC protocol) until a live seat or no seat is left."""
    while env.agents:
        sel = env.agent_selection
        if not (env.terminations.get(sel) or env.truncations.get(sel)):
            return
        env.step(None)
        _collect(env, returns, infos)


def _collect(env: CogymEnv, returns: dict[str, float], infos: dict[str, dict]) -> None:
    """Add this step's rewards to each seat's return and keep each seat's latest info
    (PettingZoo drops a finished seat's entries once it is stepped with None)."""
    for seat, r in env.rewards.items():
        returns[seat] = returns.get(seat, 0.0) + float(r)
    for seat, info in env.infos.items():
        infos[seat] = info


def credit(seat_turns: list[dict[str, list[Turn]]], returns: list[dict[str, float]],
           infos: list[dict[str, dict]]) -> list[Turn]:
    """Every move of a seat gets the seat's episode return and its last info, checked against the
    game -> learner contract (:class:`~cogym.core.outcome.SeatOutcome`); all turns in game order."""
    turns: list[Turn] = []
    for g, by_seat in enumerate(seat_turns):
        for seat, ts in by_seat.items():
            info = infos[g].get(seat, {})
            if ts:  # a mistyped fact fails here, naming the game and seat, not inside a learner
                SeatOutcome.from_info(info, where=f"game {g} infos[{seat!r}]")
            for t in ts:
                t.reward = returns[g].get(seat, 0.0)
                t.info = info
            turns.extend(ts)
    return turns


def rollout(games: Sequence[CogymEnv], seat_map: SeatMap | Sequence[SeatMap], system_prompts: dict[str, str], seeds: Sequence[int],
            episode_prefix: str = "ep", group_size: int = 1, max_steps: int = 10_000,
            game_indices: Sequence[int] | None = None) -> RolloutResult:
    """Play one episode in every game, batching generation across games; return its turns.

    ``game_indices``: each game's place in the iteration's whole game list (default 0, 1, ...), when
    these games are one data-parallel rank's share; turns' ``game_index``, episode ids and group
    keys use it, so they match a one-process run's."""
    if len(seeds) != len(games):
        raise ValueError(f"need one seed per game: {len(games)} games, {len(seeds)} seeds")
    t0 = time.perf_counter()
    returns: list[dict[str, float]] = [dict() for _ in games]
    infos: list[dict[str, dict]] = [dict() for _ in games]
    seat_turns: list[dict[str, list[Turn]]] = [defaultdict(list) for _ in games]
    index = list(game_indices) if game_indices is not None else list(range(len(games)))
    episode_ids = [f"{episode_prefix}-{i}" for i in index]
    for env, seed in zip(games, seeds):
        env.reset(seed=int(seed))
    for g, env in enumerate(games):
        _skip_dead(env, returns[g], infos[g])
    gen_tokens, gen_seconds, steps = 0, 0.0, 0
    while True:
        live = [g for g, env in enumerate(games) if env.agents]
        if not live:
            break
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"rollout exceeded {max_steps} steps; a game never ended (check its max_turns)")
        # 1. Collect the ready seats of every live game, grouped by the agent behind them.
        pending: dict[int, list[tuple[str, str, str]]] = {}
        by_agent: dict[int, tuple[Agent, list[tuple[int, int, Request]]]] = {}
        for g in live:
            env = games[g]
            ready = env.ready_agents()
            if not ready:
                raise RuntimeError(f"game {g} ({env.spec.id}) has live seats {env.agents} but none is ready")
            pending[g] = []
            for seat in ready:
                role = env.role_of(seat)
                policy_id, agent = seat_map_of(seat_map, g)(seat, role)
                messages = chat_messages(system_prompts.get(role), env.observe(seat)["text"])
                slot = by_agent.setdefault(id(agent), (agent, []))
                slot[1].append((g, len(pending[g]), Request(messages=messages, role=role, seat=seat)))
                pending[g].append((seat, role, policy_id))
        # 2. One batched call per agent.
        actions: dict[tuple[int, int], Action] = {}
        for agent, items in by_agent.values():
            tg = time.perf_counter()
            answers = agent.act([req for _, _, req in items])
            gen_seconds += time.perf_counter() - tg
            for (g, k, _), act in zip(items, answers):
                actions[(g, k)] = act
                if act.response_ids is not None:
                    gen_tokens += len(act.response_ids)
        # 3. Step every game with its actions, in the order the game declared.
        for g, seats in pending.items():
            env = games[g]
            for k, (seat, role, policy_id) in enumerate(seats):
                if env.agent_selection != seat:
                    raise RuntimeError(f"game {g} declared {seat} ready but selected {env.agent_selection}")
                act = actions[(g, k)]
                env.step(act.text)
                _collect(env, returns[g], infos[g])
                if act.response_ids is not None:
                    seat_turns[g][seat].append(Turn(
                        game_index=index[g], episode_id=episode_ids[g], seat=seat, role=role, policy_id=policy_id,
                        prompt_ids=act.prompt_ids, response_ids=act.response_ids, logprobs=act.logprobs, text=act.text,
                        finished=act.finished, group_key=(f"{episode_prefix}-{index[g] // group_size}", role)))
                _skip_dead(env, returns[g], infos[g])
                if not env.agents:
                    break
    return RolloutResult(turns=credit(seat_turns, returns, infos), returns=returns, infos=infos, generated_tokens=gen_tokens,
                         generate_seconds=gen_seconds, seconds=time.perf_counter() - t0)
