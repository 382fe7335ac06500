"""GPG's estimator, verl's ``gpg`` (docs/algorithms.md §15): the group-centred
outcome scaled up by the share of rows with a signal, ``A_i = alpha (S_i - mean_g)``, ``alpha = n / m``
(``n`` rows, ``m`` of them with a non-zero outcome); a group of one gets 0. GPG's own loss (plain
policy gradient, no clipping) is the policy loss of that name."""

from __future__ import annotations

from cogym.learners import estimators
from cogym.learners.algorithm import Algorithm
from cogym.learners.algorithms.grpo import outcome_advantages
from cogym.learners.rows import Advantages, RoleRows


class GPG(Algorithm):
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, estimators.gpg_advantages)
