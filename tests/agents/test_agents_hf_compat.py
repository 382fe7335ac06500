"""Loading HF models that differ from the embedded one: no pad token, no chat template, sampling defaults of
their own (each on the tiny char model and on the Qwen fixture, ``any_model_and_tokenizer``)."""

from __future__ import annotations

import pytest

from cogym.agents.errors import ModelLoadError
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams


def test_missing_pad_token_uses_eos_and_generation_still_pads(any_model_and_tokenizer):
    model, tok = any_model_and_tokenizer
    tok.pad_token = None
    assert tok.pad_token_id is None
    policy = Policy(model, tok)
    assert tok.pad_token_id == tok.eos_token_id
    prompts = [policy.render([{"role": "user", "content": "1+1"}]), policy.render([{"role": "user", "content": "12+34"}])]
    assert len(prompts[0]) < len(prompts[1])  # the first is padded
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=4, temperature=0.0))
    # left padding with eos must not change a greedy answer
    alone = policy.generate(prompts[:1], SamplingParams(max_new_tokens=4, temperature=0.0))
    assert gens[0].response_ids == alone[0].response_ids


def test_missing_chat_template_is_a_load_error(any_model_and_tokenizer):
    model, tok = any_model_and_tokenizer
    tok.chat_template = None
    with pytest.raises(ModelLoadError, match="no chat template"):
        Policy(model, tok, name="base-lm")


def test_a_models_own_sampling_defaults_do_not_reshape_sampling(any_model_and_tokenizer):
    # e.g. a repetition penalty in generation_config.json: the behaviour log-probs are those of
    # logits / temperature, so the sampler must use exactly that distribution.
    model, tok = any_model_and_tokenizer
    model.generation_config.repetition_penalty = 5.0
    model.generation_config.top_k = 5
    policy = Policy(model, tok)
    assert policy.model.generation_config.repetition_penalty in (None, 1.0)
    import torch

    prompt = policy.render([{"role": "user", "content": "12+34"}])
    ids = torch.tensor([prompt])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=True,
                         temperature=1.0, top_p=1.0, top_k=0, output_logits=True, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
    assert torch.equal(torch.stack(out.scores), torch.stack(out.logits))
