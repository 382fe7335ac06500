"""Pure loss functions: KL estimators, entropy, clipped policy loss, the sampler/trainer mismatch's
statistics and weights, loss aggregation (§3, §5).

Layout as in docs/algorithms.md §1: per-token tensors are (N, L) with a loss mask ``mask`` (N, L)
(1 = token emitted by the policy being trained). Masked positions may hold garbage (huge ratios,
NaN logprobs of padding); they never influence values, metrics or gradients here.

These functions carry gradients; nothing is detached except the reported metrics and the mismatch
weights (constants of the loss, like the advantages).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import Tensor

__all__ = [
    "KL_KINDS",
    "KL_CLAMPS",
    "LOSS_AGG_MODES",
    "kl_estimate",
    "entropy_from_logits",
    "clipped_policy_loss",
    "mismatch_stats",
    "mismatch_weights",
    "aggregate",
]


# -- KL estimators (§3.1), d = logp - logp_ref -------------------------------------------------

def _k1(d: Tensor) -> Tensor:
    return d


def _abs(d: Tensor) -> Tensor:
    return d.abs()


def _k2(d: Tensor) -> Tensor:
    return 0.5 * d * d


def _k3(d: Tensor) -> Tensor:
    # e^{-d} + d - 1, written with x = -d = log(pi_ref / pi)
    x = -d
    return torch.exp(x) - x - 1.0


def _k3_verl(d: Tensor) -> Tensor:
    # verl low_var_kl: clamp the exponent to [-20, 20] (and use the clamped value throughout)
    # so exp cannot overflow, then clamp the estimate to [-10, 10].
    x = (-d).clamp(-20.0, 20.0)
    return (torch.exp(x) - x - 1.0).clamp(-10.0, 10.0)


def _clamp10(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    return lambda d: fn(d).clamp(-10.0, 10.0)


_BASE = {"k1": _k1, "abs": _abs, "k2": _k2, "k3": _k3}
# Per-clamp-mode estimator tables (§3.1): verl clamps only k3; OpenRLHF clamps every result to
# [-10, 10]; TRL (None) clamps nothing.
_TABLES: dict[str | None, dict[str, Callable[[Tensor], Tensor]]] = {
    "verl": dict(_BASE, k3=_k3_verl),
    "openrlhf": {k: _clamp10(f) for k, f in _BASE.items()},
    None: dict(_BASE),
}
KL_KINDS = ("k1", "abs", "k2", "k3", "k1+", "k3+")
KL_CLAMPS = ("verl", "openrlhf", None)


def kl_estimate(logp: Tensor, logp_ref: Tensor, kind: str, clamp: str | None = "verl") -> Tensor:
    """Per-token KL estimate from ``logp`` (...) and ``logp_ref`` (same shape) -> (...).

    kinds: ``k1`` = d, ``abs`` = |d|, ``k2`` = d^2/2, ``k3`` = e^{-d} + d - 1 (d = logp - logp_ref);
    ``k1+`` / ``k3+``: forward value of k1 / k3, gradient of k2 w.r.t. ``logp`` (straight-through,
    verl). Gradients flow through both arguments as written; detach ``logp_ref`` upstream.
    clamp: "verl" (k3 exponent in [-20, 20], k3 in [-10, 10]), "openrlhf" (every result in
    [-10, 10]) or None (TRL: none).
    """
    if clamp not in _TABLES:
        raise ValueError(f"clamp must be one of {KL_CLAMPS}, got {clamp!r}")
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL kind {kind!r}; allowed kinds: {KL_KINDS}")
    if logp.shape != logp_ref.shape:
        raise ValueError(f"logp and logp_ref shapes differ: {tuple(logp.shape)} vs {tuple(logp_ref.shape)}")
    table = _TABLES[clamp]
    d = logp - logp_ref
    if kind.endswith("+"):
        forward = table[kind[:-1]](d)
        backward = table["k2"](d)
        # value == forward exactly (backward - backward.detach() is 0), gradient == k2's
        return forward.detach() + (backward - backward.detach())
    return table[kind](d)


# -- entropy (§5.4) ----------------------------------------------------------------------------

def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last dim: (..., V) -> (...).

    ``H = logsumexp(z) - sum softmax(z) * z``. Computed in at least float32 (bf16 logits lose the
    small probabilities); ``-inf`` logits (banned tokens) contribute 0 without NaN gradients.
    """
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))
    # Shift by the (constant) row max: logsumexp(z) and sum p*z are both ~max(z), and their
    # difference would lose all precision for large logits (1e4 has an fp32 ulp of ~1e-3).
    z = z - z.detach().amax(dim=-1, keepdim=True)
    p = torch.softmax(z, dim=-1)
    # p == 0 where z == -inf; replacing z there by 0 keeps both the value and the gradient finite.
    z_safe = torch.where(torch.isfinite(z), z, torch.zeros_like(z))
    h = torch.logsumexp(z, dim=-1) - (p * z_safe).sum(dim=-1)
    return h.to(logits.dtype)


# -- clipped surrogate (§5.1) ------------------------------------------------------------------

def _validate_clip(clip_low: float, clip_high: float, dual_clip: float | None, log_ratio_clamp: float) -> None:
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if clip_high < 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None to disable), got {dual_clip}")
    if not log_ratio_clamp > 0.0:
        raise ValueError(f"log_ratio_clamp must be > 0, got {log_ratio_clamp}")


def clipped_policy_loss(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
    log_ratio_clamp: float = 20.0,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate per token (§5.1), all tensors (N, L).

    ``rho = exp(clamp(logp - logp_old, +-log_ratio_clamp))``;
    ``loss = max(-A rho, -A clip(rho, 1 - clip_low, 1 + clip_high))``; with ``dual_clip = c`` the
    loss of tokens with A < 0 is additionally capped at ``-A c``.

    Returns:
        per_token_loss (N, L), exactly 0 on masked positions (aggregate it with :func:`aggregate`);
        metrics (floats, over valid tokens): ``pg_clipfrac`` (clipped branch strictly larger),
        ``pg_clipfrac_lower`` (dual bound active, A < 0; 0 when dual-clip is off),
        ``ppo_kl`` (mean of logp_old - logp with the log-ratio clamped to +-log_ratio_clamp first,
        verl's definition).
    """
    _validate_clip(clip_low, clip_high, dual_clip, log_ratio_clamp)
    for name, t in (("logp_old", logp_old), ("adv", adv), ("mask", mask)):
        if t.shape != logp.shape:
            raise ValueError(f"{name} must have logp's shape {tuple(logp.shape)}, got {tuple(t.shape)}")
    m = mask != 0
    dtype = torch.promote_types(torch.promote_types(logp.dtype, logp_old.dtype), torch.float32)
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    # Select (not multiply) so that inf/NaN on padding cannot produce NaN values or gradients.
    log_ratio = torch.where(m, logp.to(dtype) - logp_old.to(dtype), zero)
    a = torch.where(m, adv.to(dtype), zero)
    log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)  # verl: exp cannot overflow, ppo_kl is clamped too
    ratio = torch.exp(log_ratio)
    loss_unclipped = -a * ratio
    loss_clipped = -a * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    neg = a < 0
    if dual_clip is not None:
        lower_bound = -a * dual_clip
        lower_active = neg & (loss > lower_bound) & m
        loss = torch.where(neg, torch.minimum(loss, lower_bound), loss)
    else:
        lower_active = torch.zeros_like(m)
    loss = torch.where(m, loss, zero)

    n_tok = max(int(m.sum()), 1)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": float(((loss_clipped > loss_unclipped) & m).sum()) / n_tok,
            "pg_clipfrac_lower": float(lower_active.sum()) / n_tok,
            "ppo_kl": float(-log_ratio.sum()) / n_tok,
        }
    return loss, metrics


# -- the sampler/trainer mismatch (§5.6) --------------------------------------------------------

def _check_same_shape(ref: Tensor, **tensors: Tensor) -> None:
    for name, t in tensors.items():
        if t.shape != ref.shape:
            raise ValueError(f"{name} must have shape {tuple(ref.shape)}, got {tuple(t.shape)}")


def mismatch_stats(logp_trainer: Tensor, logp_behaviour: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the trainer's probabilities of the sampled tokens are from the sampler's (§5.6), token
    means over ``mask`` (N, L) of this batch (0 with no valid token); no gradient.

    ``mismatch_abs``: mean of ``|logp_trainer - logp_behaviour|``; ``mismatch_k3``: mean of
    ``r - 1 - log r`` with ``r = exp(logp_trainer - logp_behaviour)``, the k3 estimate of
    KL(behaviour || trainer) from the behaviour policy's samples (:func:`kl_estimate` with ``logp`` the
    behaviour's and ``logp_ref`` the trainer's, no clamp).
    """
    _check_same_shape(logp_trainer, logp_behaviour=logp_behaviour, mask=mask)
    with torch.no_grad():
        m = mask != 0
        dtype = torch.promote_types(torch.promote_types(logp_trainer.dtype, logp_behaviour.dtype), torch.float32)
        zero = torch.zeros((), dtype=dtype, device=logp_trainer.device)
        lt = torch.where(m, logp_trainer.detach().to(dtype), zero)
        lb = torch.where(m, logp_behaviour.detach().to(dtype), zero)
        k3 = torch.where(m, kl_estimate(lb, lt, "k3", clamp=None), zero)
        n_tok = max(int(m.sum()), 1)
        return {"mismatch_abs": float((lt - lb).abs().sum()) / n_tok, "mismatch_k3": float(k3.sum()) / n_tok}


def check_mismatch_options(tis_cap: float | None, band: Sequence[float] | None) -> None:
    """ValueError for a TIS cap that is not a number > 0 or a band that is not ``[low, high]`` with
    0 < low < 1 < high (None: that correction is off)."""
    if tis_cap is not None and (isinstance(tis_cap, bool) or not isinstance(tis_cap, (int, float))
                                or not math.isfinite(tis_cap) or tis_cap <= 0):
        raise ValueError(f"tis_cap must be a finite number > 0 (the cap C of the truncated importance weight), or "
                         f"null (off); got {tis_cap!r}")
    if band is None:
        return
    ok = (isinstance(band, (list, tuple)) and len(band) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in band))
    if not ok or not 0 < band[0] < 1 < band[1]:
        raise ValueError(f"mismatch_mask must be [low, high] with 0 < low < 1 < high (the band of trainer/sampler "
                         f"probability ratios a token must be in to count), or null (off); got {band!r}")


def mismatch_weights(logp_trainer_old: Tensor, logp_behaviour: Tensor, mask: Tensor, *,
                     tis_cap: float | None = None, band: Sequence[float] | None = None) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights (N, L) of the policy-gradient term against the sampler/trainer mismatch (§5.6).

    With ``s = exp(logp_trainer_old - logp_behaviour)`` (the trainer's probability of the sampled token
    before the update over the sampler's): ``w = 1``; with ``band = (low, high)`` ``w = 0`` where
    ``s`` is outside [low, high] (masking); with ``tis_cap = C`` ``w *= min(s, C)`` (truncated
    importance sampling). 0 where ``mask`` is 0; detached (a weight, never differentiated).

    Returns ``(w, metrics)``: ``mismatch_masked_frac`` (valid tokens the band dropped; 0 without a band)
    and ``tis_weight_mean`` (the mean of ``w`` over valid tokens, dropped ones counting 0).
    """
    check_mismatch_options(tis_cap, band)
    _check_same_shape(logp_trainer_old, logp_behaviour=logp_behaviour, mask=mask)
    with torch.no_grad():
        m = mask != 0
        dtype = torch.promote_types(torch.promote_types(logp_trainer_old.dtype, logp_behaviour.dtype), torch.float32)
        zero = torch.zeros((), dtype=dtype, device=logp_trainer_old.device)
        # Select (not multiply): padding may hold garbage log-probs
        s = torch.exp(torch.where(m, logp_trainer_old.detach().to(dtype) - logp_behaviour.detach().to(dtype), zero))
        w = torch.ones_like(s)
        dropped = torch.zeros_like(m)
        if band is not None:
            dropped = m & ((s < band[0]) | (s > band[1]))
            w = torch.where(dropped, zero, w)
        if tis_cap is not None:
            w = w * s.clamp(max=float(tis_cap))
        w = torch.where(m, w, zero)
        n_tok = max(int(m.sum()), 1)
        metrics = {"mismatch_masked_frac": float(dropped.sum()) / n_tok, "tis_weight_mean": float(w.sum()) / n_tok}
    return w, metrics


# -- aggregation (§5.3) ------------------------------------------------------------------------

def _positive(name: str, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def _masked(per_token: Tensor, m: Tensor) -> Tensor:
    return torch.where(m, per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device))


def _token_mean(lm: Tensor, m: Tensor, num_tokens: float | None, num_seqs: float | None, c: float | None) -> Tensor:
    n = num_tokens if num_tokens is not None else max(int(m.sum()), 1)
    return lm.sum() / n


def _row_lengths(m: Tensor) -> Tensor:
    return m.sum(dim=1)


def _seq_count(m: Tensor, num_seqs: float | None) -> float:
    # fully-masked rows do not count as sequences (verl/OpenRLHF semantics)
    return num_seqs if num_seqs is not None else max(int((_row_lengths(m) > 0).sum()), 1)


def _seq_mean_token_mean(lm: Tensor, m: Tensor, num_tokens: float | None, num_seqs: float | None, c: float | None) -> Tensor:
    per_row = lm.sum(dim=1) / _row_lengths(m).clamp_min(1).to(lm.dtype)
    return per_row.sum() / _seq_count(m, num_seqs)


def _seq_mean_token_sum(lm: Tensor, m: Tensor, num_tokens: float | None, num_seqs: float | None, c: float | None) -> Tensor:
    return lm.sum() / _seq_count(m, num_seqs)


def _require_c(mode: str, c: float | None) -> float:
    if c is None:
        raise ValueError(
            f"loss aggregation mode {mode!r} needs norm_const (the configured max response length); "
            "the padded width of a micro-batch is not a valid substitute"
        )
    return c


def _seq_mean_token_sum_norm(lm: Tensor, m: Tensor, num_tokens: float | None, num_seqs: float | None, c: float | None) -> Tensor:
    # verl semantics: no division by the number of sequences (B times the paper's Dr. GRPO loss)
    return lm.sum() / _require_c("seq-mean-token-sum-norm", c)


def _dr_grpo(lm: Tensor, m: Tensor, num_tokens: float | None, num_seqs: float | None, c: float | None) -> Tensor:
    # TRL/oat semantics: N_rows counts every row, fully-masked ones included (TRL counts them)
    c = _require_c("dr_grpo", c)
    n_rows = num_seqs if num_seqs is not None else max(m.shape[0], 1)
    return lm.sum() / (n_rows * c)


_AGG: dict[str, Callable[..., Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
    "dr_grpo": _dr_grpo,
}
LOSS_AGG_MODES = tuple(_AGG)


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    mode: str,
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    norm_const: float | None = None,
) -> Tensor:
    """Aggregate a per-token loss (N, L) under ``mask`` (N, L) to a scalar (§5.3).

    Modes (sums over valid tokens; ``|o_i|`` = valid tokens of row i; C = ``norm_const``):
      * ``token-mean``: ``sum / N_tok``
      * ``seq-mean-token-mean``: ``sum_i (row_sum_i / |o_i|) / N_seq``
      * ``seq-mean-token-sum``: ``sum / N_seq``
      * ``seq-mean-token-sum-norm`` (verl): ``sum / C`` (no division by the number of rows)
      * ``dr_grpo`` (TRL/oat): ``sum / (N_rows * C)``

    ``num_tokens`` (N_tok) and ``num_seqs`` (N_seq, or N_rows for ``dr_grpo``) are the GLOBAL
    counts over the whole optimizer step (all micro-batches, all ranks); the result is then this
    micro-batch's share, and summing the shares over micro-batches gives the global loss (V6b).
    When None they default to this batch's own counts. N_seq excludes fully-masked rows; N_rows
    for ``dr_grpo`` includes them (TRL counts them), so pass the total row count there.
    ``norm_const`` is required for ``seq-mean-token-sum-norm`` and ``dr_grpo``.
    """
    try:
        fn = _AGG[mode]
    except KeyError:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; allowed modes: {LOSS_AGG_MODES}") from None
    if per_token.shape != mask.shape or per_token.dim() != 2:
        raise ValueError(
            f"per_token and mask must both be (N, L), got {tuple(per_token.shape)} and {tuple(mask.shape)}"
        )
    _positive("num_tokens", num_tokens)
    _positive("num_seqs", num_seqs)
    _positive("norm_const", norm_const)
    m = mask != 0
    return fn(_masked(per_token, m), m, num_tokens, num_seqs, norm_const)
