"""Checks that need a CUDA GPU (marked ``gpu``: skipped without one; ``scripts/gpu_check.sh`` runs them
with the scale benchmarks on a GPU machine). The logic of each is tested on the CPU elsewhere:
tests/runners/ray/test_colocate.py (when and how engines sleep), tests/runners/ray/test_ray_collective.py
(weights through a collective group, gloo)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

GIB = 1 << 30


def test_a_sleeping_vllm_engine_frees_its_gpu_memory_and_wakes_to_the_same_samples(tiny_model_dir: Path) -> None:
    """vLLM's sleep mode (level 1) on the tiny model: most of the engine's GPU memory (its KV cache:
    gpu_memory_utilization of the device) is free while it sleeps, and after waking it samples the same
    tokens as before."""
    pytest.importorskip("vllm", reason="needs the vllm extra")
    from cogym.agents.backends.vllm import VLLMBackend
    from cogym.agents.policy import Policy
    from cogym.core.types import SamplingParams

    policy = Policy.from_pretrained(tiny_model_dir)
    backend = VLLMBackend(policy, enable_sleep_mode=True, gpu_memory_utilization=0.2)
    prompts = [[5, 6, 7], [8, 9]]
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    before = [g.response_ids for g in backend.generate(prompts, sampling, keys=[1, 2])]
    free_awake = torch.cuda.mem_get_info()[0]
    assert backend.sleep() is True
    free_asleep = torch.cuda.mem_get_info()[0]
    backend.wake()
    after = [g.response_ids for g in backend.generate(prompts, sampling, keys=[1, 2])]
    backend.close()
    freed = free_asleep - free_awake
    total = torch.cuda.mem_get_info()[1]
    print(f"sleep freed {freed / GIB:.2f} GiB of {total / GIB:.0f} GiB (gpu_memory_utilization 0.2: "
          f"{0.2 * total / GIB:.1f} GiB)")
    assert freed > 0.5 * 0.2 * total  # most of what the engine held
    assert after == before


def test_the_collective_buffer_lives_on_the_gpu_and_comes_back_bit_for_bit() -> None:
    """The collective sync's flat buffer on a CUDA device (what an NCCL broadcast sends): every tensor,
    bfloat16 included, comes back bit for bit. (An NCCL group needs a device per member: one GPU here.)"""
    from cogym.agents.flat_weights import pack, unpack

    g = torch.Generator().manual_seed(0)
    state = {"w": torch.randn(64, 64, generator=g).to(torch.bfloat16).cuda(), "b": torch.randn(64, generator=g).cuda()}
    layout, buf = pack(state, "cuda")
    assert buf.is_cuda
    back = unpack(buf, layout)
    assert all(torch.equal(back[k], t) for k, t in state.items())
