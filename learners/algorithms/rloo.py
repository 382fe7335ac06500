"""RLOO (docs/algorithms.md §4.4): each response's outcome minus the mean of the others in its
group, ``A_i = S_i - mean_{j != i} S_j``; a group of one gets 0."""

from __future__ import annotations

from .. import advantages as adv_fns
from .base import Algorithm, Advantages, RoleRows
from .grpo import outcome_advantages
from .registry import register


@register("rloo")
class RLOO(Algorithm):
    grouped = True

    def advantages(self, rows: RoleRows) -> Advantages:
        return outcome_advantages(rows, adv_fns.rloo_advantages)
