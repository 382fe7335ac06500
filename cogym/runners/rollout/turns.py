"""The vectorized turn-level rollout: many live games, one batched ``act`` per agent per step.

At every step each live game names the seats that may act now (``ready_agents()``: one seat in
a plain AEC game, all k solvers at once in proposer–solver). The requests of every game are
grouped by the agent behind each seat and each agent answers its whole group in one call; then
every game is stepped with its actions in AEC order. Each LLM move becomes a :class:`Turn` that
keeps the exact prompt and response token ids and the behaviour log-probabilities. The loop and
the bookkeeping are :mod:`cogym.runners.rollout.loop`'s, shared with the token-level rollout.

``rollout`` is a plain function of (games, seat assignment, prompts, seeds) so it runs unchanged
inside a worker process or a Ray actor.
"""

from __future__ import annotations

from typing import Collection, Sequence

from cogym.core.types import Action, Agent
from cogym.envs.base import CogymEnv
from cogym.envs.contract import observed_text

from cogym.runners.rollout.agents import greedy_seats
from cogym.runners.rollout.loop import MAX_PROMPT_CHARS, Episodes, RolloutResult, Seat, SeatMap, play

__all__ = ["rollout", "TurnMover"]


class TurnMover:
    """Turn level: each ready seat answers a whole message (``Agent.act``, one call per agent)."""

    def __init__(self) -> None:
        self.generated_tokens, self.generate_seconds, self.stats = 0, 0.0, {}
        self._actions: dict[tuple[int, int], Action] = {}

    def request_text(self, env: CogymEnv, g: int, seat: str) -> str:
        return observed_text(env, seat)

    def answer(self, agent: Agent, seats: list[Seat]) -> list[str]:
        answers = agent.act([s.request for s in seats])
        for s, act in zip(seats, answers):
            self._actions[(s.g, s.k)] = act
            if act.response_ids is not None:
                self.generated_tokens += len(act.response_ids)
        return [act.text for act in answers]

    def after_step(self, episodes: Episodes, s: Seat) -> None:
        act = self._actions.pop((s.g, s.k))
        if act.response_ids is not None:
            episodes.add_turn(s.g, s.seat, s.role, s.policy_id, act.prompt_ids, act.response_ids, act.logprobs,
                              act.text, act.finished, act.version)
        else:
            episodes.answered(s.g, s.seat, act.text, role=s.role, policy_id=s.policy_id, error=act.error)

    def drop(self, g: int) -> None:
        for key in [k for k in self._actions if k[0] == g]:
            del self._actions[key]

    def abort(self) -> None:
        self._actions.clear()


def rollout(games: Sequence[CogymEnv], seat_map: SeatMap | Sequence[SeatMap], system_prompts: dict[str, str], seeds: Sequence[int],
            episode_prefix: str = "ep", group_size: int = 1, max_steps: int = 10_000,
            game_indices: Sequence[int] | None = None, sampling_key: int | None = None,
            on_error: str = "stop", max_prompt_chars: int = MAX_PROMPT_CHARS,
            greedy: Collection[str] = ()) -> RolloutResult:
    """Play one episode in every game, batching generation across games; return its turns.

    ``game_indices``: each game's place in the iteration's whole game list (default 0, 1, ...), when
    these games are one data-parallel rank's or rollout worker's share; turns' ``game_index``, episode
    ids, group keys and sampling keys use it, so they match a one-process run's. ``sampling_key``:
    the rollout's key (the training loop's is a function of run seed, iteration and round); every
    request's draws are keyed by it, the game's place, its move and the seat, so a game samples the
    same tokens in any batch. None: draws from torch's global generator. ``on_error``: what a game that
    raises does to the rollout, ``"stop"`` it with a report naming the game, seed, seat and move, or
    ``"skip"`` the game (:func:`cogym.runners.rollout.loop.play`). A game is held to its ``spec.max_turns``
    and a seat is asked at most ``max_prompt_chars`` characters, or the game fails the same way.
    ``greedy``: policies whose seats decode greedily (temperature 0) in these games
    (:func:`~cogym.runners.rollout.agents.greedy_seats`; ReMax's baseline games)."""
    return play(games, greedy_seats(seat_map, greedy), system_prompts, seeds, TurnMover(), episode_prefix, group_size, max_steps, game_indices,
                sampling_key, on_error, max_prompt_chars)
