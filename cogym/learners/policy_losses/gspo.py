"""``gspo``: Group Sequence Policy Optimization (verl's ``compute_policy_loss_gspo``): the clipped
surrogate on a sequence-level ratio, the geometric mean of the row's token ratios,

    s_i = exp(mean_t (logp - logp_old)),   s_it = sg(s_i) * pi(y_it) / sg(pi(y_it))   (clamped at e^10),
    L_it = max(-A s_it, -A clip(s_it, 1 - clip_low, 1 + clip_high)),

aggregated seq-mean-token-mean whatever ``loss_agg`` is (as verl). The sequence ratio is much closer to
1 than a token's: GSPO's paper clips at clip_low 3e-4, clip_high 4e-4.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cogym.learners.policy_losses import PolicyLossInputs, token_mean

LOG_RATIO_MAX = 10.0  # verl clamps the log of the token-level ratio here


def gspo(x: PolicyLossInputs) -> tuple[Tensor, dict[str, float]]:
    """Metrics ``pg_clipfrac`` (clipped branch strictly larger) and ``ppo_kl`` (mean of logp_old - logp)."""
    m, log_ratio, adv, logp = x.valid()
    seq_log_ratio = log_ratio.sum(dim=1) / m.sum(dim=1).clamp_min(1).to(log_ratio.dtype)
    log_s = (logp - logp.detach() + seq_log_ratio.detach().unsqueeze(-1)).clamp(max=LOG_RATIO_MAX)
    s = torch.exp(log_s)
    unclipped = -adv * s
    clipped = -adv * s.clamp(1.0 - x.cfg.clip_low, 1.0 + x.cfg.clip_high)
    per_token = torch.maximum(unclipped, clipped)
    metrics = {"pg_clipfrac": token_mean((clipped > unclipped).float(), m), "ppo_kl": token_mean(-log_ratio, m)}
    return x.aggregate(per_token, "seq-mean-token-mean"), metrics
