"""Scripted agents: a seat played by a plain function of the observed text.

Games declare their scripted twins (random, oracle, always-wrong, ...) as functions
``fn(text, rng) -> action_text``; this adapter turns one into a batched agent with its own RNG,
so games, learners and tournaments can be tested without a model.
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

import numpy as np

from cogym.agents.text_streams import TextStreams
from cogym.core import seeding
from cogym.core.errors import GameError
from cogym.core.text import twin_failure
from cogym.core.types import Action, Message, Request, Token

Strategy = Callable[[str, np.random.Generator], str]


class ScriptedAgent:
    """``twin``: the twin's name in its game's ``scripted`` table (default: ``name``), which names it
    when it raises: a :class:`~cogym.core.errors.GameError` naming the twin, the seat and where."""

    trainable = False

    def __init__(self, strategy: Strategy, name: str, seed: int = 0, twin: str | None = None) -> None:
        self.strategy = strategy
        self.name = name
        self.twin = twin or name
        self.rng = seeding.rng("scripted.init", seed)  # for unkeyed requests; the trainer reseeds it every iteration
        self.streams = TextStreams(self.act)

    def act(self, requests: Sequence[Request]) -> list[Action]:
        # A keyed request (every rollout's) draws from its own key, so a scripted seat makes the same move
        # however the games are split across batches, processes or Ray workers; an unkeyed one from self.rng.
        return [Action(text=self._move(r)) for r in requests]

    def _move(self, request: Request) -> str:
        try:
            return self.strategy(request.messages[-1]["content"], self._rng(request))
        except Exception as exc:  # noqa: BLE001 - the twin is the game author's code: its bug is named as its
            raise GameError(twin_failure(self.twin, request.seat, request.role, exc)) from exc

    def _rng(self, request: Request) -> np.random.Generator:
        return self.rng if request.key is None else seeding.rng("scripted.move", request.key)

    # Token level: the whole answer, one id per step (see TokenStreaming).
    def begin(self, requests: Sequence[Request], encode: Callable[[str], list[int]]) -> list[Message]:
        return self.streams.begin(requests, encode)

    def advance(self, handles: Sequence[Hashable]) -> list[Token]:
        return self.streams.advance(handles)

    def close(self, handles: Sequence[Hashable]) -> None:
        self.streams.close(handles)
