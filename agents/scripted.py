"""Scripted agents: a seat played by a plain function of the observed text.

Games declare their scripted twins (random, oracle, always-wrong, ...) as functions
``fn(text, rng) -> action_text``; this adapter turns one into a batched agent with its own RNG,
so games, learners and tournaments can be tested without a model.
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

import numpy as np

from .text_streams import TextStreams
from .types import Action, Message, Request, Token

Strategy = Callable[[str, np.random.Generator], str]


class ScriptedAgent:
    trainable = False

    def __init__(self, strategy: Strategy, name: str, seed: int = 0) -> None:
        self.strategy = strategy
        self.name = name
        self.rng = np.random.default_rng(seed)  # the trainer reseeds it every iteration
        self.streams = TextStreams(self.act)

    def act(self, requests: Sequence[Request]) -> list[Action]:
        return [Action(text=self.strategy(r.messages[-1]["content"], self.rng)) for r in requests]

    # Token level: the whole answer, one id per step (see TokenStreaming).
    def begin(self, requests: Sequence[Request], encode: Callable[[str], list[int]]) -> list[Message]:
        return self.streams.begin(requests, encode)

    def advance(self, handles: Sequence[Hashable]) -> list[Token]:
        return self.streams.advance(handles)

    def close(self, handles: Sequence[Hashable]) -> None:
        self.streams.close(handles)
