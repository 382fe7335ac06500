"""PRIME (docs/algorithms.md §8.1): an implicit process reward model trained online with
cross-entropy on the outcome labels (the turn's reward, in [0, 1]) gives token-level process
rewards, combined with the outcome's leave-one-out baseline over the group (the batch when every
group has one member). The PRM (a copy of the policy's initial weights unless ``prime_model``
names an HF directory) is this algorithm's state, saved under ``prm/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from cogym.core.config_key import key
from cogym.learners import advantages as adv_fns
from cogym.learners.algorithm import Algorithm, AlgorithmConfig, check_choice, check_number, Context
from cogym.learners.multiagent import prime_advantages, PRIME_GRANULARITIES, PRIME_NORMS
from cogym.learners.prime import PrimeRewardModel
from cogym.learners.rows import Advantages, RoleRows

PRIME_UPDATES = ("before", "after")


@dataclass
class PrimeConfig(AlgorithmConfig):
    prime_model: str = key("", 'an HF directory for the PRM; "": a copy of the policy')
    prime_beta: float = key(0.05, "beta: a token's process reward is beta times the PRM's log-likelihood gap to the reference")
    prime_lr: float = key(1e-6, "the PRM's learning rate (constant)")
    prime_granularity: str = key("token", "token: every trained token gets its process reward; whole: their sum on the last "
                                 "token", choices=PRIME_GRANULARITIES)
    prime_norm: str = key("batch_norm", "batch_norm: process rewards divided by the batch's largest absolute return; none: "
                          "kept as they are", choices=PRIME_NORMS)
    prime_process_coef: float = key(5.0, "the weight of the process part of the advantage")
    prime_outcome_coef: float = key(5.0, "the weight of the outcome part of the advantage")
    prime_update: str = key("before", 'update the PRM on the batch "before" or "after" it scores it', choices=PRIME_UPDATES)

    def validate(self, common) -> None:
        check_choice(self.prime_granularity, PRIME_GRANULARITIES, "prime_granularity")
        check_choice(self.prime_norm, PRIME_NORMS, "prime_norm")
        check_choice(self.prime_update, PRIME_UPDATES, "prime_update")
        check_number("prime_beta", self.prime_beta, 0.0, open_low=True)
        check_number("prime_lr", self.prime_lr, 0.0, open_low=True)
        if self.prime_model and not Path(self.prime_model).is_dir():
            raise ValueError(f"prime_model {self.prime_model!r} is not a directory (an HF model for the PRM; leave it "
                             "empty to copy the policy)")
        if common.kl_in_reward != "off":
            raise ValueError("prime computes advantages from the outcome alone and would ignore kl_in_reward; use "
                             "kl_in_loss (e.g. kl_in_loss: k3) to keep the policy near its reference")
        if common.overlong_buffer:
            raise ValueError("prime trains its PRM on the outcome labels (0/1 correctness); overlong shaping would "
                             "turn them into penalties. Remove overlong_buffer (mask_truncated works with prime)")


class PRIME(Algorithm):
    Config = PrimeConfig
    grouped = False  # groups of one fall back to the whole batch as the leave-one-out group
    needs_reference = True  # pi_ref of the PRM is the policy's initial model

    def __init__(self, cfg: PrimeConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)

        # pi_ref is the policy's initial model (given as ``reference`` on resume), or the PRM's own start.
        ref = ctx.reference if ctx.reference is not None and not cfg.prime_model else None
        self.prm = PrimeRewardModel(ctx.policy.model, ctx.cfg, temperature=ctx.temperature, reference=ref, prime=cfg)

    def advantages(self, rows: RoleRows) -> Advantages:
        """The PRM is trained on this batch's outcome labels (before or after it scores it)."""
        b, metrics = rows.batch, {}
        acc = b.scores.double()
        if bool(((acc < 0) | (acc > 1)).any()):
            raise ValueError(f"PRIME needs outcome labels in [0, 1] (role {rows.role!r} has rewards "
                             f"{sorted(set(acc.tolist()))[:6]}); use a game reward that is 0/1 correctness")
        keys = b.group_keys
        # A group of one (one turn of the role per episode) has no leave-one-out baseline: use the batch.
        if len(set(keys)) == len(keys):
            keys = [rows.role] * len(keys)
            metrics["prime_batch_group"] = 1.0
        groups = adv_fns.group_index(keys).to(b.mask.device)
        mb = self.ctx.cfg.micro_batch_size
        with torch.enable_grad():
            if self.cfg.prime_update == "before":
                metrics.update(self.prm.update(b, acc, mb))
            rewards = self.prm.process_rewards(b, mb)
            if self.cfg.prime_update == "after":
                metrics.update(self.prm.update(b, acc, mb))
        metrics["prime_process_reward"] = float((rewards.sum(1)).mean())
        adv, _ = prime_advantages(rewards, acc, b.mask, groups, process_coef=self.cfg.prime_process_coef,
                                  outcome_coef=self.cfg.prime_outcome_coef)
        return Advantages(adv, metrics=metrics)

    def save(self, directory: Path) -> dict:
        self.prm.save(Path(directory) / "prm")
        return {}

    def load(self, directory: Path, state: dict) -> None:
        self.prm.load(Path(directory) / "prm")
