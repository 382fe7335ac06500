"""VAPO's PPO pieces (docs/algorithms.md §15): PPO with value pretraining, decoupled
GAE and a length-adaptive lambda (arXiv:2504.05118). The critic's targets are the GAE returns at
``lam`` (VAPO: 1, unbiased); the policy's advantages use ``lam_i = 1 - 1 / (vapo_alpha * l_i)`` for a
response of ``l_i`` tokens, then are whitened together; the first ``vapo_critic_warmup`` updates train
the critic alone. Clip-higher and token-mean are common keys (``clip_high``, ``loss_agg``).

VAPO's positive-example LM loss: ``L = L_PPO + vapo_lm_coef * L_NLL``, ``L_NLL`` the token-mean
negative log-likelihood of the batch's positive rows (the outcome's ``correct`` flag, or a reward
above ``vapo_lm_threshold``) over their response tokens:
``L_NLL = - sum_{positive i, t} m_it log pi(y_it) / sum_{positive i, t} m_it``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from cogym.core.config_key import key
from cogym.core.types import Turn
from cogym.learners.advantages import whiten
from cogym.learners.algorithm import check_number
from cogym.learners.algorithms.ppo import PPO, PPOConfig
from cogym.learners.gae import gae_advantages
from cogym.learners.rows import Advantages, MicroStep, RoleRows, TrainBatch

STATE_KEY = "vapo_updates"
LM_WEIGHT = "vapo_lm_weight"  # TrainBatch.rows: (N,) 1 / (the positive rows' tokens) on a positive row, else 0


@dataclass
class VAPOConfig(PPOConfig):
    vapo_alpha: float = key(0.05, "the policy's GAE lambda of a response of l tokens is 1 - 1 / (vapo_alpha * l), "
                            "clipped to [0, 1] (VAPO's length-adaptive GAE, alpha 0.05)")
    vapo_critic_warmup: int = key(50, "the first updates train the critic alone (VAPO's value pretraining: 50; "
                                  "verl's trainer.critic_warmup)")
    vapo_lm_coef: float = key(0.1, "mu, the weight of the positive-example LM loss added to the policy loss: the "
                              "token-mean NLL of the batch's positive rows (VAPO: 0.1; 0: off)")
    vapo_lm_threshold: Optional[float] = key(None, "the rows the LM loss imitates: null, those whose outcome reports "
                                             "correct: true (a row without the fact is not positive); a number, "
                                             "those whose reward is above it")

    def validate(self, common) -> None:
        super().validate(common)
        check_number("vapo_alpha", self.vapo_alpha, 0.0, open_low=True)
        check_number("vapo_lm_coef", self.vapo_lm_coef, 0.0)
        if self.vapo_lm_threshold is not None:
            check_number("vapo_lm_threshold", self.vapo_lm_threshold, -math.inf)
        warmup = self.vapo_critic_warmup
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"vapo_critic_warmup must be an integer >= 0 (updates that train the critic alone), "
                             f"got {warmup!r}")


def length_adaptive_lambdas(mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """(N,) ``1 - 1 / (alpha * l_i)`` clipped to [0, 1], ``l_i`` the row's loss-mask tokens."""
    length = (mask != 0).sum(1).double()
    return (1.0 - 1.0 / (alpha * length.clamp_min(1e-9))).clamp(0.0, 1.0)


def positive_rows(turns: Sequence[Turn], threshold: float | None) -> torch.Tensor:
    """(N,) bool: the turns the LM loss imitates, ``outcome.correct`` (threshold None) or ``reward > threshold``."""
    if threshold is None:
        return torch.tensor([t.outcome.correct is True for t in turns], dtype=torch.bool)
    return torch.tensor([float(t.reward) > threshold for t in turns], dtype=torch.bool)


def lm_weights(positive: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N,) ``1 / sum_{positive j} |y_j|`` on the positive rows, 0 elsewhere (all 0 without a positive token)."""
    tokens = (mask[positive] != 0).sum()
    return positive.to(mask.dtype) / tokens.clamp(min=1)


def lm_loss(logp: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``- sum_{i, t} w_i m_it logp_it``: with :func:`lm_weights` over the whole step, the micro-batches'
    terms add up to the token-mean NLL of the positive rows."""
    return -(logp * mask * weight[:, None]).sum()


class VAPO(PPO):
    Config = VAPOConfig

    def __init__(self, cfg: VAPOConfig, ctx) -> None:
        super().__init__(cfg, ctx)
        self.updates = 0

    def advantages(self, rows: RoleRows) -> Advantages:
        out = super().advantages(rows)  # GAE at lam: the critic's returns (carry) and value_mean
        old = self.values[rows.index]
        lams = length_adaptive_lambdas(rows.mask, self.cfg.vapo_alpha)
        raw = torch.zeros_like(rows.mask, dtype=torch.float64)
        for lam in torch.unique(lams):  # rows of one length share a lambda
            ix = (lams == lam).nonzero(as_tuple=True)[0]
            raw[ix] = gae_advantages(rows.token_rewards[ix], old[ix], rows.mask[ix], gamma=self.cfg.gamma,
                                     lam=float(lam), whiten_mode=None)[0].double()
        out.adv = whiten(raw, rows.mask, self.cfg.whiten).to(rows.mask.dtype)
        out.metrics["vapo_lambda_mean"] = float(lams.mean())
        return out

    def train_batch(self, learner, turns) -> TrainBatch:
        """PPO's batch; during the warm-up the critic trains on it here and the policy takes no step.
        After it, each row's weight in the LM loss (:func:`lm_weights`) travels with the rows."""
        data = super().train_batch(learner, turns)
        if data.batch is None:  # no rows: not one of the warm-up's updates
            return data
        self.updates += 1
        if self.updates > self.cfg.vapo_critic_warmup:
            if self.cfg.vapo_lm_coef > 0:
                positive = positive_rows(data.batch.turns, self.cfg.vapo_lm_threshold).to(data.batch.mask.device)
                data.rows[LM_WEIGHT] = lm_weights(positive, data.batch.mask)
                data.metrics["vapo_lm_rows"] = float(positive.sum())
            return data
        metrics = dict(data.metrics, vapo_warmup=1.0)
        for name, (kept, tensors) in data.extra["carry"].items():
            if name == self.name and bool(kept.any()):
                ix = kept.nonzero(as_tuple=True)[0]
                metrics.update(self.after_step(data.batch.rows(ix.cpu()), {k: v[ix] for k, v in tensors.items()}))
        return TrainBatch(None, metrics)

    def loss(self, step: MicroStep) -> tuple[torch.Tensor, dict[str, float]]:
        """PPO's loss plus ``vapo_lm_coef`` times this micro-batch's share of the positive rows' NLL."""
        loss, metrics = super().loss(step)
        weight = step.rows.get(LM_WEIGHT)
        if weight is None:
            return loss, metrics
        nll = lm_loss(step.logp, step.batch.mask, weight)
        metrics["vapo_lm_nll"] = float(nll.detach())
        return loss + self.cfg.vapo_lm_coef * nll, metrics

    def save(self, directory: Path) -> dict:
        return {**super().save(directory), STATE_KEY: self.updates}

    def load(self, directory: Path, state: dict) -> None:
        super().load(directory, state)
        self.updates = int(state.get(STATE_KEY, 0))
