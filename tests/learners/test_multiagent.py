"""Multi-agent plug-ins against docs/algorithms.md §8 / §12 (V9 PRIME, V11 TRR++, V12 SPIRAL RAE) and §13.

Expected numbers are copied from the specification (they ARE the specification) or derived by
hand in the test where the spec gives only the formula.
"""

from __future__ import annotations

import math

import pytest
import torch

from cogym.learners.advantages import group_index, outcome_token_rewards
from cogym.learners.multiagent import (
    RAEBaselines,
    nonzero_rows,
    prime_advantages,
    prime_ce_loss,
    prime_process_rewards,
    prime_q,
    rae_token_advantages,
    rae_turn_discount,
    rae_update,
    trr_pp_advantages,
)

from test_advantages import DTYPES, mask_from_lengths


def close(actual, expected, atol):
    exp = torch.as_tensor(expected, dtype=torch.float64)
    assert actual.shape == exp.shape, (actual.shape, exp.shape)
    assert torch.allclose(actual.to(torch.float64), exp, atol=atol, rtol=0), (actual, exp)


def pad(rows, width):
    """Ragged python rows -> (N, width) float64, zero-padded."""
    out = torch.zeros(len(rows), width, dtype=torch.float64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.float64)
    return out


# ======================================================================================= V9 PRIME
V9_BETA = 0.05
V9_LEN = [2, 3, 2]
V9_Q = [[0.4, 0.6], [-0.2, 0.0, -0.8], [1.0, 1.0]]
V9_ACC = [1.0, 0.0, 1.0]


def v9(dtype, garbage=0.0):
    """q on valid tokens, ``garbage`` on the padding (must never leak)."""
    m = mask_from_lengths(V9_LEN, 3, dtype)
    q = pad(V9_Q, 3).to(dtype)
    q = torch.where(m != 0, q, torch.full_like(q, garbage))
    return q, m, torch.tensor(V9_ACC, dtype=dtype), group_index(["p"] * 3)


V9_PROC_NONE = [[0.02, 0.03, 0.0], [-0.01, 0.0, -0.04], [0.05, 0.05, 0.0]]
V9_RET_NONE = [[2.5833333, 2.5791667, 0.0], [-5.8125, -5.5916667, -5.4458333], [2.9583333, 2.7291667, 0.0]]
V9_ADV_NONE = [[0.7722413, 0.7713060, 0.0], [-1.1122679, -1.0627002, -1.0299668], [0.8564129, 0.8049747, 0.0]]
V9_ADV_BN = [[0.6367116, 0.6318671, 0.0], [-1.2768835, -1.0201227, -0.8505637], [1.0727206, 0.8062707, 0.0]]
V9_PROC_VERL = [[0.02, 0.0, 0.0], [-0.01, 0.0, 0.0], [0.05, 0.0, 0.0]]
V9_ADV_VERL = [[0.7963778, 0.7791658, 0.0], [-1.0999733, -1.0625120, -1.0432751], [0.8510510, 0.7791658, 0.0]]


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v9_ce_loss_value(dtype, atol):
    q, m, acc, _ = v9(dtype, garbage=float("nan"))
    # logp_prm - logp_ref = q: split it arbitrarily between the two inputs
    logp_ref = torch.full_like(q, -1.5)
    loss = prime_ce_loss(q + logp_ref, logp_ref, m, acc, beta=V9_BETA)
    assert loss.dim() == 0 and loss.dtype == dtype
    # -(ln 0.5124974 + ln 0.5124974 + ln 0.5249792)/3; note (1-acc)·log(1-σ(-0.05)) = log σ(0.05)
    close(loss, 0.6604387, atol)


def test_v9_ce_loss_gradient_flows_through_prm_only():
    q, m, acc, _ = v9(torch.float64)
    logp_prm = q.clone().requires_grad_(True)
    logp_ref = torch.zeros_like(q, requires_grad=True)
    prime_ce_loss(logp_prm, logp_ref, m, acc, beta=V9_BETA).backward()
    # dL/dlogp_prm[i,t] = -(1/N)(acc_i - σ(z_i))·β·m[i,t], z = [0.05, -0.05, 0.10]
    sig = torch.sigmoid(torch.tensor([0.05, -0.05, 0.10], dtype=torch.float64))
    expect = (-(torch.tensor(V9_ACC, dtype=torch.float64) - sig) * V9_BETA / 3)[:, None] * m
    close(logp_prm.grad, expect, 1e-12)
    assert logp_ref.grad is None or torch.all(logp_ref.grad == 0)


def test_prime_q_masks_and_detaches_reference():
    m = mask_from_lengths([1, 2], 3)
    lp = torch.tensor([[-1.0, float("nan"), 5.0], [-2.0, -0.5, float("inf")]], requires_grad=True)
    ref = torch.tensor([[-0.5, 1.0, 1.0], [-1.0, -1.0, 1.0]], requires_grad=True)
    q = prime_q(lp, ref, m)
    close(q.detach(), [[-0.5, 0.0, 0.0], [-1.0, 0.5, 0.0]], 1e-7)
    assert q.requires_grad
    q.sum().backward()
    assert ref.grad is None


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v9_process_rewards_none(dtype, atol):
    q, m, _, _ = v9(dtype, garbage=7.0)
    r = prime_process_rewards(q, m, beta=V9_BETA, norm="none")
    assert r.dtype == dtype
    close(r, V9_PROC_NONE, atol)
    assert torch.all(r[m == 0] == 0)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v9_process_rewards_batch_norm_cancels_beta(dtype, atol):
    q, m, _, _ = v9(dtype, garbage=7.0)
    # original PRIME: divisor = max |reverse cumsum of q| + 1e-6 = 2.000001 (response 3's first
    # token, 1.0 + 1.0), whatever β
    for beta in (0.05, 1.0):
        r = prime_process_rewards(q, m, beta=beta, norm="batch_norm")
        close(r, pad(V9_Q, 3) / 2.000001, atol)
    # verl recipe normalises β·q: divisor β·2.0 + 1e-6 (its last-token drop changes the max too:
    # reverse cumsums of [[0.4, 0], [-0.2, 0, 0], [1.0, 0]]·β -> max 0.05)
    r = prime_process_rewards(q, m, beta=0.05, norm="batch_norm", compat="verl")
    close(r, [[0.02 / 0.050001, 0, 0], [-0.01 / 0.050001, 0, 0], [0.05 / 0.050001, 0, 0]], atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v9_process_rewards_verl_compat_drops_last_token(dtype, atol):
    q, m, _, _ = v9(dtype)
    r = prime_process_rewards(q, m, beta=V9_BETA, norm="none", compat="verl")
    close(r, V9_PROC_VERL, atol)


def test_prime_process_rewards_whole_granularity():
    q, m, _, _ = v9(torch.float64, garbage=3.0)
    r = prime_process_rewards(q, m, beta=V9_BETA, norm="none", granularity="whole")
    # β·Σq = [0.05, -0.05, 0.10] on the last valid token (indices 1, 2, 1)
    close(r, [[0.0, 0.05, 0.0], [0.0, 0.0, -0.05], [0.0, 0.10, 0.0]], 1e-12)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v9_advantages_none(dtype, atol):
    q, m, acc, g = v9(dtype)
    r = prime_process_rewards(q, m, beta=V9_BETA, norm="none")
    adv, ret = prime_advantages(r, acc, m, g)
    assert adv.dtype == dtype and adv.shape == (3, 3)
    close(ret, V9_RET_NONE, atol)
    close(adv, V9_ADV_NONE, atol)
    assert torch.all(adv[m == 0] == 0) and torch.all(ret[m == 0] == 0)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v9_advantages_batch_norm(dtype, atol):
    q, m, acc, g = v9(dtype)
    r = prime_process_rewards(q, m, beta=V9_BETA, norm="batch_norm")
    adv, _ = prime_advantages(r, acc, m, g)
    close(adv, V9_ADV_BN, atol)


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v9_advantages_verl_compat(dtype, atol):
    q, m, acc, g = v9(dtype)
    r = prime_process_rewards(q, m, beta=V9_BETA, norm="none", compat="verl")
    adv, _ = prime_advantages(r, acc, m, g)
    close(adv, V9_ADV_VERL, atol)


def test_v9_process_and_outcome_parts_separately():
    """process_coef/outcome_coef isolate the two RLOO parts (returns = reverse cumsum of each)."""
    q, m, acc, g = v9(torch.float64)
    r = prime_process_rewards(q, m, beta=V9_BETA, norm="none")
    proc_rloo = [[0.0008333, 0.0158333, 0.0], [-0.0441667, -0.0291667, -0.0891667], [0.0458333, 0.0458333, 0.0]]
    _, ret_p = prime_advantages(r, acc, m, g, process_coef=1.0, outcome_coef=0.0)
    rev = lambda x: torch.flip(torch.cumsum(torch.flip(torch.tensor(x), [1]), 1), [1])  # noqa: E731
    close(ret_p, rev(proc_rloo) * m, 1e-6)
    _, ret_o = prime_advantages(r, acc, m, g, process_coef=0.0, outcome_coef=1.0)
    # outcome RLOO [0.5, -1.0, 0.5] on the last token; γ = 1 spreads it back over the row
    close(ret_o, [[0.5, 0.5, 0.0], [-1.0, -1.0, -1.0], [0.5, 0.5, 0.0]], 1e-12)


def test_prime_equal_coefs_scale_free():
    """Equal coefficients: (5, 5) and the original repo's (1, 1) coincide after whitening."""
    q, m, acc, g = v9(torch.float64)
    r = prime_process_rewards(q, m, beta=V9_BETA, norm="none")
    a5, _ = prime_advantages(r, acc, m, g, process_coef=5.0, outcome_coef=5.0)
    a1, _ = prime_advantages(r, acc, m, g, process_coef=1.0, outcome_coef=1.0)
    close(a1, a5, 1e-6)


def test_prime_properties_permutation_masked_rows_and_groups():
    torch.manual_seed(0)
    n, width = 8, 5
    lengths = [3, 5, 1, 4, 2, 5, 3, 4]
    m = mask_from_lengths(lengths, width)
    q = torch.randn(n, width, dtype=torch.float64)
    acc = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0], dtype=torch.float64)
    g = group_index(["a", "a", "a", "a", "b", "b", "b", "b"])
    r = prime_process_rewards(q, m, norm="batch_norm")
    adv, ret = prime_advantages(r, acc, m, g)
    # permuting rows with their ids permutes outputs
    perm = torch.randperm(n)
    rp = prime_process_rewards(q[perm], m[perm], norm="batch_norm")
    adv_p, ret_p = prime_advantages(rp, acc[perm], m[perm], g[perm])
    close(adv_p, adv[perm], 1e-12)
    close(ret_p, ret[perm], 1e-12)
    # a fully-masked row with garbage/NaN changes nothing else and gets exactly 0
    m2 = torch.cat([m, torch.zeros(1, width, dtype=torch.float64)])
    q2 = torch.cat([q, torch.full((1, width), float("nan"), dtype=torch.float64)])
    acc2 = torch.cat([acc, torch.tensor([float("nan")], dtype=torch.float64)])
    g2 = torch.cat([g, torch.tensor([0])])
    r2 = prime_process_rewards(q2, m2, norm="batch_norm")
    adv2, ret2 = prime_advantages(r2, acc2, m2, g2)
    close(adv2[:n], adv, 1e-12)
    assert torch.all(adv2[n] == 0) and torch.all(ret2[n] == 0) and torch.all(r2[n] == 0)
    assert torch.all(adv[m == 0] == 0)
    # CE loss ignores the fully-masked row (and its NaN label)
    l1 = prime_ce_loss(q, torch.zeros_like(q), m, acc)
    l2 = prime_ce_loss(q2, torch.zeros_like(q2), m2, acc2)
    close(l2, l1, 1e-12)
    # a singleton group gets no RLOO signal of its own: process and outcome parts are 0
    g_single = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2])
    _, ret_s = prime_advantages(r, acc, m, g_single)
    assert torch.all(ret_s[7] == 0)


# ======================================================================================= V11 TRR++
V11_R = [0.75, -0.5, 0.125, -1.0]
V11_LEN = [2, 1, 1, 2]
V11_ADV = [1.1089253, -0.4384123, 0.3352565, -1.0573474]


@pytest.mark.parametrize("dtype,atol", DTYPES)
def test_v11_trr_pp_one_batch(dtype, atol):
    m = mask_from_lengths(V11_LEN, 2, dtype)
    tr = outcome_token_rewards(torch.tensor(V11_R, dtype=dtype), m)
    adv, ret = trr_pp_advantages(tr, m, group_index([("code_o", "propose")] * 4))
    assert adv.dtype == dtype
    # γ = 1: every valid token carries its response's reward as the return
    close(ret, [[0.75, 0.75], [-0.5, 0.0], [0.125, 0.0], [-1.0, -1.0]], atol)
    close(adv, [[V11_ADV[0]] * 2, [V11_ADV[1], 0.0], [V11_ADV[2], 0.0], [V11_ADV[3]] * 2], atol)


def test_v11_other_task_role_batches_are_independent():
    """Spec: shifting every reward of another batch by +10 must not change the V11 numbers."""
    m_a = mask_from_lengths(V11_LEN, 3)
    m_b = mask_from_lengths([3, 1, 2], 3)
    r_a = torch.tensor(V11_R, dtype=torch.float64)
    r_b = torch.tensor([1.0, -0.5, 1.0], dtype=torch.float64)
    keys = [("code_o", "propose")] * 4 + [("code_o", "solve")] * 3
    m = torch.cat([m_a, m_b])
    g = group_index(keys)
    outs = []
    for shift in (0.0, 10.0):
        tr = outcome_token_rewards(torch.cat([r_a, r_b + shift]), m)
        adv, _ = trr_pp_advantages(tr, m, g)
        close(adv[:4, 0], V11_ADV, 1e-6)
        outs.append(adv)
    # the shifted batch is itself shift-invariant (whitening removes the mean)
    close(outs[1], outs[0], 1e-9)
    # whereas whitening the two batches together would NOT reproduce V11
    tr = outcome_token_rewards(torch.cat([r_a, r_b + 10.0]), m)
    joint, _ = trr_pp_advantages(tr, m, torch.zeros(7, dtype=torch.long))
    assert not torch.allclose(joint[:4, 0], torch.tensor(V11_ADV, dtype=torch.float64), atol=1e-3)


def test_trr_pp_hand_values_two_groups():
    """Hand derivation (W_verl, token-weighted, Bessel on the token count, 1e-8 inside the sqrt).

    group ("code_i", "solve"): rewards [1, -0.5], lengths [1, 2] -> returns on 3 tokens [1, -0.5, -0.5]
      μ = (1 - 0.5 - 0.5)/3 = 0;  Σ(x-μ)² = 1 + 0.25 + 0.25 = 1.5;  var_unb = 1.5/2 = 0.75
      A = [1, -0.5] / sqrt(0.75 + 1e-8) = [1.1547005, -0.5773503]
    group ("code_f", "propose"): rewards [0.75, 0.125], lengths [1, 1]
      μ = 0.4375; deviations ±0.3125; var_unb = 2·0.3125²/1 = 0.1953125
      A = ±0.3125 / sqrt(0.1953125 + 1e-8) = ±0.7071068 (= ±1/√2)
    """
    m = mask_from_lengths([1, 1, 2, 1], 2)
    r = torch.tensor([1.0, 0.75, -0.5, 0.125], dtype=torch.float64)
    g = group_index([("code_i", "solve"), ("code_f", "propose"), ("code_i", "solve"), ("code_f", "propose")])
    adv, _ = trr_pp_advantages(outcome_token_rewards(r, m), m, g)
    s1 = math.sqrt(0.75 + 1e-8)
    s2 = math.sqrt(0.1953125 + 1e-8)
    close(adv, [[1 / s1, 0.0], [0.3125 / s2, 0.0], [-0.5 / s1, -0.5 / s1], [-0.3125 / s2, 0.0]], 1e-9)
    close(adv[1, 0], 0.7071068, 1e-6)
    close(adv[0, 0], 1.1547005, 1e-6)


def test_trr_pp_properties():
    torch.manual_seed(1)
    n, width = 9, 4
    lengths = [1, 4, 2, 3, 4, 1, 2, 3, 4]
    m = mask_from_lengths(lengths, width)
    r = torch.randn(n, dtype=torch.float64)
    g = torch.tensor([5, 9, 5, 9, 2, 2, 5, 9, 2])           # sparse arbitrary ids
    adv, _ = trr_pp_advantages(outcome_token_rewards(r, m), m, g)
    # each group: token-weighted mean 0 and var_unb 1 (up to the 1e-8)
    for gid in (2, 5, 9):
        sel = (g == gid)[:, None] & (m != 0)
        x = adv[sel]
        assert abs(float(x.mean())) < 1e-12
        assert abs(float(x.var(correction=1)) - 1.0) < 1e-6
    assert torch.all(adv[m == 0] == 0)
    # permutation with ids
    perm = torch.randperm(n)
    adv_p, _ = trr_pp_advantages(outcome_token_rewards(r[perm], m[perm]), m[perm], g[perm])
    close(adv_p, adv[perm], 1e-12)
    # fully-masked NaN row in an existing group changes nothing
    m2 = torch.cat([m, torch.zeros(1, width, dtype=torch.float64)])
    tr2 = torch.cat([outcome_token_rewards(r, m), torch.full((1, width), float("nan"), dtype=torch.float64)])
    adv2, _ = trr_pp_advantages(tr2, m2, torch.cat([g, torch.tensor([5])]))
    close(adv2[:n], adv, 1e-12)
    assert torch.all(adv2[n] == 0)
    # a one-token group has no spread: 0, not NaN
    m1 = mask_from_lengths([1], 2)
    a1, _ = trr_pp_advantages(outcome_token_rewards(torch.tensor([3.0], dtype=torch.float64), m1), m1,
                              torch.zeros(1, dtype=torch.long))
    assert torch.all(a1 == 0)


# ======================================================================================= V12 RAE
def test_v12_rae_pre_update_order_and_mirror():
    keys0 = [("tictactoe", 0)] * 3
    keys1 = [("tictactoe", 1)] * 3
    adv0, b0 = rae_update({}, keys0, torch.tensor([1.0, -1.0, 1.0]), alpha=0.95)
    adv1, b1 = rae_update({}, keys1, torch.tensor([-1.0, 1.0, -1.0]), alpha=0.95)
    close(adv0, [1.0, -1.05, 1.0025], 1e-6)
    close(adv1, [-1.0, 1.05, -1.0025], 1e-6)
    assert torch.equal(adv1, -adv0)                        # exact mirror
    assert b0[("tictactoe", 0)] == pytest.approx(0.047625, abs=1e-12)
    assert b1[("tictactoe", 1)] == pytest.approx(-0.047625, abs=1e-12)


def test_v12_rae_baselines_after_each_game():
    state: dict = {}
    seen = []
    for rew in (1.0, -1.0, 1.0):
        _, state = rae_update(state, [("g", 0)], torch.tensor([rew], dtype=torch.float64))
        seen.append(state[("g", 0)])
    close(torch.tensor(seen, dtype=torch.float64), [0.05, -0.0025, 0.047625], 1e-12)


def test_v12_rae_update_first():
    adv, b = rae_update({}, [("g", 0)] * 3, torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64),
                        order="update_first")
    close(adv, [0.95, -0.9975, 0.952375], 1e-12)
    assert b[("g", 0)] == pytest.approx(0.047625, abs=1e-12)


def test_v12_interleaved_roles_in_one_batch_and_purity():
    """Both roles of each game in one call (row order = game order): keys keep separate EMAs."""
    keys = [("g", 0), ("g", 1)] * 3
    rew = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
    start = {("other", 0): 0.3}
    adv, new = rae_update(start, keys, rew)
    close(adv, [1.0, -1.0, -1.05, 1.05, 1.0025, -1.0025], 1e-12)
    assert start == {("other", 0): 0.3}                    # input state not mutated
    assert new[("other", 0)] == 0.3                        # untouched key carried over
    # deterministic: same inputs, same outputs
    adv_again, new_again = rae_update(start, keys, rew)
    assert torch.equal(adv_again, adv) and new_again == new


def test_v12_turn_discount():
    adv = rae_turn_discount(torch.full((3,), 1.0025, dtype=torch.float64), torch.tensor([0, 1, 2]),
                            torch.tensor([3, 3, 3]), gamma=0.9)
    close(adv, [0.812025, 0.90225, 1.0025], 1e-12)
    with pytest.raises(ValueError):
        rae_turn_discount(torch.ones(1), torch.tensor([3]), torch.tensor([3]))


def test_v12_turn_discount_on_trajectory_rows():
    """One row = one player's game; its turns are runs of valid tokens split by opponent tokens (m = 0)."""
    m = torch.tensor([[1, 1, 0, 0, 1, 0, 1, 1, 0],       # 3 turns
                      [0, 1, 1, 1, 0, 0, 0, 0, 0]],      # 1 turn (prompt masked in front)
                     dtype=torch.float64)
    a = torch.tensor([1.0025, -2.0], dtype=torch.float64)
    tok = rae_token_advantages(a, m, gamma=0.9)
    close(tok, [[0.812025, 0.812025, 0, 0, 0.90225, 0, 1.0025, 1.0025, 0],
                [0, -2.0, -2.0, -2.0, 0, 0, 0, 0, 0]], 1e-12)
    # γ = 1 (default): the same value on all valid tokens
    close(rae_token_advantages(a, m), a[:, None] * m, 1e-12)


def test_v12_draw_in_first_game_is_dropped():
    adv, b = rae_update({}, [("g", 0), ("g", 1)], torch.tensor([0.0, 0.0]))
    assert torch.all(adv == 0)
    assert not nonzero_rows(adv).any()
    assert b == {("g", 0): 0.0, ("g", 1): 0.0}
    # token-level view
    m = mask_from_lengths([2, 3], 3)
    tok = rae_token_advantages(torch.tensor([0.0, 0.5]), m)
    assert nonzero_rows(tok).tolist() == [False, True]


def test_rae_property_zero_sum_mirror_random_games():
    """§13: zero-sum roles give mirrored RAE advantages, over many games of several game types."""
    gen = torch.Generator().manual_seed(3)
    games = torch.randint(0, 3, (40,), generator=gen).tolist()
    r0 = torch.randint(-1, 2, (40,), generator=gen).to(torch.float64)
    for order in ("pre", "update_first"):
        state = RAEBaselines(order=order)
        for gi, rew in zip(games, r0.tolist()):
            keys = [(f"game{gi}", 0), (f"game{gi}", 1)]
            adv, state = state.update(keys, torch.tensor([rew, -rew], dtype=torch.float64))
            assert adv[0].item() == -adv[1].item()
        for gi in range(3):
            assert state.get((f"game{gi}", 0)) == -state.get((f"game{gi}", 1))


def test_rae_property_permutation_and_invalid_rows():
    keys = [("a", 0), ("b", 1), ("c", 0), ("a", 1)]       # distinct keys: rows independent
    rew = torch.tensor([1.0, -1.0, 0.5, 1.0], dtype=torch.float64)
    start = {("a", 0): 0.2, ("b", 1): -0.1, ("a", 1): 0.4}
    adv, new = rae_update(start, keys, rew)
    close(adv, [0.8, -0.9, 0.5, 0.6], 1e-12)
    perm = [2, 0, 3, 1]
    adv_p, new_p = rae_update(start, [keys[i] for i in perm], rew[perm])
    close(adv_p, adv[perm], 1e-15)
    assert new_p == new
    # invalid (e.g. truncated / untrained-role) rows: A = 0, state untouched, NaN ignored
    rew_nan = torch.cat([rew, torch.tensor([float("nan")], dtype=torch.float64)])
    valid = torch.tensor([True, True, True, True, False])
    adv_v, new_v = rae_update(start, keys + [("a", 0)], rew_nan, valid=valid)
    close(adv_v[:4], adv, 1e-15)
    assert adv_v[4] == 0 and new_v == new


def test_rae_state_roundtrip_and_dtype():
    st = RAEBaselines(alpha=0.9)
    adv, st2 = st.update([("g", 0)], torch.tensor([1.0], dtype=torch.float32))
    assert adv.dtype == torch.float32
    assert st.values == {} and st2.get(("g", 0)) == pytest.approx(0.1)
    restored = RAEBaselines.from_state_dict(st2.state_dict())
    assert restored == st2
    a_next, _ = restored.update([("g", 0)], torch.tensor([1.0], dtype=torch.float64))
    close(a_next, [0.9], 1e-12)
    with pytest.raises(ValueError):
        rae_update({}, [("g", 0)], torch.tensor([1.0]), order="post")
