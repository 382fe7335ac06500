"""Dropout is off in the training forward, so fresh samples have ratio 1 even for models with dropout."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.core.types import Turn
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner


def test_training_forward_has_no_dropout(any_model_and_tokenizer):
    base, tok = any_model_and_tokenizer  # the tiny char Llama or the Qwen fixture, rebuilt with attention dropout
    config = copy.deepcopy(base.config)
    config.attention_dropout = 0.5
    torch.manual_seed(0)
    model = type(base)(config)
    policy = Policy(model, tok)
    prompt = policy.render([{"role": "user", "content": "3+4"}])
    model.train()
    with torch.no_grad():
        x = torch.tensor([prompt])
        assert not torch.allclose(model(x).logits, model(x).logits)  # the dropout is real
    model.eval()
    gens = policy.generate([prompt] * 8, SamplingParams(max_new_tokens=4))
    turns = [Turn(0, "e", f"s{i}", "solver", "p", g.prompt_ids, g.response_ids, g.logprobs, g.text, g.finished,
                  reward=float(i % 2), group_key=("e", "solver")) for i, g in enumerate(gens)]
    metrics = Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-8)).update(turns)
    assert metrics["logprob_drift"] < 1e-4
