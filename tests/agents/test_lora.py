"""LoRA policies: named adapters on one shared base model (peft), trained, saved and resumed apart."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft", reason="LoRA policies need peft (pip install peft)")

from cogym.agents.errors import ModelLoadError
from cogym.agents.lora import AdapterView, LoraBase, LoraConfig, require_peft
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.core.types import Turn
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner, TokenBatch, response_logp
from cogym.runners.rundir import RunDirError
from cogym.runners.train.build import build
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError

os.environ.setdefault("DS_ACCELERATOR", "cpu")

CONFIG = Path(__file__).resolve().parents[2] / "cogym" / "configs" / "proposer_solver.yaml"
MESSAGES = [[{"role": "system", "content": "Solve."}, {"role": "user", "content": f"{g}{g}+{g}"}] for g in range(4)]


def _pair(model_dir) -> tuple[LoraBase, Policy, Policy]:
    base = LoraBase(model_dir)
    return base, Policy.from_adapter(base, "alice", LoraConfig(r=4)), Policy.from_adapter(base, "bob", LoraConfig(r=4))


def _adapter_of(name: str) -> str:
    """'...q_proj.lora_A.alice.weight' -> 'alice'; a base weight -> 'base'."""
    parts = name.split(".")
    return next((parts[i + 1] for i, p in enumerate(parts) if p.startswith("lora_")), "base")


def _snapshot(base: LoraBase) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in base.peft.state_dict().items()}


def _changed(base: LoraBase, before: dict[str, torch.Tensor]) -> set[str]:
    return {_adapter_of(k) for k, v in base.peft.state_dict().items() if not torch.equal(v, before[k])}


def _perturb(policy: Policy, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in policy.model.adapter_parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)


def _turns(policy: Policy, seed: int = 0) -> list[Turn]:
    """Four answers to each of two prompts, with rewards that vary inside every group."""
    prompts = [policy.render(MESSAGES[g]) for g in range(2) for _ in range(4)]
    torch.manual_seed(seed)
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0))
    return [Turn(game_index=i // 4, episode_id=f"ep-{i // 4}", seat=f"solver_{i % 4}", role="solver", policy_id=policy.name,
                 prompt_ids=g.prompt_ids, response_ids=g.response_ids, logprobs=g.logprobs, text=g.text, finished=g.finished,
                 reward=float(i % 2), group_key=(f"ep-{i // 4}", "solver")) for i, g in enumerate(gens)]


def _logp(policy: Policy, turns: list[Turn]) -> torch.Tensor:
    with torch.no_grad():
        return response_logp(policy.model, TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id))


# ------------------------------------------------------------------ one base in memory
def test_two_lora_policies_share_one_base_model(model_dir):
    base, a, b = _pair(model_dir)
    assert isinstance(a.model, AdapterView) and a.lora and a.model.peft is b.model.peft
    pa, pb = dict(a.model.named_parameters()), dict(b.model.named_parameters())
    shared = [n for n in pa if _adapter_of(n) == "base"]
    assert shared and all(pa[n].data_ptr() == pb[n].data_ptr() for n in shared)  # the same storage, not a copy
    # Parameter memory of the two policies together: one base plus two small adapters, not two models.
    full = sum(p.numel() for p in Policy.from_pretrained(model_dir).model.parameters())
    unique = {p.data_ptr(): p.numel() for p in [*pa.values(), *pb.values()]}
    adapters = sum(p.numel() for _, p in a.model.adapter_parameters()) + sum(p.numel() for _, p in b.model.adapter_parameters())
    assert sum(unique.values()) == full + adapters < 1.2 * full
    # Frozen base; each view trains its own adapter and sees no other.
    assert {_adapter_of(n) for n, p in pa.items() if p.requires_grad} == {"alice"}
    assert {_adapter_of(n) for n, p in pb.items() if p.requires_grad} == {"bob"}
    assert {_adapter_of(n) for n in pa} == {"base", "alice"}


@pytest.mark.parametrize("engine, model_name", [("torch", "tiny"), ("torch", "qwen"),
                                                pytest.param("deepspeed", "tiny", marks=pytest.mark.slow)])
def test_a_learner_update_changes_only_its_own_adapter(model_dir, engine):
    base, a, b = _pair(model_dir)
    extra = {"zero_stage": 2} if engine == "deepspeed" else {}
    learner_a = Learner(a, LearnerConfig.from_flat(algorithm="grpo", engine=engine, lr=1e-2, **extra))
    learner_b = Learner(b, LearnerConfig.from_flat(algorithm="grpo", engine=engine, lr=1e-2, **extra))
    turns_a, turns_b = _turns(a, seed=0), _turns(b, seed=1)
    for _ in range(2):  # two rounds: the second runs with both adapters already trained
        before = _snapshot(base)
        learner_a.update(turns_a)
        assert _changed(base, before) == {"alice"}  # bob's adapter and the base: bit-identical
        before = _snapshot(base)
        learner_b.update(turns_b)
        assert _changed(base, before) == {"bob"}
    assert {_adapter_of(n) for n, p in base.peft.named_parameters() if p.requires_grad} == {"alice", "bob"}


def test_generation_follows_the_active_adapter(model_dir):
    base, a, b = _pair(model_dir)
    plain = Policy.from_pretrained(model_dir)
    prompts = [a.render(m) for m in MESSAGES]
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    ids = lambda p: [g.response_ids for g in p.generate(prompts, greedy)]  # noqa: E731
    assert ids(a) == ids(b) == ids(plain)  # fresh adapters add exactly zero
    _perturb(b)
    out_b = ids(b)
    assert out_b != ids(plain)
    assert ids(a) == ids(plain) and ids(b) == out_b  # switching back and forth
    flags = {n: p.requires_grad for n, p in base.peft.named_parameters()}
    # The base view (every adapter off: a LoRA policy's KL reference) is the base model, bit for bit.
    x = torch.tensor([prompts[0]])
    assert torch.equal(base.base_view()(input_ids=x).logits, plain.model(input_ids=x).logits)
    assert {n: p.requires_grad for n, p in base.peft.named_parameters()} == flags  # peft's toggling undone


def test_save_and_reload_reproduces_log_probs_exactly(tiny_model_dir, tmp_path):
    base, a, b = _pair(tiny_model_dir)
    _perturb(a, seed=1)
    _perturb(b, seed=2)
    turns = _turns(a)
    expected = _logp(a, turns)
    a.save(tmp_path / "alice")
    files = {p.name for p in (tmp_path / "alice").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer_config.json"} <= files
    assert not files & {"config.json", "model.safetensors"}  # the adapter only, not another copy of the base
    assert json.loads((tmp_path / "alice" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model_dir)
    alone = Policy.from_pretrained(tmp_path / "alice")  # base named in adapter_config.json + the adapter
    assert alone.lora and torch.equal(_logp(alone, turns), expected)
    shared = LoraBase(tiny_model_dir)
    shared.add("bob", LoraConfig(r=4))
    again = Policy.from_adapter(shared, "alice", adapter_dir=tmp_path / "alice")
    assert torch.equal(_logp(again, turns), expected)


def test_missing_peft_names_the_install_command(monkeypatch, tiny_model_dir):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft -> ImportError
    with pytest.raises(ModelLoadError, match="pip install peft"):
        require_peft()
    with pytest.raises(ModelLoadError, match="pip install peft"):
        LoraBase(tiny_model_dir)
    import cogym.runners.config.validate as config_mod

    monkeypatch.setattr(config_mod, "peft_available", lambda: False)
    with pytest.raises(ConfigError, match=r"policies\.solver\.lora\.r > 0 needs the peft package: pip install peft"):
        load_config(CONFIG, ["policies.solver.lora.r=4"])


# ------------------------------------------------------------------ config, build, train, resume
def _overrides(*extra: str) -> list[str]:
    return ["policies.proposer.lora.r=4", "policies.solver.lora.r=4", "learners.solver.engine=torch",
            "learners.proposer.engine=torch", "game.num_games=2", "game.kwargs.num_solvers=4", "eval.declared=false",
            "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=1", *extra]


@pytest.mark.parametrize("override, message", [
    ("policies.solver.lora.r=-1", r"policies\.solver\.lora\.r must be an integer >= 0"),
    ("policies.solver.lora.r=2.5", r"policies\.solver\.lora\.r must be an integer"),
    ("policies.solver.lora.alpha=0", r"policies\.solver\.lora\.alpha must be > 0"),
    ("policies.solver.lora.dropout=1", r"policies\.solver\.lora\.dropout must be in \[0, 1\)"),
    ("policies.solver.lora.target_modules=q_proj", r"policies\.solver\.lora\.target_modules must be a list of strings"),
    ("policies.solver.lora.rank=4", r"unknown config key 'policies\.solver\.lora\.rank'"),
    ("learners.solver.zero_stage=3", r"policies\.solver\.lora: ZeRO-3 .* learners\.solver\.engine: torch"),
])
def test_lora_config_errors(override, message):
    overrides = [o for o in _overrides() if "engine" not in o] if "zero_stage" in override else _overrides()
    with pytest.raises(ConfigError, match=message) as err:
        load_config(CONFIG, [*overrides, override])
    assert "\n" not in str(err.value)


def test_lora_build_errors(tiny_model_dir):
    with pytest.raises(ModelLoadError, match=r"policies\.solver\.lora: could not add LoRA adapter 'solver'.*nope"):
        build(load_config(CONFIG, _overrides("policies.solver.lora.target_modules=[nope]")))
    # Resuming a LoRA config from a full-model checkpoint directory: the settings changed since the run began.
    with pytest.raises(RunDirError, match=r"policies\.solver\.lora\.r > 0, but .* is a full model"):
        build(load_config(CONFIG, _overrides()), policy_dirs={"solver": tiny_model_dir})


def test_frozen_lora_policy_shares_the_base_and_never_trains():
    run = build(load_config(CONFIG, _overrides("learners.proposer.algorithm=frozen")))
    proposer, solver = run.policies["proposer"], run.policies["solver"]
    assert proposer.model.peft is solver.model.peft and set(run.learners) == {"solver"}
    assert not any(p.requires_grad for p in proposer.model.parameters())
    trained = {id(p) for group in run.learners["solver"].engine.optimizer.param_groups for p in group["params"]}
    assert trained == {id(p) for _, p in solver.model.adapter_parameters()}


def _iteration_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "rollout_s" in r]


def _adapters(ckpt: Path) -> dict[str, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    return {pid: load_file(str(ckpt / "policies" / pid / "adapter_model.safetensors")) for pid in ("proposer", "solver")}


@pytest.mark.slow
def test_two_lora_policies_train_and_resume_exactly(tmp_path):
    from cogym.runners.train.loop import train

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(load_config(CONFIG, _overrides("run.iterations=2")), run_path=straight, progress=False)
    train(load_config(CONFIG, _overrides("run.iterations=1")), run_path=resumed, progress=False)
    ck1 = resumed / "checkpoints" / "step_000001"
    assert {p.name for p in (ck1 / "policies" / "solver").iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}
    assert not (ck1 / "policies" / "solver" / "model.safetensors").exists()
    train(load_config(resumed / "config.yaml", ["run.iterations=2"]), run_path=resumed, resume=True, progress=False)
    a, b = _iteration_rows(straight), _iteration_rows(resumed)
    assert [r["iteration"] for r in b] == [1, 2]
    assert "solver/loss" in a[-1] and "proposer/loss" in a[-1]  # both learners stepped
    assert {k: v for k, v in a[-1].items() if not k.endswith("_s")} == {k: v for k, v in b[-1].items() if not k.endswith("_s")}
    final_straight, final_resumed = _adapters(straight / "checkpoints" / "step_000002"), _adapters(resumed / "checkpoints" / "step_000002")
    for pid in ("proposer", "solver"):
        assert all(torch.equal(final_straight[pid][k], final_resumed[pid][k]) for k in final_straight[pid]), pid
    first = _adapters(straight / "checkpoints" / "step_000001")["solver"]
    assert any(not torch.equal(first[k], final_straight["solver"][k]) for k in first)  # the solver's adapter trained
