"""PPO with a critic (docs/algorithms.md §4.1): GAE advantages against a learned value model that
trains alongside on the clipped value loss. The critic is this algorithm's state: built from the
policy's trunk (or resumed from ``critic/`` of a checkpoint), saved under ``critic/``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from cogym.core.config_key import key
from cogym.learners.batch import TokenBatch
from cogym.learners.critic import Critic
from cogym.learners.gae import gae_advantages
from cogym.learners.algorithm import Algorithm, Context, Discounted, Whitened, check_number
from cogym.learners.rows import Advantages, RoleRows


@dataclass
class PPOConfig(Discounted, Whitened):
    lam: float = key(1.0, "GAE lambda")
    critic_lr: float = key(1e-4, "the critic's own learning rate")
    value_clip: Optional[float] = key(0.5, "null: unclipped value loss")

    def validate(self, common) -> None:
        super().validate(common)
        check_number("lam", self.lam, 0.0, 1.0)
        check_number("critic_lr", self.critic_lr, 0.0, open_low=True)
        if self.value_clip is not None and not (math.isfinite(self.value_clip) and self.value_clip > 0):
            raise ValueError(f"value_clip must be > 0 or null (unclipped), got {self.value_clip}")


class PPO(Algorithm):
    Config = PPOConfig

    def __init__(self, cfg: PPOConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.critic = Critic(ctx.policy.model, ctx.cfg, ctx.resume.get("critic"), lr=cfg.critic_lr,
                             value_clip=cfg.value_clip)
        self.values: torch.Tensor | None = None  # (N, L) V_old of the batch being trained

    def prepare(self, batch: TokenBatch) -> None:
        self.values = self.critic.values(batch, self.ctx.cfg.micro_batch_size)

    def advantages(self, rows: RoleRows) -> Advantages:
        old = self.values[rows.index]
        adv, returns = gae_advantages(rows.token_rewards, old, rows.mask, gamma=self.cfg.gamma, lam=self.cfg.lam,
                                      whiten_mode=self.cfg.whiten)
        value_mean = float((old * rows.mask).sum() / rows.mask.sum().clamp(min=1))
        return Advantages(adv, metrics={"value_mean": value_mean},
                          carry={"old_values": old, "returns": returns.to(rows.mask.dtype)})

    def after_step(self, batch: TokenBatch, carry: dict) -> dict[str, float]:
        """Only this algorithm's rows train the critic (other roles' rows have no GAE returns)."""
        return self.critic.update(batch, carry["old_values"], carry["returns"], self.ctx.cfg.micro_batch_size)

    def save(self, directory: Path) -> dict:
        self.critic.save(Path(directory) / "critic")
        return {}

    def load(self, directory: Path, state: dict) -> None:
        """The critic's weights came in through ``Context.resume["critic"]``; its optimizer here."""
        self.critic.load_optimizer(Path(directory) / "critic")
