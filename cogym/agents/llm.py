"""LLMAgent: a seat played by a language model through a :class:`Policy`."""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.agents.streaming import PolicyStreams
from cogym.core.types import Action, Message, Request, Token


class LLMAgent:
    """Renders each request with the policy's chat template and generates the batch in one call.

    At token level (:class:`~cogym.core.types.TokenStreaming`) it writes every open message in one
    batched forward per step (:class:`~cogym.agents.streaming.PolicyStreams`); ``max_batch`` caps the
    messages of one forward (0: no cap; 1: one at a time).
    """

    trainable = True

    def __init__(self, policy: Policy, sampling: SamplingParams, name: str | None = None, max_batch: int = 0) -> None:
        self.policy = policy
        self.sampling = sampling
        self.name = name or policy.name
        self.streams = PolicyStreams(policy, max_batch=max_batch)

    def act(self, requests: Sequence[Request]) -> list[Action]:
        prompts = [self.policy.prompt_of(r) for r in requests]
        keys = [r.key for r in requests]
        gens = self.policy.generate(prompts, self.sampling, None if None in keys else keys)
        return [Action(text=g.text, prompt_ids=g.prompt_ids, response_ids=g.response_ids, logprobs=g.logprobs,
                       finished=g.finished, version=g.version) for g in gens]

    def begin(self, requests: Sequence[Request], encode: Callable[[str], list[int]]) -> list[Message]:
        """Open one message per request; its prompt is the request rendered (``encode`` is unused: the
        policy's own tokenizer makes the ids)."""
        return self.streams.begin(requests)

    def advance(self, handles: Sequence[Hashable]) -> list[Token]:
        return self.streams.advance(handles, self.sampling)

    def close(self, handles: Sequence[Hashable]) -> None:
        self.streams.close(handles)
