"""Tournament ratings: Bradley–Terry against hand-derived answers, bootstrap intervals, openskill streaming."""

from __future__ import annotations

import itertools
import json
import math
import warnings

import numpy as np
import pytest

from cogym.runners.results.ratings import (Result, bootstrap_intervals, bradley_terry, expected_score, leaderboard, win_matrix)
from cogym.runners.results.live_ratings import StreamingRatings

ELO = 400.0 / math.log(10.0)  # Elo points per natural-log unit


def games(a: str, b: str, wins: int = 0, losses: int = 0, draws: int = 0) -> list[Result]:
    """``wins`` games won by ``a``, ``losses`` won by ``b``, ``draws`` drawn."""
    return [Result(a, b, 1.0)] * wins + [Result(a, b, 0.0)] * losses + [Result(a, b, 0.5)] * draws


def simulate(elo: dict[str, float], per_pair: int, seed: int) -> list[Result]:
    """``per_pair`` decisive games for every pair, won with the Bradley–Terry probability, in shuffled order."""
    rng = np.random.default_rng(seed)
    out = []
    for a, b in itertools.combinations(elo, 2):
        wins = rng.random(per_pair) < expected_score(elo[a], elo[b])
        out += [Result(a, b, 1.0 if w else 0.0) for w in wins]
    return [out[k] for k in rng.permutation(len(out))]


def diffs(r: dict[str, float]) -> dict[str, float]:
    first = next(iter(r.values()))
    return {k: v - first for k, v in r.items()}


# -- Result and win_matrix ---------------------------------------------------------------------

def test_win_matrix_counts_draws_as_half_wins():
    results = games("A", "B", wins=2, losses=1, draws=1) + games("C", "A", wins=1)
    players, w = win_matrix(results)
    assert players == ["A", "B", "C"]
    np.testing.assert_array_equal(w, [[0.0, 2.5, 0.0], [1.5, 0.0, 0.0], [1.0, 0.0, 0.0]])
    assert w.dtype == np.float64
    # An explicit order is kept and may add players with no games.
    players, w = win_matrix(results, players=["C", "B", "A", "D"])
    assert players == ["C", "B", "A", "D"] and w[2, 1] == 2.5 and w[3].sum() == 0 and w.shape == (4, 4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(a="A", b="B", score=0.3), "score"),
    (dict(a="A", b="B", score=2), "score"),
    (dict(a="A", b="B", score=-1.0), "score"),
    (dict(a="A", b="B", score=float("nan")), "score"),
    (dict(a="A", b="B", score=True), "score"),
    (dict(a="A", b="A", score=1.0), "themself"),
    (dict(a="", b="B", score=1.0), "Result.a"),
    (dict(a="A", b=3, score=1.0), "Result.b"),
])
def test_result_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Result(**kwargs)


def test_result_normalises_score_and_is_frozen():
    r = Result("A", "B", 1)
    assert r.score == 1.0 and isinstance(r.score, float)
    with pytest.raises(AttributeError):
        r.score = 0.0  # type: ignore[misc]


def test_bad_calls_are_errors():
    ok = games("A", "B", wins=2, losses=1)
    with pytest.raises(ValueError, match="anchor 'Z'"):
        bradley_terry(ok, anchor="Z")
    with pytest.raises(ValueError, match="empty"):
        bradley_terry([])
    with pytest.raises(TypeError, match=r"results\[0\]"):
        bradley_terry([("A", "B", 1.0)])
    with pytest.raises(ValueError, match="missing from players"):
        bradley_terry(ok, players=["A"])
    with pytest.raises(ValueError, match="duplicates"):
        bradley_terry(ok, players=["A", "B", "A"])
    with pytest.raises(ValueError, match="scale"):
        bradley_terry(ok, scale="glicko")
    with pytest.raises(ValueError, match="prior"):
        bradley_terry(ok, prior=-1.0)
    with pytest.raises(ValueError, match="level"):
        bootstrap_intervals(ok, level=1.0)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_intervals(ok, n_boot=0)


# -- Bradley–Terry: hand-derived answers -------------------------------------------------------

@pytest.mark.parametrize("prior", [0.0, 1.0])
def test_symmetric_records_give_equal_ratings(prior):
    # 7-7 with 2 draws: swapping the names maps the data to itself, so the (unique) optimum
    # must give equal ratings.
    r = bradley_terry(games("A", "B", wins=7, losses=7, draws=2), prior=prior)
    assert abs(r["A"] - r["B"]) < 1e-9
    # B and C have identical records against A and split 2-2 with 1 draw between themselves:
    # swapping B and C maps the data to itself.
    results = games("A", "B", wins=5, losses=3, draws=1) + games("A", "C", wins=5, losses=3, draws=1) \
        + games("B", "C", wins=2, losses=2, draws=1)
    r = bradley_terry(results, prior=prior)
    assert abs(r["B"] - r["C"]) < 1e-9
    assert r["A"] > r["B"] + 50


def test_two_players_three_of_four_mle():
    # MLE: maximise 3 log s + log(1 - s), s = p_A/(p_A+p_B) -> s = 3/4 -> p_A/p_B = 3.
    r = bradley_terry(games("A", "B", wins=3, losses=1), prior=0.0)
    assert r["A"] - r["B"] == pytest.approx(400 * math.log10(3), abs=1e-8)  # 190.85
    assert r["A"] - r["B"] == pytest.approx(190.848501887865, abs=1e-8)
    assert r["A"] + r["B"] == pytest.approx(0.0, abs=1e-9)  # mean anchored at 0
    assert expected_score(r["A"], r["B"]) == pytest.approx(0.75, abs=1e-12)


def test_two_players_three_of_four_with_prior_by_hand():
    # With prior c, each player also draws c virtual games against a reference of theta = 0, adding
    # c * log sech(theta/2) each. The objective is invariant under (tA, tB) -> (-tB, -tA) and strictly
    # concave, so tA = t, tB = -t with
    #   d/dtA: 3 sigmoid(-2t) - sigmoid(2t) - (c/2) tanh(t/2) = 0.
    # Solve that 1-D equation by bisection (the left side decreases in t).
    c = 1.0

    def g(t):
        return 3 / (1 + math.exp(2 * t)) - 1 / (1 + math.exp(-2 * t)) - c / 2 * math.tanh(t / 2)

    lo, hi = 0.0, 5.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if g(mid) > 0 else (lo, mid)
    t = (lo + hi) / 2
    r = bradley_terry(games("A", "B", wins=3, losses=1), prior=c, scale="natural")
    assert r["A"] == pytest.approx(t, abs=1e-8) and r["B"] == pytest.approx(-t, abs=1e-8)
    elo = bradley_terry(games("A", "B", wins=3, losses=1), prior=c)
    assert elo["A"] - elo["B"] == pytest.approx(2 * t * ELO, abs=1e-6)
    assert elo["A"] - elo["B"] == pytest.approx(164.838538, abs=1e-4)  # shrunk from 190.85


def test_three_players_chain_closed_form():
    # Comparison graph A - B - C is a tree: the log-likelihood is
    #   3 log s(dAB) + 1 log s(-dAB) + 4 log s(dBC) + 1 log s(-dBC),  d = theta difference,
    # a sum of two terms in two free parameters, each maximised alone: s(dAB) = 3/4, s(dBC) = 4/5,
    # so dAB = ln 3, dBC = ln 4 and dAC = ln 12.
    results = games("A", "B", wins=3, losses=1) + games("B", "C", wins=4, losses=1)
    r = bradley_terry(results, prior=0.0)
    assert r["A"] - r["B"] == pytest.approx(400 * math.log10(3), abs=1e-7)
    assert r["B"] - r["C"] == pytest.approx(400 * math.log10(4), abs=1e-7)
    assert r["A"] - r["C"] == pytest.approx(400 * math.log10(12), abs=1e-7)  # 431.67


def test_three_players_triangle_closed_form():
    # Every pair's record equals its expectation under p = (4, 2, 1):
    #   A-B 2 of 3 (4/6), B-C 2 of 3 (2/3), A-C 4 of 5 (4/5).
    # The MLE solves the score equations sum_j n_ij p_i/(p_i+p_j) = W_i; they hold pair by pair at
    # p = (4, 2, 1), and the log-likelihood is strictly concave (the win graph is strongly
    # connected), so that is the unique maximum: gaps of 400 log10 2 = 120.41 Elo.
    results = games("A", "B", wins=2, losses=1) + games("B", "C", wins=2, losses=1) \
        + games("A", "C", wins=4, losses=1)
    r = bradley_terry(results, prior=0.0, scale="natural", anchor="C")
    assert r["A"] == pytest.approx(math.log(4), abs=1e-9)
    assert r["B"] == pytest.approx(math.log(2), abs=1e-9)
    assert r["C"] == 0.0


def test_draws_count_half():
    # Two draws carry the same information as one win plus one loss.
    base = games("A", "B", wins=3, losses=1) + games("B", "C", wins=2, losses=2)
    with_draws = bradley_terry(base + games("A", "C", draws=2))
    with_split = bradley_terry(base + games("A", "C", wins=1, losses=1))
    for p in with_draws:
        assert with_draws[p] == pytest.approx(with_split[p], abs=1e-9)
    # One draw, prior 0: p_A/p_B = 0.5/0.5 -> equal.
    r = bradley_terry(games("A", "B", draws=1), prior=0.0)
    assert r["A"] == pytest.approx(r["B"], abs=1e-12)


def test_anchoring():
    results = simulate({"A": 0.0, "B": 100.0, "C": 250.0, "D": -80.0}, 20, seed=3)
    free = bradley_terry(results)
    assert sum(free.values()) / len(free) == pytest.approx(0.0, abs=1e-9)
    at1000 = bradley_terry(results, anchor_rating=1000.0)
    assert sum(at1000.values()) / len(at1000) == pytest.approx(1000.0, abs=1e-9)
    for anchor in free:
        r = bradley_terry(results, anchor=anchor, anchor_rating=1500.0)
        assert r[anchor] == 1500.0
        for p in free:
            assert r[p] - r["A"] == pytest.approx(free[p] - free["A"], abs=1e-9)
    natural = bradley_terry(results, scale="natural")
    for p in free:
        assert natural[p] * ELO == pytest.approx(free[p], abs=1e-9)


def _log_lik(theta, w, prior):
    """Penalised BT log-likelihood, its gradient and Hessian, written out independently of MM."""
    d = theta[:, None] - theta[None, :]
    s = 1 / (1 + np.exp(-d))                            # s[i, j] = P(i beats j)
    n = w + w.T
    f = float((w * np.log(s)).sum()) + prior * float((theta / 2 - np.logaddexp(0, theta)).sum())
    sig = 1 / (1 + np.exp(-theta))
    grad = w.sum(1) - (n * s).sum(1) + prior * (0.5 - sig)
    h = n * s * (1 - s)
    hess = h - np.diag(h.sum(1)) - prior * np.diag(sig * (1 - sig))
    return f, grad, hess


def _maximise(w, prior):
    """Maximise the penalised log-likelihood over theta (theta_0 fixed at 0 when prior == 0)."""
    n = w.shape[0]
    free = slice(1, None) if prior == 0 else slice(None)
    k = n - 1 if prior == 0 else n

    def full(x):
        return np.concatenate([[0.0], x]) if prior == 0 else x

    try:
        from scipy.optimize import minimize
    except ImportError:  # Newton's method on the concave objective
        x = np.zeros(k)
        for _ in range(100):
            _, g, h = _log_lik(full(x), w, prior)
            x = x - np.linalg.solve(h[free, free], g[free])
        return full(x)
    res = minimize(lambda x: -_log_lik(full(x), w, prior)[0], np.zeros(k), method="trust-exact",
                   jac=lambda x: -_log_lik(full(x), w, prior)[1][free],
                   hess=lambda x: -_log_lik(full(x), w, prior)[2][free, free], options={"gtol": 1e-12})
    assert res.success, res.message
    return full(res.x)


@pytest.mark.parametrize("prior", [0.0, 1.0, 3.0])
def test_mm_matches_direct_maximisation(prior):
    rng = np.random.default_rng(7)
    names = ["p0", "p1", "p2", "p3", "p4"]
    strength = rng.normal(0, 1, 5)
    results = []
    for _ in range(120):
        i, j = rng.choice(5, 2, replace=False)
        u = rng.random()
        p_win = 1 / (1 + math.exp(strength[j] - strength[i]))
        score = 0.5 if u < 0.15 else (1.0 if u < 0.15 + 0.85 * p_win else 0.0)
        results.append(Result(names[i], names[j], score))
    players, w = win_matrix(results)
    theta = _maximise(w, prior)
    if prior == 0:
        theta = theta - theta.mean()
    mm = bradley_terry(results, scale="natural", prior=prior)
    np.testing.assert_allclose([mm[p] - np.mean(list(mm.values())) for p in players], theta - theta.mean(), atol=1e-7)
    if prior > 0:  # with a prior the level is identified too: check MM's optimum of the shift
        raw = np.array([mm[p] for p in players]) - np.mean(list(mm.values())) + theta.mean()
        assert np.abs(_log_lik(raw, w, prior)[1]).max() < 1e-7


# -- degenerate cases --------------------------------------------------------------------------

def test_perfect_record_is_finite_with_prior_and_an_error_without():
    results = games("A", "B", wins=5) + games("B", "C", wins=3, losses=3)
    r = bradley_terry(results)
    assert all(math.isfinite(x) for x in r.values())
    assert r["A"] > r["B"] + 100 and abs(r["B"] - r["C"]) < 60
    with pytest.raises(ValueError, match=r"never lost: \['A'\]"):
        bradley_terry(results, prior=0.0)
    # Lost every game.
    with pytest.raises(ValueError, match=r"never won: \['C'\]"):
        bradley_terry(games("A", "C", wins=2) + games("B", "C", wins=1) + games("A", "B", wins=1, losses=1), prior=0.0)
    # Two mutually beaten groups, nobody with a clean record: {A, B} beat {C, D} every time.
    groups = games("A", "B", wins=1, losses=1) + games("C", "D", wins=1, losses=1) + games("A", "C", wins=2) + games("B", "D", wins=1)
    with pytest.raises(ValueError, match=r"not strongly connected \(groups \[\['A', 'B'\], \['C', 'D'\]\]"):
        bradley_terry(groups, prior=0.0)
    assert all(math.isfinite(x) for x in bradley_terry(groups).values())


def test_player_without_games_is_an_error():
    with pytest.raises(ValueError, match=r"no games cannot be rated: \['Z'\]"):
        bradley_terry(games("A", "B", wins=1, losses=1), players=["A", "B", "Z"])


def test_disconnected_graph_is_an_error_naming_components():
    results = games("A", "B", wins=2, losses=1) + games("C", "D", wins=1, losses=1)
    for prior in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"disconnected, components \[\['A', 'B'\], \['C', 'D'\]\]"):
            bradley_terry(results, prior=prior)
    with pytest.raises(ValueError, match="disconnected"):
        bootstrap_intervals(results, n_boot=10)


def test_expected_score():
    assert expected_score(1500.0, 1500.0) == 0.5
    assert expected_score(400.0, 0.0) == pytest.approx(10 / 11, abs=1e-15)
    assert expected_score(0.0, 400.0) == pytest.approx(1 / 11, abs=1e-15)
    assert expected_score(123.0, -45.0) + expected_score(-45.0, 123.0) == pytest.approx(1.0, abs=1e-15)
    assert expected_score(1e6, 0.0) == 1.0 and expected_score(0.0, 1e6) == 0.0  # no overflow
    np.testing.assert_allclose(expected_score(np.array([0.0, 400.0]), 0.0), [0.5, 10 / 11])


# -- bootstrap ---------------------------------------------------------------------------------

def test_bootstrap_contains_estimate_and_is_deterministic():
    results = simulate({"A": 0.0, "B": 60.0, "C": 150.0, "D": 300.0}, 25, seed=1)
    point = bradley_terry(results)
    ci = bootstrap_intervals(results, n_boot=500, seed=4)
    for p, (lo, hi) in ci.items():
        assert lo < point[p] < hi
    assert bootstrap_intervals(results, n_boot=500, seed=4) == ci
    assert bootstrap_intervals(results, n_boot=500, seed=5) != ci
    # A named anchor is pinned in every replicate, other players keep a real interval.
    anchored = bootstrap_intervals(results, n_boot=200, anchor="B", anchor_rating=1000.0)
    assert anchored["B"] == (1000.0, 1000.0)
    assert anchored["D"][0] < bradley_terry(results, anchor="B", anchor_rating=1000.0)["D"] < anchored["D"][1]


def test_bootstrap_narrows_with_more_games():
    elo = {"A": 0.0, "B": 100.0, "C": 200.0}
    small = bootstrap_intervals(simulate(elo, 14, seed=2), n_boot=400)   # 42 games
    large = bootstrap_intervals(simulate(elo, 134, seed=2), n_boot=400)  # 402 games
    for p in elo:
        w_small, w_large = small[p][1] - small[p][0], large[p][1] - large[p][0]
        assert w_large < 0.6 * w_small, (p, w_small, w_large)  # ~1/sqrt(10) = 0.32 expected


def test_bootstrap_separates_clearly_different_players():
    elo = {"weak": 0.0, "mid": 200.0, "strong": 400.0}
    results = simulate(elo, 200, seed=11)
    r = bradley_terry(results)
    ci = bootstrap_intervals(results, n_boot=1000, level=0.95, seed=0)
    assert sorted(r, key=r.get) == ["weak", "mid", "strong"]
    assert ci["weak"][1] < ci["mid"][0] and ci["mid"][1] < ci["strong"][0]
    for p in elo:  # true ratings, mean-anchored, are recovered within the sampling error
        assert r[p] == pytest.approx(elo[p] - 200.0, abs=60.0)


def test_bootstrap_percentiles_match_the_binomial():
    # Two players, 100 decisive games, A wins 60, prior 0: a resample in which A wins k games has
    # rating gap 400 log10(k / (100 - k)), monotone in k with k ~ Binomial(100, 0.6). So the
    # interval's ends map back to the binomial's 2.5% and 97.5% quantiles (up to one game of
    # Monte-Carlo and interpolation error).
    n, wins = 100, 60
    lo, hi = bootstrap_intervals(games("A", "B", wins=wins, losses=n - wins), n_boot=20_000, prior=0.0, seed=1)["A"]

    def games_won(rating_a):  # mean-anchored: rating_A = gap / 2
        odds = 10 ** (2 * rating_a / 400)
        return n * odds / (1 + odds)

    cdf = np.cumsum([math.comb(n, k) * 0.6**k * 0.4 ** (n - k) for k in range(n + 1)])
    q_lo, q_hi = int(np.searchsorted(cdf, 0.025)), int(np.searchsorted(cdf, 0.975))  # 50, 69
    assert abs(games_won(lo) - q_lo) <= 1 and abs(games_won(hi) - q_hi) <= 1
    narrow = bootstrap_intervals(games("A", "B", wins=wins, losses=n - wins), n_boot=20_000, level=0.5, prior=0.0, seed=1)["A"]
    assert lo < narrow[0] < narrow[1] < hi


def test_bootstrap_without_prior_reports_resamples_without_mle():
    with pytest.raises(ValueError, match=r"of 200 bootstrap resamples have no finite"):
        bootstrap_intervals(games("A", "B", wins=2, losses=1), n_boot=200, prior=0.0)


# -- leaderboard -------------------------------------------------------------------------------

def test_leaderboard_rows():
    results = games("A", "B", wins=6, losses=2, draws=2) + games("B", "C", wins=5, losses=3) + games("A", "C", wins=7, losses=1, draws=1)
    rows = leaderboard(results, n_boot=300)
    assert [row["name"] for row in rows] == ["A", "B", "C"]
    a = rows[0]
    assert (a["games"], a["wins"], a["draws"], a["losses"]) == (19, 13, 3, 3)
    assert a["score"] == pytest.approx(14.5 / 19)
    c = rows[2]
    assert (c["games"], c["wins"], c["draws"], c["losses"]) == (17, 4, 1, 12)
    ratings = bradley_terry(results)
    for row in rows:
        assert row["rating"] == ratings[row["name"]] and row["lo"] < row["rating"] < row["hi"]
    bare = leaderboard(results, n_boot=0)
    assert bare[0]["lo"] is None and bare[0]["hi"] is None
    assert json.loads(json.dumps(rows)) == rows


# -- robustness: a finished tournament always gets its table -----------------------------------

def crash_shaped(seed: int = 0) -> list[Result]:
    """4 players x 60 games per pairing, shaped like the tournament whose ratings once crashed: a
    near-optimal player who loses one game in 180 (so bootstrap resamples often have it unbeaten),
    a random player and two middling checkpoints."""
    rng = np.random.default_rng(seed)
    out = games("nash", "random", wins=60) + games("nash", "step_3", wins=59, losses=1) + games("nash", "step_6", wins=60)
    for a, b, p in (("random", "step_3", 0.55), ("random", "step_6", 0.45), ("step_6", "step_3", 0.6)):
        out += [Result(a, b, 1.0 if w else 0.0) for w in rng.random(60) < p]
    return [out[k] for k in rng.permutation(len(out))]


def test_a_fit_that_mm_cannot_finish_in_max_iter_is_finished_not_raised():
    # A resample in which C lost every game, and A nearly every one: MM's rate tends to 1 as A's
    # rating runs off. Three MM iterations used to be a RuntimeError; now Newton's method finishes
    # the fit, to the same optimum as the full MM run (MM's own stopping error is ~1e-8).
    results = games("A", "B", wins=29, losses=1) + games("A", "C", wins=30) + games("B", "C", wins=30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # converged: no warning
        full = bradley_terry(results, scale="natural")
        for max_iter in (1, 3, 50):
            short = bradley_terry(results, scale="natural", max_iter=max_iter)
            assert all(math.isfinite(x) for x in short.values())
            for p in full:
                assert short[p] == pytest.approx(full[p], abs=1e-6), (max_iter, p)
    # It is the penalised maximum itself: at the best common level (where the prior's gradient sums
    # to 0, found by bisection), the gradient of the independently written objective is ~0.
    players, w = win_matrix(results)
    raw = np.array([bradley_terry(results, scale="natural", max_iter=2)[p] for p in players])
    lo, hi = -20.0, 20.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.sum(0.5 - 1 / (1 + np.exp(-(raw + mid)))) > 0 else (lo, mid)
    _, grad, _ = _log_lik(raw + lo, w, 1.0)
    assert np.abs(grad).max() < 1e-8
    # prior=0 too (a strongly connected record): same answer from any iteration budget.
    tight = games("A", "B", wins=9, losses=1) + games("B", "C", wins=8, losses=2) + games("C", "A", wins=1, losses=9)
    exact = bradley_terry(tight, prior=0.0, scale="natural")
    for p, x in bradley_terry(tight, prior=0.0, scale="natural", max_iter=1).items():
        assert x == pytest.approx(exact[p], abs=1e-8)


def test_a_fit_that_does_not_converge_warns_and_keeps_its_last_iterate(monkeypatch):
    from cogym.runners.results import bt_fit

    results = games("A", "B", wins=29, losses=1) + games("A", "C", wins=30) + games("B", "C", wins=30)
    full, ci_full = bradley_terry(results), bootstrap_intervals(results, n_boot=50)
    # A tol below float64's resolution is met where Newton's step stops shrinking: no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bradley_terry(results, tol=1e-300, max_iter=20) == pytest.approx(full, abs=1e-6)
    # Should Newton's method fail too, the fit keeps MM's last iterate and says so, never raises.
    monkeypatch.setattr(bt_fit, "_newton", lambda w, theta, prior, tol: (
        theta, np.full(len(theta), 0.5), np.zeros(len(theta), dtype=bool)))
    with pytest.warns(RuntimeWarning, match=r"bradley_terry: 1 of 1 Bradley–Terry fits did not converge to tol=1e-10 "
                                            r"\(20 MM iterations, then Newton's method; largest last step 0.5\)"):
        r = bradley_terry(results, max_iter=20)
    assert all(math.isfinite(x) for x in r.values()) and r["A"] > r["B"] > r["C"]
    with pytest.warns(RuntimeWarning, match=r"bootstrap_intervals: \d+ of 50 Bradley–Terry fits did not converge"):
        ci = bootstrap_intervals(results, n_boot=50, max_iter=20)
    assert all(math.isfinite(lo) and math.isfinite(hi) for lo, hi in ci.values()) and set(ci) == set(ci_full)


def test_default_bootstrap_of_a_crash_shaped_tournament_finishes_with_the_converged_intervals():
    results = crash_shaped()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ci = bootstrap_intervals(results)  # the default: 1000 resamples, max_iter 10_000
        # Resamples MM does not finish in max_iter are finished by Newton's method: same intervals
        # (a max_iter of 200 used to be a RuntimeError).
        short = bootstrap_intervals(results, max_iter=200)
    assert set(ci) == {"nash", "random", "step_3", "step_6"}
    for p, (lo, hi) in ci.items():
        assert math.isfinite(lo) and math.isfinite(hi) and lo < hi
        assert short[p] == pytest.approx((lo, hi), abs=1e-3), p
    rows = leaderboard(results)
    assert rows[0]["name"] == "nash" and rows[0]["lo"] > max(r["hi"] for r in rows[1:])


def test_leaderboard_without_prior_flags_unbounded_players_instead_of_raising():
    # C never won; with prior=0 its rating is -inf. bradley_terry still refuses (it returns numbers);
    # the leaderboard, what a finished tournament prints, flags C and rates A and B on their games.
    results = games("A", "B", wins=6, losses=4) + games("A", "C", wins=3) + games("B", "C", wins=5)
    with pytest.raises(ValueError, match=r"never won: \['C'\]"):
        bradley_terry(results, prior=0.0)
    rows = leaderboard(results, prior=0.0, n_boot=0)
    assert [r["name"] for r in rows] == ["A", "B", "C"]
    a, b, c = rows
    assert c["rating"] == -math.inf and c["note"].startswith("never won a game") and c["lo"] is None
    assert a["note"] == b["note"] == ""
    gap = 400 * math.log10(6 / 4)  # A and B rated on their own 10 games, mean-anchored
    assert a["rating"] == pytest.approx(gap / 2, abs=1e-6) and b["rating"] == pytest.approx(-gap / 2, abs=1e-6)
    # With intervals: the unbounded player's is (-inf, -inf), as in every resample; the others' come
    # from resampling their own games (enough of them that every resample has a finite MLE).
    booted = leaderboard(games("A", "B", wins=30, losses=20) + games("A", "C", wins=3) + games("B", "C", wins=5),
                         prior=0.0, n_boot=200)
    assert booted[2]["lo"] == booted[2]["hi"] == -math.inf
    assert all(r["lo"] < r["rating"] < r["hi"] and r["note"] == "" for r in booted[:2])
    # Peeled in rounds: D never lost; A lost only to D, so A is +inf too, ranked under D.
    chain = games("D", "A", wins=2) + games("A", "B", wins=3) + games("B", "C", wins=2, losses=1) + games("D", "C", wins=1)
    rows = leaderboard(chain, prior=0.0, n_boot=0)
    assert [r["name"] for r in rows] == ["D", "A", "B", "C"]
    assert rows[0]["rating"] == rows[1]["rating"] == math.inf and rows[1]["note"].startswith("lost only to")
    gap = 400 * math.log10(2)
    assert rows[2]["rating"] == pytest.approx(gap / 2) and rows[3]["rating"] == pytest.approx(-gap / 2)
    assert json.loads(json.dumps(rows)) == rows
    # An anchor that is unbounded cannot anchor anyone.
    with pytest.raises(ValueError, match="anchor 'C' never won a game"):
        leaderboard(results, prior=0.0, n_boot=0, anchor="C")
    # A split graph is still an error, with or without a prior.
    with pytest.raises(ValueError, match="disconnected"):
        leaderboard(results + games("X", "Y", wins=1), prior=0.0, n_boot=0)


def test_leaderboard_without_prior_reports_resamples_without_mle_as_a_note():
    rows = leaderboard(games("A", "B", wins=2, losses=1), n_boot=200, prior=0.0)
    assert [r["lo"] for r in rows] == [None, None]
    assert all(re_note.startswith("no bootstrap interval: ") and "of 200 bootstrap resamples" in re_note
               for re_note in (r["note"] for r in rows))


# -- streaming (openskill) ---------------------------------------------------------------------

@pytest.mark.parametrize("model", ["plackett_luce", "thurstone", "bradley_terry"])
def test_streaming_orders_players_by_true_strength(model):
    elo = {"d": 0.0, "c": 150.0, "b": 300.0, "a": 450.0}
    sr = StreamingRatings(model)
    sr.update_many(simulate(elo, 150, seed=5))
    mus = {p: mu for p, (mu, _) in sr.ratings().items()}
    assert sorted(mus, key=mus.get, reverse=True) == ["a", "b", "c", "d"]
    assert sorted(elo, key=sr.ordinal, reverse=True) == ["a", "b", "c", "d"]
    assert sr.games == 900
    assert sr.ordinal("a") == pytest.approx(sr.ratings()["a"][0] - 3 * sr.ratings()["a"][1])


def test_streaming_ties():
    sr = StreamingRatings()
    sr.update(Result("A", "B", 0.5))
    (mu_a, s_a), (mu_b, s_b) = sr.ratings()["A"], sr.ratings()["B"]
    assert mu_a == mu_b == 25.0 and s_a == s_b < 25.0 / 3.0  # a tie between equals: no move, less doubt
    for _ in range(5):
        sr.update(Result("A", "B", 1.0))
    gap = sr.ratings()["A"][0] - sr.ratings()["B"][0]
    sr.update(Result("B", "A", 0.5))  # a draw with the weaker player pulls the two together
    assert 0 < sr.ratings()["A"][0] - sr.ratings()["B"][0] < gap


def test_streaming_state_dict_round_trip_is_exact():
    results = simulate({"x": 0.0, "y": 100.0, "z": -50.0}, 30, seed=9)
    sr = StreamingRatings("thurstone_mosteller_full", tau=0.05)
    sr.update_many(results[:50])
    state = json.loads(json.dumps(sr.state_dict()))
    restored = StreamingRatings.from_state_dict(state)
    assert restored.state_dict() == sr.state_dict()
    sr.update_many(results[50:])
    restored.update_many(results[50:])
    assert restored.ratings() == sr.ratings() and restored.games == sr.games == len(results)
    with pytest.raises(ValueError, match="version"):
        StreamingRatings.from_state_dict({**state, "version": 99})


def test_streaming_errors():
    with pytest.raises(ValueError, match="model must be one of"):
        StreamingRatings("glicko")
    with pytest.raises(KeyError, match="nobody"):
        StreamingRatings().ordinal("nobody")
    with pytest.raises(TypeError):
        StreamingRatings().update(("A", "B", 1.0))
