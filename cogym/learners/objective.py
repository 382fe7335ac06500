"""The policy-gradient objective over one micro-batch (docs/algorithms.md §5, §5.6, §3.3 and §14):

    L = Agg(w * L_pg(rho, A)) + beta_kl * Agg(k(logp, logp_ref)) - c_H * Agg(H(pi))

with ``L_pg`` the configured policy loss (:mod:`cogym.learners.policy_losses`; by default ``vanilla``,
PPO's clipped surrogate with dual-clip optional), ``w`` the per-token weight of a
sampler/trainer mismatch correction (1 with none: §5.6), ``Agg`` the configured loss aggregation
normalised by the counts of the WHOLE optimizer step (so the micro-batches' losses add up to the
step's loss), ``k`` a KL estimator against the frozen reference and ``H`` the token entropy.
It is a pure function over tensors: the Learner assembles no loss anywhere else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from cogym.learners.losses import aggregate, entropy_from_logits, kl_estimate, mismatch_stats, mismatch_weights
from cogym.learners.policy_losses import get as policy_loss_fn, PolicyLossInputs


@dataclass(frozen=True)
class ObjectiveConfig:
    """The knobs of the objective (the learner config's names and defaults)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: Optional[float] = 3.0
    loss_agg: str = "token-mean"
    norm_const: Optional[float] = None  # C of seq-mean-token-sum-norm / dr_grpo
    kl_in_loss: str = "off"  # off | k2 | k3 | k3+ | k1+
    kl_loss_coef: float = 0.001
    entropy_coef: float = 0.0
    tis_cap: Optional[float] = None  # C of truncated importance sampling (§5.6); None: off
    mismatch_mask: Optional[tuple] = None  # (low, high) ratio band outside which tokens get weight 0; None: off
    policy_loss: str = "vanilla"  # a registered policy loss (cogym.learners.policy_losses)
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    kl_cov_coef: float = 0.1
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05

    @property
    def corrects_mismatch(self) -> bool:
        """Whether a mismatch correction is on (the ratio is then taken against the trainer's own old log-probs)."""
        return self.tis_cap is not None or self.mismatch_mask is not None

    @classmethod
    def of(cls, cfg) -> "ObjectiveConfig":
        """The objective's part of a learner config."""
        band = tuple(cfg.mismatch_mask) if cfg.mismatch_mask is not None else None
        knobs = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls) if f.name != "mismatch_mask"}
        return cls(**knobs, mismatch_mask=band)


def objective(logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, cfg: ObjectiveConfig, *,
              num_tokens: float, num_seqs: float, entropy: Tensor | None = None, logits: Tensor | None = None,
              ref_logp: Tensor | None = None, logp_trainer_old: Tensor | None = None,
              generator: torch.Generator | None = None) -> tuple[Tensor, dict[str, float]]:
    """Loss of one micro-batch and its metrics.

    ``logp`` (N, L) log-probabilities under the current parameters (with gradient), ``logp_old``
    (N, L) behaviour log-probabilities (the sampler's), ``adv`` (N, L) advantages, ``mask`` (N, L) loss
    mask; an entropy bonus needs the token entropies ``entropy`` (N, L), or ``logits`` (N, L, V) to take
    them from (the Learner passes ``entropy``: it never holds full logits), ``ref_logp`` (N, L) only with
    KL in the loss. ``logp_trainer_old`` (N, L): the trainer's own log-probabilities of the tokens before
    this update (the first epoch's forward, detached); it gives the mismatch metrics, and a mismatch
    correction (``tis_cap``, ``mismatch_mask``) needs it: the ratio is then ``exp(logp -
    logp_trainer_old)`` and the per-token policy loss is weighted by :func:`mismatch_weights`.
    ``num_tokens`` / ``num_seqs``: valid tokens / rows of the whole optimizer step. ``generator``: the
    random draws of a policy loss that draws (clip_cov's; the learner's stream ``learners.policy_loss``).

    Returns ``(loss, metrics)``; each metric is this micro-batch's share of its step-level value,
    so summing over the step's micro-batches gives the step's value: ``kl_loss`` and ``entropy``
    (aggregated like the loss; present when enabled), the policy loss's statistics (vanilla's
    ``pg_clipfrac``, ``pg_clipfrac_lower``, ``ppo_kl``), with ``logp_trainer_old`` ``mismatch_abs`` and ``mismatch_k3``,
    and with a correction on ``mismatch_masked_frac`` and ``tis_weight_mean`` (token means weighted by
    this micro-batch's token share).
    """
    if cfg.corrects_mismatch and logp_trainer_old is None:
        raise ValueError("tis_cap and mismatch_mask need logp_trainer_old, the trainer's log-probabilities before "
                         "the update")
    ratio_old = logp_trainer_old if cfg.corrects_mismatch else logp_old
    w, w_metrics = None, {}
    if cfg.corrects_mismatch:
        # Dropped tokens stay in the aggregation's denominators: they count as zero terms (§5.6).
        w, w_metrics = mismatch_weights(logp_trainer_old, logp_old, mask, tis_cap=cfg.tis_cap, band=cfg.mismatch_mask)
    loss, pg_metrics = policy_loss_fn(cfg.policy_loss)(
        PolicyLossInputs(logp, ratio_old, adv, mask, cfg, num_tokens=num_tokens, num_seqs=num_seqs, weight=w,
                         generator=generator))
    if logp_trainer_old is not None:
        pg_metrics.update(mismatch_stats(logp_trainer_old, logp_old, mask))
    pg_metrics.update(w_metrics)
    agg = dict(num_tokens=num_tokens, num_seqs=num_seqs, norm_const=cfg.norm_const)
    metrics: dict[str, float] = {}
    if cfg.kl_in_loss != "off":
        if ref_logp is None:
            raise ValueError(f"kl_in_loss={cfg.kl_in_loss!r} needs ref_logp, the reference model's log-probabilities")
        kl_term = aggregate(kl_estimate(logp, ref_logp, cfg.kl_in_loss), mask, cfg.loss_agg, **agg)
        loss = loss + cfg.kl_loss_coef * kl_term
        metrics["kl_loss"] = float(kl_term.detach())
    if cfg.entropy_coef > 0:
        if entropy is None and logits is None:
            raise ValueError("an entropy bonus (entropy_coef > 0) needs the token entropies (or the logits)")
        ent = aggregate(entropy if entropy is not None else entropy_from_logits(logits), mask, cfg.loss_agg, **agg)
        loss = loss - cfg.entropy_coef * ent
        metrics["entropy"] = float(ent.detach())
    share = float(mask.sum()) / num_tokens  # this micro-batch's weight in step-level token means
    metrics.update({name: float(value) * share for name, value in pg_metrics.items()})
    return loss, metrics
