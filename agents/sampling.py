"""Drawing tokens from logits, with the semantics of :meth:`Policy.generate` (top-k, top-p,
temperature, greedy at 0), for the token-level streams of :mod:`cogym.agents.streaming`."""

from __future__ import annotations

import torch

from .policy import SamplingParams


def sample_token(logits: torch.Tensor, sampling: SamplingParams) -> tuple[int, float]:
    """Draw one token from ``logits`` ``(V,)``: :func:`sample_tokens` for a batch of one."""
    ids, logp = sample_tokens(logits[None], sampling)
    return int(ids[0]), float(logp[0])


def sample_tokens(logits: torch.Tensor, sampling: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row of ``logits`` ``(B, V)`` with ``sampling``; return ids ``(B,)`` and
    their behaviour log-probs ``(B,)``.

    Like :meth:`Policy.generate`: top-k then top-p filter the tempered distribution for the draw,
    and the log-prob is of the unfiltered tempered distribution (temperature 1 when greedy), which
    is what the learner recomputes. Draws use torch's global generator (seeded per iteration).
    """
    temp = 1.0 if sampling.greedy else sampling.temperature
    logp = torch.log_softmax(logits.float() / temp, dim=-1)  # (B, V)
    if sampling.greedy:
        ids = torch.argmax(logp, dim=-1)
        return ids, logp.gather(-1, ids[:, None])[:, 0]
    scores = logp.clone()
    if sampling.top_k and sampling.top_k < scores.shape[-1]:
        kth = torch.topk(scores, sampling.top_k, dim=-1).values[:, -1:]  # (B, 1)
        scores[scores < kth] = float("-inf")
    if sampling.top_p < 1.0:
        probs_sorted, order = torch.sort(torch.softmax(scores, dim=-1), dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always the most likely token).
        drop_sorted = torch.cumsum(probs_sorted, dim=-1) - probs_sorted >= sampling.top_p  # (B, V)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores[drop] = float("-inf")
    ids = torch.multinomial(torch.softmax(scores, dim=-1), 1)[:, 0]  # (B,)
    return ids, logp.gather(-1, ids[:, None])[:, 0]
