"""A model as users bring them: Qwen2.5's byte-level BPE (151,643 ranks), ChatML, two eos ids, its own
sampling defaults, a vocabulary padded past the tokenizer (``tests/qwen_fixture.py``)."""

from __future__ import annotations

import json

import pytest
import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.envs import make
from cogym.runners.rollout.tokens import ChatCodec
from model_helpers import full_logp, hub_cache

IM_END, ENDOFTEXT = 151645, 151643


def test_the_fixture_tokenizes_as_qwen25(qwen_policy) -> None:
    tok = qwen_policy.tokenizer
    assert tok.encode("Hello world 123", add_special_tokens=False) == [9707, 1879, 220, 16, 17, 18]  # Qwen2.5's ids
    assert qwen_policy.eos_ids == [ENDOFTEXT, IM_END]  # the tokenizer's eos and the generation config's
    assert qwen_policy.model.get_output_embeddings().weight.shape[0] == 151936 > len(tok) == 151646
    ids = qwen_policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": "2+3="}])
    assert tok.decode(ids) == "<|im_start|>system\nSolve.<|im_end|>\n<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n"
    assert qwen_policy.decode([9707, IM_END, 151900]) == "Hello"  # special and padded ids are no text


def test_behaviour_logprobs_equal_a_fresh_forward_on_a_real_vocabulary(qwen_policy) -> None:
    prompts = [qwen_policy.render([{"role": "user", "content": t}]) for t in ["2+3=", "What is 7*8?", "Hi"]]
    torch.manual_seed(0)
    for gen in qwen_policy.generate(prompts, SamplingParams(max_new_tokens=6, temperature=0.7)):
        assert gen.logprobs == pytest.approx(full_logp(qwen_policy, gen.prompt_ids, gen.response_ids, 0.7), abs=1e-5)


def test_either_eos_id_ends_a_token_level_message_through_plain_pettingzoo_calls(qwen_policy) -> None:
    codec = ChatCodec(qwen_policy, {"proposer": "Propose.", "solver": "Solve."})
    env = make("proposer_solver-v0", granularity="token", codec=codec, num_solvers=1)
    env.reset(seed=0)
    for t in codec.encode("3+4") + [IM_END]:  # the chat end, not the smallest eos id
        env.step(t)
    assert not env.in_message("proposer") and env.env.observe("solver_0")["text"] == "3+4"
    for t in codec.encode("7") + [ENDOFTEXT]:
        env.step(t)
    assert env.rewards["solver_0"] == 1.0 and all(env.terminations.values())


def test_a_hub_id_loads_offline_and_a_checkpoint_keeps_the_generation_config(qwen_model_dir, tmp_path,
                                                                            monkeypatch) -> None:
    import huggingface_hub.constants

    hub_cache(tmp_path / "hub", "acme/qwen-fixture", qwen_model_dir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    policy = Policy.from_pretrained("acme/qwen-fixture")
    assert policy.name == "qwen-fixture" and policy.eos_ids == [ENDOFTEXT, IM_END]
    policy.save(tmp_path / "saved")

    def settings(path):
        data = json.loads((path / "generation_config.json").read_text())
        data.pop("transformers_version", None)
        return data

    assert settings(tmp_path / "saved") == settings(qwen_model_dir)
    side = lambda path: json.loads((path / "tokenizer_config.json").read_text()).get("padding_side")  # noqa: E731
    assert side(tmp_path / "saved") == side(qwen_model_dir) == "right"


@pytest.mark.parametrize("model_name", ["qwen"])
def test_the_model_facing_tests_copy_of_the_tokenizer_is_a_fresh_load(new_policy, _qwen_tokenizer, tmp_path) -> None:
    """conftest loads the Qwen tokenizer once a session and hands each ``Policy.from_pretrained`` a copy: a copy
    tokenizes as Qwen2.5 does, and what cogym sets on one copy reaches neither the loaded one nor another copy."""
    a, b = new_policy(), new_policy()
    assert a.tokenizer is not b.tokenizer and a.tokenizer is not _qwen_tokenizer
    assert a.tokenizer.encode("Hello world 123", add_special_tokens=False) == [9707, 1879, 220, 16, 17, 18]
    assert a.tokenizer.padding_side == b.tokenizer.padding_side == "left"
    assert (_qwen_tokenizer.padding_side, _qwen_tokenizer.pad_token) == ("right", "<|endoftext|>")
    assert a._as_loaded[1:] == ("right", "<|endoftext|>")  # what a save writes back
    a.tokenizer.pad_token = None
    assert b.tokenizer.pad_token_id == _qwen_tokenizer.pad_token_id == ENDOFTEXT
    b.save(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "tokenizer_config.json").read_text())["padding_side"] == "right"
