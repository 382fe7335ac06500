"""The reward model's pairwise losses against the peers' own functions, on fixed scores.

The expected values were computed once (float64) from:

* TRL 1.16.0, ``trl.trainer.reward_trainer.RewardTrainer.compute_loss`` (called with a stand-in model
  returning these scores as logits, chosen rows first; ``center_rewards_coefficient`` None): the loss
  without a ``margin`` input, with one, and its ``accuracy`` and ``margin`` metrics;
* OpenRLHF 0.11.2 (PyPI wheel), ``openrlhf/models/loss.py``: ``PairWiseLoss.forward`` without and
  with a margin (also pair by pair) and ``LogExpLoss.forward``.

No peer code is imported, fetched or vendored here.
"""

from __future__ import annotations

import pytest
import torch

from cogym.learners.reward_model import pair_metrics, pairwise_loss

CHOSEN = [1.5, -0.25, 0.0, 2.0, -3.0, 0.75]
REJECTED = [0.5, 0.25, 0.0, -1.0, -2.5, 4.0]
MARGIN = [0.0, 0.5, 1.0, 0.25, 2.0, 0.0]

TRL_COMPUTE_LOSS = 1.048531926616651  # RewardTrainer.compute_loss, no margin
TRL_COMPUTE_LOSS_MARGIN = 1.4781139595897  # with inputs["margin"] = MARGIN
TRL_ACCURACY, TRL_MARGIN = 0.3333333432674408, -0.041666666666666664  # its _metrics (accuracy is a float32 mean)
OPENRLHF_PAIRWISE = 1.048531926616651  # PairWiseLoss()(chosen, rejected)
OPENRLHF_PAIRWISE_MARGIN = 1.4781139595897  # PairWiseLoss()(chosen, rejected, margin)
OPENRLHF_PAIRWISE_PER_PAIR = [0.31326168751822286, 1.3132616875182228, 1.3132616875182228, 0.061967589003198625,
                              2.5788897342925496, 3.288041371687783]  # PairWiseLoss on each pair alone, with its margin
OPENRLHF_LOGEXP = 1.048531926616651  # LogExpLoss()(chosen, rejected)


def scores():
    return tuple(torch.tensor(x, dtype=torch.float64) for x in (CHOSEN, REJECTED, MARGIN))


@pytest.mark.parametrize("expected, margin", [(TRL_COMPUTE_LOSS, False), (TRL_COMPUTE_LOSS_MARGIN, True),
                                              (OPENRLHF_PAIRWISE, False), (OPENRLHF_PAIRWISE_MARGIN, True)])
def test_bt_loss_matches_trl_and_openrlhf(expected, margin):
    c, r, m = scores()
    loss = pairwise_loss(c, r, m if margin else 0.0, "bt").mean()
    assert float(loss) == pytest.approx(expected, abs=1e-6)


def test_bt_loss_per_pair_matches_openrlhf():
    c, r, m = scores()
    assert pairwise_loss(c, r, m, "bt").tolist() == pytest.approx(OPENRLHF_PAIRWISE_PER_PAIR, abs=1e-6)


def test_logexp_loss_matches_openrlhf():
    c, r, _ = scores()
    assert float(pairwise_loss(c, r, 0.0, "logexp").mean()) == pytest.approx(OPENRLHF_LOGEXP, abs=1e-6)


def test_metrics_match_trl():
    c, r, _ = scores()
    m = pair_metrics(c, r)
    assert m["accuracy"] == pytest.approx(TRL_ACCURACY, abs=1e-6)
    assert m["margin"] == pytest.approx(TRL_MARGIN, abs=1e-6)


def test_losses_are_stable_and_refuse_what_they_cannot_mean():
    big = torch.tensor([1000.0, -1000.0], dtype=torch.float64)
    assert torch.isfinite(pairwise_loss(big, -big, 0.0, "logexp")).all()
    assert pairwise_loss(big, -big, 0.0, "bt").tolist() == pytest.approx([0.0, 2000.0])
    with pytest.raises(ValueError, match="no margin"):
        pairwise_loss(big, -big, 0.5, "logexp")
    with pytest.raises(ValueError, match="rm_loss must be one of"):
        pairwise_loss(big, -big, 0.0, "hinge")
