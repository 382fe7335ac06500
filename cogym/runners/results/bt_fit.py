"""The Bradley-Terry maximum-likelihood fit behind :func:`~cogym.runners.results.ratings.bradley_terry`:
Hunter's MM iteration, finished by damped Newton ascent when MM stops short, with the checks that the
ratings are identified (every player linked by wins both ways, or a prior). Pure numpy functions of
the win matrix ``W``; the model, its prior and its scales are described in ``ratings``."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

SCALES = ("elo", "natural")


def closure(adj: np.ndarray) -> np.ndarray:
    """Reflexive-transitive closure of boolean adjacency ``(..., n, n)`` by repeated squaring."""
    n = adj.shape[-1]
    reach = (adj | np.eye(n, dtype=bool)).astype(np.float64)
    while True:
        nxt = (reach @ reach > 0).astype(np.float64)
        if np.array_equal(nxt, reach):
            return reach > 0
        reach = nxt


def _groups(mutual: np.ndarray, names: Sequence[str]) -> list[list[str]]:
    """Partition of players given a symmetric 'same group' boolean matrix (n, n)."""
    out, done = [], set()
    for k in range(len(names)):
        if k not in done:
            members = np.flatnonzero(mutual[k])
            done.update(members.tolist())
            out.append([names[m] for m in members])
    return out


def check_identifiable(w: np.ndarray, names: Sequence[str], prior: float) -> None:
    """Raise ValueError for the degenerate cases the module docstring lists."""
    games = w + w.T
    idle = [names[k] for k in np.flatnonzero(games.sum(1) == 0)]
    if idle:
        raise ValueError(f"players with no games cannot be rated: {idle} (drop them from players)")
    comps = _groups(closure(games > 0), names)
    if len(comps) > 1:
        raise ValueError(
            f"the comparison graph is disconnected, components {comps}: no game links them, so ratings "
            "across components would be pure prior; rate each component separately")
    if prior == 0:
        reach = closure(w > 0)
        sccs = _groups(reach & reach.T, names)
        if len(sccs) > 1:
            never_lost = [names[k] for k in np.flatnonzero(w.sum(0) == 0)]
            never_won = [names[k] for k in np.flatnonzero(w.sum(1) == 0)]
            raise ValueError(
                "with prior=0 the maximum-likelihood ratings are infinite: the win graph is not strongly "
                f"connected (groups {sccs}; never lost: {never_lost}; never won: {never_won}). "
                "Use prior > 0 (default 1.0) for finite ratings")


def check_options(prior: float, max_iter: int, tol: float, scale: str) -> None:
    if not (isinstance(prior, (int, float)) and math.isfinite(prior) and prior >= 0):
        raise ValueError(f"prior must be a finite number >= 0, got {prior!r}")
    if not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be an int >= 1, got {max_iter!r}")
    if not (tol > 0):
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")


def _recentre(theta: np.ndarray, prior: float) -> np.ndarray:
    """Shift each row of ``theta`` (B, n) to the optimal common level under the prior.

    The penalised log-likelihood depends on a common shift ``c`` only through the prior, whose
    derivative in ``c`` is ``prior * (n/2 - sum_i sigmoid(theta_i + c))``: solve that for ``c``
    by Newton's method (steps clipped to 1, since a sum of sigmoids flattens far from the root).
    """
    n = theta.shape[-1]
    c = np.zeros(theta.shape[:-1] + (1,))                                # (B, 1)
    for _ in range(100):
        sig = 0.5 * (1.0 + np.tanh((theta + c) / 2.0))                  # (B, n)
        slope = np.maximum((sig * (1.0 - sig)).sum(-1, keepdims=True), 1e-300)
        step = np.clip((n / 2.0 - sig.sum(-1, keepdims=True)) / slope, -1.0, 1.0)
        c = c + step
        if float(np.max(np.abs(step))) < 1e-13:
            break
    return theta + c


def _mm(w: np.ndarray, prior: float, max_iter: int, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Batched MM for Bradley–Terry. ``w`` (B, n, n) win matrices -> ``theta = ln p`` (B, n) and each
    replicate's last step ``max_i |theta_new - theta|`` (B,).

    Stops when every replicate's step is below ``tol``, or after ``max_iter`` iterations: then the
    replicates whose last step is still ``tol`` or more are not converged (:func:`fit` finishes
    them with Newton's method). With ``prior == 0`` each iterate is renormalised to mean(theta) = 0
    (the likelihood is scale-free); with a prior the reference player (p = 1) fixes the scale and
    each iterate is shifted to the best common level (:func:`_recentre`).
    """
    games = w + np.swapaxes(w, -1, -2)                                   # (B, n, n)
    log_wins = np.log(w.sum(-1) + prior / 2.0)                           # (B, n)
    theta = np.zeros(w.shape[:-1])                                       # (B, n)
    step = np.full(w.shape[0], np.inf)                                   # (B,)
    for _ in range(max_iter):
        p = np.exp(theta)
        denom = (games / (p[..., :, None] + p[..., None, :])).sum(-1)   # (B, n)
        if prior > 0:
            denom = denom + prior / (p + 1.0)
        new = log_wins - np.log(denom)
        # The likelihood ignores a common shift of theta; only the prior (or, without one, the
        # convention mean = 0) sets it. MM moves along that direction at a rate of about
        # prior / games, so set the shift exactly every step instead (a maximisation along one
        # coordinate: the objective still increases).
        new = _recentre(new, prior) if prior > 0 else new - new.mean(-1, keepdims=True)
        step = np.abs(new - theta).max(-1) if new.shape[-1] else np.zeros(w.shape[0])
        theta = new
        if float(step.max(initial=0.0)) < tol:
            break
    return theta, step


def _log_lik(theta: np.ndarray, w: np.ndarray, prior: float) -> np.ndarray:
    """Penalised log-likelihood (B,) of ``theta`` (B, n) given win matrices ``w`` (B, n, n), up to a
    constant: ``sum_ij W_ij log sigmoid(theta_i - theta_j) + prior * sum_i [theta_i / 2 - log(1 + e^theta_i)]``."""
    diff = theta[..., :, None] - theta[..., None, :]                     # (B, n, n)
    out = -(w * np.logaddexp(0.0, -diff)).sum((-1, -2))
    if prior > 0:
        out = out + prior * (theta / 2.0 - np.logaddexp(0.0, theta)).sum(-1)
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(x / 2.0))


def _newton(w: np.ndarray, theta: np.ndarray, prior: float, tol: float, max_iter: int = 100
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finish fits MM left unconverged: damped Newton ascent on :func:`_log_lik` from ``theta``.

    MM's rate is linear with a constant that tends to 1 as a rating runs away (a player who won,
    or lost, almost everything: about 1 - 1/games per step, measured with the Jeffreys prior), so a
    bootstrap replicate can need more than ``max_iter`` MM steps. The penalised
    log-likelihood is strictly concave (with ``prior > 0``; with ``prior = 0`` on the subspace
    mean(theta) = 0, given a strongly connected win graph), so Newton's method, started where MM
    stopped, converges quadratically. Steps are capped at 1 in every coordinate and halved until the
    objective does not fall (up to float64 noise), which keeps every iterate an ascent.

    Returns ``(theta, step, converged)``: the last full Newton step (B,) and whether it fell below
    ``tol``, or stopped shrinking while already below 1e-6 (float64 noise: the iterate is as close
    to the maximum as float64 can tell).
    """
    theta = theta.copy()
    b, n = theta.shape
    games = w + np.swapaxes(w, -1, -2)                                   # (B, n, n)
    wins = w.sum(-1) + prior / 2.0                                       # (B, n)
    step = np.full(b, np.inf)
    converged = np.zeros(b, dtype=bool)
    active = np.ones(b, dtype=bool)
    eye = np.eye(n)
    for _ in range(max_iter):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        t, wi, gi = theta[idx], w[idx], games[idx]
        sig = _sigmoid(t[:, :, None] - t[:, None, :])                    # (b, n, n)
        curv = gi * sig * (1.0 - sig)                                    # (b, n, n)
        grad = wins[idx] - (gi * sig).sum(-1)                            # (b, n)
        hess = curv - eye * curv.sum(-1)[:, :, None]                     # (b, n, n), negative semi-definite
        if prior > 0:
            s = _sigmoid(t)
            grad = grad - prior * s
            hess = hess - eye * (prior * s * (1.0 - s))[:, :, None]
        else:  # the likelihood is flat along a common shift: solve in the mean-zero subspace
            hess = hess - 1.0 / n
        try:
            d = np.linalg.solve(hess, -grad[..., None])[..., 0]         # (b, n), the Newton step
        except np.linalg.LinAlgError:  # singular: no Newton step (cannot happen after the checks)
            active[idx] = False
            break
        if prior == 0:
            d = d - d.mean(-1, keepdims=True)
        size = np.abs(d).max(-1)                                         # (b,)
        stalled = (size < 1e-6) & (size >= 0.5 * step[idx])
        step[idx] = size
        done = (size < tol) | stalled
        # Capped, then halved until the objective does not fall (beyond float64 noise).
        d = d * np.minimum(1.0, 1.0 / np.maximum(size, 1e-300))[:, None]
        before = _log_lik(t, wi, prior)
        slack = 1e-12 * (1.0 + np.abs(before))
        scale = np.ones(idx.size)
        for _ in range(40):
            trial = t + scale[:, None] * d
            bad = _log_lik(trial, wi, prior) < before - slack
            if not bad.any():
                break
            scale = np.where(bad, scale / 2.0, scale)
        theta[idx] = t + scale[:, None] * d
        converged[idx[done]] = True
        active[idx[done]] = False
    if prior == 0:
        theta = theta - theta.mean(-1, keepdims=True)
    return theta, step, converged


def fit(w: np.ndarray, prior: float, max_iter: int, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bradley–Terry fits of win matrices ``w`` (B, n, n): ``(theta (B, n), converged (B,), step (B,))``.

    MM (:func:`_mm`) first, exactly as it always ran, so every fit MM finishes within ``max_iter``
    is unchanged to the last bit; replicates it leaves unconverged are finished by Newton's method
    (:func:`_newton`). Never raises for non-convergence: a fit that still has not converged keeps
    its last iterate, and ``converged`` says which (the callers warn). A rating table computed
    after hours of games must not be lost to an iteration count.
    """
    theta, step = _mm(w, prior, max_iter, tol)
    converged = step < tol
    slow = np.flatnonzero(~converged)
    if slow.size:
        theta[slow], step[slow], converged[slow] = _newton(w[slow], theta[slow], prior, tol)
    return theta, converged, step


def not_converged(what: str, converged: np.ndarray, step: np.ndarray, max_iter: int, tol: float) -> str | None:
    """The warning for fits that did not converge, None when all did."""
    bad = int((~converged).sum())
    if not bad:
        return None
    return (f"{what}: {bad} of {converged.size} Bradley–Terry fits did not converge to tol={tol} ({max_iter} MM "
            f"iterations, then Newton's method; largest last step {float(step[~converged].max()):.3g}); their last "
            "iterates are used")
