"""docs/algorithms.md §13 property, loss and KL tests on seeded random batches.

Complements tests/learners/test_advantages.py and test_losses.py (which pin the §12 vectors and
check each property on one contiguous batch): here every property runs on several seeds with
ragged, interleaved, sparse group ids, interior masked tokens (multi-turn), singletons and
fully-masked rows; the loss gradients are checked against finite differences and hand-derived
values for every aggregation mode x dual-clip; the KL-in-loss gradient claims of §3.1 are checked
by Monte-Carlo sampling with tolerances derived from the sample standard error.
"""

from __future__ import annotations

import math

import pytest
import torch

from cogym.learners.advantages import (
    RETURN_SEMANTICS,
    grpo_advantages,
    grpo_batch_std_advantages,
    outcome_token_rewards,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)
from cogym.learners.losses import LOSS_AGG_MODES, aggregate, clipped_policy_loss, kl_estimate

F64 = torch.float64
SEEDS = [0, 1, 2, 3]


# ------------------------------------------------------------------ random batches
def ragged_batch(seed, width=8):
    """Ragged groups (sizes 1..6, one singleton), sparse interleaved ids, interior masked tokens,
    two fully-masked rows with NaN scores; half the groups have 0/1 rewards (ties), one group is
    constant."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [1, 2, 3, 4, 5, 6]
    ids = [7, 1000, 3, 42, 99, 5]
    scores, groups = [], []
    for k, (size, gid) in enumerate(zip(sizes, ids)):
        if k == 2:
            s = torch.full((size,), 0.25, dtype=F64)  # constant group
        elif k % 2:
            s = torch.randint(0, 2, (size,), generator=gen).to(F64)
        else:
            s = 3.0 * torch.randn(size, generator=gen, dtype=F64) + 1.0
        scores.append(s)
        groups += [gid] * size
    s = torch.cat(scores)
    g = torch.tensor(groups)
    n = len(s)
    # random (possibly non-prefix) masks: each row a random length, then some interior holes
    lengths = torch.randint(1, width + 1, (n,), generator=gen)
    m = (torch.arange(width)[None, :] < lengths[:, None]).to(F64)
    holes = torch.rand(n, width, generator=gen) < 0.2
    holes[:, 0] = False  # keep at least the first token
    m = torch.where(holes, torch.zeros_like(m), m)
    # two fully-masked rows (rejected rollouts) inside real groups
    for row in (4, n - 2):
        m[row] = 0
        s[row] = float("nan")
    # shuffle rows so groups are interleaved
    perm = torch.randperm(n, generator=gen)
    return s[perm], m[perm], g[perm]


def group_values(adv, mask, groups):
    """Per-row advantage (value on the first valid token; rows must be constant on valid tokens)."""
    m = mask != 0
    assert torch.all(adv[~m] == 0)
    first = torch.where(m.any(1), adv.gather(1, m.to(torch.int64).argmax(1, keepdim=True))[:, 0], 0.0)
    assert torch.all(torch.where(m, adv, first[:, None]) == first[:, None])
    return first


def valid_rows(mask):
    return (mask != 0).any(1)


OUTCOME = {
    "grpo": lambda s, m, g: grpo_advantages(s, m, g)[0],
    "grpo_eps0": lambda s, m, g: grpo_advantages(s, m, g, eps=0.0)[0],
    "grpo_floor": lambda s, m, g: grpo_advantages(s, m, g, variance_floor=True)[0],
    "grpo_verl_singleton": lambda s, m, g: grpo_advantages(s, m, g, singleton="verl")[0],
    "dr_grpo": lambda s, m, g: grpo_advantages(s, m, g, norm_by_std=False)[0],
    "batch_std": lambda s, m, g: grpo_batch_std_advantages(s, m, g)[0],
    "rloo": lambda s, m, g: rloo_advantages(s, m, g)[0],
    "rloo_verl_singleton": lambda s, m, g: rloo_advantages(s, m, g, singleton="verl")[0],
    "rfb_verl": lambda s, m, g: reinforce_pp_baseline_advantages(s, m, g)[0],
    "rfb_orl": lambda s, m, g: reinforce_pp_baseline_advantages(s, m, g, whiten_mode="openrlhf")[0],
}


def _rfpp(semantics, gamma, mode):
    def fn(s, m, g):
        r = outcome_token_rewards(torch.nan_to_num(s, nan=0.0), m)
        return reinforce_pp_advantages(r, m, gamma=gamma, semantics=semantics, whiten_mode=mode)[0]
    return fn


ALL = dict(OUTCOME)
for _sem in RETURN_SEMANTICS:
    for _gamma in (1.0, 0.9):
        ALL[f"rfpp_{_sem}_{_gamma}"] = _rfpp(_sem, _gamma, "verl")
ALL["rfpp_skip_orl"] = _rfpp("skip", 0.9, "openrlhf")


# ------------------------------------------------------------------ group sums / definitions
@pytest.mark.parametrize("seed", SEEDS)
def test_group_estimators_sum_to_zero_per_group(seed):
    s, m, g = ragged_batch(seed)
    v = valid_rows(m)
    for name in ("grpo", "grpo_eps0", "grpo_floor", "dr_grpo", "rloo", "batch_std"):
        a = group_values(OUTCOME[name](s, m, g), m, g)
        assert torch.all(a[~v] == 0), name
        for gid in g.unique():
            sel = g == gid
            assert abs(a[sel].sum().item()) < 1e-12, (name, int(gid), a[sel])


@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_matches_definition_and_has_unit_bessel_std_at_eps0(seed):
    s, m, g = ragged_batch(seed)
    v = valid_rows(m)
    for eps in (0.0, 1e-6, 1e-4):
        a = group_values(grpo_advantages(s, m, g, eps=eps)[0], m, g)
        for gid in g.unique():
            sel = (g == gid) & v
            x = s[sel]
            if x.numel() < 2 or bool((x == x[0]).all()):
                assert torch.all(a[sel] == 0)  # canonical singleton / constant group
                continue
            sd = x.std(correction=1)
            assert torch.allclose(a[sel], (x - x.mean()) / (sd + eps), atol=1e-12, rtol=0)
            # eps -> 0: Bessel std of a group's advantages is exactly 1; with eps it is sd/(sd+eps)
            assert a[sel].std(correction=1).item() == pytest.approx((sd / (sd + eps)).item(), abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_rloo_is_leave_one_out_and_scaled_dr_grpo(seed):
    s, m, g = ragged_batch(seed)
    v = valid_rows(m)
    a = group_values(rloo_advantages(s, m, g)[0], m, g)
    dr = group_values(grpo_advantages(s, m, g, norm_by_std=False)[0], m, g)
    for i in range(len(s)):
        others = (g == g[i]) & v
        others[i] = False
        if not v[i] or others.sum() == 0:
            assert a[i] == 0
            continue
        assert a[i].item() == pytest.approx((s[i] - s[others].mean()).item(), abs=1e-12)
        n = int(others.sum()) + 1
        assert a[i].item() == pytest.approx(n / (n - 1) * dr[i].item(), abs=1e-12)


# ------------------------------------------------------------------ whitening moments
def _token_moments(adv, mask):
    x = adv[mask != 0]
    mu = x.mean()
    ss = ((x - mu) ** 2).sum()
    return mu.item(), (ss / (x.numel() - 1)).item(), (ss / x.numel()).item()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("semantics", RETURN_SEMANTICS)
@pytest.mark.parametrize("gamma", [1.0, 0.8])
def test_reinforce_pp_whitened_token_moments(seed, semantics, gamma):
    s, m, g = ragged_batch(seed)
    r = outcome_token_rewards(torch.nan_to_num(s, nan=0.0), m)
    gen = torch.Generator().manual_seed(100 + seed)
    r = r + 0.1 * torch.randn(r.shape, generator=gen, dtype=F64) * m  # per-token KL shaping
    for mode in ("verl", "openrlhf"):
        adv, ret = reinforce_pp_advantages(r, m, gamma=gamma, semantics=semantics, whiten_mode=mode)
        assert torch.all(adv[m == 0] == 0)
        mu, var_unb, var_pop = _token_moments(adv, m)
        _, raw_unb, raw_pop = _token_moments(ret, m)
        assert raw_unb > 1e-2  # the test is about a non-degenerate batch
        assert mu == pytest.approx(0.0, abs=1e-12)
        if mode == "verl":  # W_verl: var_unb -> raw/(raw + 1e-8)
            assert var_unb == pytest.approx(raw_unb / (raw_unb + 1e-8), abs=1e-12)
            assert abs(var_unb - 1.0) < 1e-6
        else:  # W_orl: var_pop exactly 1 when var_pop > 1e-8
            assert var_pop == pytest.approx(1.0, abs=1e-12)
        # whitening is affine on the valid tokens: same ordering / correlation 1 with the returns
        x, y = adv[m != 0], ret[m != 0]
        corr = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()).norm() * (y - y.mean()).norm())
        assert corr.item() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_pp_baseline_token_moments(seed):
    s, m, g = ragged_batch(seed)
    for name, col in (("rfb_verl", 1), ("rfb_orl", 2)):
        adv = OUTCOME[name](s, m, g)
        group_values(adv, m, g)  # constant per row, padding 0
        mom = _token_moments(adv, m)
        assert mom[0] == pytest.approx(0.0, abs=1e-12)
        assert abs(mom[col] - 1.0) < 1e-6, (name, mom)


# ------------------------------------------------------------------ padding, permutation
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(ALL))
def test_padding_and_interior_masked_tokens_exactly_zero(seed, name):
    s, m, g = ragged_batch(seed)
    adv = ALL[name](s, m, g)
    assert adv.shape == m.shape and torch.isfinite(adv).all()
    assert torch.all(adv[m == 0] == 0)
    assert torch.all(adv[~valid_rows(m)] == 0)


@pytest.mark.parametrize("semantics", RETURN_SEMANTICS)
@pytest.mark.parametrize("garbage", [
    123.0, -7.5,
    *[pytest.param(x, id=f"nonfinite-{x}") for x in (float("nan"), float("inf"), -float("inf"))],
])
def test_reinforce_pp_ignores_rewards_on_masked_positions(semantics, garbage):
    # Non-finite garbage once leaked through the verl scan (NaN * 0 = NaN); masked rewards are now dropped first.
    s, m, g = ragged_batch(0)
    r = outcome_token_rewards(torch.nan_to_num(s, nan=0.0), m)
    r_garbage = torch.where(m == 0, torch.full_like(r, garbage), r)
    for mode in ("verl", "openrlhf"):
        base = reinforce_pp_advantages(r, m, gamma=0.9, semantics=semantics, whiten_mode=mode)[0]
        out = reinforce_pp_advantages(r_garbage, m, gamma=0.9, semantics=semantics, whiten_mode=mode)[0]
        assert torch.allclose(out, base, atol=1e-12, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(ALL))
def test_permuting_rows_with_ids_permutes_outputs(seed, name):
    s, m, g = ragged_batch(seed)
    fn = ALL[name]
    base = fn(s, m, g)
    perm = torch.randperm(len(s), generator=torch.Generator().manual_seed(1000 + seed))
    out = fn(s[perm], m[perm], g[perm])
    # whitening sums tokens in a different order: allow float rounding only
    assert torch.allclose(out, base[perm], atol=1e-12, rtol=0)
    # relabelling group ids (any injective map) changes nothing either
    relabel = {int(k): 10_000 - 3 * j for j, k in enumerate(g.unique())}
    g2 = torch.tensor([relabel[int(k)] for k in g])
    assert torch.allclose(fn(s, m, g2), base, atol=1e-12, rtol=0)


def test_permutation_changes_output_when_ids_are_not_permuted():
    # power check for the permutation test: moving rows without their ids does change GRPO
    s, m, g = ragged_batch(0)
    perm = torch.randperm(len(s), generator=torch.Generator().manual_seed(5))
    base = OUTCOME["grpo"](s, m, g)
    assert not torch.allclose(OUTCOME["grpo"](s[perm], m[perm], g), base[perm], atol=1e-3)


# ------------------------------------------------------------------ reward scaling
def _raw_values(name, s, m, g):
    """The values an estimator whitens (before whitening)."""
    if name.startswith("rfb"):
        return grpo_advantages(s, m, g, norm_by_std=False)[0]
    _, sem, gamma = name.split("_")
    r = outcome_token_rewards(torch.nan_to_num(s, nan=0.0), m)
    return reinforce_pp_advantages(r, m, gamma=float(gamma), semantics=sem)[1]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("k", [0.05, 1.7, 40.0])
def test_reward_scaling(seed, k):
    s, m, g = ragged_batch(seed)
    for name in ("grpo_eps0", "rfb_verl", "rfb_orl", "rfpp_skip_1.0", "rfpp_verl_0.9", "rfpp_openrlhf_0.9",
                 "rfpp_skip_orl"):
        fn = ALL[name]
        base, scaled = fn(s, m, g), fn(s * k, m, g)
        if name == "grpo_eps0":
            assert torch.allclose(scaled, base, atol=1e-12, rtol=0)
            continue
        # whitening of k*x is exactly c * whiten(x) for one scalar c; c = 1 up to the 1e-8 floor:
        # W_verl: c = k sqrt(v + 1e-8) / sqrt(k^2 v + 1e-8) (v = var_unb of the raw values);
        # W_orl: c = 1 exactly while k^2 var_pop > 1e-8
        nz = base != 0
        c = scaled[nz] / base[nz]
        assert torch.allclose(c, c[0].expand_as(c), atol=1e-12, rtol=0), name
        assert torch.all(scaled[~nz] == 0)
        if name.endswith("orl"):
            expected_c = 1.0
        else:
            v = _token_moments(_raw_values(name, s, m, g), m)[1]
            expected_c = k * math.sqrt(v + 1e-8) / math.sqrt(k * k * v + 1e-8)
        assert c[0].item() == pytest.approx(expected_c, abs=1e-12), name
    # GRPO with eps: (S - mu)/(sd + eps) at scale k equals (S - mu)/(sd + eps/k) at scale 1
    for eps in (1e-6, 1e-4):
        assert torch.allclose(grpo_advantages(s * k, m, g, eps=eps)[0], grpo_advantages(s, m, g, eps=eps / k)[0],
                              atol=1e-12, rtol=0)
        assert torch.allclose(grpo_advantages(s * k, m, g, eps=eps)[0], grpo_advantages(s, m, g, eps=eps)[0],
                              atol=1e-2, rtol=0)
    for name in ("rloo", "dr_grpo", "rloo_verl_singleton"):
        fn = OUTCOME[name]
        assert torch.allclose(fn(s * k, m, g), k * fn(s, m, g), atol=1e-12, rtol=1e-12), name


# ------------------------------------------------------------------ fully-masked rows
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(ALL))
def test_masking_a_row_equals_removing_it(seed, name):
    s, m, g = ragged_batch(seed)
    fn = ALL[name]
    v = valid_rows(m)
    rows = torch.nonzero(v)[:, 0]
    # mask out one valid row of a group of size >= 3 and one arbitrary valid row
    gen = torch.Generator().manual_seed(7 + seed)
    for drop in rows[torch.randperm(len(rows), generator=gen)[:2]].tolist():
        keep = torch.arange(len(s)) != drop
        m2 = m.clone()
        m2[drop] = 0
        s2 = s.clone()
        s2[drop] = float("nan") if name.startswith(tuple(OUTCOME)) else 1e6
        out = fn(s2, m2, g)
        assert torch.all(out[drop] == 0)
        assert torch.allclose(out[keep], fn(s[keep], m[keep], g[keep]), atol=1e-12, rtol=0), drop


# ------------------------------------------------------------------ V6 loss: gradients
V6_OLD = [[-1.0, -2.0, -0.5], [-3.0, -1.0, -2.0]]
V6_RATIO = [[1.5, 0.7, 1.0], [4.0, 0.5, 9.0]]  # 9.0 sits on a padded position
V6_ADV = [[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]]
V6_MASK = [[1, 1, 1], [1, 1, 0]]
V6_KW = dict(clip_low=0.2, clip_high=0.28)


def v6(pad_ratio=9.0):
    old = torch.tensor(V6_OLD, dtype=F64)
    ratio = torch.tensor(V6_RATIO, dtype=F64)
    ratio[1, 2] = pad_ratio
    logp = old + torch.log(ratio)
    return logp, old, torch.tensor(V6_ADV, dtype=F64), torch.tensor(V6_MASK, dtype=F64)


def v6_loss(logp, old, adv, m, mode, dual):
    loss, metrics = clipped_policy_loss(logp, old, adv, m, dual_clip=dual, **V6_KW)
    return aggregate(loss, m, mode, norm_const=3.0), metrics


# d(aggregate)/d(logp): on unclipped tokens d(-A rho)/d logp = -A rho, times the mode's token weight.
# Unclipped tokens of V6: (0,1) -A rho = -0.7, (0,2) -1.0; (1,0) +8.0 only without dual-clip
# (with c = 3 the dual bound -A c = 6 is active; (0,0) and (1,1) sit on the clipped branch).
V6_WEIGHTS = {  # per row: 5 tokens, 2 sequences of lengths 3 and 2, C = 3, N_rows = 2
    "token-mean": (1 / 5, 1 / 5),
    "seq-mean-token-mean": (1 / (2 * 3), 1 / (2 * 2)),
    "seq-mean-token-sum": (1 / 2, 1 / 2),
    "seq-mean-token-sum-norm": (1 / 3, 1 / 3),
    "dr_grpo": (1 / 6, 1 / 6),
}


@pytest.mark.parametrize("dual", [3.0, None])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_v6_gradient_hand_derived(mode, dual):
    assert set(V6_WEIGHTS) == set(LOSS_AGG_MODES)
    logp, old, adv, m = v6()
    logp.requires_grad_(True)
    old.requires_grad_(True)
    v6_loss(logp, old, adv, m, mode, dual)[0].backward()
    w0, w1 = V6_WEIGHTS[mode]
    expected = torch.tensor([[0.0, -0.7 * w0, -1.0 * w0], [0.0 if dual else 8.0 * w1, 0.0, 0.0]], dtype=F64)
    assert torch.allclose(logp.grad, expected, atol=1e-12, rtol=0), (logp.grad, expected)
    assert torch.allclose(old.grad, -expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("dual", [3.0, None])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_v6_gradcheck_finite_differences(mode, dual):
    # V6 sits away from every kink (ratios 1.5/0.7/1.0/4.0/0.5 vs bounds 0.8, 1.28, c = 3), so the
    # piecewise-smooth loss is differentiable there and finite differences must agree with autograd,
    # also in the advantages (the loss is piecewise linear in A, kink only at A = 0).
    logp, old, adv, m = v6()
    inputs = tuple(t.clone().requires_grad_(True) for t in (logp, old, adv))
    assert torch.autograd.gradcheck(lambda a, b, c: v6_loss(a, b, c, m, mode, dual)[0], inputs, eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dual", [3.0, None])
def test_random_clipped_loss_gradcheck_away_from_kinks(seed, dual):
    gen = torch.Generator().manual_seed(seed)
    n, width = 4, 6
    old = -torch.rand(n, width, generator=gen, dtype=F64) * 3
    # ratios drawn from intervals that avoid the kinks at 0.8, 1.28 and c = 3
    pools = torch.tensor([0.3, 0.6, 0.9, 1.1, 1.6, 2.5, 4.0, 7.0], dtype=F64)
    ratio = pools[torch.randint(0, len(pools), (n, width), generator=gen)]
    ratio = ratio * (1 + 0.02 * torch.rand(n, width, generator=gen, dtype=F64))
    adv = torch.randn(n, width, generator=gen, dtype=F64)
    adv = torch.where(adv.abs() < 0.1, adv.sign() * 0.1 + adv, adv)
    m = (torch.rand(n, width, generator=gen) < 0.7).to(F64)
    m[0] = 0  # a fully-masked row
    inputs = tuple(t.clone().requires_grad_(True) for t in (old + ratio.log(), old, adv))
    for mode in LOSS_AGG_MODES:
        assert torch.autograd.gradcheck(
            lambda a, b, c, mode=mode: v6_loss(a, b, c, m, mode, dual)[0], inputs, eps=1e-6, atol=1e-8
        ), mode


@pytest.mark.parametrize("dual", [3.0, None])
@pytest.mark.parametrize("pad_ratio", [1.0, 0.01, 1e4, 1e30])
def test_v6_padded_ratio_has_no_influence_in_any_mode(pad_ratio, dual):
    def run(ratio, via_old):
        logp, old, adv, m = v6(9.0)
        if via_old:  # change the padded ratio through logp_old instead of logp
            old = old.clone()
            old[1, 2] = logp[1, 2] - math.log(ratio)
        else:
            logp = logp.clone()
            logp[1, 2] = old[1, 2] + math.log(ratio)
        leaves = [t.clone().requires_grad_(True) for t in (logp, old, adv)]
        out = {}
        for mode in LOSS_AGG_MODES:
            for t in leaves:
                t.grad = None
            val, metrics = v6_loss(*leaves, m, mode, dual)
            val.backward()
            out[mode] = (val.item(), metrics, [t.grad.clone() for t in leaves])
        return out

    ref = run(9.0, via_old=False)
    for via_old in (False, True):
        got = run(pad_ratio, via_old)
        for mode in LOSS_AGG_MODES:
            assert got[mode][0] == ref[mode][0], mode
            assert got[mode][1] == ref[mode][1], mode
            for ga, gb in zip(got[mode][2], ref[mode][2]):
                assert torch.equal(ga, gb), mode
            assert all(gr[1, 2] == 0 for gr in got[mode][2])


# ------------------------------------------------------------------ KL in the loss: Monte-Carlo
N_MC = 40_000
Z = 5.0  # tolerance in standard errors (per coordinate; 5 sigma over ~20 coordinates)


def _categorical():
    gen = torch.Generator().manual_seed(11)
    theta = 0.8 * torch.randn(5, generator=gen, dtype=F64)
    ref_logp = torch.log_softmax(0.8 * torch.randn(5, generator=gen, dtype=F64), 0)
    return theta, ref_logp


def _per_sample_grads(kind, score_function=False):
    """On-policy samples x ~ pi_theta; returns (N_MC, V) per-sample gradients w.r.t. the logits of
    k(log pi(x), log ref(x)) differentiated through log pi only (KL in the loss), or, with
    ``score_function``, of sg(k) * log pi(x) (KL in the reward, REINFORCE path)."""
    theta, ref_logp = _categorical()
    gen = torch.Generator().manual_seed(12)
    x = torch.multinomial(torch.softmax(theta, 0), N_MC, replacement=True, generator=gen)
    t = theta.repeat(N_MC, 1).requires_grad_(True)  # one leaf row per sample -> per-sample grads
    logp = torch.log_softmax(t, 1).gather(1, x[:, None])[:, 0]
    k = kl_estimate(logp, ref_logp[x], kind, clamp="verl")
    assert k.abs().max().item() < 10.0  # no clamp active (a clamped sample has zero gradient)
    obj = k.detach() * logp if score_function else k
    obj.sum().backward()
    return t.grad, theta, ref_logp


def _grad(fn, theta):
    t = theta.clone().requires_grad_(True)
    fn(torch.log_softmax(t, 0)).backward()
    return t.grad


def _reverse_kl_grad(theta, ref_logp):  # grad KL(pi || ref)
    return _grad(lambda lp: (lp.exp() * (lp - ref_logp)).sum(), theta)


def _forward_kl_grad(theta, ref_logp):  # grad KL(ref || pi)
    return _grad(lambda lp: (ref_logp.exp() * (ref_logp - lp)).sum(), theta)


def _mc(grads):
    return grads.mean(0), grads.std(0, correction=1) / math.sqrt(grads.shape[0])


def _within(mean, se, target):
    return bool(torch.all((mean - target).abs() <= Z * se + 1e-12))


def _far(mean, se, target):
    """Some coordinate differs by far more than the MC noise (power check)."""
    return bool(torch.any((mean - target).abs() > 4 * Z * se))


def test_mc_k1_in_loss_gradient_averages_to_zero():
    grads, theta, ref_logp = _per_sample_grads("k1")
    mean, se = _mc(grads)
    assert torch.all(se > 0)  # every sample has a non-zero (noise) gradient
    assert _within(mean, se, torch.zeros_like(mean)), (mean, se)
    # ... while the reverse-KL gradient it should be following is clearly non-zero
    assert _far(mean, se, _reverse_kl_grad(theta, ref_logp))


def test_mc_k2_in_loss_gradient_is_reverse_kl_gradient():
    grads, theta, ref_logp = _per_sample_grads("k2")
    mean, se = _mc(grads)
    rev, fwd = _reverse_kl_grad(theta, ref_logp), _forward_kl_grad(theta, ref_logp)
    assert _within(mean, se, rev), (mean, rev, se)
    assert _far(mean, se, fwd)  # the two directions are distinguishable at this sample size


def test_mc_k3_in_loss_gradient_is_forward_kl_gradient():
    grads, theta, ref_logp = _per_sample_grads("k3")
    mean, se = _mc(grads)
    rev, fwd = _reverse_kl_grad(theta, ref_logp), _forward_kl_grad(theta, ref_logp)
    assert _within(mean, se, fwd), (mean, fwd, se)
    assert _far(mean, se, rev)  # k3 in the loss does NOT descend the reverse KL


@pytest.mark.parametrize("kind", ["k1+", "k3+"])
def test_mc_straight_through_in_loss_gradient_is_reverse_kl_gradient(kind):
    grads, theta, ref_logp = _per_sample_grads(kind)
    mean, se = _mc(grads)
    assert _within(mean, se, _reverse_kl_grad(theta, ref_logp))


def test_mc_k1_in_reward_score_function_is_reverse_kl_gradient():
    grads, theta, ref_logp = _per_sample_grads("k1", score_function=True)
    mean, se = _mc(grads)
    rev = _reverse_kl_grad(theta, ref_logp)
    assert _within(mean, se, rev), (mean, rev, se)
    assert _far(mean, se, torch.zeros_like(rev))


def test_mc_values_k1_k3_unbiased_k2_biased():
    # value side of §3.1: E[k1] = E[k3] = KL(pi || ref); k2 is biased
    theta, ref_logp = _categorical()
    gen = torch.Generator().manual_seed(13)
    logp_all = torch.log_softmax(theta, 0)
    x = torch.multinomial(logp_all.exp(), N_MC, replacement=True, generator=gen)
    kl = (logp_all.exp() * (logp_all - ref_logp)).sum().item()
    vals = {}
    for kind in ("k1", "k2", "k3"):
        k = kl_estimate(logp_all[x], ref_logp[x], kind)
        vals[kind] = (k.mean().item(), k.std().item() / math.sqrt(N_MC))
    for kind in ("k1", "k3"):
        assert abs(vals[kind][0] - kl) <= Z * vals[kind][1], (kind, vals[kind], kl)
    # k3 has lower variance than k1 (the reason it is called low_var_kl) at this moderate KL
    assert vals["k3"][1] < vals["k1"][1]
    assert abs(vals["k2"][0] - kl) > 4 * Z * vals["k2"][1]
