"""Advantage estimators as pure torch functions (docs/algorithms.md §2, §4).

Layout (docs/algorithms.md §1): ``N`` responses right-padded to width ``L``; ``mask`` (N, L) is the loss
mask (1 = token emitted by the policy being trained; 0 = padding, prompt, tool/opponent tokens);
``scores`` (N,) are per-response outcome scores ``S_i``; ``groups`` (N,) are integer group ids
(build them with :func:`group_index` from explicit keys such as ``(prompt_uid, role)``).

Conventions shared by every function here:

* Groups come ONLY from explicit ids, never from row position, so rows may be in any order and
  groups may be ragged.
* Statistics (group means/stds, whitening moments) are computed over the rows passed in. The
  caller passes ONE ROLE's rows at a time: never normalise across roles (§2.5, §8.5).
* Fully-masked rows (``mask.sum(1) == 0``; rejected or filtered rollouts) are excluded from every
  statistic and get advantage exactly 0 (§2.2). Their scores may even be NaN.
* Outputs are multiplied by the mask: padding is exactly 0. Values sitting on masked positions of
  the inputs (garbage logprob/KL on padding, NaN scores of invalid rows) never leak into outputs.
* Everything is computed in float64 and returned in the input's floating dtype, under no_grad.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import torch
from torch import Tensor

__all__ = [
    "WHITEN_MODES", "RETURN_SEMANTICS", "SINGLETON_MODES",
    "group_index", "outcome_token_rewards",
    "grpo_advantages", "grpo_batch_std_advantages", "rloo_advantages",
    "whiten", "discounted_returns", "reinforce_pp_advantages", "reinforce_pp_baseline_advantages",
    "apply_kl_in_reward",
]

F64 = torch.float64


# -- helpers -----------------------------------------------------------------------------------

def out_dtype(*tensors: Tensor) -> torch.dtype:
    """First floating dtype among ``tensors`` (scores may arrive as int 0/1 rewards)."""
    for t in tensors:
        if t.is_floating_point():
            return t.dtype
    return torch.get_default_dtype()


def _check_mask(mask: Tensor) -> None:
    if mask.dim() != 2:
        raise ValueError(f"mask must be 2-D (N, L), got shape {tuple(mask.shape)}")


def check_2d(name: str, x: Tensor, mask: Tensor) -> None:
    _check_mask(mask)
    if x.shape != mask.shape:
        raise ValueError(f"{name} must have the mask's shape {tuple(mask.shape)}, got {tuple(x.shape)}")


def check_rows(scores: Tensor, mask: Tensor, groups: Tensor | None = None) -> None:
    _check_mask(mask)
    n = mask.shape[0]
    if scores.shape != (n,):
        raise ValueError(f"scores must have shape ({n},) to match mask rows, got {tuple(scores.shape)}")
    if groups is not None:
        if groups.shape != (n,):
            raise ValueError(f"groups must have shape ({n},), got {tuple(groups.shape)}")
        if groups.is_floating_point() or groups.dtype == torch.bool:
            raise ValueError(f"groups must be an integer tensor (see group_index), got {groups.dtype}")


def row_valid(mask: Tensor) -> Tensor:
    """(N,) bool: rows with at least one unmasked token."""
    return (mask != 0).any(dim=1)


@dataclass(frozen=True)
class GroupMoments:
    """Per-row view of group statistics over the *valid* rows (fully-masked rows excluded), from
    :func:`group_moments` (other estimators, e.g. :mod:`cogym.learners.estimators`, build on it)."""

    centred: Tensor   # (N,) S_i - mean_g; exactly 0 for constant groups and invalid rows
    count: Tensor     # (N,) n_g (valid members of the row's group)
    std1: Tensor      # (N,) Bessel std of the group (0 where n_g < 2)
    var1: Tensor      # (N,) Bessel variance of the group (0 where n_g < 2)
    valid: Tensor     # (N,) bool
    stats: dict[str, float]
    gid: Tensor       # (N,) the row's group as an id in 0..G-1


def group_moments(scores: Tensor, mask: Tensor, groups: Tensor) -> GroupMoments:
    valid = row_valid(mask)
    s = torch.where(valid, scores.to(F64), torch.zeros((), dtype=F64, device=scores.device))
    # torch.unique compacts arbitrary integer ids (uid hashes, sparse ids) to 0..G-1.
    _, gid = torch.unique(groups, return_inverse=True)
    num_groups = int(gid.max()) + 1 if gid.numel() else 0
    w = valid.to(F64)
    zeros = torch.zeros(num_groups, dtype=F64, device=s.device)
    cnt = zeros.index_add(0, gid, w)
    mean_g = zeros.index_add(0, gid, s * w) / cnt.clamp_min(1.0)
    dev = (s - mean_g[gid]) * w
    var_g = zeros.index_add(0, gid, dev * dev) / (cnt - 1.0).clamp_min(1.0)
    var_g = torch.where(cnt > 1, var_g, zeros)
    # Decide "zero variance" by max == min rather than var == 0: mean-of-equal-floats can leave a
    # ~1e-17 residue that, divided by a tiny std, would turn a constant group into noise (§11).
    inf = torch.tensor(float("inf"), dtype=F64, device=s.device)
    gmax = torch.full_like(zeros, -float("inf")).scatter_reduce(0, gid, torch.where(valid, s, -inf), "amax")
    gmin = torch.full_like(zeros, float("inf")).scatter_reduce(0, gid, torch.where(valid, s, inf), "amin")
    const_g = (gmax == gmin) & (cnt > 0)
    var_g = torch.where(const_g, zeros, var_g)
    centred = torch.where(valid & ~const_g[gid], s - mean_g[gid], torch.zeros_like(s))
    present = cnt > 0
    n_present = int(present.sum())
    zero_std = int(((cnt > 1) & const_g).sum())
    stats = {
        "num_groups": float(n_present),
        "singleton_groups": float(int((cnt == 1).sum())),
        "frac_zero_std": zero_std / n_present if n_present else 0.0,
        "masked_rows": float(int((~valid).sum())),
    }
    return GroupMoments(centred, cnt[gid], var_g[gid].sqrt(), var_g[gid], valid, stats, gid)


def broadcast_rows(per_row: Tensor, mask: Tensor, dtype: torch.dtype) -> Tensor:
    """(N,) -> (N, L) on valid tokens, exactly 0 elsewhere."""
    m = (mask != 0).to(F64)
    return (per_row.to(F64)[:, None] * m).to(dtype)


# -- grouping and token rewards ----------------------------------------------------------------

def group_index(keys: Sequence[Hashable]) -> torch.LongTensor:
    """Map explicit group keys (tuples, strings, ints) to ids 0..G-1 in first-seen order.

    ``keys`` has length N; returns a (N,) int64 tensor. Two rows share a group iff their keys are
    equal, so e.g. ``(task_uid, "solver")`` and ``(task_uid, "proposer")`` are different groups.
    """
    ids: dict[Hashable, int] = {}
    out = [ids.setdefault(k, len(ids)) for k in keys]
    return torch.tensor(out, dtype=torch.long)


@torch.no_grad()
def outcome_token_rewards(scores: Tensor, mask: Tensor) -> Tensor:
    """Place each row's outcome ``scores[i]`` (N,) on its last valid token; returns (N, L).

    Fully-masked rows get nothing (all zeros).
    """
    check_rows(scores, mask)
    n, width = mask.shape
    valid = row_valid(mask)
    pos = torch.arange(width, device=mask.device).expand(n, width)
    last = torch.where(mask != 0, pos, torch.full_like(pos, -1)).max(dim=1).values.clamp_min(0)
    out = torch.zeros(n, width, dtype=F64, device=mask.device)
    vals = torch.where(valid, scores.to(F64), torch.zeros((), dtype=F64, device=mask.device))
    out.scatter_(1, last[:, None], vals[:, None])
    return out.to(out_dtype(scores, mask))


# -- group estimators (outcome-only: one value per response, broadcast to its tokens) ----------

SINGLETON_MODES = ("zero", "verl")


def _singleton_zero(scores: Tensor, eps: float, norm_by_std: bool) -> Tensor:
    return torch.zeros_like(scores)


def _singleton_verl(scores: Tensor, eps: float, norm_by_std: bool) -> Tensor:
    # verl's loop estimators use mean 0, std 1 for a lone member: a baseline-free REINFORCE.
    return scores / (1.0 + eps) if norm_by_std else scores


_SINGLETON: dict[str, Callable[[Tensor, float, bool], Tensor]] = {
    "zero": _singleton_zero,
    "verl": _singleton_verl,
}


def singleton_fn(singleton: str) -> Callable[[Tensor, float, bool], Tensor]:
    try:
        return _SINGLETON[singleton]
    except KeyError:
        raise ValueError(f"singleton must be one of {SINGLETON_MODES}, got {singleton!r}") from None


@torch.no_grad()
def grpo_advantages(
    scores: Tensor,
    mask: Tensor,
    groups: Tensor,
    *,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    singleton: str = "zero",
    variance_floor: bool = False,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO group z-score (§4.2): ``A_i = (S_i - mean_g) / (std1_g + eps)``.

    Args:
        scores: (N,) outcome scores ``S_i`` (sum of token rewards, incl. any KL-in-reward shaping).
        mask: (N, L) loss mask.
        groups: (N,) integer group ids.
        eps: added to the Bessel std (verl 1e-6, OpenRLHF 1e-9, TRL 1e-4).
        norm_by_std: False gives Dr. GRPO's ``S_i - mean_g``.
        singleton: "zero" (canonical: 0) or "verl" (``S/(1+eps)``, or ``S`` without std scaling).
        variance_floor: verl ``grpo_vectorized``: ``std = sqrt(max(var1, eps))`` before ``+ eps``.

    Returns:
        adv (N, L) = A_i on valid tokens, 0 elsewhere; stats with ``frac_zero_std`` (groups with
        >1 member and zero spread / groups present), ``singleton_groups``, ``num_groups``,
        ``masked_rows``.
    """
    check_rows(scores, mask, groups)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    single = singleton_fn(singleton)
    gm = group_moments(scores, mask, groups)
    if norm_by_std:
        std = gm.var1.clamp_min(eps).sqrt() if variance_floor else gm.std1
        # constant groups have centred == 0 exactly, so eps == 0 cannot produce 0/0 there
        denom = std + eps
        adv = torch.where(denom > 0, gm.centred / torch.where(denom > 0, denom, 1.0), 0.0)
    else:
        adv = gm.centred
    s = torch.where(gm.valid, scores.to(F64), 0.0)
    adv = torch.where(gm.count == 1, single(s, eps, norm_by_std), adv)
    adv = torch.where(gm.valid, adv, 0.0)
    return broadcast_rows(adv, mask, out_dtype(scores, mask)), gm.stats


@torch.no_grad()
def grpo_batch_std_advantages(
    scores: Tensor, mask: Tensor, groups: Tensor, *, eps: float = 1e-4
) -> tuple[Tensor, dict[str, float]]:
    """TRL ``scale_rewards="batch"``: ``A_i = (S_i - mean_g) / (std1(all valid S) + eps)``.

    Group mean, but the std of the RAW scores over every valid row passed in (§4.2). Shapes as in
    :func:`grpo_advantages`; singletons get 0 (their group mean is themselves).
    """
    check_rows(scores, mask, groups)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    gm = group_moments(scores, mask, groups)
    s = scores.to(F64)[gm.valid]
    bstd = s.std(correction=1) if s.numel() > 1 else torch.zeros((), dtype=F64, device=s.device)
    denom = float(bstd) + eps
    adv = gm.centred / denom if denom > 0 else torch.zeros_like(gm.centred)
    stats = dict(gm.stats, batch_std=float(bstd))
    return broadcast_rows(adv, mask, out_dtype(scores, mask)), stats


@torch.no_grad()
def rloo_advantages(
    scores: Tensor, mask: Tensor, groups: Tensor, *, singleton: str = "zero"
) -> tuple[Tensor, dict[str, float]]:
    """RLOO (§4.3): ``A_i = S_i - mean_{j in g, j != i} S_j = n_g/(n_g-1) * (S_i - mean_g)``.

    Shapes as in :func:`grpo_advantages`. Singletons: "zero" (canonical, = verl
    ``rloo_vectorized``) or "verl" (verl loop: the raw score). No whitening.
    """
    check_rows(scores, mask, groups)
    single = singleton_fn(singleton)
    gm = group_moments(scores, mask, groups)
    n = gm.count
    adv = gm.centred * n / (n - 1.0).clamp_min(1.0)
    s = torch.where(gm.valid, scores.to(F64), 0.0)
    adv = torch.where(n == 1, single(s, 0.0, False), adv)
    adv = torch.where(gm.valid, adv, 0.0)
    return broadcast_rows(adv, mask, out_dtype(scores, mask)), gm.stats


# -- whitening (token-weighted, §1) ------------------------------------------------------------

def _masked_moments(x: Tensor, m: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(mean, sum of squared deviations, token count) over positions where m is True."""
    xm = torch.where(m, x, 0.0)
    n = m.sum().to(F64)
    mu = xm.sum() / n.clamp_min(1.0)
    ss = torch.where(m, (x - mu) ** 2, 0.0).sum()
    return mu, ss, n


def _whiten_verl(x: Tensor, m: Tensor) -> Tensor:
    # W_verl: Bessel variance with 1e-8 inside the sqrt. A single token has no spread: its
    # centred value is exactly 0, so var := 0 yields 0 instead of 0/0.
    mu, ss, n = _masked_moments(x, m)
    var = ss / (n - 1.0) if n > 1 else torch.zeros_like(ss)
    return (x - mu) * torch.rsqrt(var + 1e-8)


def _whiten_openrlhf(x: Tensor, m: Tensor) -> Tensor:
    # W_orl: population variance floored at 1e-8.
    mu, ss, n = _masked_moments(x, m)
    var = ss / n.clamp_min(1.0)
    return (x - mu) / var.clamp_min(1e-8).sqrt()


_WHITEN: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "verl": _whiten_verl,
    "openrlhf": _whiten_openrlhf,
}
WHITEN_MODES = tuple(_WHITEN)


@torch.no_grad()
def whiten(x: Tensor, mask: Tensor, mode: str = "verl") -> Tensor:
    """Token-weighted whitening of ``x`` (N, L) over the valid tokens of ``mask`` (N, L).

    ``mode="verl"``: ``(x - mu) / sqrt(var_unb + 1e-8)``; ``mode="openrlhf"``:
    ``(x - mu) / sqrt(max(var_pop, 1e-8))``. Returns (N, L), exactly 0 on masked positions; all
    zeros when no token is valid.
    """
    check_2d("x", x, mask)
    try:
        fn = _WHITEN[mode]
    except KeyError:
        raise ValueError(f"whiten mode must be one of {WHITEN_MODES}, got {mode!r}") from None
    m = mask != 0
    out = torch.where(m, fn(x.to(F64), m), 0.0)
    return out.to(out_dtype(x, mask))


# -- discounted returns (§4.4) -----------------------------------------------------------------

def _scan(r: Tensor, step: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]) -> Tensor:
    """Backward scan over time; ``step(run, r_t, t) -> (G_t, next run)``, vectorised over rows."""
    out = torch.zeros_like(r)
    run = torch.zeros_like(r[:, 0])
    for t in range(r.shape[1] - 1, -1, -1):
        out[:, t], run = step(run, r[:, t], t)
    return out


def _returns_skip(r: Tensor, m: Tensor, gamma: float) -> Tensor:
    # Canonical: masked positions are invisible (their rewards are ignored, the running return is
    # carried through undiscounted), so G_t = r_t + gamma * G_{next valid}. Masked positions
    # report the carried return; tail padding is therefore 0.
    def step(run: Tensor, r_t: Tensor, t: int) -> tuple[Tensor, Tensor]:
        g = torch.where(m[:, t], r_t + gamma * run, run)
        return g, g
    return _scan(r, step)


def _returns_verl(r: Tensor, m: Tensor, gamma: float) -> Tensor:
    # verl reinforce_plus_plus: the running return is reset to 0 after every masked position,
    # which cuts credit across interior observation spans (V4b).
    def step(run: Tensor, r_t: Tensor, t: int) -> tuple[Tensor, Tensor]:
        g = r_t + gamma * run
        return g, torch.where(m[:, t], g, 0.0)  # not g * mask: a NaN reward on a masked token must not leak
    return _scan(torch.where(m, r, 0.0), step)


def _returns_openrlhf(r: Tensor, m: Tensor, gamma: float) -> Tensor:
    # OpenRLHF: rewards times mask, then a plain discounted cumsum (discounts across masked tokens).
    def step(run: Tensor, r_t: Tensor, t: int) -> tuple[Tensor, Tensor]:
        g = r_t + gamma * run
        return g, g
    return _scan(torch.where(m, r, 0.0), step)


_RETURNS: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "skip": _returns_skip,
    "verl": _returns_verl,
    "openrlhf": _returns_openrlhf,
}
RETURN_SEMANTICS = tuple(_RETURNS)


@torch.no_grad()
def discounted_returns(
    token_rewards: Tensor, mask: Tensor, gamma: float = 1.0, semantics: str = "skip"
) -> Tensor:
    """Returns-to-go ``G[i,t] = r[i,t] + gamma * G[i,t+1]`` of ``token_rewards`` (N, L) -> (N, L).

    ``semantics`` says what masked positions do: "skip" (canonical: neither reset nor discount),
    "verl" (reset after every masked position), "openrlhf" (rewards x mask, discount through).
    Values on interior masked positions are diagnostics only; the loss mask removes them.
    """
    check_2d("token_rewards", token_rewards, mask)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    try:
        fn = _RETURNS[semantics]
    except KeyError:
        raise ValueError(f"semantics must be one of {RETURN_SEMANTICS}, got {semantics!r}") from None
    out = fn(token_rewards.to(F64), mask != 0, float(gamma))
    return out.to(out_dtype(token_rewards, mask))


# -- REINFORCE++ family ------------------------------------------------------------------------

@torch.no_grad()
def reinforce_pp_advantages(
    token_rewards: Tensor,
    mask: Tensor,
    *,
    gamma: float = 1.0,
    whiten_mode: str = "verl",
    semantics: str = "skip",
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (§4.4): ``A = whiten(G) * m`` with ``G`` the discounted returns.

    Args:
        token_rewards: (N, L), outcome on the last valid token plus any per-token KL shaping.
        mask: (N, L).
    Returns:
        (adv (N, L) whitened over every valid token passed in, returns (N, L) unwhitened).
    """
    returns = discounted_returns(token_rewards, mask, gamma, semantics)
    return whiten(returns, mask, whiten_mode), returns


@torch.no_grad()
def reinforce_pp_baseline_advantages(
    scores: Tensor,
    mask: Tensor,
    groups: Tensor,
    *,
    whiten_mode: str = "verl",
    singleton: str = "zero",
) -> tuple[Tensor, dict[str, float]]:
    """REINFORCE++-baseline (§4.5): ``A = whiten((S_i - mean_g) * m) * m``.

    Shapes as in :func:`grpo_advantages`. Whitening is token-weighted over all rows passed in, so
    zero-variance groups get a NON-zero advantage when lengths differ (documented, V2).
    ``singleton="verl"`` uses mean 0 for lone members (verl); "zero" centres them to 0.
    """
    centred, stats = grpo_advantages(
        scores.to(F64), mask, groups, norm_by_std=False, singleton=singleton
    )
    out = whiten(centred, mask, whiten_mode)
    return out.to(out_dtype(scores, mask)), stats


@torch.no_grad()
def apply_kl_in_reward(token_rewards: Tensor, kl: Tensor, mask: Tensor, coef: float) -> Tensor:
    """KL-in-reward shaping (§3.2): ``r - coef * kl * m`` on (N, L) tensors, no gradient.

    ``kl`` is a per-token estimate on rollout logprobs; values on masked positions (possibly
    garbage/NaN) are ignored.
    """
    check_2d("token_rewards", token_rewards, mask)
    check_2d("kl", kl, mask)
    pen = torch.where(mask != 0, kl.to(F64), 0.0) * float(coef)
    return (token_rewards.to(F64) - pen).to(out_dtype(token_rewards, kl, mask))
