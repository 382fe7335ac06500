"""Pairs of responses, the data of the pairwise learners (SPIN, DPO, a reward model).

* :func:`reward_pairs`: ``(chosen, rejected)`` indices formed from a batch's groups: two samples of one
  prompt (one role, one group key, the same ``prompt_ids``) ranked by the game's reward; ties make no pair.
* :func:`pair_rows`: the token batch of n pairs (the n first members, then the n second ones), its
  micro-batches (each holds whole pairs) and a frozen model's sequence log-probabilities of every row.
* :func:`refuse_policy_gradient_keys`: the config check of an algorithm with its own pairwise objective.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from cogym.core.types import Turn
from cogym.learners.batch import TokenBatch, batch_widths, pack_rows, response_logp

PAIRINGS = ("best_worst", "all")


def reward_pairs(turns: Sequence[Turn], pairing: str = "best_worst") -> list[tuple[int, int]]:
    """``(chosen, rejected)`` indices into ``turns``.

    Turns answer one prompt when they share their role, their ``group_key`` (one episode, or the
    ``game.group_size`` episodes of one group) and their ``prompt_ids``; among the turns of one prompt
    ``best_worst`` pairs the first of the highest reward with the first of the lowest (one pair, none
    when they tie), ``all`` every two turns of different rewards (the higher one chosen), in the order
    of ``turns``. A turn whose reward is not a finite number is left out. Prompts come in the order of
    their first turn.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    prompts: dict[tuple, list[int]] = {}
    for i, t in enumerate(turns):
        if isinstance(t.reward, (int, float)) and math.isfinite(t.reward):
            prompts.setdefault((t.role, t.group_key, tuple(t.prompt_ids)), []).append(i)
    pairs = []
    for members in prompts.values():
        if pairing == "best_worst":
            best = max(members, key=lambda i: turns[i].reward)  # the first of the highest (max keeps the first)
            worst = min(members, key=lambda i: turns[i].reward)
            if turns[best].reward > turns[worst].reward:
                pairs.append((best, worst))
            continue
        for a, i in enumerate(members):
            for j in members[a + 1:]:
                if turns[i].reward != turns[j].reward:
                    pairs.append((i, j) if turns[i].reward > turns[j].reward else (j, i))
    return pairs


@torch.no_grad()
def pair_rows(first: Sequence[Turn], second: Sequence[Turn], frozen: torch.nn.Module, cfg, device, pad_id: int,
              temperature: float = 1.0) -> tuple[TokenBatch, list[torch.Tensor], torch.Tensor]:
    """``(batch, chunks, frozen_logp)`` of n pairs ``(first[i], second[i])``.

    ``batch``: the rows ``first + second`` (row ``i`` and row ``i + n`` are pair ``i``); ``chunks``: the
    micro-batches, each whole pairs (at most ``cfg.micro_batch_size // 2`` of them, at least one, and at
    most ``cfg.max_tokens_per_micro_batch`` padded tokens), a chunk's first members then its second
    ones, so one forward reads both; ``frozen_logp`` (2n,): each row's summed response log-probability
    under ``frozen`` at ``temperature`` (an opponent, a reference).
    """
    n = len(first)
    if n != len(second) or n == 0:
        raise ValueError(f"pair_rows needs as many first as second members, at least one; got {n} and {len(second)}")
    b = TokenBatch.from_turns([*first, *second], pad_id).to(device)
    widths = batch_widths(b)
    half_tokens = cfg.max_tokens_per_micro_batch // 2 if cfg.max_tokens_per_micro_batch else None
    runs = pack_rows([max(widths[i], widths[i + n]) for i in range(n)], max(1, cfg.micro_batch_size // 2), half_tokens)
    chunks = [torch.cat([ix, ix + n]) for ix in (torch.tensor(run) for run in runs)]
    logp = torch.zeros(2 * n, device=b.mask.device)
    for ix in chunks:
        logp[ix.to(b.mask.device)] = response_logp(frozen, b.rows(ix), temperature, cfg.packing).sum(1)
    return b, chunks, logp


# Common keys that weight or filter a policy-gradient term, and the value that turns each off.
POLICY_GRADIENT_KEYS = (("entropy_coef", 0), ("dynamic_sampling", "off"), ("overlong_buffer", 0),
                        ("mask_truncated", False), ("tis_cap", None), ("mismatch_mask", None), ("policy_loss", "vanilla"))


def refuse_policy_gradient_keys(common, name: str, why: str = "") -> None:
    """ValueError naming the first option of the policy-gradient learner set on ``common`` (a learner's
    common config) for algorithm ``name``, whose own objective has no policy-gradient term: refused, not
    ignored. ``role_algorithms`` (it trains every role one way), the KL keys (``why``: what anchors it
    instead) and :data:`POLICY_GRADIENT_KEYS`."""
    if common.role_algorithms:
        raise ValueError(f"{name} has its own objective and trains every role the same way; role_algorithms must be "
                         f"empty, got {common.role_algorithms!r}")
    if common.kl_in_reward != "off" or common.kl_in_loss != "off":
        raise ValueError(f"{name} has its own objective{f' ({why})' if why else ''}; kl_in_reward and kl_in_loss must "
                         f"be 'off', got kl_in_reward={common.kl_in_reward!r}, kl_in_loss={common.kl_in_loss!r}")
    for key, off in POLICY_GRADIENT_KEYS:
        if getattr(common, key) != off:
            raise ValueError(f"{name} has its own objective; {key} must be {off!r}, got {getattr(common, key)!r} "
                             f"(remove {key} from this learner)")
