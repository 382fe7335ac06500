"""ReMax, verl's ``remax`` (docs/algorithms.md §15): each response's rewards-to-go less the
reward of a greedy response to the same prompt, ``A[i, t] = G[i, t] - b_i``, without whitening.

``b_i`` is the row's ``Turn.baseline``: ``greedy_baseline`` makes the training rollout play each
group's first game once more with this policy's seats decoding greedily (the other seats making the
moves they made there) and give the group's turns their seat's return in that game
(cogym/runners/train/iteration.py ``submit_greedy``). A row without one (its greedy game failed and
was skipped, ``game.on_error: skip``, or asked its seat another first prompt) is not trained on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cogym.learners import estimators
from cogym.learners.algorithm import Algorithm, AlgorithmConfig
from cogym.learners.rows import Advantages, RoleRows


@dataclass
class ReMaxConfig(AlgorithmConfig):
    def validate(self, common) -> None:
        super().validate(common)
        if common.reward_from:
            raise ValueError(f"remax's baseline is the game's reward of a greedy game, but reward_from: "
                             f"{common.reward_from} pays this policy with a reward model; use another algorithm")
        if common.overlong_buffer > 0:
            raise ValueError(f"remax's greedy baseline is not length-shaped, so overlong_buffer: "
                             f"{common.overlong_buffer} would shift every advantage; set overlong_buffer: 0")


class ReMax(Algorithm):
    Config = ReMaxConfig
    greedy_baseline = True

    def advantages(self, rows: RoleRows) -> Advantages:
        baselines = [t.baseline for t in rows.batch.turns]
        have = torch.tensor([b is not None for b in baselines], device=rows.mask.device)
        b = torch.tensor([0.0 if x is None else float(x) for x in baselines], dtype=torch.float64,
                         device=rows.mask.device)
        adv, _ = estimators.remax_advantages(rows.token_rewards, rows.mask, b)
        metrics = {"remax_baseline": float(b[have].mean()) if bool(have.any()) else 0.0,
                   "remax_no_baseline": float((~have).sum())}
        return Advantages(adv, keep=None if bool(have.all()) else have, metrics=metrics)
