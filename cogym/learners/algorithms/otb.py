"""OTB, verl's ``optimal_token_baseline`` (docs/algorithms.md §15): the optimal
token baseline, one per group and per response position, the group's rewards-to-go weighted by each
path's accumulated "energy" ``W_t = sum_{u <= t} (1 - 2 pi_u + sum_v pi_u(v)^2)``, so noisy paths
count for more where they are noisy. ``otb_mode`` says which tokens share a baseline: those at one
position of the response (``single_turn``, verl's ``optimal_token_baseline``), or each row's k-th
model token (``multi_turn``, verl's ``tir_optimal_token_baseline``): in a conversation joined into one
row (``multi_turn: joined``) the game's and tools' tokens between the model's messages are skipped.

The policy's token statistics come from one forward of the policy before the update (``prepare``,
no grad): the log-prob of each response token and the sum of the squared next-token probabilities
at the rollout's temperature. That forward keeps the (rows, width, vocabulary) logits of one
micro-batch (``micro_batch_size``, ``max_tokens_per_micro_batch``) at a time."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from cogym.core.config_key import key
from cogym.learners import estimators
from cogym.learners.algorithm import Algorithm, AlgorithmConfig, check_choice
from cogym.learners.batch import TokenBatch, batch_widths, micro_batches, training_forward
from cogym.learners.rows import Advantages, RoleRows


@dataclass
class OTBConfig(AlgorithmConfig):
    otb_zero_tail: bool = key(False, "a group's one longest response gets baseline 0 past the second-longest "
                              "response's length (verl's handle_zero_tail; its tir_optimal_token_baseline "
                              "runs with it on)")
    otb_mode: str = key("single_turn", "the tokens that share a baseline: single_turn, one position of the response "
                        "(verl's optimal_token_baseline); multi_turn, each row's k-th model token, skipping the "
                        "game's and tools' tokens between its messages (verl's tir_optimal_token_baseline)",
                        choices=estimators.OTB_MODES)

    def validate(self, common) -> None:
        super().validate(common)
        check_choice(self.otb_mode, estimators.OTB_MODES, "otb_mode")
        if not isinstance(self.otb_zero_tail, bool):
            raise ValueError(f"otb_zero_tail must be true or false, got {self.otb_zero_tail!r}")
        if common.engine == "deepspeed" and common.zero_stage == 3:
            raise ValueError("otb takes its token statistics with a forward of the whole model, which ZeRO-3 shards "
                             "across processes; use zero_stage 0 to 2 with otb")


@torch.no_grad()
def token_statistics(model: torch.nn.Module, b: TokenBatch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, sum_pi_squared)``, both (N, L) and 0 off ``b.mask``: the log-prob of each response token
    under ``softmax(logits / temperature)`` and ``sum_v pi(v)^2`` of that next-token distribution."""
    width = int(b.attention_mask.sum(1).max())
    view = model.active() if hasattr(model, "active") and hasattr(model, "hf_model") else contextlib.nullcontext()
    with view:
        logits = model(input_ids=b.input_ids[:, :width], attention_mask=b.attention_mask[:, :width]).logits
    z = logits.gather(1, b.resp_index[..., None].expand(-1, -1, logits.shape[-1])).float() / temperature  # (N, L, V)
    logp = torch.log_softmax(z, -1).gather(-1, b.resp_ids[..., None]).squeeze(-1)
    sum_pi_squared = torch.exp(torch.logsumexp(2 * z, -1) - 2 * torch.logsumexp(z, -1))
    return logp * b.mask, sum_pi_squared * b.mask


class OTB(Algorithm):
    Config = OTBConfig
    grouped = True

    def __init__(self, cfg: OTBConfig, ctx) -> None:
        super().__init__(cfg, ctx)
        self.stats: tuple[torch.Tensor, torch.Tensor] | None = None  # (logp, sum_pi_squared) of the batch

    def prepare(self, batch: TokenBatch) -> None:
        common = self.ctx.cfg
        model = self.ctx.policy.model
        chunks = micro_batches(batch_widths(batch), common.micro_batch_size, common.max_tokens_per_micro_batch)
        with training_forward(model):
            parts = [token_statistics(model, batch.rows(ix), self.ctx.temperature) for ix in chunks]
        self.stats = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def advantages(self, rows: RoleRows) -> Advantages:
        logp, sum_pi_squared = (s[rows.index] for s in self.stats)
        is_weights = None
        tis_cap = getattr(self.ctx.cfg, "tis_cap", None)
        if tis_cap is not None:  # verl scales W by the rollout's truncated IS weights squared
            is_weights = torch.exp(logp - rows.batch.logp_old).clamp(max=tis_cap) * rows.mask
        adv, _ = estimators.otb_advantages(rows.token_rewards, rows.mask, rows.groups(), logp, sum_pi_squared,
                                           is_weights=is_weights, zero_tail=self.cfg.otb_zero_tail,
                                           mode=self.cfg.otb_mode)
        energy = (1 - 2 * logp.exp() + sum_pi_squared) * rows.mask
        return Advantages(adv, metrics={"otb_token_energy": float(energy.sum() / rows.mask.sum().clamp(min=1))})
