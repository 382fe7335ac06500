"""LLMAgent: a seat played by a language model through a :class:`Policy`."""

from __future__ import annotations

from typing import Sequence

from .policy import Policy, SamplingParams
from .types import Action, Request


class LLMAgent:
    """Renders each request with the policy's chat template and generates the batch in one call."""

    trainable = True

    def __init__(self, policy: Policy, sampling: SamplingParams, name: str | None = None) -> None:
        self.policy = policy
        self.sampling = sampling
        self.name = name or policy.name

    def act(self, requests: Sequence[Request]) -> list[Action]:
        prompts = [self.policy.render(r.messages) for r in requests]
        gens = self.policy.generate(prompts, self.sampling)
        return [Action(text=g.text, prompt_ids=g.prompt_ids, response_ids=g.response_ids, logprobs=g.logprobs,
                       finished=g.finished) for g in gens]
