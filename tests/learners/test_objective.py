"""The objective (docs/algorithms.md §5, §3.3): policy loss + KL - entropy over a micro-batch, as one
pure function, against the spec's vectors V6 (clipped loss), V7 (KL) and V8 (entropy)."""

from __future__ import annotations

import math

import pytest
import torch

from cogym.learners.objective import ObjectiveConfig, objective

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
LOGP_OLD = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, -2.0]], dtype=torch.float64)
RATIOS = torch.tensor([[1.5, 0.7, 1.0], [4.0, 0.5, 9.0]], dtype=torch.float64)  # 9.0 sits on padding
ADV = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]], dtype=torch.float64)


def _v6(**kw):
    logp = (LOGP_OLD + RATIOS.log()).requires_grad_(True)
    cfg = ObjectiveConfig(clip_low=0.2, clip_high=0.28, **kw)
    loss, metrics = objective(logp, LOGP_OLD, ADV, MASK, cfg, num_tokens=5.0, num_seqs=2.0)
    return logp, loss, metrics


@pytest.mark.parametrize("dual_clip, expected", [(3.0, 0.924), (None, 1.324)])
def test_v6_token_mean_with_and_without_dual_clip(dual_clip, expected):
    _, loss, metrics = _v6(dual_clip=dual_clip)
    assert float(loss) == pytest.approx(expected, abs=1e-7)
    assert set(metrics) == {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"}  # KL and entropy off


def test_v6_metrics_and_gradient():
    logp, loss, metrics = _v6(dual_clip=3.0)
    assert metrics["pg_clipfrac"] == pytest.approx(0.4) and metrics["pg_clipfrac_lower"] == pytest.approx(0.2)
    assert metrics["ppo_kl"] == pytest.approx(-0.1483875, abs=1e-7)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0, -0.14, -0.2], [0, 0, 0]], dtype=torch.float64), atol=1e-7)


@pytest.mark.parametrize("mode, expected", [("seq-mean-token-mean", 1.4033333), ("seq-mean-token-sum", 2.31),
                                            ("seq-mean-token-sum-norm", 1.54), ("dr_grpo", 0.77)])
def test_v6_aggregation_modes(mode, expected):
    _, loss, _ = _v6(dual_clip=3.0, loss_agg=mode, norm_const=3.0)
    assert float(loss) == pytest.approx(expected, abs=1e-7)


def test_kl_term_is_added_with_its_coefficient_v7():
    """V7: k3 of logp = ln 0.5 against logp_ref = ln 0.25 is 0.1931472 per token; the ratio is 1, A = 0."""
    logp = torch.full((1, 2), math.log(0.5), dtype=torch.float64)
    ref = torch.full((1, 2), math.log(0.25), dtype=torch.float64)
    cfg = ObjectiveConfig(kl_in_loss="k3", kl_loss_coef=0.5)
    loss, metrics = objective(logp, logp, torch.zeros(1, 2), torch.ones(1, 2), cfg, num_tokens=2.0, num_seqs=1.0,
                              ref_logp=ref)
    assert metrics["kl_loss"] == pytest.approx(0.1931472, abs=1e-7)
    assert float(loss) == pytest.approx(0.5 * 0.1931472, abs=1e-7)
    with pytest.raises(ValueError, match="ref_logp"):
        objective(logp, logp, torch.zeros(1, 2), torch.ones(1, 2), cfg, num_tokens=2.0, num_seqs=1.0)


def test_entropy_bonus_is_subtracted_v8():
    """V8: logits [ln 3, 0] have entropy 0.5623351; [0, 0] have ln 2."""
    logits = torch.tensor([[[math.log(3.0), 0.0], [0.0, 0.0]]], dtype=torch.float64)
    logp = torch.zeros(1, 2, dtype=torch.float64)
    cfg = ObjectiveConfig(entropy_coef=0.1)
    loss, metrics = objective(logp, logp, torch.zeros(1, 2), torch.ones(1, 2), cfg, num_tokens=2.0, num_seqs=1.0,
                              logits=logits)
    assert metrics["entropy"] == pytest.approx((0.5623351 + math.log(2)) / 2, abs=1e-7)
    assert float(loss) == pytest.approx(-0.1 * metrics["entropy"], abs=1e-9)


def test_metrics_are_shares_of_the_step():
    """Two micro-batches of one step: their losses and metric shares add up to the one-batch values (V6b)."""
    cfg = ObjectiveConfig(clip_low=0.2, clip_high=0.28)
    logp = LOGP_OLD + RATIOS.log()
    whole, m = objective(logp, LOGP_OLD, ADV, MASK, cfg, num_tokens=5.0, num_seqs=2.0)
    parts = [objective(logp[i:i + 1], LOGP_OLD[i:i + 1], ADV[i:i + 1], MASK[i:i + 1], cfg, num_tokens=5.0, num_seqs=2.0)
             for i in range(2)]
    assert float(sum(p[0] for p in parts)) == pytest.approx(float(whole))
    for key, value in m.items():
        assert sum(p[1][key] for p in parts) == pytest.approx(value)


def test_ppo_kl_uses_the_clamped_log_ratio_like_verl():
    """Log-ratios (logp - logp_old) of -30 and 0.5: verl clamps them to [-20, 20] before the mean, so
    ppo_kl = mean(-clamp(log_ratio)) = (20 - 0.5) / 2 = 9.75; the unclamped mean would be
    (30 - 0.5) / 2 = 14.75. A = 0, so the loss is 0 either way."""
    logp_old = torch.zeros(1, 2, dtype=torch.float64)
    logp = torch.tensor([[-30.0, 0.5]], dtype=torch.float64)
    _, metrics = objective(logp, logp_old, torch.zeros(1, 2), torch.ones(1, 2), ObjectiveConfig(),
                           num_tokens=2.0, num_seqs=1.0)
    assert metrics["ppo_kl"] == pytest.approx(9.75, abs=1e-12)
