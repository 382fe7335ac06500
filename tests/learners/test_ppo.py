"""PPO with a critic: GAE against a value model that trains on the clipped value loss, saved and resumed exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_learner import _turns

from cogym.agents.policy import Policy
from cogym.learners.config import LearnerConfig
from cogym.learners.critic import Critic
from cogym.learners.gae import gae_advantages
from cogym.learners.learner import Learner, TokenBatch
from cogym.learners.pipeline import role_advantages
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError
from cogym.runners.train.loop import train


def _ppo(policy: Policy, **kw) -> Learner:
    return Learner(policy, LearnerConfig.from_flat(algorithm="ppo", engine="torch", lr=1e-3, critic_lr=1e-2, **kw))


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_the_critic_starts_at_zero_and_gae_then_equals_the_outcome_returns(any_policy: Policy) -> None:
    policy = any_policy
    learner = _ppo(policy)
    turns = _turns(policy)
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    values = learner.algorithms["ppo"].critic.values(b, micro_batch_size=3)
    assert values.shape == b.mask.shape and torch.count_nonzero(values) == 0  # zero head: V = 0 everywhere
    adv, _, _ = learner.advantages(b, None)  # PPO's prepare() computes the critic's values first
    # gamma = lam = 1 and V = 0: every token's raw advantage is the episode return, then whitened over the batch.
    rewards = torch.zeros_like(b.mask)
    last = b.mask.sum(1).long() - 1
    rewards[torch.arange(len(turns)), last] = b.scores
    expected, returns = gae_advantages(rewards, values, b.mask, gamma=1.0, lam=1.0, whiten_mode="verl")
    assert torch.allclose(adv, expected.to(adv.dtype))
    _, _, _, carry = role_advantages(learner, b, None)  # PPO's per-row returns, handed to its critic after the step
    assert torch.allclose(carry["ppo"][1]["returns"], (b.scores[:, None] * b.mask).to(adv.dtype))


def test_one_ppo_update_trains_the_policy_and_the_critic(any_policy: Policy) -> None:
    policy = any_policy
    learner = _ppo(policy)
    policy_before, critic_before = _snapshot(policy.model), _snapshot(learner.algorithms["ppo"].critic.model)
    metrics = learner.update(_turns(policy))
    assert {"loss", "vf_loss", "vf_clipfrac", "solver/value_mean"} <= set(metrics)
    assert metrics["vf_loss"] > 0  # V = 0 against returns of 0 and 1
    assert any(not torch.equal(v, policy_before[k]) for k, v in policy.model.state_dict().items())
    assert not torch.equal(learner.algorithms["ppo"].critic.model.head.weight, critic_before["head.weight"])
    # The critic is its own model: training it never touched the policy's weights through a shared tensor.
    assert learner.algorithms["ppo"].critic.model.lm is not policy.model
    # A second update sees non-zero values from the trained critic.
    b = TokenBatch.from_turns(_turns(policy, seed=1), policy.tokenizer.pad_token_id)
    assert torch.count_nonzero(learner.algorithms["ppo"].critic.values(b, 8)) > 0


def test_only_ppo_roles_train_the_critic(policy: Policy) -> None:
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="grpo", role_algorithms={"proposer": "ppo"}, engine="torch",
                                            critic_lr=1e-2))
    before = _snapshot(learner.algorithms["ppo"].critic.model)
    metrics = learner.update(_turns(policy, role="solver"))  # no proposer rows: the critic has nothing to learn
    assert "vf_loss" not in metrics
    assert all(torch.equal(v, before[k]) for k, v in learner.algorithms["ppo"].critic.model.state_dict().items())
    metrics = learner.update(_turns(policy, role="solver") + _turns(policy, role="proposer", seed=2))
    assert "vf_loss" in metrics and "proposer/value_mean" in metrics


def test_critic_save_and_load_continue_exactly(policy: Policy, tmp_path: Path) -> None:
    cfg = LearnerConfig.from_flat(algorithm="ppo", engine="torch", critic_lr=1e-2)
    critic = Critic(policy.model, cfg, lr=1e-2)
    b = TokenBatch.from_turns(_turns(policy), policy.tokenizer.pad_token_id)
    returns = b.scores[:, None] * b.mask
    critic.update(b, critic.values(b, 8), returns, 8)
    critic.save(tmp_path)
    resumed = Critic(policy.model, cfg, weights=tmp_path, lr=1e-2)
    resumed.load_optimizer(tmp_path)
    assert torch.equal(critic.values(b, 8), resumed.values(b, 8))
    critic.update(b, critic.values(b, 8), returns, 8)
    resumed.update(b, resumed.values(b, 8), returns, 8)  # Adam's second step: needs the restored moments
    assert torch.equal(critic.values(b, 8), resumed.values(b, 8))


def _cfg(model_dir: Path, out: Path, iterations: int):
    return load_config(None, [f"policies.proposer.model={model_dir}", f"policies.solver.model={model_dir}",
                              "seats.proposer=scripted:random", "learners.solver.algorithm=ppo",
                              "learners.solver.engine=torch", "learners.solver.critic_lr=1e-2", "game.num_games=2",
                              "game.kwargs.num_solvers=2", "policies.solver.sampling.max_new_tokens=4",
                              "eval.declared=false", "run.tensorboard=false", "run.plot=false",
                              f"run.iterations={iterations}", "run.checkpoint_every=1", f"run.out_dir={out}"])


def test_a_ppo_run_resumes_exactly_with_its_critic(tiny_model_dir: Path, tmp_path: Path) -> None:
    timing = ("rollout_s", "update_s", "iteration_s", "tokens_per_s")

    def rows(path: Path) -> list[dict]:
        lines = (path / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if k not in timing} for x in lines if "rollout_s" in x]

    train(_cfg(tiny_model_dir, tmp_path, 3), tmp_path / "straight", progress=False)
    train(_cfg(tiny_model_dir, tmp_path, 2), tmp_path / "resumed", progress=False)
    assert (tmp_path / "resumed" / "checkpoints" / "step_000002" / "learners" / "solver" / "critic" / "critic.safetensors").is_file()
    train(load_config(tmp_path / "resumed" / "config.yaml", ["run.iterations=3"]), tmp_path / "resumed", resume=True,
          progress=False)
    a, b = rows(tmp_path / "straight"), rows(tmp_path / "resumed")
    assert "solver/vf_loss" in a[-1] and a == b


def test_ppo_settings_are_checked_at_load(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="critic_lr must be a finite number > 0"):
        load_config(None, ["learners.solver.algorithm=ppo", "learners.solver.critic_lr=0"])
    with pytest.raises(ConfigError, match="value_clip must be > 0 or null"):
        load_config(None, ["learners.solver.algorithm=ppo", "learners.solver.value_clip=-1"])
    with pytest.raises(ConfigError, match="lam must be a finite number in"):
        load_config(None, ["learners.solver.algorithm=ppo", "learners.solver.lam=1.5"])
