"""Keyed sampling (agents/sampling.py): a row's draws are a pure function of its key and step, so a
prompt gets the same response whatever else shares its batch."""

from __future__ import annotations

import pytest
import torch

from cogym.core.types import SamplingParams
from cogym.agents.sampling import derive_key, row_uniforms, sample_tokens

PLAIN = SamplingParams(max_new_tokens=12, temperature=1.0)
FILTERED = SamplingParams(max_new_tokens=12, temperature=0.7, top_k=5, top_p=0.9)


def test_uniforms_are_a_pure_function_of_key_and_step():
    keys = [derive_key(7, g) for g in range(1000)]
    u = row_uniforms(keys, 3)
    assert torch.equal(u, row_uniforms(keys, 3))
    assert torch.equal(u[500:], row_uniforms(keys[500:], 3))  # no dependence on the other rows
    assert not torch.equal(u, row_uniforms(keys, 4))
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.03 and abs(float(u.var()) - 1 / 12) < 0.01
    assert len(set(keys)) == 1000 and all(0 <= k < 2**63 for k in keys)
    assert derive_key(1, 2) != derive_key(2, 1)


@pytest.mark.parametrize("sampling", [PLAIN, FILTERED], ids=["plain", "filtered"])
def test_keyed_draws_follow_the_filtered_distribution(sampling):
    torch.manual_seed(0)
    logits = torch.randn(1, 12) * 2
    n = 40_000
    ids, logp = sample_tokens(logits.expand(n, -1), sampling, [derive_key(3, i) for i in range(n)], 0)
    freq = torch.bincount(ids, minlength=12).double() / n
    # The distribution the draw is from: tempered, then top-k, then top-p (smallest prefix reaching top_p).
    p = torch.softmax(logits[0].double() / sampling.temperature, -1)
    if sampling.top_k:
        p[p < torch.topk(p, sampling.top_k).values[-1]] = 0
        p /= p.sum()
    if sampling.top_p < 1:
        sp, order = torch.sort(p, descending=True)
        drop = torch.cumsum(sp, 0) - sp >= sampling.top_p
        p[order[drop]] = 0
        p /= p.sum()
    assert torch.all(freq[p == 0] == 0)  # a filtered token is never drawn
    assert float((freq - p).abs().max()) < 4 * float((p * (1 - p) / n).sqrt().max()) + 1e-9
    # the log-prob is of the tempered, unfiltered distribution
    full = torch.log_softmax(logits[0] / sampling.temperature, -1)
    assert torch.allclose(logp, full[ids])


def test_a_row_draws_the_same_token_in_any_batch():
    torch.manual_seed(1)
    logits = torch.randn(64, 50)
    keys = [derive_key(9, i) for i in range(64)]
    whole, _ = sample_tokens(logits, FILTERED, keys, 5)
    part, _ = sample_tokens(logits[10:20], FILTERED, keys[10:20], 5)
    assert torch.equal(whole[10:20], part)
    alone, _ = sample_tokens(logits[33:34], FILTERED, keys[33:34], 5)
    assert int(alone[0]) == int(whole[33])


def test_rows_without_keys_draw_from_the_global_generator():
    logits = torch.randn(8, 30)
    torch.manual_seed(5)
    a, _ = sample_tokens(logits, PLAIN)
    torch.manual_seed(5)
    b, _ = sample_tokens(logits, PLAIN)
    assert torch.equal(a, b)


@pytest.mark.parametrize("sampling", [PLAIN, FILTERED], ids=["plain", "filtered"])
def test_generate_gives_a_prompt_the_same_response_in_any_batch(any_policy, sampling):
    """Bitwise: the same ids and log-probs for a prompt generated with 7 others of other lengths, with
    half of them, and alone (left padding to a multiple of PAD_MULTIPLE keeps its ids aligned)."""
    policy = any_policy
    texts = ["1+1=", "22*3=", "7", "100-99=", "5*5=", "what is 12 + 30?", "0", "9*9*9*9="]
    prompts = [policy.render([{"role": "user", "content": t}]) for t in texts]
    assert len({len(p) for p in prompts}) > 3  # lengths differ, so the batches pad differently
    keys = [derive_key(2, i) for i in range(len(prompts))]
    whole = policy.generate(prompts, sampling, keys)
    half = policy.generate(prompts[1::2], sampling, keys[1::2])
    alone = policy.generate([prompts[5]], sampling, [keys[5]])
    for g, h in zip(whole[1::2], half):
        assert (g.response_ids, g.logprobs) == (h.response_ids, h.logprobs)
    assert (whole[5].response_ids, whole[5].logprobs) == (alone[0].response_ids, alone[0].logprobs)
    other = policy.generate(prompts, sampling, [k + 1 for k in keys])
    assert [g.response_ids for g in other] != [g.response_ids for g in whole]  # the key picks the draws


def test_generate_needs_one_key_per_prompt(policy):
    with pytest.raises(ValueError, match="one sampling key per prompt"):
        policy.generate([[1, 2], [3]], PLAIN, [1])


def test_derive_key_is_the_splitmix_chain_on_uint64_whatever_the_integers():
    """derive_key runs on Python ints: the same keys as the splitmix64 chain on numpy uint64 (every run's keys,
    and so every golden run, hang on them), for negative, huge and ordinary parts alike."""
    import random

    import numpy as np

    from cogym.agents.sampling import _GOLDEN, _mix64

    def on_numpy(*parts: int) -> int:
        x = np.zeros(1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for p in parts:
                x = _mix64(x ^ np.uint64(int(p) & 0xFFFFFFFFFFFFFFFF) + _GOLDEN)
        return int(x[0] >> np.uint64(1))

    rng = random.Random(0)
    for _ in range(2000):
        parts = [rng.choice([0, 1, -1, 2**63, 2**64 - 1, -2**63, rng.randrange(-2**70, 2**70), rng.randrange(1000)])
                 for _ in range(rng.randint(0, 5))]
        assert derive_key(*parts) == on_numpy(*parts), parts
    assert derive_key(0, 0) == on_numpy(0, 0) and 0 <= derive_key(5) < 2**63
