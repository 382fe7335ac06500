"""GAE for PPO with a critic, and the clipped value loss (docs/algorithms.md §4.1, §6).

Layout as in :mod:`cogym.learners.advantages` (docs/algorithms.md §1): ``N`` responses right-padded to
width ``L``; ``mask`` (N, L) is the loss mask (1 = token emitted by the policy being trained; 0 =
padding, prompt, tool/environment/opponent tokens); ``token_rewards`` (N, L) carry the outcome on
the last valid token plus any per-token shaping (e.g. KL-in-reward); ``values`` (N, L) are the
critic's ``V[i,t]`` recorded at rollout time.

Conventions (same as :mod:`cogym.learners.advantages`):

* Advantages are computed in float64 under no_grad and returned in the input's floating dtype.
* Outputs are exactly 0 on every masked position (tail padding and interior masked spans). Values
  and rewards sitting on masked positions (garbage, even NaN) never leak into outputs.
* Fully-masked rows get advantage and return 0 and are excluded from the whitening statistics.
* Whitening statistics are over the rows passed in: pass ONE ROLE's rows at a time (§2.5, §8.5).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from cogym.learners.advantages import WHITEN_MODES, out_dtype, whiten

__all__ = ["GAE_SEMANTICS", "gae_advantages", "clipped_value_loss"]

F64 = torch.float64


def _gae_skip(r: Tensor, v: Tensor, m: Tensor, gamma: float, lam: float) -> Tensor:
    # Canonical / verl (PR #2337): a masked position carries the running V_next and A_next through
    # unchanged, so the masked span is invisible and the next policy token's value bootstraps.
    # Tail padding therefore leaves V_next = 0, A_next = 0 at T_i.
    n, width = r.shape
    adv = torch.zeros_like(r)
    v_next = torch.zeros(n, dtype=F64, device=r.device)
    a_next = torch.zeros(n, dtype=F64, device=r.device)
    for t in range(width - 1, -1, -1):
        mt = m[:, t]
        delta = r[:, t] + gamma * v_next - v[:, t]
        a_t = delta + gamma * lam * a_next
        # where (not multiply): garbage/NaN on masked positions must not reach the carried state
        a_next = torch.where(mt, a_t, a_next)
        v_next = torch.where(mt, v[:, t], v_next)
        adv[:, t] = a_next
    return adv


def _gae_zero(r: Tensor, v: Tensor, m: Tensor, gamma: float, lam: float) -> Tensor:
    # OpenRLHF: rewards and values are zeroed on masked positions, then the plain recursion runs
    # over every position (a masked step is a V = 0, r = 0 step that is still discounted).
    zero = torch.zeros((), dtype=F64, device=r.device)
    r = torch.where(m, r, zero)
    v = torch.where(m, v, zero)
    n, width = r.shape
    adv = torch.zeros_like(r)
    v_next = torch.zeros(n, dtype=F64, device=r.device)
    a_next = torch.zeros(n, dtype=F64, device=r.device)
    for t in range(width - 1, -1, -1):
        a_next = r[:, t] + gamma * v_next - v[:, t] + gamma * lam * a_next
        v_next = v[:, t]
        adv[:, t] = a_next
    return adv


_GAE: dict[str, Callable[[Tensor, Tensor, Tensor, float, float], Tensor]] = {
    "skip": _gae_skip,
    "zero": _gae_zero,
}
GAE_SEMANTICS = tuple(_GAE)


@torch.no_grad()
def gae_advantages(
    token_rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    *,
    semantics: str = "skip",
    whiten_mode: str | None = "verl",
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (§4.1), backwards over ``t = L-1 .. 0`` per row::

        delta_t = r_t + gamma * V_next - V_t
        A_t     = delta_t + gamma * lam * A_next
        G_t     = A_t + V_t                      (returns, from the RAW advantage)

    Args:
        token_rewards: (N, L) token rewards ``r[i,t]``.
        values: (N, L) critic values ``V[i,t]`` at rollout time.
        mask: (N, L) loss mask.
        gamma: discount in [0, 1] (default 1.0, verl and OpenRLHF).
        lam: GAE lambda in [0, 1] (default 1.0, verl and OpenRLHF).
        semantics: what interior masked positions (multi-turn tool/opponent tokens) do:
            "skip" (canonical, verl): the masked span is skipped; ``V_next`` and ``A_next`` are
            carried through it unchanged, so the next policy token's value is the bootstrap.
            "zero" (OpenRLHF compat): rewards and values are zeroed there and the recursion runs
            through them. The two agree when gamma = lam = 1 and when there is only tail padding
            (vector V5b).
        whiten_mode: "verl" (canonical ``W_verl``), "openrlhf" (``W_orl``), or None for the raw
            advantage. Token-weighted, over every valid token of the rows passed in.

    Returns:
        (advantages (N, L), returns (N, L)): exactly 0 on masked positions; returns are never
        whitened (they are the critic's targets).
    """
    for name, t in (("token_rewards", token_rewards), ("values", values)):
        if t.dim() != 2 or t.shape != mask.shape:
            raise ValueError(f"{name} and mask must both be (N, L), got {tuple(t.shape)} and {tuple(mask.shape)}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    try:
        fn = _GAE[semantics]
    except KeyError:
        raise ValueError(f"semantics must be one of {GAE_SEMANTICS}, got {semantics!r}") from None
    if whiten_mode is not None and whiten_mode not in WHITEN_MODES:
        raise ValueError(f"whiten_mode must be one of {WHITEN_MODES} or None, got {whiten_mode!r}")
    m = mask != 0
    dtype = out_dtype(token_rewards, values, mask)
    v = values.to(F64)
    raw = fn(token_rewards.to(F64), v, m, float(gamma), float(lam))
    zero = torch.zeros((), dtype=F64, device=raw.device)
    returns = torch.where(m, raw + v, zero)
    raw = torch.where(m, raw, zero)
    adv = raw if whiten_mode is None else whiten(raw, mask, whiten_mode)
    return adv.to(dtype), returns.to(dtype)


def clipped_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip_value: float | None = 0.5,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped critic loss per token (§4.1), all tensors (N, L)::

        V_clip = clip(V, V_old - c, V_old + c)
        loss   = 0.5 * max((V - G)^2, (V_clip - G)^2)

    ``values`` carries the gradient; ``old_values`` are the rollout-time values and ``returns``
    the GAE returns ``G`` (both treated as constants). ``clip_value = c`` (default 0.5, verl
    ``critic.cliprange_value`` and OpenRLHF ``--critic.value_clip``); None disables clipping
    (plain ``0.5 (V - G)^2``). The total loss is ``aggregate(per_token, mask, mode)`` from
    :mod:`cogym.learners.losses` (the 0.5 is already applied per token).

    Returns:
        per_token_loss (N, L), exactly 0 on masked positions (NaN/inf there cannot reach values
        or gradients); metrics over valid tokens: ``vf_clipfrac`` (clipped branch strictly
        larger), ``vpred_mean``.
    """
    for name, t in (("old_values", old_values), ("returns", returns), ("mask", mask)):
        if t.shape != values.shape:
            raise ValueError(f"{name} must have values' shape {tuple(values.shape)}, got {tuple(t.shape)}")
    if values.dim() != 2:
        raise ValueError(f"values must be (N, L), got {tuple(values.shape)}")
    if clip_value is not None and not clip_value > 0:
        raise ValueError(f"clip_value must be > 0 (or None to disable), got {clip_value}")
    m = mask != 0
    dtype = torch.promote_types(values.dtype, torch.float32)
    zero = torch.zeros((), dtype=dtype, device=values.device)
    v = torch.where(m, values.to(dtype), zero)
    g = torch.where(m, returns.detach().to(dtype), zero)
    loss_unclipped = (v - g) ** 2
    if clip_value is not None:
        v_old = torch.where(m, old_values.detach().to(dtype), zero)
        v_clip = v_old + (v - v_old).clamp(-clip_value, clip_value)
        loss_clipped = (v_clip - g) ** 2
        loss = torch.maximum(loss_unclipped, loss_clipped)
    else:
        loss_clipped = loss_unclipped
        loss = loss_unclipped
    loss = torch.where(m, 0.5 * loss, zero)
    n_tok = max(int(m.sum()), 1)
    with torch.no_grad():
        metrics = {
            "vf_clipfrac": float(((loss_clipped > loss_unclipped) & m).sum()) / n_tok,
            "vpred_mean": float(v.sum()) / n_tok,
        }
    return loss, metrics
