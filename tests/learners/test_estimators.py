"""verl's estimators as cogym plug-ins (grpo_passk, opo, gpg, otb): their config keys and validation,
the policy statistics OTB takes from its own forward, and a learner update with each. Their numbers
against verl's functions: test_estimator_parity.py."""

from __future__ import annotations

import pytest
import torch
from test_learner import _turns

from cogym.agents.policy import Policy
from cogym.learners.algorithms import get
from cogym.learners.algorithms.otb import token_statistics
from cogym.learners.batch import TokenBatch, response_logp
from cogym.learners.config import LearnerConfig
from cogym.learners.estimators import otb_advantages, pf_ppo_weights, remax_advantages
from cogym.learners.learner import Learner

NEW = ("grpo_passk", "opo", "gpg", "otb")


def test_each_is_a_grouped_estimator_with_verl_defaults():
    assert all(get(name).grouped for name in NEW)
    cfg = LearnerConfig.from_flat(algorithm="grpo_passk")
    cfg.validate()
    assert cfg.settings("grpo_passk").grpo_eps == 1e-6 and cfg.settings("grpo_passk").passk_norm_by_std is True
    assert LearnerConfig.from_flat(algorithm="otb").settings("otb").otb_zero_tail is False


@pytest.mark.parametrize("keys, message", [
    ({"algorithm": "grpo_passk", "passk_norm_by_std": "yes"}, "passk_norm_by_std must be true or false"),
    ({"algorithm": "grpo_passk", "grpo_eps": -1.0}, "grpo_eps must be a finite number >= 0.0"),
    ({"algorithm": "otb", "otb_zero_tail": 1}, "otb_zero_tail must be true or false"),
])
def test_a_bad_value_is_one_line_naming_the_key(keys, message):
    cfg = LearnerConfig.from_flat(**keys)
    with pytest.raises(ValueError, match=message) as err:
        cfg.validate()
    assert "\n" not in str(err.value)


def test_the_keys_go_to_the_estimator_that_declares_them():
    cfg = LearnerConfig.from_flat(algorithm="otb", otb_zero_tail=True, role_algorithms={"proposer": "grpo_passk"},
                                  passk_norm_by_std=False)
    assert cfg.settings("otb").otb_zero_tail is True and cfg.settings("grpo_passk").passk_norm_by_std is False
    assert LearnerConfig.from_flat(**cfg.flat()) == cfg


def test_bad_modes_and_shapes_are_refused():
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match="pf_reweight must be one of pow, max_min, max_random"):
        pf_ppo_weights(torch.ones(2), "median")
    with pytest.raises(ValueError, match=r"baselines must have shape \(2,\)"):
        remax_advantages(mask, mask, torch.ones(3))
    with pytest.raises(ValueError, match="singleton must be one of"):
        otb_advantages(mask, mask, torch.tensor([0, 1]), mask, mask, singleton="mean")


def test_otb_statistics_are_the_policys_own(tiny_model_dir):
    """OTB's forward gives the learner's log-probs of the response tokens, and sum_v pi(v)^2 of each
    next-token distribution at the rollout's temperature."""
    policy = Policy.from_pretrained(str(tiny_model_dir))
    b = TokenBatch.from_turns(_turns(policy, n_groups=2, per_group=2), policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, sum_sq = token_statistics(policy.model, b, 0.7)
        expected_logp = response_logp(policy.model, b, 0.7, "off")
        logits = policy.model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    assert torch.allclose(logp, expected_logp, atol=1e-5)
    i, j = (b.mask > 0).nonzero()[-1].tolist()
    probs = torch.softmax(logits[i, b.resp_index[i, j]].float() / 0.7, -1)
    assert sum_sq[i, j] == pytest.approx(float((probs ** 2).sum()), rel=1e-5)
    assert 0 < float(sum_sq[b.mask > 0].min()) and float(sum_sq.max()) <= 1 and float(sum_sq[b.mask == 0].abs().sum()) == 0


@pytest.mark.parametrize("name", NEW)
def test_a_learner_updates_with_each(tiny_model_dir, name):
    policy = Policy.from_pretrained(str(tiny_model_dir))
    learner = Learner(policy, LearnerConfig(algorithm=name, engine="torch", lr=1e-3))
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    turns = _turns(policy)
    turns[0].reward = 2.0  # a unique best in group 0 (pass@k trains nothing where the top is tied)
    metrics = learner.update(turns)
    assert metrics["trained_rows"] == 8 and metrics["adv_abs_mean"] > 0
    assert metrics["solver/singleton_groups" if name != "otb" else "solver/otb_token_energy"] >= 0
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


@pytest.mark.parametrize("keys, message", [
    ({"pf_reweight": "median"}, "pf_reweight must be one of pow, max_min, max_random"),
    ({"pf_weight_pow": -1.0}, "pf_weight_pow must be a finite number >= 0.0"),
])
def test_pf_ppo_refuses_a_bad_value(keys, message):
    with pytest.raises(ValueError, match=message):
        LearnerConfig.from_flat(algorithm="pf_ppo", **keys).validate()


def test_pf_ppo_trains_on_the_batch_drawn_by_reward(tiny_model_dir, tmp_path):
    """With rewards 0 and 1, pow weights give the 0 rows 1e-8 of a 1 row's chance: the drawn batch is the
    rewarded rows, with repeats; the draw is the update number's, saved with the learner."""
    policy = Policy.from_pretrained(str(tiny_model_dir))
    turns = _turns(policy)
    learner = Learner(policy, LearnerConfig(algorithm="pf_ppo", engine="torch", lr=1e-3))
    first = learner.algorithm.train_batch(learner, turns)
    assert first.batch.scores.tolist() == [1.0] * 8 and first.rows["adv"].shape[0] == 8
    assert first.metrics["pf_distinct_rows"] <= 0.5  # 8 draws from the 4 rewarded rows
    assert first.extra["carry"]["pf_ppo"][1]["returns"].shape == first.batch.mask.shape  # the critic's targets follow
    again = Learner(policy, LearnerConfig(algorithm="pf_ppo", engine="torch", lr=1e-3))
    assert [t.seat for t in again.algorithm.train_batch(again, turns).batch.turns] == [t.seat for t in first.batch.turns]
    metrics = learner.update(turns)
    assert metrics["trained_rows"] == 8 and "vf_loss" in metrics
    learner.save(tmp_path)
    again.load(tmp_path)
    assert again.algorithm.updates == learner.algorithm.updates == 2


def test_vapo_lambda_follows_the_response_length():
    from cogym.learners.algorithms.vapo import length_adaptive_lambdas
    mask = torch.zeros(3, 400)
    mask[0, :20], mask[1, :100], mask[2, :400] = 1, 1, 1
    assert length_adaptive_lambdas(mask, 0.05).tolist() == pytest.approx([0.0, 0.8, 0.95])
    with pytest.raises(ValueError, match="vapo_critic_warmup must be an integer >= 0"):
        LearnerConfig.from_flat(algorithm="vapo", vapo_critic_warmup=-1).validate()
    with pytest.raises(ValueError, match="vapo_alpha must be a finite number > 0.0"):
        LearnerConfig.from_flat(algorithm="vapo", vapo_alpha=0.0).validate()


def test_vapo_warms_the_critic_up_then_trains_the_policy(tiny_model_dir):
    policy = Policy.from_pretrained(str(tiny_model_dir))
    turns = _turns(policy)
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="vapo", engine="torch", lr=1e-3, vapo_critic_warmup=1,
                                                      vapo_alpha=0.5))
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    critic = {k: v.clone() for k, v in learner.algorithm.critic.model.state_dict().items()}
    first = learner.update(turns)
    assert first["vapo_warmup"] == 1.0 and "vf_loss" in first and learner.steps == 0
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())  # the policy waits
    assert any(not torch.equal(critic[k], v) for k, v in learner.algorithm.critic.model.state_dict().items())
    second = learner.update(turns)
    assert "vapo_warmup" not in second and learner.steps == 1 and 0 <= second["solver/vapo_lambda_mean"] <= 1
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
