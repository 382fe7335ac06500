"""VAPO's positive-example LM loss (cogym/learners/algorithms/vapo.py): ``L = L_PPO + mu * L_NLL``, ``L_NLL``
the token-mean negative log-likelihood of the positive rows, on fixed tensors and in a learner update."""

from __future__ import annotations

import pytest
import torch
from test_learner import _turns

from cogym.agents.policy import Policy
from cogym.core.types import Turn
from cogym.learners.algorithm import Algorithm
from cogym.learners.algorithms.vapo import LM_WEIGHT, lm_weights, positive_rows
from cogym.learners.batch import TokenBatch, response_logp
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner
from cogym.learners.rows import MicroStep

# Three rows of four response tokens; row 1 holds a game message (mask 0) between two of the model's.
MASK = [[1, 1, 1, 0], [1, 0, 1, 1], [1, 1, 0, 0]]
LOGP_OLD = [[-1.2, -0.4, -2.3, 0.0], [-0.7, 0.0, -0.2, -3.0], [-0.5, -1.1, 0.0, 0.0]]
DELTA = [[0.05, -0.5, 0.3, 0.0], [0.8, 0.0, 0.12, 0.4], [-0.3, 0.25, 0.0, 0.0]]
ADV = [[1.3, -0.2, 0.6, 0.0], [-0.9, 0.0, -0.3, 0.8], [0.5, -1.4, 0.0, 0.0]]


def fixed_turns(correct: list) -> list[Turn]:
    return [Turn(game_index=0, episode_id="ep", seat=f"solver_{i}", role="solver", policy_id="solver",
                 prompt_ids=[5, 6], response_ids=[7, 8, 9, 10], logprobs=LOGP_OLD[i], text="", finished=True,
                 reward=float(i), info={"correct": c}, mask=MASK[i])
            for i, c in enumerate(correct)]


def loss_and_grad(alg: Algorithm, weights: torch.Tensor | None, base: bool = False):
    b = TokenBatch.from_turns(fixed_turns([True, False, True]), 0)
    logp = (b.logp_old + torch.tensor(DELTA)).requires_grad_(True)
    rows = {"adv": torch.tensor(ADV)} if weights is None else {"adv": torch.tensor(ADV), LM_WEIGHT: weights}
    step = MicroStep(b, logp, None, rows, 0, float(b.mask.sum()), 3.0)
    loss, metrics = Algorithm.loss(alg, step) if base else alg.loss(step)
    loss.backward()
    return loss.detach(), logp.grad, metrics, logp.detach(), b.mask


@pytest.fixture
def vapo(tiny_model_dir):
    policy = Policy.from_pretrained(str(tiny_model_dir))
    return Learner(policy, LearnerConfig.from_flat(algorithm="vapo", engine="torch", vapo_lm_coef=0.3)).algorithm


def test_the_loss_is_ppos_plus_mu_times_the_positive_rows_nll(vapo):
    ppo, ppo_grad, _, logp, mask = loss_and_grad(vapo, None, base=True)
    positive = torch.tensor([True, False, True])
    loss, grad, metrics, _, _ = loss_and_grad(vapo, lm_weights(positive, mask))
    nll = -(logp * mask)[positive].sum() / mask[positive].sum()  # by hand: 5 tokens of rows 0 and 2
    assert float(nll) == pytest.approx((1.2 - 0.05 + 0.4 + 0.5 + 2.3 - 0.3 + 0.5 + 0.3 + 1.1 - 0.25) / 5)
    assert metrics["vapo_lm_nll"] == pytest.approx(float(nll), abs=1e-6)
    assert torch.allclose(loss, ppo + 0.3 * nll, atol=1e-6)
    lm_grad = -0.3 * mask * positive[:, None] / 5  # d(mu * NLL) / d logp
    assert torch.allclose(grad, ppo_grad + lm_grad, atol=1e-7)
    assert not torch.allclose(grad, ppo_grad)


def test_without_a_positive_row_the_loss_is_ppos(vapo):
    ppo, ppo_grad, _, _, mask = loss_and_grad(vapo, None, base=True)
    loss, grad, metrics, _, _ = loss_and_grad(vapo, lm_weights(torch.zeros(3, dtype=torch.bool), mask))
    assert torch.equal(loss, ppo) and torch.equal(grad, ppo_grad) and metrics["vapo_lm_nll"] == 0.0


def test_positive_rows_come_from_the_correct_flag_or_the_reward():
    turns = fixed_turns([True, False, None])  # rewards 0, 1, 2
    assert positive_rows(turns, None).tolist() == [True, False, False]
    assert positive_rows(turns, 0.5).tolist() == [False, True, True]
    assert positive_rows(turns, 1.0).tolist() == [False, False, True]
    w = lm_weights(torch.tensor([True, False, True]), torch.tensor(MASK, dtype=torch.float32))
    assert w.tolist() == pytest.approx([0.2, 0.0, 0.2])


@pytest.mark.parametrize("keys, message", [
    ({"vapo_lm_coef": -0.1}, "vapo_lm_coef must be a finite number >= 0.0"),
    ({"vapo_lm_threshold": float("nan")}, "vapo_lm_threshold must be a finite number"),
])
def test_vapo_refuses_a_bad_lm_key(keys, message):
    with pytest.raises(ValueError, match=message):
        LearnerConfig.from_flat(algorithm="vapo", **keys).validate()


def test_an_update_reports_the_nll_of_the_correct_rows(tiny_model_dir):
    """After the warm-up the metric is the positive rows' token-mean NLL under the model before the step."""
    policy = Policy.from_pretrained(str(tiny_model_dir))
    turns = _turns(policy)
    for t in turns:
        t.info = {"correct": t.reward == 1.0}
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="vapo", engine="torch", lr=1e-3, vapo_critic_warmup=0))
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = response_logp(policy.model, b, 1.0, "off")
    positive = torch.tensor([t.reward == 1.0 for t in turns])
    expected = float(-(logp * b.mask)[positive].sum() / b.mask[positive].sum())
    metrics = learner.update(turns)
    assert metrics["vapo_lm_rows"] == 4.0
    assert metrics["vapo_lm_nll"] == pytest.approx(expected, rel=1e-4)
    off = Learner(policy, LearnerConfig.from_flat(algorithm="vapo", engine="torch", vapo_critic_warmup=0, vapo_lm_coef=0))
    assert "vapo_lm_nll" not in off.update(turns)
