"""DPO's losses (cogym.learners.preference.dpo_loss) against TRL's own.

The reference values were computed once with TRL 1.16.0 (the PyPI release; trl/trainer/dpo_trainer.py,
sha256 f69f0f78f07990aa5a36157dbc81c23b259b9acd9f9423f1a6e69777446fb92f), by calling
``DPOTrainer._compute_loss`` (the method that holds every DPO loss type in 1.16.0) in float64 on a minimal
stand-in trainer: ``precompute_ref_logps`` on (the reference log-probs given), ``f_divergence_type``
reverse_kl, no ``ld_alpha``, no weighting, and a stand-in model whose per-token log-probs put each
response's summed log-probability on its first token, its response lengths those below. Each pair was a
batch of its own (``losses``: the returned loss; rewards: the ``rewards/chosen`` and ``rewards/rejected``
metrics); the whole batch's loss equals their mean, and its ``rewards/margins`` and ``rewards/accuracies``
metrics are the margin and accuracy below.

TRL 1.16.0's ``sigmoid`` takes no label smoothing; conservative DPO's smoothed sigmoid
``-(1 - eps) log s(beta d) - eps log s(-beta d)`` is its ``aot`` loss on a batch of one pair (aot sorts
the pairs' log-ratio differences over the batch, which leaves one pair as it is), so the smoothed sigmoid
cases were computed with ``loss_type="aot"`` one pair at a time. Nothing here imports TRL.
"""

from __future__ import annotations

import pytest
import torch

from cogym.learners.preference import dpo_loss

CHOSEN = [-2.0, -4.0, -1.3, -7.5, -0.2]  # sum of log pi over the chosen response, per pair
REJECTED = [-1.0, -3.5, -2.7, -6.0, -30.0]
REF_CHOSEN = [-3.0, -2.0, -1.5, -7.0, -0.4]  # the same under pi_ref
REF_REJECTED = [-1.5, -2.0, -2.2, -9.0, -1.0]
CHOSEN_TOKENS = [3, 1, 5, 2, 4]  # response lengths (ipo averages the log-ratios over them)
REJECTED_TOKENS = [2, 4, 1, 6, 3]

# beta -> TRL's rewards/chosen and rewards/rejected of each pair (beta times the log-ratios)
REWARDS = {
    0.1: ([0.1, -0.2, 0.02, -0.05, 0.02], [0.05, -0.15, -0.05, 0.3, -2.9]),
    0.5: ([0.5, -1.0, 0.1, -0.25, 0.1], [0.25, -0.75, -0.25, 1.5, -14.5]),
    2.0: ([2.0, -4.0, 0.4, -1.0, 0.4], [1.0, -3.0, -1.0, 6.0, -58.0]),
    1.0: ([1.0, -2.0, 0.2, -0.5, 0.2], [0.5, -1.5, -0.5, 3.0, -29.0]),
}

# (cogym loss, beta, label smoothing, TRL loss_type it was computed with, per-pair losses, mean loss,
#  TRL's rewards/margins, TRL's rewards/accuracies over the five pairs)
CASES = [
    ("sigmoid", 0.1, 0.0, "sigmoid", [0.668459648, 0.718459648, 0.6587595555, 0.8833821554, 0.0525295329],
     0.596318108, 0.528, 0.6),
    ("sigmoid", 0.5, 0.0, "sigmoid", [0.5759394199, 0.8259394199, 0.5333821554, 1.9102241504, 4.564e-07],
     0.7690971204, 2.64, 0.6),
    ("sigmoid", 0.1, 0.1, "aot", [0.673459648, 0.713459648, 0.6657595555, 0.8483821554, 0.3445295329],
     0.649118108, 0.528, 0.6),
    ("sigmoid", 0.5, 0.3, "aot", [0.6509394199, 0.7509394199, 0.6383821554, 1.3852241504, 4.3800004564],
     1.5610971204, 2.64, 0.6),
    ("hinge", 0.1, 0.0, "hinge", [0.95, 1.05, 0.93, 1.35, 0.0], 0.856, 0.528, 0.6),
    ("hinge", 2.0, 0.0, "hinge", [0.0, 2.0, 0.0, 8.0, 0.0], 2.0, 10.56, 0.6),
    ("ipo", 0.1, 0.0, "ipo", [24.1736111111, 43.890625, 19.8916, 33.0625, 22.2469444444],
     28.6530561111, 0.528, 0.6),
    ("ipo", 1.0, 0.0, "ipo", [0.1736111111, 4.515625, 0.0016, 1.5625, 84.9469444444], 18.2400561111, 5.28, 0.6),
    ("robust", 0.1, 0.0, "robust", [0.668459648, 0.718459648, 0.6587595555, 0.8833821554, 0.0525295329],
     0.596318108, 0.528, 0.6),
    ("robust", 0.1, 0.1, "robust", [0.662209648, 0.724709648, 0.6500095555, 0.9271321554, -0.3124704671],
     0.530318108, 0.528, 0.6),
    ("robust", 0.5, 0.3, "robust", [0.3884394199, 1.0134394199, 0.2708821554, 3.2227241504, -10.9499995436],
     -1.2109028796, 2.64, 0.6),
]


def _tensor(values, dtype):
    return torch.tensor(values, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("loss_type, beta, eps, trl_type, losses, mean, margin, accuracy", CASES,
                         ids=[f"{c[0]}-beta{c[1]}-eps{c[2]}" for c in CASES])
def test_dpo_loss_matches_trl(dtype, loss_type, beta, eps, trl_type, losses, mean, margin, accuracy) -> None:
    ours, chosen, rejected = dpo_loss(
        *(_tensor(v, dtype) for v in (CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED)), beta=beta, loss_type=loss_type,
        label_smoothing=eps, chosen_tokens=_tensor(CHOSEN_TOKENS, torch.long),
        rejected_tokens=_tensor(REJECTED_TOKENS, torch.long))
    # float32 carries ~7 significant digits: the ipo losses (up to 85) agree to their last float32 digit
    tol = 1e-6 if dtype == torch.float64 else 1e-6 * max(1.0, max(abs(x) for x in losses))
    assert ours.dtype == dtype
    assert ours.tolist() == pytest.approx(losses, abs=tol)
    assert float(ours.mean()) == pytest.approx(mean, abs=tol)
    assert chosen.tolist() == pytest.approx(REWARDS[beta][0], abs=1e-6)
    assert rejected.tolist() == pytest.approx(REWARDS[beta][1], abs=1e-6)
    assert float((chosen - rejected).mean()) == pytest.approx(margin, abs=1e-6)
    assert float((chosen > rejected).double().mean()) == pytest.approx(accuracy)


def test_robust_without_smoothing_is_dpo_and_ipo_reads_the_lengths() -> None:
    args = [torch.tensor(v, dtype=torch.float64) for v in (CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED)]
    assert torch.allclose(dpo_loss(*args, beta=0.3, loss_type="robust")[0], dpo_loss(*args, beta=0.3)[0])
    ones = torch.ones(len(CHOSEN))
    with_lengths = dpo_loss(*args, beta=0.3, loss_type="ipo", chosen_tokens=torch.tensor(CHOSEN_TOKENS),
                            rejected_tokens=torch.tensor(REJECTED_TOKENS))[0]
    per_sequence = dpo_loss(*args, beta=0.3, loss_type="ipo", chosen_tokens=ones, rejected_tokens=ones)[0]
    assert not torch.allclose(with_lengths, per_sequence)  # the lengths do enter IPO


def test_gradient_raises_the_chosen_and_lowers_the_rejected() -> None:
    # (ipo is left out: past its target margin 1 / (2 beta), pair 4 here, it pulls the two back together)
    for loss_type in ("sigmoid", "hinge", "robust"):
        args = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (CHOSEN, REJECTED, REF_CHOSEN,
                                                                                   REF_REJECTED)]
        loss = dpo_loss(*args, beta=0.1, loss_type=loss_type, chosen_tokens=torch.tensor(CHOSEN_TOKENS),
                        rejected_tokens=torch.tensor(REJECTED_TOKENS))[0]
        loss.sum().backward()
        chosen, rejected = args[0].grad, args[1].grad
        assert (chosen <= 0).all() and (rejected >= 0).all() and (chosen < 0).any(), loss_type
        assert torch.allclose(args[2].grad, -chosen) and torch.allclose(args[3].grad, -rejected)
    # at d = 0 the sigmoid loss is log 2 and its slope on the chosen log-prob is -beta / 2
    x = torch.zeros(1, requires_grad=True)
    z = torch.zeros(1)
    loss = dpo_loss(x, z, z, z, beta=0.1)[0]
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.6931472, abs=1e-6) and float(x.grad) == pytest.approx(-0.05)


@pytest.mark.parametrize("kwargs, message", [
    ({"beta": 0.0}, "beta must be a finite number > 0"),
    ({"loss_type": "sigmoidd"}, "loss must be one of sigmoid, hinge, ipo, robust"),
    ({"loss_type": "robust", "label_smoothing": 0.5}, r"label_smoothing must be a number in \[0, 0.5\)"),
    ({"loss_type": "hinge", "label_smoothing": 0.1}, "label_smoothing applies to the sigmoid and robust losses"),
    ({"loss_type": "ipo"}, "ipo loss needs chosen_tokens and rejected_tokens"),
])
def test_bad_options_are_refused(kwargs, message) -> None:
    x = torch.zeros(2)
    with pytest.raises(ValueError, match=message):
        dpo_loss(x, x, x, x, **{"beta": 0.1, **kwargs})
    with pytest.raises(ValueError, match="one shape"):
        dpo_loss(x, x, x, torch.zeros(3), beta=0.1)
