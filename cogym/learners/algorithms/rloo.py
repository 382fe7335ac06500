"""RLOO (docs/algorithms.md §4.4): each response's outcome minus the mean of the others in its
group, ``A_i = S_i - mean_{j != i} S_j``; a group of one gets 0."""

from __future__ import annotations

from cogym.learners import advantages as adv_fns
from cogym.learners.algorithm import Algorithm
from cogym.learners.rows import Advantages, RoleRows
from cogym.learners.algorithms.grpo import outcome_advantages


class RLOO(Algorithm):
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, adv_fns.rloo_advantages)
