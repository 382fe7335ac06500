"""Dr. GRPO (docs/algorithms.md §4.3): GRPO without the division by the group std,
``A_i = S_i - mean_g`` (pair it with ``loss_agg: dr_grpo`` for the paper's length-unbiased loss)."""

from __future__ import annotations

from .. import advantages as adv_fns
from .base import Algorithm, Advantages, RoleRows
from .grpo import GRPOConfig, outcome_advantages
from .registry import register


@register("dr_grpo")
class DrGRPO(Algorithm):
    Config = GRPOConfig
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, adv_fns.grpo_advantages, eps=self.cfg.grpo_eps, norm_by_std=False)
