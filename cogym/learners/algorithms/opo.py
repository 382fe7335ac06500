"""OPO, verl's ``opo`` (docs/algorithms.md §15): the optimal reward baseline
of on-policy RL, each group's length-weighted mean outcome, ``A_i = S_i - sum_j l_j S_j / sum_j l_j``
(``l_j`` the response's tokens), without std scaling; a group of one gets 0."""

from __future__ import annotations

from cogym.learners import estimators
from cogym.learners.algorithm import Algorithm
from cogym.learners.algorithms.grpo import outcome_advantages
from cogym.learners.rows import Advantages, RoleRows


class OPO(Algorithm):
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, estimators.opo_advantages)
