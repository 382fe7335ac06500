"""GAE and the clipped value loss against docs/algorithms.md §12 (V5, V5b) and §13 properties.

Expected numbers are the reference's vectors (and, where it rounds to 7 decimals, the same values
computed to full precision by an independent numpy oracle); they ARE the specification.
"""

from __future__ import annotations

import pytest
import torch

from cogym.learners.advantages import discounted_returns
from cogym.learners.gae import GAE_SEMANTICS, clipped_value_loss, gae_advantages
from cogym.learners.losses import aggregate

NAN = float("nan")
# brief: float64 reference at 1e-12, float32 at 1e-5
DTYPES = [(torch.float64, 1e-12), (torch.float32, 1e-5)]


def close(actual, expected, atol):
    exp = torch.as_tensor(expected, dtype=torch.float64)
    assert torch.allclose(actual.to(torch.float64), exp, atol=atol, rtol=0), (actual, exp)


# ------------------------------------------------------------------ V5
def v5(dtype, garbage=NAN):
    """V5 inputs; masked positions of values AND rewards hold garbage (must not leak)."""
    r = torch.tensor([[0, 0, 1, garbage], [0, 0, garbage, garbage]], dtype=dtype)
    v = torch.tensor([[0.5, 0.6, 0.7, garbage], [0.2, 0.1, garbage, garbage]], dtype=dtype)
    m = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=dtype)
    return r, v, m


V5_RAW = [[0.46575, 0.385, 0.3, 0.0], [-0.195, -0.1, 0.0, 0.0]]
V5_RETURNS = [[0.96575, 0.985, 1.0, 0.0], [0.005, 0.0, 0.0, 0.0]]
# full precision (the reference rounds to 7 decimals: [[0.9865161, 0.7161116, 0.4314752], [-1.2261130, -0.9079900]])
V5_WHITE = {
    "verl": [[0.9865161261734945, 0.7161115871765168, 0.43147523033759283, 0.0],
             [-1.226112965371436, -0.9079899783161679, 0.0, 0.0]],
    "openrlhf": [[1.1029586213522238, 0.8006371390908796, 0.48240399986841187, 0.0],
                 [-1.3708360461918423, -1.0151637141196725, 0.0, 0.0]],
}
V5_WHITE_SPEC = {
    "verl": [[0.9865161, 0.7161116, 0.4314752, 0], [-1.2261130, -0.9079900, 0, 0]],
    "openrlhf": [[1.1029586, 0.8006371, 0.4824040, 0], [-1.3708360, -1.0151637, 0, 0]],
}


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("semantics", GAE_SEMANTICS)
def test_v5_raw_advantages_and_returns(dtype, atol, semantics):
    r, v, m = v5(dtype)
    adv, ret = gae_advantages(r, v, m, 1.0, 0.95, semantics=semantics, whiten_mode=None)
    assert adv.dtype == dtype and ret.dtype == dtype and adv.shape == (2, 4)
    # tail padding only: skip and zero semantics agree (V5)
    close(adv, V5_RAW, atol)
    close(ret, V5_RETURNS, atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("mode", ["verl", "openrlhf"])
def test_v5_whitened(dtype, atol, mode):
    r, v, m = v5(dtype)
    adv, ret = gae_advantages(r, v, m, 1.0, 0.95, whiten_mode=mode)
    close(adv, V5_WHITE[mode], atol)
    close(adv, V5_WHITE_SPEC[mode], 1e-6 if dtype == torch.float64 else 1e-5)
    # returns come from the RAW advantage and are never whitened (§4.1, §6)
    close(ret, V5_RETURNS, atol)


def test_v5_default_is_canonical_verl_whitening_with_skip():
    r, v, m = v5(torch.float64)
    adv, _ = gae_advantages(r, v, m, 1.0, 0.95)
    close(adv, V5_WHITE["verl"], 1e-12)


# ------------------------------------------------------------------ V5b
V5B_R = [[0.0, 0.0, 0.0, 1.0]]
V5B_V = [[0.4, 0.9, 0.5, 0.6]]
V5B_M = [[1.0, 0.0, 1.0, 1.0]]
V5B = [
    # (lam, semantics, advantages on positions 0..3 (masked position 1 reported as 0))
    (1.0, "skip", [0.6, 0.0, 0.5, 0.4]),
    (1.0, "zero", [0.6, 0.0, 0.5, 0.4]),
    (0.9, "skip", [0.514, 0.0, 0.46, 0.4]),
    (0.9, "zero", [0.4226, 0.0, 0.46, 0.4]),
]


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("lam,semantics,expected", V5B)
def test_v5b_interior_masked_token(dtype, atol, lam, semantics, expected):
    r = torch.tensor(V5B_R, dtype=dtype)
    v = torch.tensor(V5B_V, dtype=dtype)
    m = torch.tensor(V5B_M, dtype=dtype)
    adv, ret = gae_advantages(r, v, m, 1.0, lam, semantics=semantics, whiten_mode=None)
    close(adv[0], expected, atol)
    exp_ret = [a + vv if mm else 0.0 for a, vv, mm in zip(expected, V5B_V[0], V5B_M[0])]
    close(ret[0], exp_ret, atol)


def test_v5b_masked_value_and_reward_are_ignored_by_skip():
    """The interior token's V (0.9) and any reward placed on it must not matter under skip."""
    m = torch.tensor(V5B_M, dtype=torch.float64)
    base, _ = gae_advantages(torch.tensor(V5B_R, dtype=torch.float64), torch.tensor(V5B_V, dtype=torch.float64), m,
                             1.0, 0.9, whiten_mode=None)
    r2 = torch.tensor([[0.0, 7.0, 0.0, 1.0]], dtype=torch.float64)
    v2 = torch.tensor([[0.4, -3.0, 0.5, 0.6]], dtype=torch.float64)
    for sem in GAE_SEMANTICS:
        adv, _ = gae_advantages(r2, v2, m, 1.0, 0.9, semantics=sem, whiten_mode=None)
        close(adv, [[0.514, 0.0, 0.46, 0.4]] if sem == "skip" else [[0.4226, 0.0, 0.46, 0.4]], 1e-12)
    close(base, [[0.514, 0.0, 0.46, 0.4]], 1e-12)


def test_skip_discounts_once_across_masked_span():
    """gamma < 1: the skipped span costs one discount step, zero semantics one per position."""
    r = torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    v = torch.zeros(1, 4, dtype=torch.float64)
    m = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    skip, _ = gae_advantages(r, v, m, 0.9, 1.0, semantics="skip", whiten_mode=None)
    zero, _ = gae_advantages(r, v, m, 0.9, 1.0, semantics="zero", whiten_mode=None)
    close(skip, [[0.9, 0, 0, 1.0]], 1e-12)
    close(zero, [[0.729, 0, 0, 1.0]], 1e-12)


# ------------------------------------------------------------------ §13 properties
def random_batch(seed, n=5, width=7, dtype=torch.float64, interior=True):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (n,), generator=g)
    m = (torch.arange(width)[None, :] < lengths[:, None]).to(dtype)
    if interior:  # multi-turn: punch interior holes (never the first token)
        holes = torch.rand(n, width, generator=g) < 0.3
        holes[:, 0] = False
        m = torch.where(holes, torch.zeros_like(m), m)
    r = torch.randn(n, width, generator=g, dtype=dtype)
    v = torch.randn(n, width, generator=g, dtype=dtype)
    return r, v, m


@pytest.mark.parametrize("semantics", GAE_SEMANTICS)
@pytest.mark.parametrize("whiten_mode", [None, "verl", "openrlhf"])
def test_padding_and_masked_positions_exactly_zero_with_garbage(semantics, whiten_mode):
    r, v, m = random_batch(0)
    r = torch.where(m != 0, r, torch.full_like(r, NAN))
    v = torch.where(m != 0, v, torch.full_like(v, float("inf")))
    adv, ret = gae_advantages(r, v, m, 0.95, 0.9, semantics=semantics, whiten_mode=whiten_mode)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert torch.all(adv[m == 0] == 0) and torch.all(ret[m == 0] == 0)
    assert (adv[m != 0] != 0).any()


@pytest.mark.parametrize("semantics", GAE_SEMANTICS)
@pytest.mark.parametrize("whiten_mode", [None, "verl", "openrlhf"])
def test_permuting_rows_permutes_outputs(semantics, whiten_mode):
    r, v, m = random_batch(1, n=6)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    adv, ret = gae_advantages(r, v, m, 0.9, 0.8, semantics=semantics, whiten_mode=whiten_mode)
    adv_p, ret_p = gae_advantages(r[perm], v[perm], m[perm], 0.9, 0.8, semantics=semantics, whiten_mode=whiten_mode)
    close(adv_p, adv[perm], 1e-12)
    close(ret_p, ret[perm], 1e-12)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("semantics,ret_semantics", [("skip", "skip"), ("zero", "openrlhf")])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_lam_one_equals_returns_minus_values(seed, semantics, ret_semantics, gamma):
    """lam = 1 telescopes: A = G - V with G the discounted returns of the matching semantics."""
    r, v, m = random_batch(seed)
    adv, ret = gae_advantages(r, v, m, gamma, 1.0, semantics=semantics, whiten_mode=None)
    g = discounted_returns(r, m, gamma, ret_semantics)
    valid = m != 0
    close(adv[valid], (g - v)[valid], 1e-12)
    close(ret[valid], g[valid], 1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_gamma_lam_one_skip_equals_zero_semantics(seed):
    r, v, m = random_batch(seed)
    a_skip, r_skip = gae_advantages(r, v, m, 1.0, 1.0, semantics="skip", whiten_mode=None)
    a_zero, r_zero = gae_advantages(r, v, m, 1.0, 1.0, semantics="zero", whiten_mode=None)
    close(a_skip, a_zero, 1e-12)
    close(r_skip, r_zero, 1e-12)
    # ... and they differ once lam < 1 with interior holes (the test would be vacuous otherwise)
    a_skip, _ = gae_advantages(r, v, m, 1.0, 0.9, semantics="skip", whiten_mode=None)
    a_zero, _ = gae_advantages(r, v, m, 1.0, 0.9, semantics="zero", whiten_mode=None)
    assert not torch.allclose(a_skip, a_zero)


def test_lam_zero_is_one_step_td_without_holes():
    r, v, m = random_batch(5, interior=False)
    adv, _ = gae_advantages(r, v, m, 0.9, 0.0, whiten_mode=None)
    valid = m != 0
    v_next = torch.cat([v[:, 1:], torch.zeros(v.shape[0], 1, dtype=v.dtype)], 1)
    v_next = torch.where(torch.cat([valid[:, 1:], torch.zeros(v.shape[0], 1, dtype=torch.bool)], 1), v_next, 0.0)
    td = r + 0.9 * v_next - v
    close(adv[valid], td[valid], 1e-12)


@pytest.mark.parametrize("semantics", GAE_SEMANTICS)
@pytest.mark.parametrize("whiten_mode", [None, "verl", "openrlhf"])
def test_fully_masked_rows_do_not_change_other_rows(semantics, whiten_mode):
    r, v, m = random_batch(2)
    adv, ret = gae_advantages(r, v, m, 0.9, 0.95, semantics=semantics, whiten_mode=whiten_mode)
    width = m.shape[1]
    r2 = torch.cat([r[:2], torch.full((1, width), NAN, dtype=r.dtype), r[2:], torch.full((1, width), 5.0, dtype=r.dtype)])
    v2 = torch.cat([v[:2], torch.full((1, width), NAN, dtype=v.dtype), v[2:], torch.full((1, width), -5.0, dtype=v.dtype)])
    m2 = torch.cat([m[:2], torch.zeros(1, width, dtype=m.dtype), m[2:], torch.zeros(1, width, dtype=m.dtype)])
    adv2, ret2 = gae_advantages(r2, v2, m2, 0.9, 0.95, semantics=semantics, whiten_mode=whiten_mode)
    keep = [0, 1, 3, 4, 5]
    close(adv2[keep], adv, 1e-12)
    close(ret2[keep], ret, 1e-12)
    assert adv2.shape[0] == 7
    assert torch.all(adv2[[2, 6]] == 0) and torch.all(ret2[[2, 6]] == 0)


def test_raw_rows_are_independent():
    r, v, m = random_batch(3)
    adv, ret = gae_advantages(r, v, m, 0.95, 0.9, whiten_mode=None)
    for i in range(m.shape[0]):
        a_i, g_i = gae_advantages(r[i:i + 1], v[i:i + 1], m[i:i + 1], 0.95, 0.9, whiten_mode=None)
        close(a_i[0], adv[i], 1e-12)
        close(g_i[0], ret[i], 1e-12)


@pytest.mark.parametrize("mode,ddof", [("verl", 1), ("openrlhf", 0)])
def test_whitened_token_moments(mode, ddof):
    r, v, m = random_batch(4, n=8, width=9)
    adv, _ = gae_advantages(r, v, m, 1.0, 0.95, whiten_mode=mode)
    x = adv[m != 0]
    assert abs(float(x.mean())) < 1e-12
    assert float(x.var(correction=ddof)) == pytest.approx(1.0, abs=1e-6)


def test_no_valid_tokens_gives_zeros():
    m = torch.zeros(2, 3, dtype=torch.float64)
    adv, ret = gae_advantages(torch.ones(2, 3), torch.ones(2, 3), m)
    assert torch.all(adv == 0) and torch.all(ret == 0)


def test_validation_errors():
    r, v, m = v5(torch.float64, garbage=0.0)
    with pytest.raises(ValueError, match="semantics"):
        gae_advantages(r, v, m, semantics="verl_reset")
    with pytest.raises(ValueError, match="whiten_mode"):
        gae_advantages(r, v, m, whiten_mode="batch")
    with pytest.raises(ValueError, match="gamma"):
        gae_advantages(r, v, m, 1.1, 0.9)
    with pytest.raises(ValueError, match="lam"):
        gae_advantages(r, v, m, 1.0, -0.1)
    with pytest.raises(ValueError, match=r"\(N, L\)"):
        gae_advantages(r[:, :3], v, m)


# ------------------------------------------------------------------ clipped value loss (§4.1)
def value_case(dtype=torch.float64):
    # token 0: V=1 moved 1.0 from V_old=0 -> V_clip=0.5; (1-2)^2=1 < (0.5-2)^2=2.25 -> clipped branch
    # token 1: V=2, V_old=2.2 (inside the 0.5 band) -> both branches (2-0)^2 = 4
    # token 2: padding, NaN garbage
    values = torch.tensor([[1.0, 2.0, NAN]], dtype=dtype, requires_grad=True)
    old = torch.tensor([[0.0, 2.2, NAN]], dtype=dtype)
    ret = torch.tensor([[2.0, 0.0, NAN]], dtype=dtype)
    mask = torch.tensor([[1, 1, 0]], dtype=dtype)
    return values, old, ret, mask


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_clipped_value_loss_hand_vector(dtype, atol):
    values, old, ret, mask = value_case(dtype)
    loss, metrics = clipped_value_loss(values, old, ret, mask, clip_value=0.5)
    close(loss, [[1.125, 2.0, 0.0]], atol)
    assert loss[0, 2] == 0
    assert metrics["vf_clipfrac"] == pytest.approx(0.5)
    total = aggregate(loss, mask, "token-mean")
    close(total, 1.5625, atol)
    total.backward()
    # clipped branch saturated -> no gradient on token 0; token 1: d/dV 0.5 (V - G)^2 = 2, / 2 tokens
    assert torch.isfinite(values.grad).all()
    close(values.grad, [[0.0, 1.0, 0.0]], atol)


def test_value_loss_without_clipping():
    values, old, ret, mask = value_case()
    loss, metrics = clipped_value_loss(values, old, ret, mask, clip_value=None)
    close(loss, [[0.5, 2.0, 0.0]], 1e-12)
    assert metrics["vf_clipfrac"] == 0.0
    aggregate(loss, mask, "token-mean").backward()
    close(values.grad, [[-0.5, 1.0, 0.0]], 1e-12)


def test_value_loss_validation():
    values, old, ret, mask = value_case()
    with pytest.raises(ValueError, match="clip_value"):
        clipped_value_loss(values, old, ret, mask, clip_value=0.0)
    with pytest.raises(ValueError, match="shape"):
        clipped_value_loss(values, old[:, :2], ret, mask)
