"""``vanilla``: PPO's clipped surrogate with asymmetric clipping and dual clip (verl's
``compute_policy_loss_vanilla``), per token, aggregated by ``loss_agg``:

    rho = exp(clamp(logp - logp_old, +-20)),  L = max(-A rho, -A clip(rho, 1 - clip_low, 1 + clip_high)),
    with dual_clip c: L = min(L, -A c) where A < 0.
"""

from __future__ import annotations

from torch import Tensor

from cogym.learners.losses import clipped_policy_loss
from cogym.learners.policy_losses import PolicyLossInputs


def vanilla(x: PolicyLossInputs) -> tuple[Tensor, dict[str, float]]:
    """Metrics ``pg_clipfrac``, ``pg_clipfrac_lower``, ``ppo_kl`` (:func:`clipped_policy_loss`)."""
    per_token, metrics = clipped_policy_loss(x.logp, x.logp_old, x.adv, x.mask, clip_low=x.cfg.clip_low,
                                             clip_high=x.cfg.clip_high, dual_clip=x.cfg.dual_clip)
    return x.aggregate(per_token), metrics
