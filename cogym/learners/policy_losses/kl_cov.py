"""``kl_cov``: KL-Cov (verl's ``compute_policy_loss_kl_cov``, from "The Entropy Mechanism of RL for
Reasoning LMs"): the unclipped surrogate, plus a KL penalty on the tokens of highest covariance between
advantage and log-probability,

    rho = exp(logp - logp_old),   L_t = -A_t rho_t  (+ kl_cov_coef * |logp_t - logp_old_t| on the top tokens),
    the top max(1, int(kl_cov_ratio * valid tokens)) valid tokens by cov_t = (A_t - mean A)(logp_t - mean logp),

aggregated by ``loss_agg``. The selection is deterministic (a top-k).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cogym.learners.policy_losses import PolicyLossInputs, token_mean


def kl_cov(x: PolicyLossInputs) -> tuple[Tensor, dict[str, float]]:
    """Metric ``ppo_kl``: the mean of |logp - logp_old| (verl's, for this loss)."""
    m, log_ratio, adv, logp = x.valid()
    per_token = -adv * torch.exp(log_ratio)
    with torch.no_grad():
        top = torch.zeros(m.numel(), dtype=torch.bool, device=m.device)
        valid = torch.nonzero(m.reshape(-1), as_tuple=True)[0]
        if len(valid):
            a, lp = adv.reshape(-1)[valid], logp.reshape(-1)[valid]
            cov = (a - a.mean()) * (lp - lp.mean())
            k = max(1, int(len(valid) * x.cfg.kl_cov_ratio))
            top[valid[torch.topk(cov, k).indices]] = True
    per_token = torch.where(top.view_as(m), per_token + x.cfg.kl_cov_coef * log_ratio.abs(), per_token)
    return x.aggregate(per_token), {"ppo_kl": token_mean(log_ratio.abs(), m)}
