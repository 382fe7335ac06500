"""The HF backend's decode steps read a shared prompt once per block of its rows (agents/cascade.py
``generate_plan``): the same draws as plain attention, log-probs those of a full forward, and a row's
numbers bitwise the same whatever else its batch holds (its twins, or no twin at all)."""

from __future__ import annotations

import pytest
import torch

from cogym.agents import cascade
from cogym.agents.backends import HFBackend
from cogym.core.types import SamplingParams
from tests.agents.test_backends import _group_prompts


@pytest.fixture
def plans(monkeypatch):
    """Record every generate call's plan (None: plain attention)."""
    seen = []
    use = cascade.use_cascade

    def spy(model, plan, force=False):
        seen.append(plan)
        return use(model, plan, force)

    monkeypatch.setattr(cascade, "use_cascade", spy)
    return seen


def test_shared_prompt_decoding_matches_a_full_forward(any_policy, plans):
    from tests.model_helpers import full_logp

    prompts = [p for p in _group_prompts(any_policy) for _ in range(11)]  # blocks of 8: one full, one of 3
    out = any_policy.backend.generate(prompts, SamplingParams(max_new_tokens=6), keys=list(range(len(prompts))))
    assert plans and plans[-1] is not None
    for g in out[::5]:
        assert g.logprobs == pytest.approx(full_logp(any_policy, g.prompt_ids, g.response_ids, 1.0), abs=1e-4)


def test_shared_prompt_decoding_draws_what_plain_attention_draws(policy, plans, monkeypatch):
    prompts = [p for p in _group_prompts(policy) for _ in range(8)]
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    keys = list(range(len(prompts)))
    shared = HFBackend(policy).generate(prompts, sampling, keys=keys)
    monkeypatch.setattr(cascade, "supports", lambda model: False)  # as for a model whose attention is not plain
    plain = HFBackend(policy).generate(prompts, sampling, keys=keys)
    assert plans[0] is not None and plans[1] is None
    assert [g.response_ids for g in shared] == [g.response_ids for g in plain]
    for s, p in zip(shared, plain):
        assert s.logprobs == pytest.approx(p.logprobs, abs=1e-4)


def test_a_row_decodes_bitwise_alike_with_or_without_twins_under_the_plan(policy, plans):
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    a, b, c, d = _group_prompts(policy)
    few = policy.backend.generate([a, b, c, d] * 4, sampling, keys=list(range(100, 116)))
    many = policy.backend.generate([a] * 13 + [b, c, d], sampling, keys=[100] + list(range(200, 212)) + [101, 102, 103])
    assert plans[0] is not None and plans[1] is not None
    assert many[0] == few[0] and many[13:] == few[1:4]


def test_a_row_decodes_bitwise_alike_in_a_batch_that_shares_no_prompt(policy, plans):
    """Every batch takes the plan (one block a prompt), so a row without twins among rows without twins
    gets the numbers it gets beside groups: what keeps a run the same split over Ray workers or not."""
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    lone = _group_prompts(policy, tuple(f"{k}+{k * 3}" for k in range(16)))
    alone = policy.backend.generate(lone, sampling, keys=list(range(16)))
    keys = [0] + list(range(100, 108)) + list(range(1, 8))
    grouped = policy.backend.generate([lone[0]] * 9 + lone[1:8], sampling, keys=keys)
    assert plans[0] is not None and plans[1] is not None
    assert grouped[0] == alone[0] and grouped[9:] == alone[1:8]


def test_a_model_whose_attention_is_not_plain_generates_without_a_plan(policy, plans):
    policy.model.config.sliding_window, policy.model.config.use_sliding_window = 8, True
    try:
        out = policy.backend.generate(_group_prompts(policy), SamplingParams(max_new_tokens=2), keys=list(range(4)))
    finally:
        policy.model.config.sliding_window = None
    assert plans == [None] and len(out) == 4


def test_generate_plan_blocks_have_a_fixed_size_and_place_every_row():
    owner = [0] * 11 + [1, 2, 2]
    plan = cascade.generate_plan(owner, torch.ones(3, 5, dtype=torch.bool), 5, "cpu", torch.float32)
    size = cascade.GENERATE_BLOCK
    assert plan.size == size and plan.stack.numel() == size * plan.reps.numel()
    assert plan.reps.tolist() == [0, 0, 11, 12]  # two blocks for prompt 0, one each for 1 and 2
    stack, place = plan.stack.tolist(), plan.place.tolist()
    assert all(stack[place[i]] == i for i in range(len(owner)))
    lone = cascade.generate_plan([0, 1, 2], torch.ones(3, 5, dtype=torch.bool), 5, "cpu", torch.float32)
    assert lone.reps.tolist() == [0, 1, 2] and lone.stack.numel() == 3 * size  # a block of its own for each row
