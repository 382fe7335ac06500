"""Whole-text answers streamed token by token: what a scripted agent, or any agent that answers in
text, plays at token level (:class:`~cogym.core.types.TokenStreaming`)."""

from __future__ import annotations

import itertools
from typing import Callable, Hashable, Sequence

from cogym.core.types import Action, Message, Request, Token


class TextStreams:
    """Whole-text answers streamed one id per step: ``act`` once per batch of new messages, the text
    encoded by the game's ``encode``; after the last id, an end with no id."""

    def __init__(self, act: Callable[[Sequence[Request]], list[Action]]) -> None:
        self.act = act
        self.queues: dict[Hashable, list[int]] = {}
        self._ids = itertools.count()

    def begin(self, requests: Sequence[Request], encode: Callable[[str], list[int]]) -> list[Message]:
        out = []
        for action in self.act(requests):
            handle = next(self._ids)
            self.queues[handle] = list(encode(action.text))[::-1]  # popped from the end
            out.append(Message(handle=handle))
        return out

    def advance(self, handles: Sequence[Hashable]) -> list[Token]:
        return [Token(id=self.queues[h].pop()) if self.queues[h] else Token(id=None, end=True) for h in handles]

    def close(self, handles: Sequence[Hashable]) -> None:
        for h in handles:
            self.queues.pop(h)
