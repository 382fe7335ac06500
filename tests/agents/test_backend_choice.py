"""Choosing a policy's generation backend: ``policies.<id>.generation`` in a config, ``make_backend``,
and the errors a user sees when vLLM is missing or a setup is one the vLLM backend does not support.
(The backends' behaviour is tests/agents/test_backend_contract.py.)"""

from __future__ import annotations

import pytest

import cogym.runners.config.validate as config_module
from cogym.agents.backends import BACKENDS, HFBackend, make_backend
from cogym.agents.backends import vllm as vllm_module
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError


def _error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    msg = str(err.value)
    assert "\n" not in msg, "config errors are one line"
    return msg


def test_the_default_is_the_hf_backend():
    cfg = load_config(None)
    assert {pc.generation.backend for pc in cfg.policies.values()} == {"hf"}
    assert all(pc.generation.vllm == {} for pc in cfg.policies.values())


def test_vllm_without_vllm_installed_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setattr(config_module, "vllm_available", lambda: False)
    msg = _error(["policies.solver.generation.backend=vllm"])
    assert "policies.solver.generation.backend: vllm needs vLLM" in msg and "cogym[vllm]" in msg


def test_the_backend_itself_names_the_extra_when_vllm_is_missing(policy, monkeypatch):
    monkeypatch.setattr(vllm_module, "vllm_available", lambda: False)
    with pytest.raises(ImportError, match=r"cogym\[vllm\]") as err:
        make_backend("vllm", policy)
    assert "\n" not in str(err.value)


def test_a_misspelt_backend_is_refused_with_a_suggestion():
    assert "did you mean 'vllm'" in _error(["policies.solver.generation.backend=vlm"])
    assert "did you mean 'backend'" in _error(["policies.solver.generation.bakend=hf"])


def test_engine_arguments_without_the_vllm_backend_are_refused():
    msg = _error(["policies.solver.generation.vllm.max_num_seqs=8"])
    assert "generation.backend is 'hf'" in msg


def test_vllm_with_ray_and_with_lora_adapters_is_accepted(monkeypatch):
    """Both were refused before vLLM ran inside Ray workers and served LoRA adapters."""
    monkeypatch.setattr(config_module, "vllm_available", lambda: True)
    monkeypatch.setattr(config_module, "peft_available", lambda: True)
    cfg = load_config(None, ["policies.solver.generation.backend=vllm", "run.backend=ray", "policies.solver.lora.r=4"])
    assert cfg.policies["solver"].generation.backend == "vllm" and cfg.run.backend == "ray"


def test_lora_adapters_sharing_an_engine_must_share_its_arguments(monkeypatch):
    monkeypatch.setattr(config_module, "vllm_available", lambda: True)
    monkeypatch.setattr(config_module, "peft_available", lambda: True)
    both = ["seats.proposer=proposer", "policies.proposer.model=tiny", "learners.proposer.algorithm=reinforce_pp",
            "policies.solver.lora.r=4", "policies.proposer.lora.r=4", "policies.solver.generation.backend=vllm",
            "policies.proposer.generation.backend=vllm"]
    load_config(None, both)
    msg = _error([*both, "policies.solver.generation.vllm.max_num_seqs=8"])
    assert "served by one shared vLLM engine" in msg and "generation.vllm must be equal" in msg


@pytest.mark.parametrize("overrides, says", [
    (["game.granularity=token"], "game.granularity: token"),
    (["policies.solver.sampling.top_p=0.9"], "top_k/top_p"),
    (["policies.solver.sampling.top_k=5"], "top_k/top_p"),
])
def test_setups_the_vllm_backend_does_not_support_are_refused(monkeypatch, overrides, says):
    monkeypatch.setattr(config_module, "vllm_available", lambda: True)
    monkeypatch.setattr(config_module, "peft_available", lambda: True)
    load_config(None, ["policies.solver.generation.backend=vllm"])  # supported as it is
    assert says in _error(["policies.solver.generation.backend=vllm", *overrides])


def test_make_backend(policy):
    assert BACKENDS == ("hf", "vllm")
    assert isinstance(make_backend("hf", policy), HFBackend)
    with pytest.raises(ValueError, match="takes no options"):
        make_backend("hf", policy, {"max_num_seqs": 4})
    with pytest.raises(ValueError, match="unknown generation backend 'sglang'"):
        make_backend("sglang", policy)


def test_the_vllm_backend_keeps_the_settings_its_log_probs_depend_on(policy, monkeypatch):
    monkeypatch.setattr(vllm_module, "vllm_available", lambda: True)
    with pytest.raises(ValueError, match="logprobs_mode='processed_logprobs'"):
        vllm_module.VLLMBackend(policy, logprobs_mode="raw_logprobs")
    backend = vllm_module.VLLMBackend(policy, logprobs_mode="processed_logprobs", max_num_seqs=8)
    assert backend.name == "vllm" and backend.version == 0 and backend.engine_args["max_num_seqs"] == 8
    backend.load_weights(None, version=3)  # before the engine starts: nothing to send, the version is kept
    assert backend.version == 3
    with pytest.raises(ValueError, match="older than"):
        backend.load_weights(None, version=2)
    with pytest.raises(KeyError, match="weights the model does not have"):
        backend.load_weights({"no.such.weight": policy.model.lm_head.weight}, version=4)


def test_a_vllm_policy_gets_its_backend_when_a_run_is_built(monkeypatch):
    """The run builder gives a policy whose config says vllm the backend make_backend builds, with its options."""
    import cogym.runners.train.build as build_module
    from cogym.runners.train.build import build

    made = []

    def fake_make(name, policy, options, shared=None):
        made.append((name, policy.name, dict(options)))
        return HFBackend(policy)

    monkeypatch.setattr(config_module, "vllm_available", lambda: True)
    monkeypatch.setattr(build_module, "make_backend", fake_make)
    cfg = load_config(None, ["policies.solver.generation.backend=vllm",
                             "policies.solver.generation.vllm.max_num_seqs=8"])
    build(cfg)
    assert made == [("vllm", "solver", {"max_num_seqs": 8})]


def test_nproc_refuses_the_vllm_backend(monkeypatch):
    from cogym.runners.train.launch import check_data_parallel

    monkeypatch.setattr(config_module, "vllm_available", lambda: True)
    cfg = load_config(None, ["policies.solver.generation.backend=vllm"])
    check_data_parallel(cfg, 1)  # one process: fine
    with pytest.raises(ConfigError, match="--nproc 2: policies.solver.generation.backend: vllm runs one engine"):
        check_data_parallel(cfg, 2)


def test_a_rollout_worker_keeps_a_vllm_policys_own_model_on_the_cpu(monkeypatch):
    """In a Ray rollout worker the engine holds the device's copy of a vLLM policy: its transformers model
    (the copy the engine starts from) is loaded on the CPU; an HF policy's, which generates, as usual."""
    import cogym.runners.train.build as build_module
    from cogym.agents.policy import Policy
    from cogym.runners.train.build import build

    devices = {}
    load = Policy.from_pretrained.__func__

    def recording(cls, path, name=None, device="auto", **kwargs):
        devices[name] = device
        return load(cls, path, name=name, device=device, **kwargs)

    monkeypatch.setattr(config_module, "vllm_available", lambda: True)
    monkeypatch.setattr(build_module, "make_backend", lambda name, policy, options, shared=None: HFBackend(policy))
    monkeypatch.setattr(Policy, "from_pretrained", classmethod(recording))
    cfg = load_config(None, ["policies.solver.generation.backend=vllm", "run.backend=ray"])
    build(cfg, rollout_only=True)
    assert devices == {"proposer": "auto", "solver": "cpu"}
    devices.clear()
    build(cfg)  # the driver, which trains the model: where it trains
    assert devices == {"proposer": "auto", "solver": "auto"}
