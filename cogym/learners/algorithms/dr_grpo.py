"""Dr. GRPO (docs/algorithms.md §4.3): GRPO without the division by the group std,
``A_i = S_i - mean_g`` (pair it with ``loss_agg: dr_grpo`` for the paper's length-unbiased loss)."""

from __future__ import annotations

from cogym.learners import advantages as adv_fns
from cogym.learners.algorithm import Algorithm
from cogym.learners.rows import Advantages, RoleRows
from cogym.learners.algorithms.grpo import GRPOConfig, outcome_advantages


class DrGRPO(Algorithm):
    Config = GRPOConfig
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, adv_fns.grpo_advantages, eps=self.cfg.grpo_eps, norm_by_std=False)
