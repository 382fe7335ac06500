"""GRPO (docs/algorithms.md §4.2): each response's outcome z-scored within its group,
``A_i = (S_i - mean_g) / (std_g + eps)`` on every token; a group of one gets 0."""

from __future__ import annotations

from dataclasses import dataclass

from cogym.core.config_key import key
from cogym.learners import advantages as adv_fns
from cogym.learners.algorithm import AlgorithmConfig, Algorithm, check_number
from cogym.learners.rows import Advantages, RoleRows


@dataclass
class GRPOConfig(AlgorithmConfig):
    grpo_eps: float = key(1e-6, "added to the group std (verl's 1e-6; TRL 1e-4, OpenRLHF 1e-9)")

    def validate(self, common) -> None:
        check_number("grpo_eps", self.grpo_eps, 0.0)


def outcome_advantages(rows: RoleRows, fn, **kwargs) -> Advantages:
    """An outcome estimator on ``rows``: its score is the sum of the (possibly KL-shaped) token
    rewards; its statistics (frac_zero_std, singleton_groups, ...) are reported, not hidden (§2.9)."""
    adv, stats = fn(rows.token_rewards.sum(1), rows.mask, rows.groups(), **kwargs)
    return Advantages(adv, metrics={name: float(value) for name, value in stats.items()})


class GRPO(Algorithm):
    Config = GRPOConfig
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, adv_fns.grpo_advantages, eps=self.cfg.grpo_eps)
