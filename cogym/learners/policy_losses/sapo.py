"""``sapo``: Soft Adaptive Policy Optimization (verl's ``compute_policy_loss_sapo``): a smooth sigmoid
gate on the token ratio instead of a hard clip,

    rho = exp(clamp(logp - logp_old, +-20)),   L = -A * sigmoid(tau (rho - 1)) * 4 / tau,
    tau = sapo_tau_pos where A > 0, else sapo_tau_neg,

aggregated seq-mean-token-mean whatever ``loss_agg`` is (as verl). At rho = 1 the gradient is
-A * rho, REINFORCE's; far from 1 it fades instead of dropping to 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cogym.learners.policy_losses import PolicyLossInputs, token_mean

LOG_RATIO_CLAMP = 20.0


def sapo(x: PolicyLossInputs) -> tuple[Tensor, dict[str, float]]:
    """Metric ``ppo_kl``."""
    m, log_ratio, adv, _ = x.valid()
    log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    tau_pos, tau_neg = (torch.as_tensor(t, dtype=adv.dtype, device=adv.device)
                        for t in (x.cfg.sapo_tau_pos, x.cfg.sapo_tau_neg))
    tau = torch.where(adv > 0, tau_pos, tau_neg)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    return x.aggregate(-gate * adv, "seq-mean-token-mean"), {"ppo_kl": token_mean(-log_ratio, m)}
