"""Multi-agent / co-training advantage plug-ins as pure functions (docs/algorithms.md §8).

* PRIME (§8.1, V9): implicit process reward ``r = beta * (log pi_phi - log pi_ref)`` from an
  outcome-trained implicit PRM, its cross-entropy loss on verifier labels, and the combined
  process-RLOO + outcome-RLOO -> returns -> ``W_verl`` advantage.
* SPIRAL RAE (§8.2, V12): one EMA baseline per ``(game_id, role)``; the state is passed in and a new
  state returned, never mutated.
* Absolute Zero TRR++ (§8.4, V11): REINFORCE++ (returns, then token-weighted whitening) applied
  separately to each ``(task_type, role)`` group.

Layout and conventions are those of :mod:`cogym.learners.advantages` (docs/algorithms.md §1): ``N``
responses right-padded to width ``L``; ``mask`` (N, L) is the loss mask; group ids are explicit
integer ids (build them with :func:`~cogym.learners.advantages.group_index`); fully-masked rows are
excluded from every statistic and get exactly 0; padding is exactly 0; values on masked positions
of the inputs never leak; computation is float64, outputs come back in the input's floating dtype.
Everything except :func:`prime_ce_loss` runs under ``no_grad``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

import torch
from torch import Tensor

from cogym.learners.advantages import (
    F64,
    check_2d,
    check_rows,
    out_dtype,
    row_valid,
    discounted_returns,
    outcome_token_rewards,
    reinforce_pp_advantages,
    rloo_advantages,
    whiten,
)

__all__ = [
    "PRIME_GRANULARITIES", "PRIME_NORMS", "PRIME_COMPATS", "RAE_ORDERS",
    "prime_q", "prime_process_rewards", "prime_ce_loss", "prime_advantages",
    "rae_update", "RAEBaselines", "rae_turn_discount", "rae_token_advantages", "nonzero_rows",
    "trr_pp_advantages",
]


# =============================================================================================
# PRIME (§8.1)
# =============================================================================================

PRIME_GRANULARITIES = ("token", "whole")
PRIME_NORMS = ("batch_norm", "none")
PRIME_COMPATS = ("original", "verl")


def _last_valid(mask: Tensor) -> Tensor:
    """(N,) index of each row's last valid token (0 for fully-masked rows)."""
    n, width = mask.shape
    pos = torch.arange(width, device=mask.device).expand(n, width)
    return torch.where(mask != 0, pos, torch.full_like(pos, -1)).max(dim=1).values.clamp_min(0)


def prime_q(logp_prm: Tensor, logp_ref: Tensor, mask: Tensor) -> Tensor:
    """Token Q-difference ``q = (log pi_phi - log pi_ref) * m`` (§8.1); (N, L) x2 -> (N, L).

    Keeps the gradient of ``logp_prm`` (``logp_ref`` is treated as frozen and detached). Masked
    positions are exactly 0 whatever the inputs hold there (NaN included).
    """
    check_2d("logp_prm", logp_prm, mask)
    check_2d("logp_ref", logp_ref, mask)
    m = mask != 0
    diff = logp_prm - logp_ref.detach()
    return torch.where(m, diff, torch.zeros((), dtype=diff.dtype, device=diff.device))


@torch.no_grad()
def prime_process_rewards(
    q: Tensor,
    mask: Tensor,
    *,
    beta: float = 0.05,
    granularity: str = "token",
    norm: str = "batch_norm",
    compat: str = "original",
) -> Tensor:
    """Implicit process rewards ``r_phi = beta * q`` placed per §8.1; (N, L) -> (N, L).

    Args:
        q: (N, L) ``log pi_phi - log pi_ref`` per token (see :func:`prime_q`); masked values ignored.
        mask: (N, L) loss mask.
        beta: ``beta_train``.
        granularity: "token" (every valid token gets its own reward) or "whole" (``sum_t r_phi`` on
            the last valid token).
        norm: "batch_norm" divides all rewards by ``max_{i,t} |sum_{s>=t} r[i,s]| + 1e-6`` over the
            whole batch, so beta cancels: with compat "original" the normalised tensor is ``q``
            itself (V9's divisor 2.000001), with "verl" it is ``beta * q``; "none" keeps
            ``beta * q``.
        compat: "original" (canonical, original PRIME: all valid tokens ``0..T_i``) or "verl" (verl
            recipe, token granularity only: the last valid token's process reward is zeroed, but the
            token stays valid, so it still counts in the per-response mean of
            :func:`prime_advantages`). The batch norm is taken over the rewards actually emitted,
            i.e. after that drop, as in the verl recipe.

    Returns:
        (N, L) process rewards, exactly 0 on masked positions and on fully-masked rows.
    """
    check_2d("q", q, mask)
    if granularity not in PRIME_GRANULARITIES:
        raise ValueError(f"granularity must be one of {PRIME_GRANULARITIES}, got {granularity!r}")
    if norm not in PRIME_NORMS:
        raise ValueError(f"norm must be one of {PRIME_NORMS}, got {norm!r}")
    if compat not in PRIME_COMPATS:
        raise ValueError(f"compat must be one of {PRIME_COMPATS}, got {compat!r}")
    m = mask != 0
    # original PRIME normalises q itself, the verl recipe normalises beta * q (same up to the 1e-6)
    scale = 1.0 if (norm == "batch_norm" and compat == "original") else float(beta)
    r = torch.where(m, q.to(F64), 0.0) * scale
    last = _last_valid(mask)
    valid = row_valid(mask)
    if granularity == "whole":
        total = torch.where(valid, r.sum(dim=1), 0.0)
        r = torch.zeros_like(r).scatter_(1, last[:, None], total[:, None])
    elif compat == "verl":
        r = r.scatter(1, last[:, None], 0.0)
    if norm == "batch_norm":
        rev = torch.flip(torch.cumsum(torch.flip(r, dims=[1]), dim=1), dims=[1])
        r = r / (rev.abs().max() + 1e-6) if r.numel() else r
    return torch.where(m, r, 0.0).to(out_dtype(q, mask))


def prime_ce_loss(
    logp_prm: Tensor, logp_ref: Tensor, mask: Tensor, acc: Tensor, *, beta: float = 0.05
) -> Tensor:
    """PRM cross-entropy on outcome labels (§8.1, ``loss_type: ce``); returns a scalar with grad.

    ``L = -(1/N) sum_i [acc_i log sigma(z_i) + (1 - acc_i) log(1 - sigma(z_i))]``,
    ``z_i = beta * sum_t q[i,t]``.

    Args:
        logp_prm: (N, L) log pi_phi of the sampled tokens (carries gradient).
        logp_ref: (N, L) log pi_ref (frozen; detached here, so no gradient reaches it).
        mask: (N, L) loss mask.
        acc: (N,) verifier labels in {0, 1} (soft labels in [0, 1] also work).
    Fully-masked rows are excluded from the sum and from ``N`` (their labels may be NaN); with no
    valid row the loss is 0 (still differentiable). Computed with ``logsigmoid`` in float64 for
    stability and returned in ``logp_prm``'s dtype.
    """
    check_rows(acc, mask)
    q = prime_q(logp_prm, logp_ref, mask).to(F64)
    valid = row_valid(mask)
    z = q.sum(dim=1) * float(beta)
    y = torch.where(valid, acc.to(F64), 0.0)
    ll = y * torch.nn.functional.logsigmoid(z) + (1.0 - y) * torch.nn.functional.logsigmoid(-z)
    ll = torch.where(valid, ll, torch.zeros_like(ll))
    n = valid.sum().clamp_min(1).to(F64)
    return (-ll.sum() / n).to(out_dtype(logp_prm, mask))


@torch.no_grad()
def _process_rloo(r: Tensor, mask: Tensor, groups: Tensor) -> Tensor:
    """PRIME's token-level RLOO: ``r[i,t] * n/(n-1) - sum_{j in g} mean_j / (n-1)`` on valid tokens.

    ``mean_j`` = mean of ``r[j, .]`` over response j's valid tokens; ``n`` = number of valid rows
    in the group. Singleton groups (n = 1) get 0; fully-masked rows get 0 and do not count.
    """
    m = mask != 0
    valid = row_valid(mask)
    r = torch.where(m, r, 0.0)
    tok = m.sum(dim=1).to(F64)
    means = torch.where(valid, r.sum(dim=1) / tok.clamp_min(1.0), 0.0)
    _, gid = torch.unique(groups, return_inverse=True)
    num_groups = int(gid.max()) + 1 if gid.numel() else 0
    zeros = torch.zeros(num_groups, dtype=F64, device=r.device)
    cnt = zeros.index_add(0, gid, valid.to(F64))[gid]                   # (N,)
    msum = zeros.index_add(0, gid, means)[gid]                             # (N,)
    den = (cnt - 1.0).clamp_min(1.0)
    out = r * (cnt / den)[:, None] - (msum / den)[:, None]
    keep = m & (valid & (cnt > 1))[:, None]
    return torch.where(keep, out, 0.0)


@torch.no_grad()
def prime_advantages(
    process_rewards: Tensor,
    acc: Tensor,
    mask: Tensor,
    groups: Tensor,
    *,
    process_coef: float = 5.0,
    outcome_coef: float = 5.0,
) -> tuple[Tensor, Tensor]:
    """PRIME advantage (§8.1, ``adv_estimator = rloo``, γ = 1).

    ``combined = process_coef * RLOO_tok(process_rewards) + outcome_coef * RLOO(acc) on last token``,
    ``G[i,t] = sum_{s>=t} combined[i,s]``, ``A = W_verl(G)`` over every valid token passed in.

    Args:
        process_rewards: (N, L) from :func:`prime_process_rewards`.
        acc: (N,) verifier outcome labels.
        mask: (N, L) loss mask.
        groups: (N,) integer prompt-group ids (the ``n`` samples of one prompt).
        process_coef / outcome_coef: verl ``reward_dpo_coef`` / ``reward_gt_coef`` (5, 5); the
            original repo is (1, 1) -- the same result after whitening when they are equal.
    Returns:
        (adv (N, L), returns (N, L) before whitening); both exactly 0 on masked positions.
    """
    check_2d("process_rewards", process_rewards, mask)
    check_rows(acc, mask, groups)
    m = mask != 0
    proc = _process_rloo(process_rewards.to(F64), mask, groups)
    out_adv, _ = rloo_advantages(acc.to(F64), mask.to(F64), groups)       # (N, L) broadcast
    per_row = out_adv.gather(1, _last_valid(mask)[:, None])[:, 0] if mask.shape[1] else acc.to(F64)
    outcome = outcome_token_rewards(per_row, mask.to(F64))                  # on the last valid token
    combined = float(process_coef) * proc + float(outcome_coef) * outcome
    returns = discounted_returns(combined, mask.to(F64), 1.0, "skip")
    returns = torch.where(m, returns, 0.0)
    adv = whiten(returns, mask.to(F64), "verl")
    dtype = out_dtype(process_rewards, acc, mask)
    return adv.to(dtype), returns.to(dtype)


# =============================================================================================
# SPIRAL role-conditioned advantage estimation (§8.2)
# =============================================================================================

RAE_ORDERS = ("pre", "update_first")


@torch.no_grad()
def rae_update(
    baselines: Mapping[Hashable, float],
    keys: Sequence[Hashable],
    rewards: Tensor,
    *,
    alpha: float = 0.95,
    order: str = "pre",
    valid: Tensor | None = None,
) -> tuple[Tensor, dict[Hashable, float]]:
    """Role-conditioned advantages against per-key EMA baselines (§8.2, V12). Pure: no mutation.

    Rows are finished (game, role) outcomes processed **sequentially in row order** (the EMA is a
    recursion, so two rows with the same key are order-dependent; rows with different keys are
    independent). For each valid row with key ``k = (game_id, role)``:

    * ``order="pre"`` (canonical): ``A = R - b_k``, then ``b_k <- alpha * b_k + (1 - alpha) * R``;
    * ``order="update_first"`` (paper reading): update ``b_k`` first, then ``A = R - b_k``.

    Unseen keys start at 0 (no bias correction).

    Args:
        baselines: current state ``{key: b}``; not modified.
        keys: N hashable keys, canonically ``(game_id, role)``.
        rewards: (N,) terminal rewards ``R_p``.
        valid: optional (N,) bool; invalid rows get A = 0 and leave the state untouched (their
            rewards may be NaN).
    Returns:
        (adv (N,) in the rewards' floating dtype, new state dict).
    """
    if order not in RAE_ORDERS:
        raise ValueError(f"order must be one of {RAE_ORDERS}, got {order!r}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    n = len(keys)
    if rewards.shape != (n,):
        raise ValueError(f"rewards must have shape ({n},) to match keys, got {tuple(rewards.shape)}")
    if valid is not None and valid.shape != (n,):
        raise ValueError(f"valid must have shape ({n},), got {tuple(valid.shape)}")
    new = dict(baselines)
    r = rewards.detach().to(F64).cpu().tolist()
    ok = [True] * n if valid is None else [bool(v) for v in valid.cpu().tolist()]
    out = [0.0] * n
    a = float(alpha)
    for i, (k, rew, v) in enumerate(zip(keys, r, ok)):
        if not v:
            continue
        b = float(new.get(k, 0.0))
        if order == "pre":
            out[i] = rew - b
            new[k] = a * b + (1.0 - a) * rew
        else:
            b = a * b + (1.0 - a) * rew
            new[k] = b
            out[i] = rew - b
    adv = torch.tensor(out, dtype=F64, device=rewards.device)
    return adv.to(out_dtype(rewards)), new


@dataclass(frozen=True)
class RAEBaselines:
    """Immutable RAE state (§8.2): trainer-global, keyed by ``(game_id, role)``, checkpointable.

    ``update`` returns ``(advantages, new_state)`` and leaves ``self`` unchanged.
    """

    alpha: float = 0.95
    order: str = "pre"
    values: Mapping[Hashable, float] = field(default_factory=dict)

    def update(
        self, keys: Sequence[Hashable], rewards: Tensor, valid: Tensor | None = None
    ) -> tuple[Tensor, "RAEBaselines"]:
        adv, new = rae_update(self.values, keys, rewards, alpha=self.alpha, order=self.order, valid=valid)
        return adv, RAEBaselines(self.alpha, self.order, new)

    def get(self, key: Hashable) -> float:
        return float(self.values.get(key, 0.0))

    def state_dict(self) -> dict:
        """Plain dict for checkpoints (keys kept as given: tuples pickle fine with torch.save)."""
        return {"alpha": self.alpha, "order": self.order, "values": dict(self.values)}

    @classmethod
    def from_state_dict(cls, state: Mapping) -> "RAEBaselines":
        return cls(float(state["alpha"]), str(state["order"]), dict(state["values"]))


@torch.no_grad()
def rae_turn_discount(
    advantages: Tensor, turn_index: Tensor, num_turns: Tensor, *, gamma: float = 1.0
) -> Tensor:
    """Per-turn credit for one-row-per-turn layouts (SPIRAL's): ``A * gamma**(num_turns - 1 - k)``.

    Args:
        advantages: (N,) the game-level RAE advantage of the row's (game, role).
        turn_index: (N,) int, k = 0 for the player's earliest turn in that game.
        num_turns: (N,) int, the player's number of turns in that game.
    Returns:
        (N,) per-turn advantages (the last turn keeps ``A``). Broadcast them onto the turn's tokens
        with :func:`~cogym.learners.advantages.outcome_token_rewards` (reward on the last token) or
        ``adv[:, None] * mask`` (the Monte-Carlo advantage = summed token reward of the row).
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    n = advantages.shape[0]
    if advantages.shape != (n,) or turn_index.shape != (n,) or num_turns.shape != (n,):
        raise ValueError("advantages, turn_index and num_turns must all have shape (N,)")
    k = turn_index.to(F64)
    kk = num_turns.to(F64)
    if bool(((k < 0) | (k >= kk)).any()):
        raise ValueError("turn_index must satisfy 0 <= turn_index < num_turns")
    out = advantages.to(F64) * torch.pow(torch.tensor(float(gamma), dtype=F64), kk - 1.0 - k)
    return out.to(out_dtype(advantages))


@torch.no_grad()
def rae_token_advantages(advantages: Tensor, mask: Tensor, *, gamma: float = 1.0) -> Tensor:
    """Per-turn credit for one-row-per-trajectory layouts; (N,), (N, L) -> (N, L).

    A row holds one player's whole game; its turns are the maximal runs of valid tokens (opponent /
    environment tokens between them have ``m = 0``). Every token of turn k (of K) gets
    ``A * gamma**(K - 1 - k)`` (γ = 1: the same value on every valid token). No group baseline,
    no whitening. Masked positions and fully-masked rows are exactly 0.
    """
    check_rows(advantages, mask)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    m = mask != 0
    starts = m.clone()
    starts[:, 1:] &= ~m[:, :-1]
    turn_no = torch.cumsum(starts.to(torch.long), dim=1)           # 1..K on valid tokens
    total = turn_no[:, -1:] if m.shape[1] else turn_no.sum(dim=1, keepdim=True)
    expo = (total - turn_no).to(F64)                                # K - k for k = turn_no (1-based)
    a = torch.where(row_valid(mask), advantages.to(F64), 0.0)
    val = a[:, None] * torch.pow(torch.tensor(float(gamma), dtype=F64), expo)
    return torch.where(m, val, 0.0).to(out_dtype(advantages, mask))


def nonzero_rows(adv: Tensor) -> Tensor:
    """SPIRAL ``filter_zero_adv``: (N,) per-row or (N, L) per-token advantages -> (N,) bool keep.

    A row is kept iff some advantage is non-zero (a per-turn row with ``A == 0`` exactly is dropped).
    """
    return (adv != 0) if adv.dim() == 1 else (adv != 0).any(dim=1)


# =============================================================================================
# Absolute Zero TRR++ (§8.4)
# =============================================================================================

@torch.no_grad()
def trr_pp_advantages(
    token_rewards: Tensor,
    mask: Tensor,
    groups: Tensor,
    *,
    gamma: float = 1.0,
    whiten_mode: str = "verl",
    semantics: str = "skip",
) -> tuple[Tensor, Tensor]:
    """Task-relative REINFORCE++ (§8.4, V11): REINFORCE++ run separately on each group.

    Each group (canonically ``(task_type, role)``, e.g. 3 task types x {propose, solve}) gets its
    own discounted returns whitened with its own token-weighted mean and std (``W_verl``), so no
    group's rewards can influence another's advantages.

    Args:
        token_rewards: (N, L), outcome (with AZR format shaping) on the last valid token; build
            with :func:`~cogym.learners.advantages.outcome_token_rewards`.
        mask: (N, L) loss mask.
        groups: (N,) integer group ids.
        semantics: returns across interior masked tokens (see ``discounted_returns``); "verl" is
            the reference-code behaviour, identical for AZR's single-turn rows.
    Returns:
        (adv (N, L), returns (N, L) unwhitened); exactly 0 on masked positions. A group whose
        valid tokens all carry the same return gets 0; a group with no valid token gets 0.
    """
    check_2d("token_rewards", token_rewards, mask)
    check_rows(torch.zeros(mask.shape[0]), mask, groups)
    r = token_rewards.to(F64)
    m = mask.to(F64)
    adv = torch.zeros_like(r)
    ret = torch.zeros_like(r)
    for g in torch.unique(groups).tolist():
        rows = (groups == g).nonzero(as_tuple=True)[0]
        a_g, r_g = reinforce_pp_advantages(
            r[rows], m[rows], gamma=gamma, whiten_mode=whiten_mode, semantics=semantics
        )
        adv[rows] = a_g
        ret[rows] = r_g
    dtype = out_dtype(token_rewards, mask)
    return adv.to(dtype), ret.to(dtype)

