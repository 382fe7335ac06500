"""Held-out evaluation: solver accuracy on the fixed 500-problem arithmetic set, greedy or sampled."""

from __future__ import annotations

from typing import Sequence

from cogym.agents.policy import Policy, SamplingParams
from cogym.envs.arithmetic import extract_answer


def heldout_accuracy(policy: Policy, records: Sequence[dict], system_prompt: str, *, batch_size: int = 500,
                     max_new_tokens: int = 8, temperature: float = 0.0, samples: int = 1) -> float:
    """Fraction of ``{"question", "answer"}`` records the policy answers exactly, ``batch_size`` prompts per
    generate call. ``temperature`` 0 (the default) decodes greedily; above 0 it is the mean accuracy of
    ``samples`` answers to each record sampled at that temperature (pass@1 as the papers estimate it)."""
    if not records:
        raise ValueError("held-out set is empty")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0 and samples != 1:
        raise ValueError(f"greedy decoding (temperature 0) gives one answer a record, got samples={samples}")
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
    answers = [int(r["answer"]) for r in records for _ in range(samples)]
    questions = [r["question"] for r in records for _ in range(samples)]
    correct = 0
    for start in range(0, len(questions), batch_size):
        prompts = [policy.render([{"role": "system", "content": system_prompt}, {"role": "user", "content": q}])
                   for q in questions[start:start + batch_size]]
        for answer, gen in zip(answers[start:start + batch_size], policy.generate(prompts, params)):
            correct += extract_answer(gen.text) == answer
    return correct / len(questions)
