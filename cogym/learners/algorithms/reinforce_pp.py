"""REINFORCE++ (docs/algorithms.md §4.6): per-token discounted returns of the token rewards,
whitened over the role's whole batch: a batch baseline, so no groups are needed."""

from __future__ import annotations

from dataclasses import dataclass

from cogym.learners import advantages as adv_fns
from cogym.learners.algorithm import Algorithm, Discounted, Whitened
from cogym.learners.rows import Advantages, RoleRows


@dataclass
class ReinforcePPConfig(Discounted, Whitened):
    pass


class ReinforcePP(Algorithm):
    Config = ReinforcePPConfig

    def advantages(self, rows: RoleRows) -> Advantages:
        adv, _ = adv_fns.reinforce_pp_advantages(rows.token_rewards, rows.mask, gamma=self.cfg.gamma,
                                                 whiten_mode=self.cfg.whiten)
        return Advantages(adv)
