"""``clip_cov``: Clip-Cov (verl's ``compute_policy_loss_clip_cov``, from "The Entropy Mechanism of RL
for Reasoning LMs"): PPO's clipped surrogate (no dual clip, no ratio clamp) whose gradient is cut on a
few tokens of high covariance between advantage and log-probability, the tokens that drive entropy down:

    cov_t = (A_t - mean A) (logp_t - mean logp)   (means over the micro-batch's valid tokens),
    candidates: valid, not clipped by PPO, clip_cov_lb < cov_t < clip_cov_ub;
    max(1, int(clip_cov_ratio * valid tokens)) of them drawn at random lose their term.

The draw (``torch.randperm`` among the candidates, as verl's) takes :attr:`PolicyLossInputs.generator`, never
torch's global generator: the learner derives it from the run's seed, the optimizer step and the
micro-batch (stream ``learners.policy_loss``), so a run draws the same tokens in one process and in a Ray
learner actor, and another ``run.seed`` draws others.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cogym.learners.policy_losses import PolicyLossInputs, token_mean


def clip_cov(x: PolicyLossInputs) -> tuple[Tensor, dict[str, float]]:
    """Metrics ``pg_clipfrac`` (the share of tokens whose term was cut, verl's name) and ``ppo_kl``."""
    m, log_ratio, adv, logp = x.valid()
    cfg = x.cfg
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    with torch.no_grad():
        n = m.sum()
        cov = (adv - adv.sum() / n.clamp_min(1)) * (logp - logp.sum() / n.clamp_min(1))
        candidates = m & ~(clipped > unclipped) & (cov > cfg.clip_cov_lb) & (cov < cfg.clip_cov_ub)
        idx = torch.nonzero(candidates)
        budget = max(int(cfg.clip_cov_ratio * int(n)), 1)
        if len(idx) > budget:
            if x.generator is None:
                raise ValueError("clip_cov draws the tokens to cut with PolicyLossInputs.generator, which is None; "
                                 "pass objective(..., generator=torch.Generator().manual_seed(seed))")
            idx = idx[torch.randperm(len(idx), generator=x.generator)[:budget].to(idx.device)]
        keep = torch.ones_like(adv)
        keep[idx[:, 0], idx[:, 1]] = 0.0
    per_token = torch.maximum(unclipped, clipped) * keep
    metrics = {"pg_clipfrac": token_mean((keep == 0).float(), m), "ppo_kl": token_mean(-log_ratio, m)}
    return x.aggregate(per_token), metrics
