"""The HF backend's decode steps read a shared prompt once per block of its rows (agents/cascade.py
``generate_plan``): the same draws as plain attention, log-probs those of a full forward, and a row's
numbers bitwise the same whatever the number of its twins in the batch."""

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


@pytest.fixture
def always(monkeypatch, plans):
    """A plan whenever two rows share a prompt, however little it saves."""
    monkeypatch.setattr("cogym.agents.backends.hf.MIN_SAVED", 0)
    return plans


def test_shared_prompt_decoding_matches_a_full_forward(any_policy, always):
    from tests.model_helpers import full_logp

    prompts = [p for p in _group_prompts(any_policy) for _ in range(11)]  # blocks of 8: one full, one of 3
    out = any_policy.backend.generate(prompts, SamplingParams(max_new_tokens=6), keys=list(range(len(prompts))))
    assert always and always[-1] is not None
    for g in out[::5]:
        assert g.logprobs == pytest.approx(full_logp(any_policy, g.prompt_ids, g.response_ids, 1.0), abs=1e-4)


def test_shared_prompt_decoding_draws_what_plain_attention_draws(policy, plans, monkeypatch):
    prompts = [p for p in _group_prompts(policy) for _ in range(8)]
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    keys = list(range(len(prompts)))
    monkeypatch.setattr("cogym.agents.backends.hf.MIN_SAVED", 0)
    shared = HFBackend(policy).generate(prompts, sampling, keys=keys)
    monkeypatch.setattr("cogym.agents.backends.hf.MIN_SAVED", 10 ** 9)
    plain = HFBackend(policy).generate(prompts, sampling, keys=keys)
    assert plans[0] is not None and plans[1] is None
    assert [g.response_ids for g in shared] == [g.response_ids for g in plain]
    for s, p in zip(shared, plain):
        assert s.logprobs == pytest.approx(p.logprobs, abs=1e-4)


def test_a_row_decodes_bitwise_alike_with_or_without_twins_under_the_plan(policy, always):
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    a, b, c, d = _group_prompts(policy)
    few = policy.backend.generate([a, b, c, d] * 4, sampling, keys=list(range(100, 116)))
    many = policy.backend.generate([a] * 13 + [b, c, d], sampling, keys=[100] + list(range(200, 212)) + [101, 102, 103])
    assert always[0] is not None and always[1] is not None
    assert many[0] == few[0] and many[13:] == few[1:4]


def test_the_default_rule_plans_long_shared_prompts_and_not_short_lone_ones(policy, plans):
    long = [policy.render([{"role": "user", "content": f"{k} " + "1+2+3+4+5+6+7+8+9+" * 3}]) for k in range(8)]
    policy.backend.generate([p for p in long for _ in range(8)], SamplingParams(max_new_tokens=2), keys=list(range(64)))
    policy.backend.generate(_group_prompts(policy), SamplingParams(max_new_tokens=2), keys=list(range(4)))
    assert plans[0] is not None and plans[1] is None  # (64 - 8) x ~60 slot reads saved a step; then nothing shared


def test_generate_plan_blocks_have_a_fixed_size_and_place_every_row():
    owner = [0] * 11 + [1, 2, 2]
    plan = cascade.generate_plan(owner, torch.ones(3, 5, dtype=torch.bool), 5, "cpu", torch.float32)
    size = cascade.GENERATE_BLOCK
    assert plan.size == size and plan.stack.numel() == size * plan.reps.numel()
    assert plan.reps.tolist() == [0, 0, 11, 12]  # two blocks for prompt 0, one each for 1 and 2
    stack, place = plan.stack.tolist(), plan.place.tolist()
    assert all(stack[place[i]] == i for i in range(len(owner)))
    assert cascade.generate_plan([0, 1, 2], torch.ones(3, 5, dtype=torch.bool), 5, "cpu", torch.float32) is None
    assert cascade.generate_saving(owner, 5) == (14 - 4) * 5
