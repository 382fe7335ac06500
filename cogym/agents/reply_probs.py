"""The exact probability that a policy's sampled reply falls in each class of a classifier.

Games read a reply's meaning off a prefix (Kuhn poker reads its first word), so the probability of
each move is a sum over a few short token paths: walk the tree of replies a token at a time, close
a branch as soon as its text decides the class (the first word ended, or can no longer become a
legal one), and expand only the branches still open. Every open branch of one depth is scored in
one batched forward of the policy's own model, with the distribution the policy samples from:
``softmax(logits / temperature)``, or all mass on the argmax when greedy.

Branches whose probability falls below ``min_prob`` are not expanded; their mass is returned as
``unresolved``, so the result is exact up to that stated remainder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams

# classify(text, finished) -> the reply's class once ``text`` decides it, else None (keep reading).
# ``finished``: the reply ends here (an end token, or max_new_tokens reached).
Classifier = Callable[[str, bool], "str | None"]


@dataclass
class ReplyDistribution:
    """The probability of each class, and the mass left on branches below ``min_prob``."""

    probs: dict[str, float] = field(default_factory=dict)
    unresolved: float = 0.0
    forwards: int = 0  # rows scored (all prompts, all depths)

    def add(self, label: str, p: float) -> None:
        self.probs[label] = self.probs.get(label, 0.0) + p


def reply_distributions(policy: Policy, prompts: Sequence[Sequence[int]], classify: Sequence[Classifier] | Classifier,
                        sampling: SamplingParams, min_prob: float = 1e-6, batch_size: int = 256,
                        max_branches: int = 4096) -> list[ReplyDistribution]:
    """For each prompt, the exact distribution of its reply's class under ``sampling``.

    ``classify``: one classifier for all prompts or one per prompt. ``max_branches`` bounds the open
    branches of one depth (a model that spreads its mass over many undecided tokens): past it the
    smallest are left unresolved. Only plain temperature sampling (``top_p`` 1, ``top_k`` 0) has an
    exact distribution here; other settings raise ``ValueError``.
    """
    if sampling.top_p != 1.0 or sampling.top_k not in (0, None):
        raise ValueError("reply_distributions computes plain temperature sampling; set top_p 1.0 and top_k 0")
    if not 0.0 <= min_prob < 1.0:
        raise ValueError(f"min_prob must be in [0, 1), got {min_prob}")
    classifiers = list(classify) if isinstance(classify, Sequence) else [classify] * len(prompts)
    if len(classifiers) != len(prompts):
        raise ValueError(f"{len(classifiers)} classifiers for {len(prompts)} prompts")
    out = [ReplyDistribution() for _ in prompts]
    eos = set(policy.eos_ids)
    # an open branch: (prompt index, response ids so far, probability)
    branches: list[tuple[int, list[int], float]] = [(i, [], 1.0) for i in range(len(prompts))]
    model = policy.model
    training = model.training
    model.eval()
    try:
        with torch.inference_mode(), policy.gather():
            for depth in range(sampling.max_new_tokens):
                if not branches:
                    break
                if len(branches) > max_branches:
                    branches.sort(key=lambda b: -b[2])
                    for i, _, p in branches[max_branches:]:
                        out[i].unresolved += p
                    branches = branches[:max_branches]
                last = depth + 1 == sampling.max_new_tokens
                opened: list[tuple[int, list[int], float]] = []
                for start in range(0, len(branches), batch_size):
                    chunk = branches[start:start + batch_size]
                    probs = _next_token_probs(policy, [list(prompts[i]) + ids for i, ids, _ in chunk], sampling)
                    for (i, ids, p), row in zip(chunk, probs):
                        out[i].forwards += 1
                        for new, mass in _extend(policy, classifiers[i], out[i], ids, p, row, eos, last, min_prob):
                            opened.append((i, new, mass))
                branches = opened
    finally:
        model.train(training)
    return out


def _extend(policy: Policy, classify: Classifier, dist: ReplyDistribution, ids: list[int], p: float,
            row: torch.Tensor, eos: set[int], last: bool, min_prob: float) -> list[tuple[list[int], float]]:
    """Close each next token of one branch whose text decides its class (adding its mass to ``dist``);
    return the ones left open, as (response ids, probability)."""
    nonzero = torch.nonzero(row > 0).flatten().tolist()
    values = row[nonzero].tolist()
    small = 0.0
    opened: list[tuple[list[int], float]] = []
    for token, q in zip(nonzero, values):
        mass = p * q
        if token in eos:
            dist.add(_decided(classify, policy.decode(ids), True), mass)
            continue
        if mass < min_prob:  # too small to follow: its class is unknown
            small += mass
            continue
        new = ids + [token]
        text = policy.decode(new)
        label = _decided(classify, text, True) if last else classify(text, False)
        if label is None:
            opened.append((new, mass))
        else:
            dist.add(label, mass)
    dist.unresolved += small
    return opened


def _decided(classify: Classifier, text: str, finished: bool) -> str:
    label = classify(text, finished)
    if label is None:
        raise ValueError("the classifier left a finished reply undecided")
    return label


def _next_token_probs(policy: Policy, rows: list[list[int]], sampling: SamplingParams) -> torch.Tensor:
    """The sampling distribution of the next token after each row (left-padded into one batch)."""
    width = max(len(r) for r in rows)
    pad = policy.tokenizer.pad_token_id or 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[k, width - len(r):] = 1
    device = policy.device
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = policy.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                          position_ids=position_ids.to(device)).logits[:, -1, :].float().cpu()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.softmax(logits / sampling.temperature, dim=-1)
