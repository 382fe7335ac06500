"""Advantage estimators against docs/algorithms.md §12 (V1-V4b) and the §13 property checklist.

Expected numbers are copied from the specification; they ARE the specification.
"""

from __future__ import annotations

import math

import pytest
import torch

from cogym.learners.advantages import (
    apply_kl_in_reward,
    discounted_returns,
    group_index,
    grpo_advantages,
    grpo_batch_std_advantages,
    outcome_token_rewards,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    whiten,
)

DTYPES = [(torch.float64, 1e-6), (torch.float32, 1e-5)]


def mask_from_lengths(lengths, width, dtype=torch.float64):
    m = torch.zeros(len(lengths), width, dtype=dtype)
    for i, n in enumerate(lengths):
        m[i, :n] = 1
    return m


def per_row(adv, mask):
    """Value on each row's first token, after checking it is constant over valid tokens and 0 on padding."""
    m = mask != 0
    assert torch.all(adv[~m] == 0), "padding must be exactly 0"
    first = adv[:, 0]
    assert torch.allclose(torch.where(m, adv, first[:, None]), first[:, None].expand_as(adv), atol=1e-12)
    return first


def close(actual, expected, atol):
    exp = torch.as_tensor(expected, dtype=torch.float64)
    assert torch.allclose(actual.to(torch.float64), exp, atol=atol, rtol=0), (actual, exp)


# ------------------------------------------------------------------ V1 shared batch
V1_R = [1.0, 0.0, 0.0, 2.0, 0.0, 1.0]
V1_LEN = [2, 4, 3, 1, 3, 4]
V1_KEYS = ["A", "A", "A", "B", "B", "B"]


def v1(dtype):
    return (
        torch.tensor(V1_R, dtype=dtype),
        mask_from_lengths(V1_LEN, 4, dtype),
        group_index(V1_KEYS),
    )


V1_GRPO = {
    0.0: [1.1547005, -0.5773503, -0.5773503, 1.0, -1.0, 0.0],
    1e-6: [1.1546985, -0.5773493, -0.5773493, 0.9999990, -0.9999990, 0.0],
    1e-9: [1.1547005, -0.5773503, -0.5773503, 1.0, -1.0, 0.0],
    1e-4: [1.1545006, -0.5772503, -0.5772503, 0.9999000, -0.9999000, 0.0],
}


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("eps", list(V1_GRPO))
def test_v1_grpo_eps_variants(dtype, atol, eps):
    r, m, g = v1(dtype)
    adv, stats = grpo_advantages(r, m, g, eps=eps)
    assert adv.dtype == dtype and adv.shape == (6, 4)
    close(per_row(adv, m), V1_GRPO[eps], atol)
    assert stats["frac_zero_std"] == 0.0 and stats["singleton_groups"] == 0.0


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v1_token_layout(dtype, atol):
    r, m, g = v1(dtype)
    adv, _ = grpo_advantages(r, m, g)
    close(adv[0], [1.1546985, 1.1546985, 0, 0], atol)
    close(adv[3], [0.9999990, 0, 0, 0], atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v1_trl_batch_std(dtype, atol):
    r, m, g = v1(dtype)
    adv, stats = grpo_batch_std_advantages(r, m, g)
    close(per_row(adv, m), [0.8163966, -0.4081983, -0.4081983, 1.2245949, -1.2245949, 0], atol)
    assert stats["batch_std"] == pytest.approx(math.sqrt(10 / 15), abs=1e-7)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v1_dr_grpo(dtype, atol):
    r, m, g = v1(dtype)
    adv, _ = grpo_advantages(r, m, g, norm_by_std=False)
    close(per_row(adv, m), [0.6666667, -0.3333333, -0.3333333, 1.0, -1.0, 0], atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v1_rloo(dtype, atol):
    r, m, g = v1(dtype)
    adv, _ = rloo_advantages(r, m, g)
    close(per_row(adv, m), [1.0, -0.5, -0.5, 1.5, -1.5, 0], atol)


V1_RFB = {
    "verl": [1.4879650, -0.2768307, -0.2768307, 2.0762302, -1.4533611, 0.3114345],
    "openrlhf": [1.5337592, -0.2853506, -0.2853506, 2.1401291, -1.4980904, 0.3210194],
}
V1_RFPP = {
    "verl": [0.8480571, -0.7538285, -0.7538285, 2.4499428, -0.7538285, 0.8480571],
    "openrlhf": [0.8741573, -0.7770287, -0.7770287, 2.5253432, -0.7770287, 0.8741573],
}


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("mode", ["verl", "openrlhf"])
def test_v1_reinforce_pp_baseline(dtype, atol, mode):
    r, m, g = v1(dtype)
    adv, _ = reinforce_pp_baseline_advantages(r, m, g, whiten_mode=mode)
    assert adv.dtype == dtype
    close(per_row(adv, m), V1_RFB[mode], atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("mode", ["verl", "openrlhf"])
def test_v1_reinforce_pp(dtype, atol, mode):
    r, m, g = v1(dtype)
    tok = outcome_token_rewards(r, m)
    adv, ret = reinforce_pp_advantages(tok, m, gamma=1.0, whiten_mode=mode)
    close(per_row(adv, m), V1_RFPP[mode], atol)
    close(per_row(ret, m), V1_R, atol)  # gamma = 1, no KL: return = outcome on every valid token


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v1_old_openrlhf_rloo_whitened_equals_rfb_orl(dtype, atol):
    # RLOO = 1.5 x centred values and whitening is scale-invariant (spec remark under V1)
    r, m, g = v1(dtype)
    rloo, _ = rloo_advantages(r, m, g)
    close(per_row(whiten(rloo, m, "openrlhf"), m), V1_RFB["openrlhf"], atol)


def test_outcome_token_rewards_places_on_last_valid_token():
    m = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.float32)
    out = outcome_token_rewards(torch.tensor([2.0, -1.0, 5.0]), m)
    close(out, [[0, 2, 0, 0], [0, 0, -1, 0], [0, 0, 0, 0]], 0)
    assert out.dtype == torch.float32


# ------------------------------------------------------------------ V2, V3, V3b
@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v2_zero_variance_group(dtype, atol):
    r = torch.tensor([1.0, 0, 0, 1, 1, 1], dtype=dtype)
    m = mask_from_lengths([2, 4, 3, 1, 2, 3], 4, dtype)
    g = group_index(["A", "A", "A", "C", "C", "C"])
    a_vals = [1.1546985, -0.5773493, -0.5773493]
    for eps in (1e-6, 1e-9, 1e-4, 0.0):
        adv, stats = grpo_advantages(r, m, g, eps=eps)
        assert torch.all(per_row(adv, m)[3:] == 0)
        assert stats["frac_zero_std"] == 0.5
    close(per_row(grpo_advantages(r, m, g)[0], m)[:3], a_vals, atol)
    assert torch.all(per_row(rloo_advantages(r, m, g)[0], m)[3:] == 0)
    assert torch.all(per_row(grpo_advantages(r, m, g, norm_by_std=False)[0], m)[3:] == 0)
    close(per_row(rloo_advantages(r, m, g)[0], m)[:3], [1.0, -0.5, -0.5], atol)
    verl, _ = reinforce_pp_baseline_advantages(r, m, g, whiten_mode="verl")
    close(per_row(verl, m), [2.1692292, -0.7888106, -0.7888106] + [0.1972027] * 3, atol)
    orl, _ = reinforce_pp_baseline_advantages(r, m, g, whiten_mode="openrlhf")
    close(per_row(orl, m), [2.2453656, -0.8164966, -0.8164966] + [0.2041241] * 3, atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v3_singleton(dtype, atol):
    r = torch.tensor([0.7], dtype=dtype)
    m = torch.tensor([[1, 1, 0]], dtype=dtype)
    g = group_index(["D"])
    adv, stats = grpo_advantages(r, m, g)
    assert torch.all(adv == 0) and stats["singleton_groups"] == 1.0
    adv, _ = grpo_advantages(r, m, g, singleton="verl")
    close(adv, [[0.6999993, 0.6999993, 0]], atol)
    adv, _ = grpo_advantages(r, m, g, singleton="verl", variance_floor=True)
    close(adv, [[0.6999993, 0.6999993, 0]], atol)
    adv, stats = rloo_advantages(r, m, g)
    assert torch.all(adv == 0) and stats["singleton_groups"] == 1.0
    close(rloo_advantages(r, m, g, singleton="verl")[0], [[0.7, 0.7, 0]], atol)
    with pytest.raises(ValueError, match="singleton"):
        grpo_advantages(r, m, g, singleton="nope")


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        ({"eps": 1e-6}, [-0.5763520, -0.5763520, 1.1527040]),
        ({"eps": 1e-6, "variance_floor": True}, [-0.3330003, -0.3330003, 0.6660007]),
        ({"eps": 1e-9}, [-0.5773493, -0.5773493, 1.1546985]),
        ({"eps": 1e-4}, [-0.4921137, -0.4921137, 0.9842274]),
    ],
)
def test_v3b_near_constant_group(kwargs, expected):
    # float64 only: float32 cannot represent std1 = 5.7735e-4 to the 1e-9 needed by eps = 1e-9
    r = torch.tensor([0.0, 0.0, 0.001], dtype=torch.float64)
    m = torch.ones(3, 2, dtype=torch.float64)
    adv, stats = grpo_advantages(r, m, group_index([7, 7, 7]), **kwargs)
    close(per_row(adv, m), expected, 1e-6)
    assert stats["frac_zero_std"] == 0.0


# ------------------------------------------------------------------ V4, V4b
@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v4_reinforce_pp_with_kl_in_reward(dtype, atol):
    m = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=dtype)
    kl = torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.1, float("nan")]], dtype=dtype)  # "·" = garbage
    tok = apply_kl_in_reward(outcome_token_rewards(torch.tensor([1.0, 0.0], dtype=dtype), m), kl, m, 0.5)
    close(tok, [[-0.05, -0.10, 1.00], [-0.15, -0.05, 0]], atol)
    adv, ret = reinforce_pp_advantages(tok, m, gamma=1.0, whiten_mode="verl")
    close(ret, [[0.85, 0.90, 1.00], [-0.20, -0.05, 0]], atol)
    close(adv, [[0.6081211, 0.6949956, 0.8687445], [-1.2162423, -0.9556189, 0]], atol)
    assert adv[1, 2] == 0
    adv, _ = reinforce_pp_advantages(tok, m, gamma=1.0, whiten_mode="openrlhf")
    close(adv, [[0.6799001, 0.7770287, 0.9712859], [-1.3598002, -1.0684144, 0]], atol)
    for sem in ("skip", "verl", "openrlhf"):  # tail padding only: all semantics agree
        close(discounted_returns(tok, m, 0.9, sem), [[0.67, 0.80, 1.00], [-0.195, -0.05, 0]], atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize(
    "semantics,gamma,expected_g0,expected",
    [
        ("skip", 1.0, 1.0, [1, 1, 1]),
        ("openrlhf", 1.0, 1.0, [1, 1, 1]),
        ("verl", 1.0, 0.0, [0, 1, 1]),
        ("skip", 0.9, 0.9, None),
        ("openrlhf", 0.9, 0.81, None),
        ("verl", 0.9, 0.0, None),
    ],
)
def test_v4b_interior_masked_token(dtype, atol, semantics, gamma, expected_g0, expected):
    m = torch.tensor([[1, 0, 1]], dtype=dtype)
    r = torch.tensor([[0.0, 0.0, 1.0]], dtype=dtype)
    ret = discounted_returns(r, m, gamma, semantics)
    assert ret[0, 0].item() == pytest.approx(expected_g0, abs=atol)
    assert ret[0, 2].item() == pytest.approx(1.0, abs=atol)
    if expected is not None:
        close(ret, [expected], atol)
    adv, ret2 = reinforce_pp_advantages(r, m, gamma=gamma, semantics=semantics)
    assert torch.equal(ret, ret2) and adv[0, 1] == 0


def test_skip_semantics_ignores_rewards_on_masked_positions():
    m = torch.tensor([[1.0, 0, 1, 0]])
    r = torch.tensor([[0.0, 5.0, 1.0, 7.0]])  # 5 and 7 sit on masked positions
    close(discounted_returns(r, m, 0.5, "skip"), [[0.5, 1.0, 1.0, 0.0]], 1e-7)


# ------------------------------------------------------------------ grouping
def test_group_index_first_seen_order_and_explicit_keys():
    keys = [("p1", "solver"), ("p0", "solver"), ("p1", "solver"), ("p1", "proposer"), "x", "x"]
    g = group_index(keys)
    assert g.dtype == torch.long
    assert g.tolist() == [0, 1, 0, 2, 3, 3]


def test_groups_by_id_not_position_and_sparse_ids():
    # interleaved rows with sparse integer ids give the same per-row values as V1
    r, m, _ = v1(torch.float64)
    order = torch.tensor([3, 0, 4, 1, 5, 2])
    g = torch.tensor([1000, 5, 1000, 5, 1000, 5])  # B, A, B, A, B, A
    adv, _ = grpo_advantages(r[order], m[order], g)
    close(per_row(adv, m[order]), torch.tensor(V1_GRPO[1e-6])[order], 1e-6)


# ------------------------------------------------------------------ §13 properties
def random_batch(seed, n_groups=4, size=5, width=7):
    gen = torch.Generator().manual_seed(seed)
    n = n_groups * size
    scores = torch.randn(n, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, width + 1, (n,), generator=gen)
    m = mask_from_lengths(lengths.tolist(), width)
    groups = torch.arange(n_groups).repeat_interleave(size)
    return scores, m, groups


OUTCOME_ESTIMATORS = {
    "grpo": lambda s, m, g: grpo_advantages(s, m, g)[0],
    "grpo_floor": lambda s, m, g: grpo_advantages(s, m, g, variance_floor=True)[0],
    "dr_grpo": lambda s, m, g: grpo_advantages(s, m, g, norm_by_std=False)[0],
    "batch_std": lambda s, m, g: grpo_batch_std_advantages(s, m, g)[0],
    "rloo": lambda s, m, g: rloo_advantages(s, m, g)[0],
    "rfb_verl": lambda s, m, g: reinforce_pp_baseline_advantages(s, m, g)[0],
    "rfb_orl": lambda s, m, g: reinforce_pp_baseline_advantages(s, m, g, whiten_mode="openrlhf")[0],
    "rfpp": lambda s, m, g: reinforce_pp_advantages(outcome_token_rewards(s, m), m)[0],
}


@pytest.mark.parametrize("name", list(OUTCOME_ESTIMATORS))
def test_permuting_rows_with_ids_permutes_outputs(name):
    fn = OUTCOME_ESTIMATORS[name]
    s, m, g = random_batch(1)
    perm = torch.randperm(len(s), generator=torch.Generator().manual_seed(2))
    base = fn(s, m, g)
    assert torch.allclose(fn(s[perm], m[perm], g[perm]), base[perm], atol=1e-12)


@pytest.mark.parametrize("name", list(OUTCOME_ESTIMATORS))
def test_padding_exactly_zero_and_masked_rows_do_not_leak(name):
    fn = OUTCOME_ESTIMATORS[name]
    s, m, g = random_batch(3)
    base = fn(s, m, g)
    assert torch.all(base[m == 0] == 0)
    # append fully-masked rows (NaN and huge scores) to an existing group and a new group
    s2 = torch.cat([s, torch.tensor([float("nan"), 1e6, 3.0], dtype=s.dtype)])
    m2 = torch.cat([m, torch.zeros(3, m.shape[1], dtype=m.dtype)])
    g2 = torch.cat([g, torch.tensor([0, 1, 99])])
    out = fn(s2, m2, g2)
    assert torch.all(out[-3:] == 0)
    assert torch.allclose(out[:-3], base, atol=1e-12)


def test_masked_rows_excluded_from_group_size_and_stats():
    # group of 3 with one fully-masked row behaves like a group of 2
    s = torch.tensor([1.0, 0.0, 5.0], dtype=torch.float64)
    m = torch.tensor([[1, 1], [1, 0], [0, 0]], dtype=torch.float64)
    g = torch.zeros(3, dtype=torch.long)
    adv, stats = rloo_advantages(s, m, g)
    close(adv[:, 0], [1.0, -1.0, 0.0], 1e-12)
    assert stats["masked_rows"] == 1.0 and stats["singleton_groups"] == 0.0
    # the only valid member left makes the group a singleton
    adv, stats = grpo_advantages(s, torch.tensor([[1.0, 1], [0, 0], [0, 0]]), g)
    assert stats["singleton_groups"] == 1.0 and torch.all(adv == 0)


def test_group_sums_zero_grpo_eps0_and_rloo():
    s, m, g = random_batch(4)
    for adv in (grpo_advantages(s, m, g, eps=0.0)[0], rloo_advantages(s, m, g)[0],
                grpo_advantages(s, m, g, norm_by_std=False)[0]):
        sums = torch.zeros(4, dtype=s.dtype).index_add(0, g, adv[:, 0])
        assert torch.allclose(sums, torch.zeros(4, dtype=s.dtype), atol=1e-12)
    # eps = 0 z-scores have Bessel std exactly 1 per group
    a = grpo_advantages(s, m, g, eps=0.0)[0][:, 0]
    for k in range(4):
        assert a[g == k].std(correction=1).item() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("mode,ddof", [("verl", 1), ("openrlhf", 0)])
def test_whitened_mean_zero_variance_one(mode, ddof):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(6, 9, generator=gen, dtype=torch.float64) * 3 + 2
    m = mask_from_lengths([9, 1, 4, 7, 0, 2], 9)
    x_garbage = torch.where(m > 0, x, torch.full_like(x, float("inf")))
    w = whiten(x_garbage, m, mode)
    assert torch.all(w[m == 0] == 0)
    vals = w[m > 0]
    assert vals.mean().item() == pytest.approx(0.0, abs=1e-12)
    var = ((vals - vals.mean()) ** 2).sum() / (vals.numel() - ddof)
    assert var.item() == pytest.approx(1.0, abs=1e-8)


def test_whiten_edge_cases_and_errors():
    m = torch.zeros(2, 3)
    assert torch.all(whiten(torch.randn(2, 3), m) == 0)
    one = torch.tensor([[0.0, 1.0, 0.0]])
    assert torch.all(whiten(torch.tensor([[5.0, 3.0, 1.0]]), one, "verl") == 0)
    with pytest.raises(ValueError, match="verl"):
        whiten(torch.zeros(1, 3), one, "zscore")


@pytest.mark.parametrize("k", [0.01, 7.0])
def test_reward_scaling(k):
    s, m, g = random_batch(6)
    for name in ("grpo", "rfb_verl", "rfb_orl", "rfpp"):
        fn = OUTCOME_ESTIMATORS[name]
        # invariant up to the eps terms (1e-6 on a std of ~1: relative 1e-4 at k = 0.01)
        assert torch.allclose(fn(s * k, m, g), fn(s, m, g), atol=1e-3), name
    for fn in (grpo_advantages, grpo_batch_std_advantages):  # exact invariance without eps
        assert torch.allclose(fn(s * k, m, g, eps=0.0)[0], fn(s, m, g, eps=0.0)[0], atol=1e-10)
    for name in ("rloo", "dr_grpo"):
        fn = OUTCOME_ESTIMATORS[name]
        assert torch.allclose(fn(s * k, m, g), k * fn(s, m, g), atol=1e-12), name


def test_constant_group_is_exactly_zero_even_with_float_residue():
    # in float64, mean([0.7] * 3) - 0.7 = 1.1e-16: a naive z-score with eps = 1e-9 gives 1e-7,
    # with eps = 0 it gives 0/0; the advantage of a constant group must be exactly 0
    s = torch.tensor([0.7] * 3 + [0.3, 0.7], dtype=torch.float64)
    m = torch.ones(5, 2, dtype=torch.float64)
    g = torch.tensor([0] * 3 + [1, 1])
    assert (s[:3] - s[:3].mean()).abs().max() > 0  # the residue this test is about
    for eps in (0.0, 1e-9, 1e-6):
        adv, stats = grpo_advantages(s, m, g, eps=eps)
        assert torch.all(adv[:3] == 0) and torch.isfinite(adv).all()
        assert stats["frac_zero_std"] == 0.5
    assert torch.all(rloo_advantages(s, m, g)[0][:3] == 0)
    assert torch.all(grpo_advantages(s.float(), m.float(), g, eps=0.0)[0][:3] == 0)


def test_int_scores_and_bool_mask_accepted():
    adv, _ = rloo_advantages(torch.tensor([1, 0]), torch.tensor([[True, False], [True, True]]), torch.tensor([0, 0]))
    assert adv.dtype == torch.get_default_dtype()
    close(adv, [[1, 0], [-1, -1]], 1e-7)


def test_validation_errors():
    s, m, g = v1(torch.float64)
    with pytest.raises(ValueError, match="scores must have shape"):
        grpo_advantages(s[:5], m, g)
    with pytest.raises(ValueError, match="groups must be an integer"):
        grpo_advantages(s, m, g.double())
    with pytest.raises(ValueError, match="eps must be >= 0"):
        grpo_advantages(s, m, g, eps=-1.0)
    with pytest.raises(ValueError, match="semantics must be one of"):
        discounted_returns(m, m, 1.0, "reset")
    with pytest.raises(ValueError, match="gamma must be in"):
        discounted_returns(m, m, 1.5)
    with pytest.raises(ValueError, match="kl must have the mask's shape"):
        apply_kl_in_reward(m, m[:, :2], m, 0.1)
