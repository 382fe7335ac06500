"""GRPO pass@k, verl's ``grpo_passk`` (docs/algorithms.md §15): only the
best response of each group learns, by its lead over the runner-up, ``A_best = (S_max - S_second) /
(std_g + eps)``; the others get 0. It optimises the chance that one of k samples is right."""

from __future__ import annotations

from dataclasses import dataclass

from cogym.core.config_key import key
from cogym.learners import estimators
from cogym.learners.algorithm import Algorithm
from cogym.learners.algorithms.grpo import GRPOConfig, outcome_advantages
from cogym.learners.rows import Advantages, RoleRows


@dataclass
class GRPOPassKConfig(GRPOConfig):
    passk_norm_by_std: bool = key(True, "divide the best response's lead by its group's std + grpo_eps (verl's "
                                  "norm_adv_by_std_in_grpo); false: the raw lead S_max - S_second")

    def validate(self, common) -> None:
        super().validate(common)
        if not isinstance(self.passk_norm_by_std, bool):
            raise ValueError(f"passk_norm_by_std must be true or false, got {self.passk_norm_by_std!r}")


class GRPOPassK(Algorithm):
    Config = GRPOPassKConfig
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, estimators.grpo_passk_advantages, eps=self.cfg.grpo_eps,
                                  norm_by_std=self.cfg.passk_norm_by_std)
