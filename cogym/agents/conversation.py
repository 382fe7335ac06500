"""Multi-turn conversations with exact token continuity.

A seat of a conversation role (:attr:`cogym.envs.base.GameSpec.conversation`) keeps its context
across its moves. Re-rendering the whole exchange at every move would re-tokenise the model's
earlier answers, and a decoded answer does not always encode back to the ids the model wrote (a
learner trained on the re-encoded ids trains on tokens the model never produced). So a model's
next prompt is built from ids, not text:

    prompt[t+1] = prompt[t] + response[t] + (template close of the answer) + render(new messages)

:class:`Conversation` is a seat's state in a rollout; :meth:`cogym.agents.policy.Policy.prompt_of`
builds the prompt; :func:`join_turns` makes a seat's moves of one game one training sequence
whose loss mask covers only the ids the model generated; :func:`continuity_breaks` checks the
equation above on a rollout's turns (the ``context_drift`` metric: 0 unless something re-tokenised).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Sequence

from cogym.core.types import Request, Turn

@dataclass
class Conversation:
    """One seat's conversation in one game: its messages so far and, once a model has answered, the
    exact ids of its last prompt and answer."""

    history: list[dict] = field(default_factory=list)
    ids: list[int] | None = None
    _pending: list[dict] = field(default_factory=list)

    def ask(self, request: Request, delta: list[dict]) -> None:
        """Give ``request`` this conversation with ``delta`` (the game's new messages) as its next part."""
        self._pending = delta
        request.conversation = [*self.history, *delta]
        request.delta = list(delta)
        request.prefix_ids = None if self.ids is None else list(self.ids)

    def answered(self, text: str, prompt_ids: list[int] | None, response_ids: list[int] | None) -> None:
        """The seat answered the last request with ``text`` (and these ids, for a model)."""
        self.history += [*self._pending, {"role": "assistant", "content": text}]
        self._pending = []
        self.ids = None if prompt_ids is None or response_ids is None else [*prompt_ids, *response_ids]


def continues(previous: Turn, turn: Turn) -> bool:
    """Whether ``turn``'s prompt starts with ``previous``'s prompt and response, verbatim."""
    n = len(previous.prompt_ids)
    m = n + len(previous.response_ids)
    return (len(turn.prompt_ids) >= m and turn.prompt_ids[:n] == previous.prompt_ids
            and turn.prompt_ids[n:m] == previous.response_ids)


def _by_seat(turns: Sequence[Turn]) -> dict[tuple, list[int]]:
    out: dict[tuple, list[int]] = {}
    for i, t in enumerate(turns):
        out.setdefault((t.episode_id, t.seat, t.policy_id), []).append(i)
    return out


def continuity_breaks(turns: Sequence[Turn]) -> tuple[int, int]:
    """(breaks, checked): of the conversation moves that follow an earlier move of the same seat in
    the same game, how many have a prompt that does not continue that move's prompt and response."""
    breaks = checked = 0
    for idx in _by_seat(turns).values():
        for a, b in zip(idx, idx[1:]):
            if turns[b].conversation:
                checked += 1
                breaks += not continues(turns[a], turns[b])
    return breaks, checked


def join_turns(turns: Sequence[Turn], joinable: Callable[[Turn], bool] | None = None) -> list[Turn]:
    """Each seat's consecutive conversation moves of one game as one sequence; every other turn as it is.

    The joined turn's prompt is the first move's; its response is everything after it up to the end
    of the last move, with ``mask`` 1 on the ids the model generated and 0 on the rest (the template's
    close of each answer and the game's messages and tool results in between, whose ``logprobs`` are
    0). It keeps the seat's reward and info, the first move's weight version and group key, the last
    move's text; ``finished`` holds when every move finished. Moves that do not continue each other
    (:func:`continues`) are not joined, nor are turns ``joinable`` refuses. Order: each joined turn
    takes its first move's place.
    """
    joined: dict[int, Turn] = {}
    skip: set[int] = set()
    for idx in _by_seat(turns).values():
        run = [idx[0]]
        for i in idx[1:] + [None]:
            if (i is not None and turns[i].conversation and (joinable is None or joinable(turns[i]))
                    and continues(turns[run[-1]], turns[i])):
                run.append(i)
                continue
            if len(run) > 1:
                joined[run[0]] = _join([turns[k] for k in run])
                skip.update(run[1:])
            if i is not None:
                run = [i]
    return [joined.get(i, t) for i, t in enumerate(turns) if i not in skip]


def _join(moves: list[Turn]) -> Turn:
    first = moves[0]
    ids: list[int] = []
    logprobs: list[float] = []
    mask: list[int] = []
    start = len(first.prompt_ids)
    for k, t in enumerate(moves):
        if k:  # what came between the last move's answer and this one's: not the model's
            between = t.prompt_ids[start + len(ids):]
            ids += between
            logprobs += [0.0] * len(between)
            mask += [0] * len(between)
        own = t.mask if t.mask is not None else [1] * len(t.response_ids)
        ids += t.response_ids
        logprobs += [lp if keep else 0.0 for lp, keep in zip(t.logprobs, own)]
        mask += list(own)
    return dataclasses.replace(first, response_ids=ids, logprobs=logprobs, mask=mask, text=moves[-1].text,
                               finished=all(t.finished for t in moves), info=moves[-1].info,
                               reward=moves[-1].reward)


def longest_message(turn: Turn) -> int:
    """The most ids the model generated in one message of ``turn`` (its length for a one-move turn)."""
    if turn.mask is None:
        return len(turn.response_ids)
    best = run = 0
    for keep in turn.mask:
        run = run + 1 if keep else 0
        best = max(best, run)
    return best
