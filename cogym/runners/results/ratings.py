"""Tournament ratings as pure functions: Bradley–Terry (Elo scale) with bootstrap intervals, openskill.

Input is a list of :class:`Result` records, one per game between two named players:
``Result(a, b, score)`` with ``score`` 1 if ``a`` won, 0 if ``b`` won, 0.5 for a draw. Who sat in which
seat is the caller's business; a result only says who beat whom.

Model (Bradley–Terry). Player ``i`` has strength ``p_i > 0`` and beats ``j`` with probability
``p_i / (p_i + p_j)``. A draw counts as half a win for each side, so the data reduce to the win
matrix ``W`` (:func:`win_matrix`): ``W[i, j]`` = wins of ``i`` over ``j`` + draws / 2, and
``N = W + W.T`` games per pair. Ratings are reported on the Elo scale, ``400 * log10(p_i)`` (a
difference of 400 is 10:1 odds; :func:`expected_score` inverts it), or, with ``scale="natural"``,
as ``ln p_i``. Only differences are identified, so every rating vector is shifted: the ``anchor``
player gets ``anchor_rating``, or, with no anchor, the mean rating is ``anchor_rating``.

Estimation: the minorization–maximization (MM) algorithm of Hunter (2004, Ann. Statist. 32(1),
eq. 3), all players updated at once,

    p_i <- (W_i + prior/2) / (sum_j N_ij / (p_i + p_j) + prior / (p_i + 1)),

which increases the (penalised) log-likelihood at every step and converges to its unique maximum.
Its rate is linear, with a constant that tends to 1 as a rating runs off (a player who won, or
lost, nearly every game: about ``1 - 1/games`` per step, ``games`` being that player's; some
2000-4000 steps at 180 games, more with more games), so a bootstrap resample can need more than
``max_iter`` steps. A fit MM has not finished by then is finished by
Newton's method on the same (concave) objective; fits MM finishes are exactly as MM leaves them. A
fit is never an error for not converging: one that Newton cannot finish either (not seen in
practice) keeps its last iterate, with a RuntimeWarning.

The prior, and the degenerate cases (each decision is tested in tests/runners/tournament/test_ratings.py):

* **Prior** (``prior``, default 1.0). Each player also plays ``prior`` virtual games against a
  fixed virtual reference player of strength 1, all scored as draws (``prior/2`` wins and
  ``prior/2`` losses). This adds ``prior * [theta/2 - log(1 + e^theta)] = prior * log sech(theta/2)
  + const`` to the log-likelihood of ``theta = ln p``: a symmetric, log-concave prior centred on the
  reference. With ``prior=1`` it is exactly the Jeffreys prior for the player's log-odds of beating
  the reference (Beta(1/2, 1/2) on that win probability), the standard non-informative choice,
  and enough to keep every estimate finite. It shrinks ratings by the equivalent of one drawn game each: negligible at
  hundreds of games, visible at a handful (a 3–1 record over 4 games gives a gap of 164.8 Elo
  instead of the MLE's 400 log10 3 = 190.8).
  The reference fixes the common level: after each MM step the iterate is shifted to the best
  common level under the prior (plain MM would creep there at a rate of ~prior/games per step).
  ``prior=0`` gives the plain MLE, renormalised to mean(ln p) = 0 after each step as in Hunter.
* **Perfect records** (a player who won, or lost, every game). The MLE is at infinity. With
  ``prior > 0`` the estimate is finite (the prior dominates far from the reference). With
  ``prior=0`` it is an error naming the players who never lost / never won; more generally the
  MLE exists iff the directed "beat at least once" graph is strongly connected (Hunter's
  Assumption 1; a draw is an edge both ways) and the error names its strongly connected groups.
  :func:`leaderboard`, the table of a finished tournament, reports such players instead of raising:
  rated +inf / -inf with a note, the others rated on their games among themselves.
* **A player with no games** (only possible through an explicit ``players`` list) is an error:
  nothing is known about them and a number in the table would be the prior dressed up as data.
* **A disconnected comparison graph** (two groups that never played each other) is an error
  naming the components, whatever the prior: the prior would give finite numbers, but the gap
  between components would be pure prior, not data. Rate each component separately.
  Bootstrap resamples are the exception (see :func:`bootstrap_intervals`).

Live ratings (:class:`~cogym.runners.results.live_ratings.StreamingRatings`) use the ``openskill`` package's Weng–Lin Bayesian
models (Plackett–Luce by default, Thurstone–Mosteller for TrueSkill-like updates): one game at a
time, ``(mu, sigma)`` per player, JSON-serialisable state for checkpoints.

Nothing here touches global RNG state; bootstrap draws come from ``seeding.rng("ratings.bootstrap", seed)``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cogym.core import seeding
from cogym.runners.results.bt_fit import SCALES, check_identifiable, check_options, closure, fit, not_converged

__all__ = ["Result", "SCALES", "win_matrix", "bradley_terry", "bootstrap_intervals", "expected_score", "leaderboard"]

_ELO = 400.0 / math.log(10.0)  # Elo points per natural-log unit of strength
_SCORES = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class Result:
    """One game: ``score`` is 1.0 if ``a`` won, 0.0 if ``b`` won, 0.5 for a draw.

    ``score`` is stored as a float; an int 0/1 is accepted. Two different, non-empty names.
    """

    a: str
    b: str
    score: float

    def __post_init__(self) -> None:
        for field in ("a", "b"):
            name = getattr(self, field)
            if not isinstance(name, str) or not name:
                raise ValueError(f"Result.{field} must be a non-empty player name (str), got {name!r}")
        if self.a == self.b:
            raise ValueError(f"a player cannot play themself: Result(a={self.a!r}, b={self.b!r})")
        s = self.score
        if isinstance(s, bool) or not isinstance(s, (int, float, np.integer, np.floating)) or float(s) not in _SCORES:
            raise ValueError(f"Result.score must be 1 (a won), 0 (b won) or 0.5 (draw), got {s!r}")
        object.__setattr__(self, "score", float(s))


def check_results(results: Sequence[Result]) -> list[Result]:
    results = list(results)
    for k, r in enumerate(results):
        if not isinstance(r, Result):
            raise TypeError(f"results[{k}] must be a Result(a, b, score), got {type(r).__name__}: {r!r}")
    return results


def _player_list(results: Sequence[Result], players: Sequence[str] | None) -> list[str]:
    seen = {name for r in results for name in (r.a, r.b)}
    if players is None:
        return sorted(seen)
    players = list(players)
    if len(set(players)) != len(players):
        dup = sorted({p for p in players if players.count(p) > 1})
        raise ValueError(f"players has duplicates: {dup}")
    unknown = sorted(seen - set(players))
    if unknown:
        raise ValueError(f"results name players missing from players: {unknown}")
    return players


def _game_cells(results: Sequence[Result], index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, score) arrays, one entry per game: (G,), (G,), (G,)."""
    i = np.fromiter((index[r.a] for r in results), dtype=np.int64, count=len(results))
    j = np.fromiter((index[r.b] for r in results), dtype=np.int64, count=len(results))
    s = np.fromiter((r.score for r in results), dtype=np.float64, count=len(results))
    return i, j, s


def win_matrix(results: Sequence[Result], players: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """Win matrix of ``results``.

    Returns ``(players, W)`` with ``W`` a float64 ``(n, n)`` array: ``W[i, j]`` = wins of
    ``players[i]`` over ``players[j]``, a draw counting 0.5 for each. ``W + W.T`` is the number of
    games per pair; the diagonal is 0. ``players`` defaults to the sorted names in ``results``; an
    explicit list fixes the order, may add players with no games (zero rows), and must contain every
    name in ``results``.
    """
    results = check_results(results)
    names = _player_list(results, players)
    n = len(names)
    i, j, s = _game_cells(results, {p: k for k, p in enumerate(names)})
    w = np.zeros(n * n, dtype=np.float64)
    np.add.at(w, i * n + j, s)
    np.add.at(w, j * n + i, 1.0 - s)
    return names, w.reshape(n, n)


def _report(theta: np.ndarray, names: Sequence[str], anchor: str | None, anchor_rating: float, scale: str) -> np.ndarray:
    """Natural-log strengths (..., n) -> ratings on ``scale``, shifted to the anchor convention."""
    r = theta * (_ELO if scale == "elo" else 1.0)
    ref = r[..., list(names).index(anchor)] if anchor is not None else r.mean(-1)
    return r - ref[..., None] + anchor_rating


def _check_anchor(anchor: str | None, names: Sequence[str]) -> None:
    if anchor is not None and anchor not in names:
        raise ValueError(f"anchor {anchor!r} is not a rated player; players are {list(names)}")


def bradley_terry(
    results: Sequence[Result],
    players: Sequence[str] | None = None,
    anchor: str | None = None,
    anchor_rating: float = 0.0,
    scale: str = "elo",
    prior: float = 1.0,
    max_iter: int = 10_000,
    tol: float = 1e-10,
) -> dict[str, float]:
    """Bradley–Terry ratings by Hunter's MM algorithm (penalised by ``prior``; see the module docstring).

    Args:
        results: the games; draws count as half a win for each player.
        players: rating order and set (default: sorted names in ``results``); every listed player
            must have played.
        anchor: the player pinned to ``anchor_rating``; None pins the mean rating instead.
        anchor_rating: the anchor's (or the mean) rating.
        scale: ``"elo"`` (``400 log10 p``) or ``"natural"`` (``ln p``).
        prior: virtual drawn games of each player against a reference player of strength 1;
            0 gives the plain maximum-likelihood estimate.
        max_iter, tol: MM stops when no ``ln p_i`` moves by ``tol`` or more; a fit still moving
            after ``max_iter`` iterations is finished by Newton's method (see :func:`fit`). If even
            that does not converge, the last iterate is returned with a RuntimeWarning, never an error.

    Returns:
        ``{name: rating}`` in ``players`` order.

    Raises:
        ValueError: empty results, unknown anchor, a player with no games, a disconnected
            comparison graph, or (``prior=0`` only) a win graph that is not strongly connected.
    """
    check_options(prior, max_iter, tol, scale)
    names, w = win_matrix(results, players)
    if not names:
        raise ValueError("results is empty: nothing to rate")
    _check_anchor(anchor, names)
    check_identifiable(w, names, prior)
    theta, converged, step = fit(w[None], prior, max_iter, tol)
    message = not_converged("bradley_terry", converged, step, max_iter, tol)
    if message:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    ratings = _report(theta[0], names, anchor, anchor_rating, scale)
    return {p: float(x) for p, x in zip(names, ratings)}


class NoFiniteResamples(ValueError):
    """``prior=0`` bootstrap resamples without a finite maximum-likelihood estimate (a ValueError;
    :func:`leaderboard` catches it to report the ratings without intervals)."""


def bootstrap_intervals(
    results: Sequence[Result],
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    *,
    players: Sequence[str] | None = None,
    anchor: str | None = None,
    anchor_rating: float = 0.0,
    scale: str = "elo",
    prior: float = 1.0,
    max_iter: int = 10_000,
    tol: float = 1e-10,
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap intervals for :func:`bradley_terry` ratings.

    Each replicate resamples the games with replacement (as many as there are) and refits with the
    same options and anchor convention; the interval is the ``(1 - level)/2`` and ``(1 + level)/2``
    quantiles of the replicates. All replicates are fitted at once (a multinomial draw of counts
    over the distinct (pair, outcome) cells, then one batched MM), so 1000 replicates cost about as
    much as a few single fits. Deterministic for a given ``seed``.

    The full data must pass :func:`bradley_terry`'s checks. A resample may lose a player's only
    games or split the graph: with ``prior > 0`` such a replicate is still well defined (the missing
    information is replaced by the prior, which widens the interval, as it should); with
    ``prior=0`` any replicate without a finite MLE is a ValueError (:class:`NoFiniteResamples`)
    saying how many, since dropping them would bias the interval.

    A replicate is never an error for not converging: MM is finished by Newton's method (as in
    :func:`bradley_terry`), and the rare replicate that still has not converged keeps its last
    iterate, with one RuntimeWarning saying how many.

    Returns:
        ``{name: (lo, hi)}`` in ``players`` order. With a named ``anchor``, the anchor's interval
        is ``(anchor_rating, anchor_rating)``.
    """
    if not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    check_options(prior, max_iter, tol, scale)
    results = check_results(results)
    names, w = win_matrix(results, players)
    if not names:
        raise ValueError("results is empty: nothing to rate")
    _check_anchor(anchor, names)
    check_identifiable(w, names, prior)

    n = len(names)
    i, j, s = _game_cells(results, {p: k for k, p in enumerate(names)})
    # A game adds s to W[i, j] and 1 - s to W[j, i]; orient every game so i < j and pool identical ones.
    swap = i > j
    lo_, hi_ = np.where(swap, j, i), np.where(swap, i, j)
    s = np.where(swap, 1.0 - s, s)
    code = (lo_ * n + hi_) * 3 + np.rint(2 * s).astype(np.int64)          # (G,) cell id
    cells, counts = np.unique(code, return_counts=True)                      # (K,)
    pair, s_cell = cells // 3, (cells % 3) / 2.0
    ci, cj = pair // n, pair % n
    effect = np.zeros((len(cells), n * n))                                   # (K, n*n)
    rows = np.arange(len(cells))
    effect[rows, ci * n + cj] += s_cell
    effect[rows, cj * n + ci] += 1.0 - s_cell

    rng = seeding.rng("ratings.bootstrap", seed)
    draws = rng.multinomial(len(results), counts / counts.sum(), size=n_boot)  # (B, K)
    wb = (draws @ effect).reshape(n_boot, n, n)                                 # (B, n, n)
    if prior == 0:
        reach = closure(wb > 0)                                                # (B, n, n)
        bad = int((~(reach & np.swapaxes(reach, -1, -2)).all(axis=(-1, -2))).sum())
        if bad:
            raise NoFiniteResamples(f"{bad} of {n_boot} bootstrap resamples have no finite maximum-likelihood ratings "
                                    "(a player won or lost all its resampled games, or the graph split); use prior > 0")
    theta, converged, step = fit(wb, prior, max_iter, tol)                                # (B, n)
    message = not_converged("bootstrap_intervals", converged, step, max_iter, tol)
    if message:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    ratings = _report(theta, names, anchor, anchor_rating, scale)                          # (B, n)
    q = np.quantile(ratings, [(1 - level) / 2, (1 + level) / 2], axis=0)                   # (2, n)
    return {p: (float(q[0, k]), float(q[1, k])) for k, p in enumerate(names)}


def expected_score(r_a: float, r_b: float) -> float:
    """Expected score of a player rated ``r_a`` against one rated ``r_b`` on the Elo scale.

    ``1 / (1 + 10 ** ((r_b - r_a) / 400))``, computed as ``(1 + tanh(x / 2)) / 2`` with
    ``x = ln(10) (r_a - r_b) / 400`` so huge gaps give 0 or 1 instead of an overflow. Accepts
    numpy arrays (broadcast) as well as floats.
    """
    x = (np.asarray(r_a, dtype=np.float64) - np.asarray(r_b, dtype=np.float64)) / _ELO
    out = 0.5 * (1.0 + np.tanh(x / 2.0))
    return float(out) if out.ndim == 0 else out


def _unbounded(w: np.ndarray, names: Sequence[str]) -> dict[str, tuple[float, int, str]]:
    """With ``prior=0``: the players whose maximum-likelihood rating is infinite, ``{name: (sign,
    round, why)}``, ``sign`` +inf or -inf.

    Peeled off in rounds: a player who never lost (never won) a game is infinitely stronger (weaker)
    than everyone; as its rating runs off, the likelihood of its games tends to 1 whatever the
    others' ratings, so the others' ratings are the MLE of their games among themselves, where the
    peeling repeats (a player who lost only to the first round's unbeaten players is next).
    """
    alive = np.ones(len(names), dtype=bool)
    out: dict[str, tuple[float, int, str]] = {}
    for level in range(len(names)):
        idx = np.flatnonzero(alive)
        sub = w[np.ix_(idx, idx)]
        played = (sub + sub.T).sum(1) > 0
        top, bottom = played & (sub.sum(0) == 0), played & (sub.sum(1) == 0)   # never lost / never won here
        if not (top | bottom).any():
            break
        for k in idx[top]:
            out[names[k]] = (math.inf, level, "never lost a game" if level == 0 else
                             "lost only to players whose rating is +inf")
        for k in idx[bottom]:
            out[names[k]] = (-math.inf, level, "never won a game" if level == 0 else
                             "won only against players whose rating is -inf")
        alive[idx[top | bottom]] = False
    return out


def leaderboard(
    results: Sequence[Result],
    players: Sequence[str] | None = None,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    anchor: str | None = None,
    anchor_rating: float = 0.0,
    scale: str = "elo",
    prior: float = 1.0,
    max_iter: int = 10_000,
    tol: float = 1e-10,
) -> list[dict[str, Any]]:
    """Rows sorted by rating (highest first, ties by name).

    Each row: ``name``, ``rating`` (:func:`bradley_terry`), ``lo``/``hi`` (:func:`bootstrap_intervals`
    at ``level``; None when ``n_boot=0``), ``games``, ``wins``, ``draws``, ``losses``, ``score``
    (mean points per game, a draw scoring 0.5) and ``note`` ("" unless something below applies).

    The table is what a finished tournament prints, so what :func:`bradley_terry` and
    :func:`bootstrap_intervals` refuse with ``prior=0`` for lack of a finite estimate is reported
    here instead of raised. A player who never lost (never won), or who lost only to such players
    (won only against them), has an infinite rating: ``rating``, ``lo`` and ``hi`` are +inf (-inf),
    the note says why, and the others are rated on their games among themselves. Bootstrap
    resamples without a finite estimate leave the finite players with no interval (None) and a
    note saying how many. Still errors: the checks of the data themselves (no results, a player
    with no games, a disconnected comparison graph), an ``anchor`` whose rating is infinite, and
    with ``prior=0`` a win graph that stays not strongly connected once those players are set
    aside (groups that beat each other only one way), whose gaps no finite number describes.
    """
    bt = dict(anchor=anchor, anchor_rating=anchor_rating, scale=scale, prior=prior, max_iter=max_iter, tol=tol)
    check_options(prior, max_iter, tol, scale)
    results = check_results(results)
    names, w = win_matrix(results, players)
    if not names:
        raise ValueError("results is empty: nothing to rate")
    _check_anchor(anchor, names)
    unbounded = _unbounded(w, names) if prior == 0 else {}
    if unbounded:
        check_identifiable(w, names, prior=1.0)  # no games, or a split graph, are errors with any prior
        if anchor in unbounded:
            raise ValueError(f"anchor {anchor!r} {unbounded[anchor][2]}: with prior=0 its rating is infinite, so it "
                             "cannot anchor the others; anchor another player or use prior > 0")
    finite = [p for p in names if p not in unbounded]
    kept = [r for r in results if r.a not in unbounded and r.b not in unbounded] if unbounded else results
    notes = {p: f"{why}: rating {'+' if sign > 0 else '-'}inf without a prior (prior=0)"
             for p, (sign, _, why) in unbounded.items()}
    if len(finite) == 1:  # everyone else is unbounded: the one finite player carries the anchor convention
        ratings = {finite[0]: float(anchor_rating)}
        intervals = {finite[0]: (float(anchor_rating),) * 2} if n_boot else {}
    elif finite:
        idle = sorted(set(finite) - {q for r in kept for q in (r.a, r.b)})
        if idle:
            raise ValueError(f"with prior=0, {idle} played only players whose rating is infinite "
                             f"({sorted(unbounded)}), so nothing places them among the others; use prior > 0")
        ratings = bradley_terry(kept, finite, **bt)
        try:
            intervals = bootstrap_intervals(kept, n_boot, level, seed, players=finite, **bt) if n_boot else {}
        except NoFiniteResamples as exc:
            intervals = {}
            notes.update({p: f"no bootstrap interval: {exc}" for p in finite})
    else:
        ratings, intervals = {}, {}
    for p, (sign, _, _) in unbounded.items():
        ratings[p] = sign
        if n_boot:
            intervals[p] = (sign, sign)
    tally = {p: [0, 0, 0] for p in names}                                    # wins, draws, losses
    for r in results:
        if r.score == 0.5:
            tally[r.a][1] += 1
            tally[r.b][1] += 1
        else:
            winner, loser = (r.a, r.b) if r.score == 1.0 else (r.b, r.a)
            tally[winner][0] += 1
            tally[loser][2] += 1
    rows = []
    for name in names:
        wins, draws, losses = tally[name]
        games = wins + draws + losses
        lo, hi = intervals.get(name, (None, None))
        rows.append(dict(name=name, rating=ratings[name], lo=lo, hi=hi, games=games, wins=wins, draws=draws,
                         losses=losses, score=(wins + 0.5 * draws) / games, note=notes.get(name, "")))

    def order(row: dict) -> tuple:
        # Among infinite ratings, earlier peeled players are further out (the unbeaten above those they beat).
        sign, level_, _ = unbounded.get(row["name"], (0.0, 0, ""))
        return -row["rating"], level_ * (1 if sign > 0 else -1), row["name"]

    rows.sort(key=order)
    return rows
