"""REINFORCE++-baseline (docs/algorithms.md §4.5): the outcome minus its group mean, whitened
over the role's whole batch (token-weighted)."""

from __future__ import annotations

from dataclasses import dataclass

from cogym.learners import advantages as adv_fns
from cogym.learners.algorithm import Algorithm, Whitened
from cogym.learners.rows import Advantages, RoleRows
from cogym.learners.algorithms.grpo import outcome_advantages


@dataclass
class ReinforcePPBaselineConfig(Whitened):
    pass


class ReinforcePPBaseline(Algorithm):
    Config = ReinforcePPBaselineConfig
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, adv_fns.reinforce_pp_baseline_advantages, whiten_mode=self.cfg.whiten)
