"""Precision and memory options of a policy: dtype (mixed precision with float32 master weights, loss
scaling for float16), gradient checkpointing and the attention kernel, on every copy of the model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.core.types import Turn
from cogym.core.errors import ConfigError
from cogym.learners.batch import TokenBatch, response_logp, training_forward
from cogym.learners.config import LearnerConfig
from cogym.learners.engines import LossScaler, TorchEngine
from cogym.learners.learner import Learner
from cogym.runners.train.build import build
from cogym.runners.config.load import load_config

DEFAULT = str(Path(__file__).resolve().parents[2] / "cogym" / "configs" / "proposer_solver.yaml")


def _turns(policy: Policy, n: int = 8) -> list[Turn]:
    """Turns sampled from ``policy`` itself (so the behaviour log-probs are its own), rewards 0/1."""
    torch.manual_seed(0)
    prompts = [policy.render([{"role": "user", "content": f"{i}+{i}="}]) for i in range(n)]
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=5))
    return [Turn(game_index=i, episode_id=f"e{i}", seat="solver_0", role="solver", policy_id="p",
                 prompt_ids=g.prompt_ids, response_ids=g.response_ids, logprobs=g.logprobs, text=g.text,
                 finished=g.finished, reward=float(i % 2), group_key=i // 4) for i, g in enumerate(gens)]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_low_precision_policy_generates_and_trains_with_float32_master_weights(tiny_model_dir, dtype):
    policy = Policy.from_pretrained(tiny_model_dir, dtype=dtype)
    want = torch.bfloat16 if dtype == "bf16" else torch.float16
    assert {p.dtype for p in policy.model.parameters()} == {want}
    turns = _turns(policy)
    assert all(t.logprobs and all(lp <= 0 for lp in t.logprobs) for t in turns)
    learner = Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-3))
    engine = learner.engine
    assert isinstance(engine, TorchEngine) and engine.master is not None
    assert all(m.dtype == torch.float32 for m in engine.master)
    metrics = learner.update(turns)
    # The behaviour log-probs were taken by the same low-precision model: the ratio starts at 1.
    assert metrics["logprob_drift"] < 1e-3
    assert metrics["grad_norm"] > 0
    for m, p in zip(engine.master, engine.params):  # the model holds the master weights, rounded
        assert torch.equal(p.detach(), m.to(want))
    assert (dtype == "fp16") == ("loss_scale" in metrics)


def test_master_weights_keep_updates_smaller_than_bfloat16_resolution(tiny_model_dir):
    """lr 1e-6 moves a weight of size ~0.02 by far less than bfloat16's step there (~1e-4): pure bf16 AdamW
    would lose every such update; the float32 master copy accumulates them."""
    policy = Policy.from_pretrained(tiny_model_dir, dtype="bf16")
    engine = TorchEngine(policy.model, LearnerConfig.from_flat(engine="torch", lr=1e-6))
    before = [m.clone() for m in engine.master]
    model_before = [p.detach().clone() for p in engine.params]
    for _ in range(3):
        loss = sum((p.float() ** 2).sum() for p in engine.params)
        engine.backward(loss)
        engine.step()
    moved = sum(int((m != b).sum()) for m, b in zip(engine.master, before))
    total = sum(m.numel() for m in engine.master)
    assert moved > 0.9 * total
    unchanged_in_model = sum(int((p.detach() == b).sum()) for p, b in zip(engine.params, model_before))
    assert unchanged_in_model > 0.5 * total  # most updates are below the model's own resolution


def test_float16_loss_scaling_skips_an_overflowing_step_and_halves_the_scale(tiny_model_dir):
    policy = Policy.from_pretrained(tiny_model_dir, dtype="fp16")
    engine = TorchEngine(policy.model, LearnerConfig.from_flat(engine="torch", lr=1e-3))
    assert isinstance(engine.scaler, LossScaler) and engine.scaler.scale == 2.0 ** 16
    before = [m.clone() for m in engine.master]
    engine.backward(sum(p.float().sum() for p in engine.params) * 0.0)
    engine.params[0].grad[0, 0] = float("inf")  # an overflow in one gradient
    metrics = engine.step()
    assert metrics["skipped_step"] == 1.0 and metrics["loss_scale"] == 2.0 ** 15
    assert all(torch.equal(m, b) for m, b in zip(engine.master, before))
    assert all(p.grad is None for p in engine.params)
    engine.backward(sum((p.float() ** 2).sum() for p in engine.params) * 1e-4)
    metrics = engine.step()
    assert "skipped_step" not in metrics and metrics["grad_norm"] > 0
    assert any(not torch.equal(m, b) for m, b in zip(engine.master, before))
    scaler = LossScaler(scale=4.0, window=2)
    scaler.update(False), scaler.update(False)
    assert scaler.scale == 8.0


def test_master_weights_and_loss_scale_survive_save_and_load(tiny_model_dir, tmp_path):
    policy = Policy.from_pretrained(tiny_model_dir, dtype="fp16")
    engine = TorchEngine(policy.model, LearnerConfig.from_flat(engine="torch", lr=1e-3))
    engine.backward(sum((p.float() ** 2).sum() for p in engine.params) * 1e-4)
    engine.step()
    engine.scaler.scale = 1024.0
    engine.save(tmp_path)
    fresh = TorchEngine(Policy.from_pretrained(tiny_model_dir, dtype="fp16").model,
                        LearnerConfig.from_flat(engine="torch", lr=1e-3))
    fresh.load(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(fresh.master, engine.master))
    assert fresh.scaler.scale == 1024.0


@pytest.mark.parametrize("zero_stage", [0, 2])
def test_deepspeed_trains_a_bfloat16_policy(tiny_model_dir, zero_stage):
    policy = Policy.from_pretrained(tiny_model_dir, dtype="bfloat16")
    before = [p.detach().float().clone() for p in policy.model.parameters()]
    learner = Learner(policy, LearnerConfig.from_flat(engine="deepspeed", zero_stage=zero_stage, lr=1e-3))
    metrics = learner.update(_turns(policy))
    assert {p.dtype for p in policy.model.parameters()} == {torch.bfloat16}
    assert metrics["logprob_drift"] < 1e-3
    assert 0 < metrics["grad_norm"] < float("inf")
    assert any(not torch.equal(p.detach().float(), b) for p, b in zip(policy.model.parameters(), before))


def test_gradient_checkpointing_recomputes_layers_with_the_same_gradient(tiny_model_dir):
    """Each decoder layer runs twice in a training forward+backward (the recompute), the gradient is
    the one without checkpointing, and generation afterwards still uses its KV cache."""
    grads, calls = {}, {}
    for gc in (False, True):
        policy = Policy.from_pretrained(tiny_model_dir, gradient_checkpointing=gc)
        turns = _turns(policy)
        b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
        layer = policy.model.model.layers[0]
        seen = []  # the layer's own hooks sit outside the checkpoint: count its attention's forwards
        hook = layer.self_attn.register_forward_hook(lambda *_: seen.append(1))
        with training_forward(policy.model):
            response_logp(policy.model, b, packing="off").sum().backward()  # (auto adds its one-time check's forwards)
        hook.remove()
        calls[gc] = len(seen)
        grads[gc] = [p.grad.clone() for p in policy.model.parameters()]
        assert not layer.training  # restored: generation must not see the training flag
        cache_used = []
        attn = layer.self_attn
        h = attn.register_forward_hook(lambda _m, _a, kw, _o: cache_used.append(kw.get("past_key_values", kw.get("cache")) is not None),
                                       with_kwargs=True)
        policy.generate([turns[0].prompt_ids], SamplingParams(max_new_tokens=3))
        h.remove()
        assert cache_used and all(cache_used)  # (transformers >= 5.24 names the attention's argument ``cache``)
    assert calls == {False: 1, True: 2}
    for a, c in zip(grads[False], grads[True]):
        assert torch.allclose(a, c, atol=1e-6)


def test_attention_implementation_is_applied(tiny_model_dir):
    eager = Policy.from_pretrained(tiny_model_dir, attn_implementation="eager")
    sdpa = Policy.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    assert eager.model.config._attn_implementation == "eager"
    assert sdpa.model.config._attn_implementation == "sdpa"
    b = TokenBatch.from_turns(_turns(eager), eager.tokenizer.pad_token_id)
    with torch.no_grad():
        assert torch.allclose(response_logp(eager.model, b), response_logp(sdpa.model, b), atol=1e-5)


def _cfg(model: Path, extra: list[str]):
    return load_config(DEFAULT, [f"policies.solver.model={model}", f"policies.proposer.model={model}",
                                 "run.checkpoint_every=0", "run.plot=false", "learners.solver.engine=torch",
                                 "learners.proposer.engine=torch", *extra])


def test_precision_settings_reach_the_reference_the_critic_and_the_prm(tiny_model_dir):
    run = build(_cfg(tiny_model_dir, ["policies.solver.dtype=bf16", "policies.solver.attn_implementation=eager",
                                      "learners.solver.kl_in_loss=k3", "learners.solver.algorithm=ppo",
                                      "policies.proposer.dtype=bfloat16", "learners.proposer.algorithm=prime"]))
    solver, proposer = run.learners["solver"], run.learners["proposer"]
    assert run.policies["solver"].model.dtype == torch.bfloat16
    assert run.policies["solver"].model.config._attn_implementation == "eager"
    assert solver.ref_model.dtype == torch.bfloat16
    assert solver.ref_model.config._attn_implementation == "eager"
    critic = solver.algorithms["ppo"].critic.model
    assert {p.dtype for p in critic.parameters()} == {torch.bfloat16}
    prm = proposer.algorithms["prime"].prm
    assert prm.model.dtype == torch.bfloat16 and prm.ref_model.dtype == torch.bfloat16
    assert run.policies["proposer"].model.dtype == torch.bfloat16


def test_precision_settings_are_checked(tiny_model_dir):
    with pytest.raises(ConfigError, match=r"policies.solver.dtype.*did you mean 'bf16'"):
        _cfg(tiny_model_dir, ["policies.solver.dtype=bf61"])
    with pytest.raises(ConfigError, match=r"attn_implementation.*did you mean 'sdpa'"):
        _cfg(tiny_model_dir, ["policies.solver.attn_implementation=spda"])
    with pytest.raises(ConfigError, match=r"max_tokens_per_micro_batch must be >= 1"):
        _cfg(tiny_model_dir, ["learners.solver.max_tokens_per_micro_batch=0"])
    assert _cfg(tiny_model_dir, ["learners.solver.max_tokens_per_micro_batch=null"]).learners["solver"].max_tokens_per_micro_batch is None
    cfg = _cfg(tiny_model_dir, ["policies.solver.dtype=fp16", "policies.solver.gradient_checkpointing=true"])
    assert cfg.policies["solver"].load_options() == dict(dtype="fp16", attn_implementation=None,
                                                         gradient_checkpointing=True)


def test_a_bfloat16_lora_adapter_with_checkpointing_trains(tiny_model_dir):
    """The shared base loads in bf16 with checkpointing; peft keeps the adapter in float32 (so the engine
    needs no master copy), and only the adapter moves."""
    pytest.importorskip("peft", reason="LoRA needs the peft package (the test extra installs it)")
    from cogym.agents.lora import LoraBase, LoraConfig

    base = LoraBase(tiny_model_dir, dtype="bf16", gradient_checkpointing=True)
    policy = Policy.from_adapter(base, "alice", LoraConfig(r=4))
    base_before = {n: p.detach().clone() for n, p in base.model.named_parameters() if "lora_" not in n}
    learner = Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-2))
    assert {p.dtype for p in learner.engine.params} == {torch.float32} and learner.engine.master is None
    adapter_before = [p.detach().clone() for p in learner.engine.params]
    metrics = learner.update(_turns(policy))
    assert metrics["grad_norm"] > 0
    assert any(not torch.equal(p.detach(), b) for p, b in zip(learner.engine.params, adapter_before))
    assert all(torch.equal(p.detach(), base_before[n]) for n, p in base.model.named_parameters() if n in base_before)
    assert {p.dtype for n, p in base.model.named_parameters() if n in base_before} == {torch.bfloat16}
