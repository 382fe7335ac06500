"""Policy: loading by path, batched generation, behaviour log-probabilities (token-in/token-out)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from cogym.agents.errors import ModelLoadError
from cogym.agents.loading import tiny_model_path
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from model_helpers import hub_cache

MESSAGES = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "37+45"}]


def _prompts(policy: Policy) -> list[list[int]]:
    """Prompts of different lengths, so the batch is left-padded."""
    return [
        policy.render(MESSAGES),
        policy.render([{"role": "user", "content": "1+2"}]),
        policy.render([{"role": "system", "content": "Propose."}, {"role": "user", "content": "Propose a problem."}]),
        policy.render([{"role": "user", "content": "99*99"}]),
    ]


def _fresh_logprobs(policy: Policy, prompt: list[int], response: list[int], temperature: float = 1.0) -> torch.Tensor:
    """Log-probs of ``response`` after ``prompt`` from one unpadded forward pass."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float() / temperature  # (P+R, V)
    logp = torch.log_softmax(logits[len(prompt) - 1: len(prompt) + len(response) - 1], dim=-1)
    return logp.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


# ------------------------------------------------------------------ loading
def test_nonexistent_path_raises_model_load_error_naming_it(tmp_path):
    missing = tmp_path / "no" / "such" / "model"
    with pytest.raises(ModelLoadError, match="does not exist") as err:
        Policy.from_pretrained(missing)
    assert str(missing) in str(err.value)


def test_file_instead_of_directory_raises(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_text("x")
    with pytest.raises(ModelLoadError) as err:
        Policy.from_pretrained(f)
    assert str(f) in str(err.value)


def test_directory_without_config_json_raises_naming_it(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="config.json") as err:
        Policy.from_pretrained(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_model_load_error_is_a_value_error():
    # Callers that catch ValueError for bad input also catch a bad model path.
    assert issubclass(ModelLoadError, ValueError)


def test_invalid_config_json_raises_model_load_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError) as err:
        Policy.from_pretrained(tmp_path)
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_broken_weights_raise_model_load_error(tiny_model_dir, tmp_path, damage):
    broken = tmp_path / damage
    shutil.copytree(tiny_model_dir, broken)
    if damage == "missing":
        (broken / "model.safetensors").unlink()
    else:
        (broken / "model.safetensors").write_text("garbage")
    with pytest.raises(ModelLoadError) as err:
        Policy.from_pretrained(broken)
    assert str(broken) in str(err.value)


def test_tiny_names_the_embedded_model_directory():
    path = tiny_model_path()
    assert path.name == "tiny" and path.parent.name == "agents"


def test_loaded_policy_matches_the_saved_model(model_dir, model_name):
    import json

    from safetensors.torch import load_file

    saved = load_file(str(Path(model_dir) / "model.safetensors"))
    p = Policy.from_pretrained(model_dir)
    assert p.name == Path(model_dir).name
    assert Policy.from_pretrained(model_dir, name="solver").name == "solver"
    loaded = p.model.state_dict()
    assert saved
    for k, v in saved.items():
        assert torch.equal(loaded[k], v), k
    # The eos ids: the tokenizer's and the generation config's (Qwen: <|im_end|> and <|endoftext|>).
    own = json.loads((Path(model_dir) / "generation_config.json").read_text())["eos_token_id"]
    assert p.eos_ids == sorted({p.tokenizer.eos_token_id, *(own if isinstance(own, list) else [own])})
    assert len(p.eos_ids) == {"tiny": 1, "qwen": 2}[model_name]
    assert p.tokenizer.padding_side == "left"
    assert not p.model.training


def test_save_then_load_round_trips_weights(any_policy, tmp_path):
    policy = any_policy
    with torch.no_grad():
        for prm in policy.model.parameters():
            prm.add_(0.01)
    policy.save(tmp_path / "p")
    again = Policy.from_pretrained(tmp_path / "p")
    for (k, a), b in zip(policy.model.state_dict().items(), again.model.state_dict().values()):
        assert torch.equal(a, b), k
    assert again.render(MESSAGES) == policy.render(MESSAGES)


# ------------------------------------------------------------------ rendering
RENDERED = {  # MESSAGES through each test model's chat template, with the assistant generation prompt
    "tiny": "<|system|>Solve.<|end|><|user|>37+45<|end|><|assistant|>",
    "qwen": "<|im_start|>system\nSolve.<|im_end|>\n<|im_start|>user\n37+45<|im_end|>\n<|im_start|>assistant\n",
}


def test_render_uses_the_chat_template(any_policy, model_name):
    ids = any_policy.render(MESSAGES)
    assert any_policy.tokenizer.decode(ids) == RENDERED[model_name]
    assert all(isinstance(i, int) for i in ids)
    ids.append(0)  # a caller's list: the cached rendering is not changed through it
    assert any_policy.tokenizer.decode(any_policy.render(MESSAGES)) == RENDERED[model_name]


# ------------------------------------------------------------------ sampling params
@pytest.mark.parametrize("kwargs, match", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(temperature=-0.1), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
])
def test_sampling_params_validate(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_temperature_zero_is_greedy():
    assert SamplingParams(temperature=0).greedy and not SamplingParams(temperature=0.7).greedy


# ------------------------------------------------------------------ generation
def test_generate_empty_batch(policy):
    assert policy.generate([], SamplingParams()) == []


def test_generate_shapes_eos_and_logprobs(policy):
    torch.manual_seed(0)
    sampling = SamplingParams(max_new_tokens=40, temperature=1.0)
    prompts = _prompts(policy) * 8
    gens = policy.generate(prompts, sampling)
    assert len(gens) == len(prompts)
    eos = policy.tokenizer.eos_token_id
    finished = [g for g in gens if g.finished]
    unfinished = [g for g in gens if not g.finished]
    # A random 103-token model stops within 40 tokens sometimes, not always (seeded: both happen).
    assert finished and unfinished
    for g, p in zip(gens, prompts):
        assert g.prompt_ids == p
        assert len(g.logprobs) == len(g.response_ids) >= 1
        assert all(lp <= 0.0 for lp in g.logprobs)
        assert all(isinstance(i, int) for i in g.response_ids)
        assert eos not in g.response_ids[:-1], "generation must stop at the first end token"
        assert g.text == policy.decode(g.response_ids)
    for g in finished:
        assert g.response_ids[-1] == eos
    for g in unfinished:
        assert len(g.response_ids) == sampling.max_new_tokens
        assert g.response_ids[-1] != eos


def test_greedy_generation_is_deterministic(any_policy):
    policy = any_policy
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    prompts = _prompts(policy)
    torch.manual_seed(1)
    a = policy.generate(prompts, greedy)
    torch.manual_seed(2)
    b = policy.generate(prompts, greedy)
    assert [g.response_ids for g in a] == [g.response_ids for g in b]
    for x, y in zip(a, b):
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-6)


def test_greedy_batch_equals_one_prompt_at_a_time(any_policy):
    policy = any_policy
    # Left padding must not change what a prompt generates.
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    prompts = _prompts(policy)
    batched = policy.generate(prompts, greedy)
    for p, g in zip(prompts, batched):
        alone = policy.generate([p], greedy)[0]
        assert alone.response_ids == g.response_ids
        assert alone.logprobs == pytest.approx(g.logprobs, abs=1e-4)


def test_greedy_picks_the_argmax(any_policy):
    policy = any_policy
    prompt = policy.render(MESSAGES)
    g = policy.generate([prompt], SamplingParams(max_new_tokens=6, temperature=0.0))[0]
    ids = torch.tensor([prompt + g.response_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0]
    argmax = logits[len(prompt) - 1: len(prompt) + len(g.response_ids) - 1].argmax(-1).tolist()
    assert argmax == g.response_ids


@pytest.mark.parametrize("temperature", [1.0, 0.0, 0.5])
def test_behaviour_logprobs_equal_a_fresh_forward_pass(any_policy, temperature):
    policy = any_policy
    torch.manual_seed(3)
    prompts = _prompts(policy) * 2
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=10, temperature=temperature))
    scale = 1.0 if temperature == 0.0 else temperature
    for p, g in zip(prompts, gens):
        fresh = _fresh_logprobs(policy, p, g.response_ids, temperature=scale)
        torch.testing.assert_close(torch.tensor(g.logprobs), fresh, atol=1e-4, rtol=0)


def test_generate_restores_training_mode(any_policy):
    policy = any_policy
    policy.model.train()
    policy.generate([policy.render(MESSAGES)], SamplingParams(max_new_tokens=2))
    assert policy.model.training
    policy.model.eval()
    policy.generate([policy.render(MESSAGES)], SamplingParams(max_new_tokens=2))
    assert not policy.model.training


def _generate_keeping_every_step(policy, prompts, sampling, keys):
    """Generation as it was before log-probs were taken step by step: every step's raw logits kept
    (``output_logits``), stacked (B, T, V), then one log-softmax (the same padding and keyed draws)."""
    from cogym.agents import cascade
    from cogym.agents.backends.hf import PAD_MULTIPLE, _KeyedDraw, shared_prefill

    pad = policy.tokenizer.pad_token_id
    width = -(-max(len(p) for p in prompts) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
    kwargs = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=pad, eos_token_id=policy.eos_ids,
                  return_dict_in_generate=True, output_logits=True, do_sample=False)
    if not sampling.greedy:
        kwargs.update(logits_processor=[_KeyedDraw(sampling, keys)])
    policy.model.eval()
    # the backend's prefill (each distinct prompt once) and its decode plan (each prompt read once per block of rows)
    kwargs.update(shared_prefill(policy.model, ids, mask, room=sampling.max_new_tokens))
    with cascade.use_cascade(policy.model, kwargs.pop("cascade", None)):
        out = policy.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    new = out.sequences[:, width:]
    temp = 1.0 if sampling.greedy else sampling.temperature
    logp = torch.log_softmax(torch.stack(out.logits, dim=1).float() / temp, dim=-1)
    return new, logp.gather(-1, new.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("sampling", [SamplingParams(max_new_tokens=12, temperature=0.7, top_k=5, top_p=0.9),
                                      SamplingParams(max_new_tokens=12, temperature=1.0),
                                      SamplingParams(max_new_tokens=12, temperature=0.0)], ids=["filtered", "plain", "greedy"])
def test_step_by_step_logprobs_equal_those_of_every_step_kept(any_policy, sampling):
    """Log-probs are taken a step at a time (memory of one step's logits, not all of them): the same tokens
    and bit for bit the same log-probs as keeping every step's logits."""
    policy = any_policy
    # 20 prompts: no filling up to MIN_ROWS, so the reference below runs the very same batch
    prompts = [policy.render([{"role": "user", "content": t}]) for t in ["1+1=", "22*3=", "7", "100-99=", "5*5="] * 4]
    keys = list(range(11, 31))
    got = policy.generate(prompts, sampling, keys)
    new, logp = _generate_keeping_every_step(policy, prompts, sampling, keys)
    for i, g in enumerate(got):
        n = len(g.response_ids)
        assert g.response_ids == new[i, :n].tolist() and g.logprobs == logp[i, :n].tolist()
    assert not policy.model._forward_hooks  # the step hook is gone


def test_the_step_hook_goes_even_when_generation_fails(policy, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("out of memory, say")

    monkeypatch.setattr(policy.model, "generate", broken)
    with pytest.raises(RuntimeError, match="out of memory"):
        policy.generate([policy.render([{"role": "user", "content": "1+1="}])], SamplingParams(max_new_tokens=3))
    assert not policy.model._forward_hooks


def test_a_checkpoint_keeps_the_models_own_generation_and_tokenizer_settings(tiny_model_dir, tmp_path):
    """cogym samples with its own settings, but a saved policy is the model as it came: its generation
    config (sampling defaults, eos ids in their order) and the tokenizer's padding side and pad token."""
    import json

    src = tmp_path / "src"
    shutil.copytree(tiny_model_dir, src)
    own = {"bos_token_id": 2, "eos_token_id": [3, 1], "pad_token_id": 0, "top_k": 20, "repetition_penalty": 1.05,
           "do_sample": True, "temperature": 0.7}
    (src / "generation_config.json").write_text(json.dumps(own))
    tok = json.loads((src / "tokenizer_config.json").read_text())
    tok["padding_side"] = "right"
    (src / "tokenizer_config.json").write_text(json.dumps(tok))
    policy = Policy.from_pretrained(src)
    assert policy.eos_ids == [1, 3] and policy.tokenizer.padding_side == "left"
    assert policy.model.generation_config.top_k in (None, 50) and policy.model.generation_config.repetition_penalty in (None, 1.0)
    policy.save(tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert {k: saved.get(k) for k in own} == own
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["padding_side"] == "right"
    # The policy in memory keeps sampling with cogym's settings after the save.
    assert policy.tokenizer.padding_side == "left" and policy.model.generation_config.top_k in (None, 50)
    again = Policy.from_pretrained(tmp_path / "out")
    assert again.eos_ids == [1, 3] and again.tokenizer.padding_side == "left"


def test_a_hub_id_loads_from_the_local_cache_offline(tiny_model_dir, tmp_path, monkeypatch):
    import huggingface_hub.constants

    snapshot = hub_cache(tmp_path / "hub", "acme/tiny-chat", tiny_model_dir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    policy = Policy.from_pretrained("acme/tiny-chat")
    assert policy.name == "tiny-chat"
    reference = Policy.from_pretrained(snapshot)
    for (name, a), (_, b) in zip(policy.model.named_parameters(), reference.model.named_parameters()):
        assert torch.equal(a, b), name
    with pytest.raises(ModelLoadError, match=r"'acme/missing' is not a directory, and no Hub model .*`hf download acme/missing`"):
        Policy.from_pretrained("acme/missing")
