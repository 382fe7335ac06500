"""Dropout is off in the training forward, so fresh samples have ratio 1 even for models with dropout."""

from __future__ import annotations

import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from transformers import LlamaConfig, LlamaForCausalLM

from cogym.agents.char_tokenizer import build_char_tokenizer
from cogym.agents.policy import Policy, SamplingParams
from cogym.agents.types import Turn
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner


def test_training_forward_has_no_dropout():
    tok = build_char_tokenizer()
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, attention_dropout=0.5, tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id))
    policy = Policy(model, tok)
    prompt = policy.render([{"role": "user", "content": "3+4"}])
    gens = policy.generate([prompt] * 8, SamplingParams(max_new_tokens=4))
    turns = [Turn(0, "e", f"s{i}", "solver", "p", g.prompt_ids, g.response_ids, g.logprobs, g.text, g.finished,
                  reward=float(i % 2), group_key=("e", "solver")) for i, g in enumerate(gens)]
    metrics = Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-8)).update(turns)
    assert metrics["logprob_drift"] < 1e-4
