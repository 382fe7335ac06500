"""verl's advantage estimators that :mod:`cogym.learners.advantages` does not hold, as pure torch
functions (docs/algorithms.md §15): GRPO pass@k, OPO, GPG, ReMax, the
optimal token baseline (OTB), and PF-PPO's reweighting of a batch by its outcomes.

Layout and conventions are those of :mod:`cogym.learners.advantages`: ``mask`` (N, L) the loss mask,
``scores`` (N,) outcomes, ``groups`` (N,) integer group ids from explicit keys; fully-masked rows are
left out of every statistic and get advantage 0; outputs are 0 on masked positions; float64 inside,
the input's floating dtype out, no grad. ``singleton`` says what a group with one valid member gets:
"zero" (cogym's convention: no baseline, no signal) or "verl" (verl's: a baseline of 0).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cogym.learners.advantages import (
    broadcast_rows, check_2d, check_rows, group_moments, out_dtype, row_valid, singleton_fn,
)

__all__ = [
    "PF_REWEIGHTS", "grpo_passk_advantages", "opo_advantages", "gpg_advantages", "remax_advantages",
    "returns_to_go", "OTB_MODES", "otb_advantages", "pf_ppo_weights", "pf_ppo_resample",
]

F64 = torch.float64
OTB_MODES = ("single_turn", "multi_turn")  # the optimal token baseline's timesteps: response positions | model tokens


def _per_group(values: Tensor, gid: Tensor, reduce: str, fill: float) -> Tensor:
    """(G,) reduction of ``values`` (N,) over each group id of ``gid`` (N,) (``reduce``: sum | amax | amin)."""
    num_groups = int(gid.max()) + 1 if gid.numel() else 0
    out = torch.full((num_groups,), fill, dtype=values.dtype, device=values.device)
    if reduce == "sum":
        return out.index_add(0, gid, values)
    return out.scatter_reduce(0, gid, values, reduce)


# -- outcome estimators (one value per response, on every token) -------------------------------

@torch.no_grad()
def grpo_passk_advantages(scores: Tensor, mask: Tensor, groups: Tensor, *, eps: float = 1e-6,
                          norm_by_std: bool = True) -> tuple[Tensor, dict[str, float]]:
    """GRPO pass@k (verl ``compute_grpo_passk_outcome_advantage``): only the best response of a group
    learns, ``A_best = (S_max - S_second) / (std1_g + eps)`` (without ``/ (std + eps)`` when
    ``norm_by_std`` is False); every other response gets 0. Ties at the top give 0, so which of
    the tied rows is "best" does not matter. A group with one valid member gets 0 (verl refuses it).
    Returns (adv (N, L), group statistics as :func:`~cogym.learners.advantages.grpo_advantages`'s)."""
    check_rows(scores, mask, groups)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    gm = group_moments(scores, mask, groups)
    gid, n = gm.gid, len(scores)
    s = torch.where(gm.valid, scores.to(F64), -torch.inf)
    top = _per_group(s, gid, "amax", -torch.inf)
    pos = torch.arange(n, device=s.device)
    # the first valid row reaching the group's maximum is its best
    first = _per_group(torch.where(gm.valid & (s == top[gid]), pos, n), gid, "amin", n)
    best = pos == first[gid]
    second = _per_group(torch.where(best, -torch.inf, s), gid, "amax", -torch.inf)
    adv = torch.where(best & (gm.count > 1), top[gid] - second[gid], torch.zeros((), dtype=F64, device=s.device))
    if norm_by_std:
        denom = gm.std1 + eps
        adv = torch.where(denom > 0, adv / torch.where(denom > 0, denom, 1.0), 0.0)
    return broadcast_rows(adv, mask, out_dtype(scores, mask)), gm.stats


@torch.no_grad()
def opo_advantages(scores: Tensor, mask: Tensor, groups: Tensor, *,
                   singleton: str = "zero") -> tuple[Tensor, dict[str, float]]:
    """OPO (verl ``compute_opo_outcome_advantage``): the group's length-weighted mean outcome as the
    baseline, ``A_i = S_i - sum_j l_j S_j / sum_j l_j``, ``l_j`` the row's loss-mask tokens (its
    response length); no std scaling. Singletons: "zero" gives 0, "verl" the raw score (baseline 0)."""
    check_rows(scores, mask, groups)
    single = singleton_fn(singleton)
    gm = group_moments(scores, mask, groups)
    s = torch.where(gm.valid, scores.to(F64), 0.0)
    length = (mask != 0).sum(1).to(F64)
    baseline = _per_group(length * s, gm.gid, "sum", 0.0) / _per_group(length, gm.gid, "sum", 0.0).clamp_min(1.0)
    adv = s - baseline[gm.gid]
    adv = torch.where(gm.count == 1, single(s, 0.0, False), adv)
    adv = torch.where(gm.valid, adv, 0.0)
    return broadcast_rows(adv, mask, out_dtype(scores, mask)), gm.stats


@torch.no_grad()
def gpg_advantages(scores: Tensor, mask: Tensor, groups: Tensor, *, f_norm: float = 1.0,
                   singleton: str = "zero") -> tuple[Tensor, dict[str, float]]:
    """GPG (verl ``compute_gpg_outcome_advantage``): ``A_i = alpha * (S_i - mean_g) / f_norm`` with
    ``alpha = n / max(m, 1)``, ``n`` the valid rows passed in and ``m`` those with a non-zero score
    (the paper's correction for the rows that carry no signal). Singletons: "zero" gives 0, "verl"
    ``alpha * S_i / f_norm`` (a mean of 0). Stats add ``gpg_alpha``."""
    check_rows(scores, mask, groups)
    if not f_norm > 0:
        raise ValueError(f"f_norm must be > 0, got {f_norm}")
    single = singleton_fn(singleton)
    gm = group_moments(scores, mask, groups)
    s = torch.where(gm.valid, scores.to(F64), 0.0)
    alpha = float(gm.valid.sum()) / max(int((gm.valid & (s != 0)).sum()), 1)
    centred = torch.where(gm.count == 1, single(s, 0.0, False), gm.centred)
    adv = torch.where(gm.valid, alpha * centred / f_norm, 0.0)
    return broadcast_rows(adv, mask, out_dtype(scores, mask)), dict(gm.stats, gpg_alpha=alpha)


# -- token estimators --------------------------------------------------------------------------

def returns_to_go(token_rewards: Tensor, mask: Tensor) -> Tensor:
    """``G[i, t] = sum_{u >= t} r[i, u] m[i, u]`` (float64, (N, L)): undiscounted rewards-to-go of
    the loss-mask tokens, as verl's ReMax and OTB take them."""
    r = torch.where(mask != 0, token_rewards.to(F64), 0.0)
    return r.flip(-1).cumsum(-1).flip(-1)


@torch.no_grad()
def remax_advantages(token_rewards: Tensor, mask: Tensor, baselines: Tensor) -> tuple[Tensor, Tensor]:
    """ReMax (verl ``compute_remax_outcome_advantage``): ``A[i, t] = G[i, t] - b_i`` on the loss-mask
    tokens, ``G`` the rewards-to-go and ``b_i`` (N,) the reward of a greedy response to row i's
    prompt. Returns (adv (N, L), returns (N, L)), both 0 on masked positions."""
    check_2d("token_rewards", token_rewards, mask)
    if baselines.shape != (mask.shape[0],):
        raise ValueError(f"baselines must have shape ({mask.shape[0]},), got {tuple(baselines.shape)}")
    m = mask != 0
    returns = torch.where(m, returns_to_go(token_rewards, mask), 0.0)
    adv = torch.where(m, returns - baselines.to(F64)[:, None], 0.0)
    dtype = out_dtype(token_rewards, mask)
    return adv.to(dtype), returns.to(dtype)


@torch.no_grad()
def otb_advantages(token_rewards: Tensor, mask: Tensor, groups: Tensor, logp: Tensor, sum_pi_squared: Tensor,
                   *, is_weights: Tensor | None = None, zero_tail: bool = False, eps: float = 1e-8,
                   singleton: str = "zero", mode: str = "single_turn") -> tuple[Tensor, Tensor]:
    """The optimal token baseline (verl ``compute_optimal_token_baseline_advantage``, and with
    ``mode="multi_turn"`` ``compute_multi_turn_optimal_token_baseline_advantage``)::

        w[i, t] = (1 - 2 pi[i, t] + sum_v pi[i, t, v]^2) * rho[i, t]^2      (rho: is_weights, else 1)
        W[i, t] = sum_{u <= t} w[i, u] m[i, u]                                (the path's "energy")
        B_g[k]  = sum_{i in g, k(i, t) = k} G[i, t] W[i, t] m[i, t] / (sum_{same} W[i, t] m[i, t] + eps)
        A[i, t] = (G[i, t] - B_g[k(i, t)]) m[i, t]

    ``G`` the rewards-to-go; ``logp`` (N, L) the policy's log-probs of the response tokens (``pi =
    exp(logp)``); ``sum_pi_squared`` (N, L) the sum of the squared next-token probabilities there.
    ``k(i, t)``, the timestep a baseline is shared at: "single_turn" the position ``t`` in the
    response; "multi_turn" the count of row i's loss-mask tokens before ``t`` (the model's k-th token,
    whatever game or tool tokens lie between its messages). ``zero_tail``: a group's one longest row
    gets baseline 0 at timesteps past the second-longest row's length. Singletons: "zero" gives 0,
    "verl" ``A = G`` (baseline 0). Returns (adv (N, L), returns (N, L)), both 0 on masked positions."""
    for name, x in (("token_rewards", token_rewards), ("logp", logp), ("sum_pi_squared", sum_pi_squared)):
        check_2d(name, x, mask)
    if is_weights is not None:
        check_2d("is_weights", is_weights, mask)
    check_rows(torch.zeros(len(groups), device=mask.device), mask, groups)
    singleton_fn(singleton)  # a bad mode's one-line error
    if mode not in OTB_MODES:
        raise ValueError(f"mode must be one of {', '.join(OTB_MODES)}, got {mode!r}")
    _, gid = torch.unique(groups, return_inverse=True)
    m = mask != 0
    width = mask.shape[1]
    if mode == "multi_turn":
        step = (m.long().cumsum(-1) - 1).clamp_min(0)
    else:
        step = torch.arange(width, device=mask.device).expand(mask.shape)
    valid = row_valid(mask)
    zero = torch.zeros((), dtype=F64, device=mask.device)
    returns = torch.where(m, returns_to_go(token_rewards, mask), zero)
    w = 1.0 - 2.0 * torch.where(m, logp.to(F64), zero).exp() + torch.where(m, sum_pi_squared.to(F64), zero)
    if is_weights is not None:
        w = w * torch.where(m, is_weights.to(F64), zero) ** 2
    energy = torch.where(m, w, zero).cumsum(-1)
    weight = torch.where(m, energy, zero)  # W m: what each row adds to its group's baseline at t
    cell = (gid[:, None] * width + step).flatten()  # (group, timestep) of each position
    num = torch.zeros((int(gid.max()) + 1 if gid.numel() else 0) * width, dtype=F64, device=mask.device)
    baseline = (num.index_add(0, cell, (returns * weight).flatten())
                / (num.index_add(0, cell, weight.flatten()) + eps))[cell].view(mask.shape)
    count = _per_group(valid.to(F64), gid, "sum", 0.0)[gid]
    if zero_tail:
        baseline = torch.where(_beyond_second_longest(mask, gid, valid, step), zero, baseline)
    if singleton == "verl":  # no baseline: A = G
        baseline = torch.where((count == 1)[:, None], zero, baseline)
    trained = valid & (count > 1) if singleton == "zero" else valid
    adv = torch.where(m & trained[:, None], returns - baseline, zero)
    dtype = out_dtype(token_rewards, mask)
    return adv.to(dtype), returns.to(dtype)


def _beyond_second_longest(mask: Tensor, gid: Tensor, valid: Tensor, step: Tensor) -> Tensor:
    """(N, L) bool: the positions of a group's one longest valid row whose timestep ``step`` (N, L) is
    at or past the length of the group's second-longest (none where the longest length is shared or
    the group has one row)."""
    length = (mask != 0).sum(1).to(F64)
    longest = _per_group(torch.where(valid, length, -1.0), gid, "amax", -1.0)
    at_top = valid & (length == longest[gid])
    unique_top = _per_group(at_top.to(F64), gid, "sum", 0.0)[gid] == 1
    second = _per_group(torch.where(valid & ~at_top, length, -1.0), gid, "amax", -1.0)[gid]
    cut = at_top & unique_top & (second >= 0)
    return cut[:, None] & (step >= second[:, None])


# -- PF-PPO: the batch resampled by its outcomes --------------------------------------------------

PF_REWEIGHTS = ("pow", "max_min", "max_random")


@torch.no_grad()
def pf_ppo_weights(scores: Tensor, method: str = "pow", weight_pow: float = 2.0) -> Tensor:
    """PF-PPO's sampling weights of the rows (verl ``compute_pf_ppo_reweight_data``), float64 (N,):
    "pow" ``|S|^weight_pow``; "max_min" 1 for the batch's best and worst outcomes, else 0;
    "max_random" 0.4 for the best, else 0.1; each then ``max(weight + 1e-8, 1e-8)``."""
    s = scores.to(F64)
    if method == "pow":
        w = s.abs() ** weight_pow
    elif method == "max_min":
        w = ((s == s.max()) | (s == s.min())).to(F64)
    elif method == "max_random":
        w = torch.where(s == s.max(), 0.4, 0.1).to(F64)
    else:
        raise ValueError(f"pf_reweight must be one of {', '.join(PF_REWEIGHTS)}, got {method!r}")
    return (w + 1e-8).clamp_min(1e-8)


def pf_ppo_resample(weights: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """(N,) row indices drawn with replacement in proportion to ``weights`` (N,): the rows PF-PPO
    trains on in place of the batch (``torch.multinomial``, as verl draws them)."""
    return torch.multinomial(weights.cpu(), len(weights), replacement=True, generator=generator)
