"""``gpg``: Group Policy Gradient (verl's ``compute_policy_loss_gpg``): plain REINFORCE, no ratio and
no clipping, ``L = -A * logp`` per token, aggregated by ``loss_agg``."""

from __future__ import annotations

from torch import Tensor

from cogym.learners.policy_losses import PolicyLossInputs


def gpg(x: PolicyLossInputs) -> tuple[Tensor, dict[str, float]]:
    """No metrics (verl reports none)."""
    _, _, adv, logp = x.valid()
    return x.aggregate(-adv * logp), {}
