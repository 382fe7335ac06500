"""The arithmetic games' evaluator (``heldout_arithmetic``, declared by proposer_solver-v0 and the games
that reuse its held-out set): accuracy of the solver role's policy on the fixed 500-problem held-out set,
greedy (``heldout_acc``) and, at a temperature, pass@1 (``heldout_sampled_acc``). It asks the model
through :class:`cogym.envs.evaluation.EvalContext` (see there)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from cogym.core.types import SamplingParams
from cogym.envs.arithmetic import extract_answer, load_heldout
from cogym.envs.evaluation import EvalContext, Model


@dataclass
class HeldoutArithmetic:
    """Greedy accuracy of ``role``'s policy on the held-out arithmetic set (its first ``size`` problems),
    ``heldout_acc``; with ``temperature`` > 0 also ``heldout_sampled_acc``, the mean accuracy of ``samples``
    answers to each problem sampled at that temperature (the pass@1 the papers report)."""

    name: str = "heldout"
    role: str = "solver"
    size: int = 500
    max_new_tokens: int = 8
    batch_size: int = 500  # prompts per generate call
    temperature: float = 0.0
    samples: int = 4
    seed: int = 2468  # the sampling stream of heldout_sampled_acc: the same before and after training

    def __post_init__(self) -> None:
        bad = [f"{k}={getattr(self, k)!r}" for k in ("size", "max_new_tokens", "batch_size", "samples")
               if getattr(self, k) < 1]
        if bad:
            raise ValueError(f"{', '.join(bad)}: must be >= 1")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature={self.temperature!r}: must be >= 0 (0: greedy accuracy only)")

    def evaluate(self, ctx: EvalContext) -> dict[str, float]:
        pid = ctx.policy_of(self.role)
        if pid is None:  # no model plays the role: nothing to measure
            return {}
        return self.accuracies(ctx.model(pid), ctx.system(self.role), ctx)

    def accuracies(self, model: Model, system: str, ctx: EvalContext) -> dict[str, float]:
        """``heldout_acc`` of ``model`` under the system message ``system`` (and ``heldout_sampled_acc``)."""
        records = load_heldout()[: self.size]
        out = {"heldout_acc": heldout_accuracy(model, records, system, max_new_tokens=self.max_new_tokens,
                                               batch_size=self.batch_size)}
        if self.temperature > 0:
            with ctx.rng(self.seed):  # a fixed stream, and the caller's continues as if nothing ran
                out["heldout_sampled_acc"] = heldout_accuracy(
                    model, records, system, max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                    temperature=self.temperature, samples=self.samples)
        return out


def heldout_accuracy(model: Model, records: Sequence[dict], system_prompt: str, *, batch_size: int = 500,
                     max_new_tokens: int = 8, temperature: float = 0.0, samples: int = 1) -> float:
    """Fraction of ``{"question", "answer"}`` records ``model`` answers exactly, ``batch_size`` prompts per
    generate call. ``temperature`` 0 (the default) decodes greedily; above 0 it is the mean accuracy of
    ``samples`` answers to each record sampled at that temperature (pass@1 as the papers estimate it).
    ``model``: a :class:`cogym.envs.evaluation.Model` (``cogym.runners.evaluation.context.PolicyModel(policy)``
    wraps a policy)."""
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
    # The system message even when empty: the chats the held-out accuracy has always been measured on.
    chats = [[{"role": "system", "content": system_prompt}, {"role": "user", "content": r["question"]}]
             for r in records for _ in range(samples)]
    texts = model.answer(chats, params, batch_size=batch_size)
    return sum(extract_answer(text) == answer for answer, text in zip(answers, texts)) / len(chats)
