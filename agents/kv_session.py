"""Token-by-token play with a policy: one KV cache per seat, extended one step at a time.

A seat at token level is asked for one token at a time with its whole context (prompt plus the
tokens of its unfinished message). Re-reading that context every step would make each token cost
O(context); a :class:`KVSession` keeps the model's key/value cache of the ids it has already
read and feeds only the new ones, so the next token costs one forward over the new ids. When the
context is not an extension of what the session read (a new turn with a re-rendered prompt), the
session starts over with one prefill.

This is the one-seat view (``benchmarks/token_kv_cache.py`` measures it); the token rollout writes
every open message of a policy at once with :class:`~cogym.agents.streaming.PolicyStreams`, which
shares :func:`sample_tokens`.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .policy import Policy, SamplingParams


class KVSession:
    """The cached state of one seat's context in one policy's model."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.ids: list[int] = []
        self._cache = None
        self._logits: torch.Tensor | None = None  # (V,) next-token logits after self.ids
        self.fed_tokens = 0  # ids run through the model so far (cache reuse shows as fed << sum of contexts)
        self.prefills = 0  # times the session started over

    def reset(self) -> None:
        self.ids, self._cache, self._logits = [], None, None

    @torch.no_grad()
    def next_logits(self, context: Sequence[int]) -> torch.Tensor:
        """Next-token logits ``(V,)`` after ``context``, reusing the cache when it extends ``self.ids``."""
        n = len(self.ids)
        if not context:
            raise ValueError("a context needs at least one id")
        if n and len(context) >= n and context[n - 1] == self.ids[-1] and list(context[:n]) == self.ids:
            if len(context) == n:
                assert self._logits is not None
                return self._logits
            new = list(context[n:])
        else:
            self.reset()
            self.prefills += 1
            new = list(context)
        model = self.policy.model
        was_training = model.training
        model.eval()
        with self.policy.gather():
            out = model(input_ids=torch.tensor([new], dtype=torch.long, device=self.policy.device),
                        past_key_values=self._cache, use_cache=True)
        if was_training:
            model.train()
        self._cache = out.past_key_values
        self._logits = out.logits[0, -1].float().cpu()
        self.ids = list(context)
        self.fed_tokens += len(new)
        return self._logits


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
