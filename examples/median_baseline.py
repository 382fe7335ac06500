"""A user algorithm in one file: the group-median baseline (docs/write_your_own_algorithm.md).

Each response's advantage is its outcome minus the MEDIAN outcome of its group, times ``median_scale``:

    A_i = median_scale * (S_i - median_{j in g(i)} S_j)     on every token of response i

A median is robust to one outlier in the group (a lucky 10 among zeros moves the mean, not the
median). Groups of one get 0 (no baseline to compare with), as GRPO's do. It needs groups, so
``grouped = True``: the builder refuses it on a role that plays once per game without
``game.group_size``. Listed in a config's ``game.modules``, it is ``algorithm: median_baseline``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cogym.learners.algorithms import Advantages, Algorithm, AlgorithmConfig, RoleRows, check_number, register


@dataclass
class MedianBaselineConfig(AlgorithmConfig):
    """The algorithm's own keys, written flat under ``learners.<id>:`` next to the common ones."""

    median_scale: float = 1.0

    def validate(self, common) -> None:
        check_number("median_scale", self.median_scale, 0.0, open_low=True)  # "median_scale must be ..."


def median_baseline_advantages(scores: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor,
                               scale: float = 1.0) -> tuple[torch.Tensor, dict[str, float]]:
    """A pure function over tensors: ``scores`` (N,), ``mask`` (N, L), ``groups`` (N,) int ->
    (advantages (N, L), statistics). Fully-masked rows neither count in a median nor get an advantage."""
    valid = mask.sum(1) > 0
    adv = torch.zeros_like(scores, dtype=torch.float64)
    singletons = 0
    for g in groups.unique().tolist():
        rows = (groups == g) & valid
        if int(rows.sum()) < 2:
            singletons += 1
            continue
        group = scores[rows].double()
        # torch.median takes the lower of the two middle values; the midpoint is the usual median.
        middle = group.sort().values
        n = len(middle)
        median = (middle[(n - 1) // 2] + middle[n // 2]) / 2
        adv[rows] = scale * (group - median)
    return adv[:, None].to(mask.dtype) * mask, {"median_singleton_groups": float(singletons)}


@register("median_baseline")
class MedianBaseline(Algorithm):
    Config = MedianBaselineConfig
    grouped = True  # the baseline is the group's median: a group of one learns nothing

    def advantages(self, rows: RoleRows) -> Advantages:
        # rows.token_rewards already holds the outcome (and any kl_in_reward shaping) on each row's tokens.
        adv, stats = median_baseline_advantages(rows.token_rewards.sum(1), rows.mask, rows.groups(),
                                                scale=self.cfg.median_scale)
        return Advantages(adv, metrics=stats)  # logged as <policy>/<role>/median_singleton_groups
