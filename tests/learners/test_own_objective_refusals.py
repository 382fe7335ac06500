"""Algorithms with an objective of their own (SPIN, DPO, SFT, the reward model) refuse a policy-loss choice
instead of ignoring it: `policy_loss: gspo` on a DPO learner is a one-line error naming the key."""

from __future__ import annotations

import pytest

from cogym.learners.config import LearnerConfig


@pytest.mark.parametrize("algorithm", ["spin", "dpo", "sft", "reward_model"])
def test_an_algorithm_with_its_own_objective_refuses_a_policy_loss(algorithm: str) -> None:
    with pytest.raises(ValueError, match=r"policy_loss must be 'vanilla', got 'gspo' \(remove policy_loss"):
        LearnerConfig.from_flat(algorithm=algorithm, engine="torch", policy_loss="gspo").validate()
    LearnerConfig.from_flat(algorithm=algorithm, engine="torch").validate()  # its default is accepted


def test_a_policy_gradient_algorithm_takes_any_policy_loss() -> None:
    cfg = LearnerConfig.from_flat(algorithm="grpo", engine="torch", policy_loss="gspo")
    cfg.validate()
    assert cfg.policy_loss == "gspo"
