"""Held-out evaluation: greedy solver accuracy on the fixed 500-problem arithmetic set."""

from __future__ import annotations

from typing import Sequence

from cogym.agents.policy import Policy, SamplingParams
from cogym.envs.arithmetic import extract_answer


def heldout_accuracy(policy: Policy, records: Sequence[dict], system_prompt: str, *, batch_size: int = 500,
                     max_new_tokens: int = 8) -> float:
    """Fraction of ``{"question", "answer"}`` records the policy answers exactly, decoding greedily,
    ``batch_size`` prompts per generate call."""
    if not records:
        raise ValueError("held-out set is empty")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    greedy = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
    correct = 0
    for start in range(0, len(records), batch_size):
        chunk = records[start:start + batch_size]
        prompts = [policy.render([{"role": "system", "content": system_prompt},
                                  {"role": "user", "content": r["question"]}]) for r in chunk]
        for rec, gen in zip(chunk, policy.generate(prompts, greedy)):
            correct += extract_answer(gen.text) == int(rec["answer"])
    return correct / len(records)
