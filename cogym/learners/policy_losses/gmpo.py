"""``gmpo``: Geometric-Mean Policy Optimization (verl's ``compute_policy_loss_geo_mean``): the
sequence's ratio is the geometric mean of its token ratios, each clipped in log space on the side the
advantage's sign makes pessimistic,

    c_t = clamp(d_t, -clip_low, clip_high) with d_t = logp - logp_old,
    l_t = sgn(A) * min(sgn(A) d_t, sgn(A) c_t),   r_i = exp(mean_t l_t),   L_i = -mean_t(A) * r_i,

averaged over the step's sequences whatever ``loss_agg`` is (as verl; verl's mean also counts rows
without a valid token, which add 0, cogym's num_seqs does not). Under a mismatch correction each row is
weighted by the geometric mean of its tokens' weights (as verl).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cogym.learners.policy_losses import PolicyLossInputs, token_mean

LOG_EPS = 1e-10  # verl: log(w + 1e-10) of a correction weight (a band-masked token has w = 0)


def gmpo(x: PolicyLossInputs) -> tuple[Tensor, dict[str, float]]:
    """Metrics ``pg_clipfrac`` (clipped tokens with A > 0), ``pg_clipfrac_lower`` (with A < 0), ``ppo_kl``."""
    m, log_ratio, adv, _ = x.valid()
    sign = torch.sign(adv)
    clamped = log_ratio.clamp(-x.cfg.clip_low, x.cfg.clip_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    lengths = m.sum(dim=1).clamp_min(1).to(adv.dtype)
    ratio = torch.exp(pessimistic.sum(dim=1) / lengths)
    per_seq = -(adv.sum(dim=1) / lengths) * ratio
    if x.weight is not None:
        zero = torch.zeros((), dtype=adv.dtype, device=adv.device)
        log_w = torch.where(m, torch.log(x.weight.to(adv.dtype) + LOG_EPS), zero)
        per_seq = per_seq * torch.exp(log_w.sum(dim=1) / lengths)
    clipped = log_ratio != clamped
    metrics = {"pg_clipfrac": token_mean((clipped & (adv > 0)).float(), m),
               "pg_clipfrac_lower": token_mean((clipped & (adv < 0)).float(), m),
               "ppo_kl": token_mean(-log_ratio, m)}
    return per_seq.sum() / x.num_seqs, metrics
