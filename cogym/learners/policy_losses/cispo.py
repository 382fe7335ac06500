"""``cispo``: Clipped IS-weight Policy Optimization (verl's ``compute_policy_loss_cispo``): REINFORCE
weighted by the clipped, stop-gradient importance ratio, so every token keeps a gradient,

    rho = exp(clamp(logp - logp_old, +-20)),   L = -sg(clip(rho, 1 - clip_low, 1 + clip_high)) * A * logp,

aggregated by ``loss_agg``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cogym.learners.policy_losses import PolicyLossInputs, token_mean

LOG_RATIO_CLAMP = 20.0


def cispo(x: PolicyLossInputs) -> tuple[Tensor, dict[str, float]]:
    """Metrics ``pg_clipfrac`` (tokens whose weight was clipped) and ``ppo_kl``."""
    m, log_ratio, adv, logp = x.valid()
    log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    weight = ratio.clamp(1.0 - x.cfg.clip_low, 1.0 + x.cfg.clip_high)
    per_token = -weight.detach() * adv * logp
    metrics = {"pg_clipfrac": token_mean((ratio != weight).float(), m), "ppo_kl": token_mean(-log_ratio, m)}
    return x.aggregate(per_token), metrics
