"""PF-PPO, verl's ``use_pf_ppo`` (docs/algorithms.md §15): PPO whose update trains
on the batch resampled by outcome, rows drawn with replacement in proportion to a weight of their
reward (``pf_reweight``), so the rows whose reward is most trustworthy count more. The draw is a pure
function of the run's seed, the learner and the update number (saved with the checkpoint; stream
``learners.pf_ppo``), the same on every data-parallel rank."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from cogym.core.config_key import key
from cogym.learners import estimators, torch_dist as dist
from cogym.learners.algorithm import check_choice, check_number
from cogym.learners.algorithms.ppo import PPO, PPOConfig
from cogym.learners.batch import batch_groups, batch_widths, micro_batches
from cogym.learners.rows import TrainBatch

STATE_KEY = "pf_ppo_updates"


@dataclass
class PFPPOConfig(PPOConfig):
    pf_reweight: str = key("pow", "each row's weight in the draw: pow (|reward| ** pf_weight_pow), max_min (1 for the "
                           "batch's best and worst reward, else 0) or max_random (0.4 for the best, else 0.1)",
                           choices=estimators.PF_REWEIGHTS)
    pf_weight_pow: float = key(2.0, "the power of pf_reweight: pow")

    def validate(self, common) -> None:
        super().validate(common)
        check_choice(self.pf_reweight, estimators.PF_REWEIGHTS, "pf_reweight")
        check_number("pf_weight_pow", self.pf_weight_pow, 0.0)


class PFPPO(PPO):
    Config = PFPPOConfig

    def __init__(self, cfg: PFPPOConfig, ctx) -> None:
        super().__init__(cfg, ctx)
        self.updates = 0  # batches resampled so far: the draw's stream

    def train_batch(self, learner, turns) -> TrainBatch:
        """PPO's batch (advantages, and the critic's returns in the carry), its rows resampled as a whole."""
        data = super().train_batch(learner, turns)
        if data.batch is None:
            return data
        b = data.batch
        weights = estimators.pf_ppo_weights(b.scores, self.cfg.pf_reweight, self.cfg.pf_weight_pow)
        draw = estimators.pf_ppo_resample(weights, self.ctx.generator("learners.pf_ppo", self.updates))
        self.updates += 1
        ix = draw.sort().values  # the same rows in any order train alike; sorted, a group's copies stay together
        rows = b.rows(ix)
        on = ix.to(b.mask.device)
        carry = {name: (kept[on], {k: v[on] for k, v in tensors.items()})
                 for name, (kept, tensors) in data.extra["carry"].items()}
        cfg = learner.cfg
        chunks = micro_batches(batch_widths(rows), cfg.micro_batch_size, cfg.max_tokens_per_micro_batch,
                               dist.rank(), dist.world_size(), batch_groups(rows))
        metrics = dict(data.metrics, pf_distinct_rows=float(len(torch.unique(ix))) / len(ix))
        return TrainBatch(rows, metrics, rows={k: (v[on] if v is not None else None) for k, v in data.rows.items()},
                          chunks=chunks, num_tokens=float(rows.mask.sum()), num_seqs=float(len(rows.turns)),
                          extra={**data.extra, "carry": carry})

    def save(self, directory: Path) -> dict:
        return {**super().save(directory), STATE_KEY: self.updates}

    def load(self, directory: Path, state: dict) -> None:
        super().load(directory, state)
        self.updates = int(state.get(STATE_KEY, 0))
