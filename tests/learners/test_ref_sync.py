"""The moving KL reference (``ref_sync_every`` / ``ref_sync_mix``): each weight of the reference
becomes mix * policy + (1 - mix) * reference every N optimizer steps, is saved with the learner and
comes back on load; configs that cannot use it are refused with the fix."""

from __future__ import annotations

import os

import pytest
import torch

from cogym.agents.policy import Policy
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import REFERENCE_FILE, Learner
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError

from test_learner import _snapshot, _turns

KL = dict(kl_in_loss="k3", kl_loss_coef=0.1)


def _learner(policy: Policy, **kw) -> Learner:
    return Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-3, **KL, **kw))


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_a_mix_of_one_copies_the_policy_after_each_step(policy):
    learner = _learner(policy, ref_sync_every=1, ref_sync_mix=1.0)
    start = _params(learner.ref_model)
    learner.update(_turns(policy))
    ref, pol = _params(learner.ref_model), _params(policy.model)
    assert any(not torch.equal(ref[n], start[n]) for n in ref)  # it moved ...
    for n, v in pol.items():
        assert torch.equal(ref[n], v), n  # ... onto the policy


def test_a_partial_mix_moves_each_weight_that_share_of_the_way(policy):
    learner = _learner(policy, ref_sync_every=1, ref_sync_mix=0.25)
    start = _params(learner.ref_model)
    learner.update(_turns(policy))
    ref, pol = _params(learner.ref_model), _params(policy.model)
    moved = 0
    for n, v in pol.items():
        torch.testing.assert_close(ref[n], 0.75 * start[n] + 0.25 * v, atol=1e-6, rtol=0)
        moved += not torch.equal(ref[n], start[n])
    assert moved > 0 and any(not torch.equal(ref[n], pol[n]) for n in ref)


def test_the_reference_moves_every_n_optimizer_steps(policy):
    learner = _learner(policy, ref_sync_every=2, ref_sync_mix=1.0)
    start = _snapshot(learner.ref_model)
    learner.update(_turns(policy, seed=0))
    assert all(torch.equal(v, start[k]) for k, v in learner.ref_model.state_dict().items())  # step 1: not yet
    learner.update(_turns(policy, seed=1))
    assert learner.steps == 2
    assert all(torch.equal(p, q) for p, q in zip(learner.ref_model.parameters(), policy.model.parameters()))


def test_a_frozen_reference_stays_the_initial_model(policy):
    learner = _learner(policy)  # ref_sync_every: 0, the default
    start = _snapshot(learner.ref_model)
    learner.update(_turns(policy))
    assert all(torch.equal(v, start[k]) for k, v in learner.ref_model.state_dict().items())


def test_the_moved_reference_is_saved_and_loaded(tiny_model_dir, tmp_path):
    policy = Policy.from_pretrained(tiny_model_dir)
    learner = _learner(policy, ref_sync_every=1, ref_sync_mix=0.5)
    learner.update(_turns(policy))
    learner.save(tmp_path)
    assert (tmp_path / REFERENCE_FILE).is_file()
    moved = _params(learner.ref_model)

    fresh = _learner(Policy.from_pretrained(tiny_model_dir), ref_sync_every=1, ref_sync_mix=0.5)
    assert any(not torch.equal(p, moved[n]) for n, p in fresh.ref_model.named_parameters())
    fresh.load(tmp_path)
    for n, p in fresh.ref_model.named_parameters():
        assert torch.equal(p, moved[n]), n
    assert fresh.steps == 1


def test_no_reference_file_without_a_moving_reference(policy, tmp_path):
    learner = _learner(policy)
    learner.update(_turns(policy))
    learner.save(tmp_path)
    assert not (tmp_path / REFERENCE_FILE).exists()


@pytest.mark.parametrize("keys, match", [
    (dict(ref_sync_every=1), "KL is off"),
    (dict(ref_sync_every=-1, **KL), "ref_sync_every must be an integer >= 0"),
    (dict(ref_sync_every=1.5, **KL), "ref_sync_every must be an integer"),
    (dict(ref_sync_every=1, ref_sync_mix=0.0, **KL), r"ref_sync_mix must be a number in \(0, 1\]"),
    (dict(ref_sync_every=1, ref_sync_mix=1.5, **KL), r"ref_sync_mix must be a number in \(0, 1\]"),
])
def test_a_learner_refuses_a_reference_that_cannot_move(policy, keys, match):
    with pytest.raises(ValueError, match=match):
        Learner(policy, LearnerConfig.from_flat(engine="torch", **keys))


@pytest.mark.parametrize("overrides, match", [
    (["learners.solver.ref_sync_every=1"], r"learners\.solver\.ref_sync_every=1 moves the KL reference, but KL is off"),
    (["learners.solver.kl_in_loss=k3", "learners.solver.ref_sync_every=1", "learners.solver.ref_sync_mix=2"],
     r"learners\.solver\.ref_sync_mix must be a number in \(0, 1\]"),
    (["learners.solver.kl_in_loss=k3", "learners.solver.ref_sync_every=1", "policies.solver.lora.r=4"],
     "a LoRA policy's KL reference is its base model"),
])
def test_the_config_refuses_a_reference_that_cannot_move(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_the_config_takes_a_moving_reference():
    cfg = load_config(None, ["learners.solver.kl_in_loss=k3", "learners.solver.ref_sync_every=4",
                             "learners.solver.ref_sync_mix=0.1"])
    lc = cfg.learners["solver"]
    assert (lc.ref_sync_every, lc.ref_sync_mix) == (4, 0.1)


@pytest.mark.slow
def test_a_zero3_reference_moves_onto_the_gathered_policy(monkeypatch, tiny_model_dir):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    os.environ["DS_ACCELERATOR"] = "cpu"
    policy = Policy.from_pretrained(tiny_model_dir)
    learner = Learner(policy, LearnerConfig.from_flat(engine="deepspeed", zero_stage=3, lr=1e-3, **KL,
                                                      ref_sync_every=1, ref_sync_mix=1.0))
    start = _params(learner.ref_model)
    learner.update(_turns(policy))
    with learner.engine.gathered_params():
        pol = _params(policy.model)
    ref = _params(learner.ref_model)
    assert any(not torch.equal(ref[n], start[n]) for n in ref)
    for n, v in pol.items():
        assert torch.equal(ref[n], v), n
