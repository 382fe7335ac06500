"""Loss functions against docs/algorithms.md §12 (V6, V6b, V7, V8) and the §13 loss/KL checklist.

Expected numbers are copied from the specification; they ARE the specification.
"""

from __future__ import annotations

import math

import pytest
import torch

from cogym.learners.losses import (
    KL_KINDS,
    LOSS_AGG_MODES,
    aggregate,
    clipped_policy_loss,
    entropy_from_logits,
    kl_estimate,
)

DTYPES = [(torch.float64, 1e-6), (torch.float32, 1e-5)]


def close(actual, expected, atol):
    exp = torch.as_tensor(expected, dtype=torch.float64)
    assert torch.allclose(actual.detach().to(torch.float64), exp, atol=atol, rtol=0), (actual, exp)


# ------------------------------------------------------------------ V6
V6_OLD = [[-1.0, -2.0, -0.5], [-3.0, -1.0, -2.0]]
V6_RATIO = [[1.5, 0.7, 1.0], [4.0, 0.5, 9.0]]  # 9.0 sits on a padded position
V6_ADV = [[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]]
V6_MASK = [[1, 1, 1], [1, 1, 0]]
V6_KW = dict(clip_low=0.2, clip_high=0.28)


def v6(dtype, requires_grad=False):
    old = torch.tensor(V6_OLD, dtype=dtype)
    logp = (old + torch.log(torch.tensor(V6_RATIO, dtype=dtype))).detach().requires_grad_(requires_grad)
    return logp, old, torch.tensor(V6_ADV, dtype=dtype), torch.tensor(V6_MASK, dtype=dtype)


V6_TOKEN = {
    3.0: [[-1.28, -0.7, -1.0], [6.0, 1.6, 0.0]],
    None: [[-1.28, -0.7, -1.0], [8.0, 1.6, 0.0]],
}
V6_AGG = {
    "token-mean": {3.0: 0.9240000, None: 1.3240000},
    "seq-mean-token-mean": {3.0: 1.4033333, None: 1.9033333},
    "seq-mean-token-sum": {3.0: 2.3100000, None: 3.3100000},
    "seq-mean-token-sum-norm": {3.0: 1.5400000, None: 2.2066667},
    "dr_grpo": {3.0: 0.7700000, None: 1.1033333},
}


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("dual", [3.0, None])
def test_v6_per_token_loss_and_metrics(dtype, atol, dual):
    logp, old, adv, m = v6(dtype)
    loss, metrics = clipped_policy_loss(logp, old, adv, m, dual_clip=dual, **V6_KW)
    close(loss, V6_TOKEN[dual], atol)
    assert loss[1, 2] == 0
    assert metrics["pg_clipfrac"] == pytest.approx(0.4, abs=atol)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(0.2 if dual else 0.0, abs=atol)
    assert metrics["ppo_kl"] == pytest.approx(-0.1483875, abs=atol)
    assert all(isinstance(v, float) for v in metrics.values())


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("dual", [3.0, None])
@pytest.mark.parametrize("mode", list(V6_AGG))
def test_v6_aggregation_modes(dtype, atol, dual, mode):
    assert set(V6_AGG) == set(LOSS_AGG_MODES)
    logp, old, adv, m = v6(dtype)
    loss, _ = clipped_policy_loss(logp, old, adv, m, dual_clip=dual, **V6_KW)
    out = aggregate(loss, m, mode, norm_const=3.0)
    assert out.dim() == 0
    assert out.item() == pytest.approx(V6_AGG[mode][dual], abs=atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v6_autograd_gradient(dtype, atol):
    logp, old, adv, m = v6(dtype, requires_grad=True)
    loss, _ = clipped_policy_loss(logp, old, adv, m, dual_clip=3.0, **V6_KW)
    aggregate(loss, m, "token-mean").backward()
    close(logp.grad, [[0.0, -0.14, -0.2], [0.0, 0.0, 0.0]], atol)


@pytest.mark.parametrize("garbage", [9.0, 1e6, -1e6, float("inf"), float("nan")])
def test_v6_padded_position_has_no_effect(garbage):
    ref_logp, old, adv, m = v6(torch.float64, requires_grad=True)
    ref_loss, ref_metrics = clipped_policy_loss(ref_logp, old, adv, m, **V6_KW)
    aggregate(ref_loss, m, "token-mean").backward()

    logp = ref_logp.detach().clone()
    logp[1, 2] = garbage
    logp.requires_grad_(True)
    adv2 = adv.clone()
    adv2[1, 2] = garbage
    loss, metrics = clipped_policy_loss(logp, old, adv2, m, **V6_KW)
    assert torch.equal(loss, ref_loss.detach()) and metrics == ref_metrics
    for mode in LOSS_AGG_MODES:
        assert aggregate(loss, m, mode, norm_const=3.0).item() == pytest.approx(
            aggregate(ref_loss, m, mode, norm_const=3.0).item(), abs=1e-12
        )
    aggregate(loss, m, "token-mean").backward()
    assert torch.equal(logp.grad, ref_logp.grad)
    assert logp.grad[1, 2] == 0


def test_v6_trl_delta_equivalence_dual_clip_only_for_negative_advantages():
    # a huge ratio with A > 0 is clipped by clip_high, never by the dual bound
    logp, old = torch.tensor([[math.log(10.0)]]), torch.zeros(1, 1)
    loss, metrics = clipped_policy_loss(logp, old, torch.ones(1, 1), torch.ones(1, 1), **V6_KW)
    close(loss, [[-1.28]], 1e-7)
    assert metrics["pg_clipfrac_lower"] == 0.0
    # log-ratio clamp at 20 keeps the ratio finite
    loss, _ = clipped_policy_loss(torch.tensor([[500.0]]), old, -torch.ones(1, 1), torch.ones(1, 1), dual_clip=None)
    close(loss, [[math.exp(20.0)]], 1e-3 * math.exp(20.0))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"clip_low": 1.5}, r"clip_low must be in \[0, 1\), got 1.5"),
        ({"clip_low": -0.1}, "clip_low"),
        ({"clip_high": -0.2}, "clip_high must be >= 0"),
        ({"dual_clip": 1.0}, "dual_clip must be > 1"),
        ({"dual_clip": 0.5}, "dual_clip must be > 1"),
        ({"log_ratio_clamp": 0.0}, "log_ratio_clamp"),
    ],
)
def test_clipped_policy_loss_validation(kwargs, match):
    logp, old, adv, m = v6(torch.float64)
    with pytest.raises(ValueError, match=match):
        clipped_policy_loss(logp, old, adv, m, **kwargs)


def test_clipped_policy_loss_shape_mismatch():
    logp, old, adv, m = v6(torch.float64)
    with pytest.raises(ValueError, match="adv must have logp's shape"):
        clipped_policy_loss(logp, old, adv[:, :2], m)


# ------------------------------------------------------------------ V6b and micro-batch invariance
def test_v6b_global_normalisation_across_micro_batches():
    mb1 = (torch.tensor([[1.0]]), torch.tensor([[1.0]]))
    mb2 = (torch.zeros(1, 3), torch.ones(1, 3))
    glob = sum(aggregate(x, m, "token-mean", num_tokens=4) for x, m in (mb1, mb2))
    assert glob.item() == pytest.approx(0.25, abs=1e-7)
    # per-micro-batch local means averaged over accumulation steps (verl legacy, TRL bnpo)
    local = sum(aggregate(x, m, "token-mean") for x, m in (mb1, mb2)) / 2
    assert local.item() == pytest.approx(0.5, abs=1e-7)
    seq = sum(aggregate(x, m, "seq-mean-token-mean", num_seqs=2) for x, m in (mb1, mb2))
    assert seq.item() == pytest.approx(0.5, abs=1e-7)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_global_loss_invariant_to_micro_batch_split(mode):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    lengths = [5, 1, 0, 3, 4, 2, 5]  # includes a fully-masked row
    m = torch.zeros(7, 5, dtype=torch.float64)
    for i, n in enumerate(lengths):
        m[i, :n] = 1
    n_tok = float(m.sum())
    # dr_grpo counts every row (TRL); the seq-mean modes count only rows with tokens
    n_seq = 7.0 if mode == "dr_grpo" else float((m.sum(1) > 0).sum())
    whole = aggregate(x, m, mode, norm_const=5.0)
    for split in ([3, 4], [1, 1, 5], [2, 2, 2, 1]):
        parts = zip(torch.split(x, split), torch.split(m, split))
        total = sum(aggregate(xp, mp, mode, num_tokens=n_tok, num_seqs=n_seq, norm_const=5.0) for xp, mp in parts)
        assert total.item() == pytest.approx(whole.item(), abs=1e-12)


def test_fully_masked_rows_in_sequence_denominators():
    logp, old, adv, m = v6(torch.float64)
    loss, _ = clipped_policy_loss(logp, old, adv, m, **V6_KW)
    loss3 = torch.cat([loss, torch.full((1, 3), 5.0, dtype=loss.dtype)])  # garbage on a masked row
    m3 = torch.cat([m, torch.zeros(1, 3, dtype=m.dtype)])
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        assert aggregate(loss3, m3, mode, norm_const=3.0).item() == pytest.approx(V6_AGG[mode][3.0], abs=1e-7)
    # dr_grpo: TRL counts the masked row in N_rows
    assert aggregate(loss3, m3, "dr_grpo", norm_const=3.0).item() == pytest.approx(4.62 / 9, abs=1e-7)


def test_aggregate_errors():
    x, m = torch.ones(2, 3), torch.ones(2, 3)
    for mode in ("seq-mean-token-sum-norm", "dr_grpo"):
        with pytest.raises(ValueError, match="norm_const"):
            aggregate(x, m, mode)
    with pytest.raises(ValueError, match="token-mean.*dr_grpo"):
        aggregate(x, m, "sum")
    with pytest.raises(ValueError, match="num_tokens must be > 0"):
        aggregate(x, m, "token-mean", num_tokens=0)
    with pytest.raises(ValueError, match=r"\(N, L\)"):
        aggregate(x, m[:, :2], "token-mean")


def test_aggregate_keeps_gradient():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    m = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    aggregate(x, m, "seq-mean-token-mean").backward()
    close(x.grad, [[0.5, 0.0], [0.25, 0.25]], 1e-7)


# ------------------------------------------------------------------ V7 KL estimators
LN = math.log
V7_ROWS = [
    # (logp, logp_ref, {kind: value})
    (LN(0.5), LN(0.25), {"k1": 0.6931472, "abs": 0.6931472, "k2": 0.2402265, "k3": 0.1931472}),
    (LN(0.25), LN(0.5), {"k1": -0.6931472, "abs": 0.6931472, "k2": 0.2402265, "k3": 0.3068528}),
    (LN(0.3), LN(0.3), {"k1": 0.0, "abs": 0.0, "k2": 0.0, "k3": 0.0}),
]


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("clamp", ["verl", "openrlhf", None])
@pytest.mark.parametrize("kind", KL_KINDS)
def test_v7_values(dtype, atol, clamp, kind):
    lp = torch.tensor([r[0] for r in V7_ROWS], dtype=dtype)
    ref = torch.tensor([r[1] for r in V7_ROWS], dtype=dtype)
    expected = [r[2][kind.rstrip("+")] for r in V7_ROWS]
    out = kl_estimate(lp, ref, kind, clamp=clamp)
    assert out.dtype == dtype and out.shape == (3,)
    close(out, expected, atol)


@pytest.mark.parametrize(
    "d,kind,clamp,expected",
    [
        (-30.0, "k3", "verl", 10.0),  # exponent clamped to 20, e^20 - 20 - 1 clamped to 10
        (-30.0, "k3", "openrlhf", 10.0),
        (-30.0, "k3", None, math.exp(30.0) - 31.0),
        (15.0, "k1", "openrlhf", 10.0),
        (-15.0, "k1", "openrlhf", -10.0),
        (15.0, "k2", "openrlhf", 10.0),
        (15.0, "k1", "verl", 15.0),  # verl clamps only k3
        (15.0, "k2", "verl", 112.5),
        (15.0, "k1", None, 15.0),
    ],
)
def test_v7_clamps(d, kind, clamp, expected):
    out = kl_estimate(torch.tensor([d], dtype=torch.float64), torch.zeros(1, dtype=torch.float64), kind, clamp)
    assert out.item() == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v7_straight_through_gradient(dtype, atol):
    ref = torch.tensor([LN(0.25)], dtype=dtype)
    lp = torch.tensor([LN(0.5)], dtype=dtype, requires_grad=True)
    val = kl_estimate(lp, ref, "k3+")
    val.sum().backward()
    assert val.item() == pytest.approx(0.1931472, abs=atol)
    assert lp.grad.item() == pytest.approx(0.6931472, abs=atol)
    lp.grad = None
    kl_estimate(lp, ref, "k3").sum().backward()
    assert lp.grad.item() == pytest.approx(0.5, abs=atol)  # plain k3: 1 - e^{-d}
    lp.grad = None
    val = kl_estimate(lp, ref, "k1+")
    val.sum().backward()
    assert val.item() == pytest.approx(0.6931472, abs=atol) and lp.grad.item() == pytest.approx(0.6931472, abs=atol)


def test_kl_errors():
    x = torch.zeros(2)
    with pytest.raises(ValueError, match=r"allowed kinds: \('k1', 'abs', 'k2', 'k3', 'k1\+', 'k3\+'\)"):
        kl_estimate(x, x, "k4")
    with pytest.raises(ValueError, match="clamp must be one of"):
        kl_estimate(x, x, "k1", clamp="trl")
    with pytest.raises(ValueError, match="shapes differ"):
        kl_estimate(x, torch.zeros(3), "k1")


# ------------------------------------------------------------------ KL-in-loss gradient expectations
def _expected_kl_loss_grad(kind, clamp="verl"):
    """Exact on-policy expectation over a 5-way categorical: sum_x sg(pi(x)) * k(log pi(x), log ref(x)).

    Logits are scaled so that |d| stays well inside the [-10, 10] result clamps (a clamped outcome
    has zero gradient and would break the identities being tested).
    """
    gen = torch.Generator().manual_seed(0)
    theta = (0.5 * torch.randn(5, generator=gen, dtype=torch.float64)).requires_grad_(True)
    ref_logp = torch.log_softmax(0.5 * torch.randn(5, generator=gen, dtype=torch.float64), 0)
    logp = torch.log_softmax(theta, 0)
    probs = logp.exp().detach()  # sampling weights: no gradient through the sampling distribution
    k = kl_estimate(logp, ref_logp, kind, clamp=clamp)
    assert k.abs().max().item() < 10.0
    (probs * k).sum().backward()
    return theta, ref_logp


def _grad_of(fn, theta):
    t = theta.detach().clone().requires_grad_(True)
    fn(torch.log_softmax(t, 0)).backward()
    return t.grad


def test_k1_in_loss_has_zero_expected_gradient():
    theta, _ = _expected_kl_loss_grad("k1")
    assert theta.grad.abs().max().item() < 1e-12
    # ... yet a single sample does have a (pure-noise) gradient
    t = theta.detach().clone().requires_grad_(True)
    kl_estimate(torch.log_softmax(t, 0)[0:1], torch.zeros(1, dtype=torch.float64), "k1").sum().backward()
    assert t.grad.abs().max().item() > 1e-3


@pytest.mark.parametrize("clamp", ["verl", "openrlhf", None])
@pytest.mark.parametrize("kind", ["k2", "k3+", "k1+"])
def test_k2_gradient_is_reverse_kl_gradient(kind, clamp):
    theta, ref_logp = _expected_kl_loss_grad(kind, clamp)
    rev = _grad_of(lambda lp: (lp.exp() * (lp - ref_logp)).sum(), theta)  # grad KL(pi || ref)
    assert rev.abs().max().item() > 1e-3
    assert torch.allclose(theta.grad, rev, atol=1e-12)


@pytest.mark.parametrize("clamp", ["verl", "openrlhf", None])
def test_k3_gradient_is_forward_kl_gradient(clamp):
    theta, ref_logp = _expected_kl_loss_grad("k3", clamp)
    fwd = _grad_of(lambda lp: (ref_logp.exp() * (ref_logp - lp)).sum(), theta)  # grad KL(ref || pi)
    rev = _grad_of(lambda lp: (lp.exp() * (lp - ref_logp)).sum(), theta)
    assert torch.allclose(theta.grad, fwd, atol=1e-12)
    assert not torch.allclose(theta.grad, rev, atol=1e-3)


# ------------------------------------------------------------------ V8 entropy
@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v8_entropy(dtype, atol):
    assert entropy_from_logits(torch.tensor([0.0, 0.0], dtype=dtype)).item() == pytest.approx(0.6931472, abs=atol)
    assert entropy_from_logits(torch.tensor([LN(3.0), 0.0], dtype=dtype)).item() == pytest.approx(0.5623351, abs=atol)
    h = entropy_from_logits(torch.zeros(2, 3, 4, dtype=dtype))
    assert h.shape == (2, 3) and h.dtype == dtype
    close(h, torch.full((2, 3), 1.3862944), atol)


def test_entropy_numerically_stable():
    z = torch.tensor([[1000.0, 0.0], [1e4, 1e4], [0.0, -float("inf")]], requires_grad=True)
    h = entropy_from_logits(z)
    close(h, [0.0, math.log(2.0), 0.0], 1e-6)
    h.sum().backward()
    assert torch.isfinite(z.grad).all()
    # shift invariance and bf16 input handled in float32
    # (51 and 50 are exact in bf16; the result is only rounded once, to bf16's ~3 digits)
    zb = torch.tensor([[51.0, 50.0]], dtype=torch.bfloat16)
    expected = entropy_from_logits(torch.tensor([[1.0, 0.0]], dtype=torch.float64)).item()
    hb = entropy_from_logits(zb)
    assert hb.dtype == torch.bfloat16 and hb.float().item() == pytest.approx(expected, abs=4e-3)
