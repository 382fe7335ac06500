"""Drawing tokens from logits, with the semantics of :meth:`Policy.generate` (top-k, top-p,
temperature, greedy at 0): for the token-level streams of :mod:`cogym.agents.streaming` and the
turn-level backends of :mod:`cogym.agents.backends`.

A draw is *keyed*: each row has a 63-bit key, and its uniform number at step t is a pure function
of (key, t) (:func:`row_uniforms`, a counter-based generator), turned into a token by the inverse
of the row's cumulative distribution. So a row's tokens do not depend on which other rows share
its batch, or on how many draws came before: the games of a rollout sample the same tokens whether
one process plays them all or several workers each play a share. Rows without a key draw one from
torch's global generator (seeded per iteration by the training loop).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from cogym.core.seeding import derive_key, GOLDEN, KEY_BITS  # noqa: F401 - derive_key: cogym.agents exports it
from cogym.core.types import SamplingParams

_GOLDEN = np.uint64(GOLDEN)


def _mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on uint64 ``x`` (wrapping arithmetic): a bijection that scatters bits."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def random_keys(n: int) -> list[int]:
    """``n`` keys drawn from torch's global generator (for rows that come without one)."""
    return torch.randint(0, 2**KEY_BITS - 1, (n,), dtype=torch.long).tolist()


def row_uniforms(keys: Sequence[int], steps: Sequence[int] | int) -> torch.Tensor:
    """Uniform numbers in [0, 1), one per row: a pure function of the row's (key, step), ``(B,)`` float64."""
    k = np.asarray(keys, dtype=np.uint64)
    t = np.broadcast_to(np.asarray(steps, dtype=np.uint64), k.shape)
    with np.errstate(over="ignore"):
        x = _mix64(_mix64(k + _GOLDEN) ^ (t + np.uint64(1)) * _GOLDEN)
    return torch.from_numpy(((x >> np.uint64(11)).astype(np.float64) * 2.0**-53).copy())


def sample_token(logits: torch.Tensor, sampling: SamplingParams) -> tuple[int, float]:
    """Draw one token from ``logits`` ``(V,)``: :func:`sample_tokens` for a batch of one."""
    ids, logp = sample_tokens(logits[None], sampling)
    return int(ids[0]), float(logp[0])


def sample_tokens(logits: torch.Tensor, sampling: SamplingParams, keys: Sequence[int] | None = None,
                  steps: Sequence[int] | int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row of ``logits`` ``(B, V)`` with ``sampling``; return ids ``(B,)`` and
    their behaviour log-probs ``(B,)``.

    Like :meth:`Policy.generate`: top-k then top-p filter the tempered distribution for the draw,
    and the log-prob is of the unfiltered tempered distribution (temperature 1 when greedy), which
    is what the learner recomputes. Row i's draw is keyed by ``(keys[i], steps[i])`` (see the module
    docstring); without ``keys`` each row gets a key from torch's global generator.
    """
    temp = 1.0 if sampling.greedy else sampling.temperature
    logp = torch.log_softmax(logits.float() / temp, dim=-1)  # (B, V)
    if sampling.greedy:
        ids = torch.argmax(logp, dim=-1)
        return ids, logp.gather(-1, ids[:, None])[:, 0]
    ids = draw(logp, sampling, random_keys(logp.shape[0]) if keys is None else keys, steps)
    return ids, logp.gather(-1, ids[:, None])[:, 0]


def draw(logp: torch.Tensor, sampling: SamplingParams, keys: Sequence[int], steps: Sequence[int] | int) -> torch.Tensor:
    """Ids ``(B,)`` drawn from the tempered log-probs ``logp`` ``(B, V)`` after top-k and top-p, row i
    by inverse transform of the uniform number of ``(keys[i], steps[i])``. Every operation is
    row-wise, so a row's draw is the same in any batch."""
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
    cdf = torch.cumsum(torch.softmax(scores, dim=-1), dim=-1)  # (B, V)
    u = row_uniforms(keys, steps).to(cdf.device)
    total = cdf[:, -1:]  # (B, 1)
    target = torch.minimum((u[:, None] * total.double()).float(), torch.nextafter(total, torch.zeros_like(total)))
    # The first token whose cumulative mass exceeds the target (< the row's total): never one of zero probability.
    return torch.searchsorted(cdf, target, right=True)[:, 0]
