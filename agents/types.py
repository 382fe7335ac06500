"""Small data types shared by agents, learners and runners."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Protocol, Sequence

from cogym.core.outcome import SeatOutcome


@dataclass
class Request:
    """What a seat is asked: chat messages (the per-role system message, then the game's text)."""

    messages: list[dict]
    role: str
    seat: str


@dataclass
class Action:
    """An agent's answer. LLM agents also return the exact ids and behaviour log-probabilities."""

    text: str
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finished: bool = True


class Agent(Protocol):
    """Answers a batch of requests; a single request is a batch of one."""

    name: str

    def act(self, requests: Sequence[Request]) -> list[Action]: ...


@dataclass
class Turn:
    """One move of one seat, as the learner sees it (token-in, token-out).

    ``prompt_ids``/``response_ids`` are exactly the ids the policy was prompted with and
    generated; ``logprobs`` are the behaviour log-probabilities of ``response_ids``; ``reward`` is
    credited when the game ends; ``group_key`` groups samples for group-based estimators;
    ``info`` is the seat's last info and ``outcome`` its typed end-of-game facts (the game -> learner
    contract, :mod:`cogym.core.outcome`), which learners read.
    """

    game_index: int
    episode_id: str
    seat: str
    role: str
    policy_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    finished: bool
    reward: float = 0.0
    group_key: Hashable = None
    info: dict = field(default_factory=dict)

    @property
    def outcome(self) -> SeatOutcome:
        """The typed facts of ``info`` (always in step with it: a Turn's info may be replaced)."""
        return SeatOutcome.from_info(self.info)
