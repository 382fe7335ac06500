"""LLMAgent (one batched generate per act) and ScriptedAgent (its own RNG)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from cogym.agents.llm import LLMAgent
from cogym.core.types import SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.core.types import Action, Request
from cogym.envs import scripted_strategies


def _requests(n: int) -> list[Request]:
    return [Request(messages=[{"role": "system", "content": "Solve."}, {"role": "user", "content": f"{i}+{i}"}],
                    role="solver", seat=f"solver_{i}") for i in range(n)]


class CountingGenerate:
    """Wraps Policy.generate and records the batch size of every call."""

    def __init__(self, policy):
        self.inner = policy.generate
        self.calls: list[int] = []
        policy.generate = self

    def __call__(self, prompts, sampling, keys=None):
        self.calls.append(len(prompts))
        return self.inner(prompts, sampling, keys)


def test_llm_agent_answers_a_batch_with_one_generate_call(any_policy):
    policy = any_policy
    counter = CountingGenerate(policy)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=5), name="solver")
    requests = _requests(17)
    actions = agent.act(requests)
    assert counter.calls == [17]
    assert len(actions) == 17
    for req, act in zip(requests, actions):
        assert isinstance(act, Action)
        assert act.prompt_ids == policy.render(req.messages)
        assert 1 <= len(act.response_ids) <= 5
        assert len(act.logprobs) == len(act.response_ids)
        assert act.text == policy.decode(act.response_ids)


def test_llm_agent_single_request_is_a_batch_of_one(policy):
    counter = CountingGenerate(policy)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=3))
    assert len(agent.act(_requests(1))) == 1
    assert counter.calls == [1]
    assert agent.name == policy.name and agent.trainable


def test_llm_agent_uses_its_sampling_params(any_policy):
    policy = any_policy
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=4, temperature=0.0))
    a = agent.act(_requests(3))
    b = agent.act(_requests(3))
    assert [x.response_ids for x in a] == [x.response_ids for x in b]  # greedy
    greedy = policy.generate([policy.render(r.messages) for r in _requests(3)], SamplingParams(4, 0.0))
    assert [x.response_ids for x in a] == [g.response_ids for g in greedy]


def test_llm_agent_keeps_unfinished_flag(policy):
    torch.manual_seed(0)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=1))
    acts = agent.act(_requests(8))
    eos = policy.tokenizer.eos_token_id
    for act in acts:
        assert act.finished == (act.response_ids == [eos])


# ------------------------------------------------------------------ scripted
def _solver_requests(problems: list[str]) -> list[Request]:
    return [Request(messages=[{"role": "system", "content": "Solve."}, {"role": "user", "content": p}],
                    role="solver", seat=f"solver_{i}") for i, p in enumerate(problems)]


def test_scripted_agent_reads_the_last_message():
    twins = scripted_strategies("proposer_solver-v0")
    agent = ScriptedAgent(twins["solver"]["oracle"], name="oracle")
    acts = agent.act(_solver_requests(["37+45", "12*3", "5-9"]))
    assert [a.text for a in acts] == ["82", "36", "-4"]
    assert all(a.response_ids is None and a.prompt_ids is None for a in acts)
    assert agent.trainable is False


def test_scripted_agent_same_seed_same_actions():
    twins = scripted_strategies("proposer_solver-v0")
    reqs = _solver_requests(["1+1"] * 20)
    a = ScriptedAgent(twins["solver"]["random"], name="r", seed=7).act(reqs)
    b = ScriptedAgent(twins["solver"]["random"], name="r", seed=7).act(reqs)
    c = ScriptedAgent(twins["solver"]["random"], name="r", seed=8).act(reqs)
    assert [x.text for x in a] == [x.text for x in b]
    assert [x.text for x in a] != [x.text for x in c]
    assert len({x.text for x in a}) > 1  # it is random, not constant


def test_scripted_agent_does_not_touch_global_rng_state():
    twins = scripted_strategies("proposer_solver-v0")
    np.random.seed(123)
    random.seed(123)
    np_state = np.random.get_state()
    py_state = random.getstate()
    torch_state = torch.get_rng_state()
    for strategy in (twins["solver"]["random"], twins["proposer"]["random"], twins["proposer"]["garbage"]):
        ScriptedAgent(strategy, name="s", seed=0).act(_solver_requests(["1+1"] * 10))
    after = np.random.get_state()
    assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1]) and after[2:] == np_state[2:]
    assert random.getstate() == py_state
    assert torch.equal(torch.get_rng_state(), torch_state)


def test_scripted_agent_stream_independent_of_global_seed():
    twins = scripted_strategies("proposer_solver-v0")
    reqs = _solver_requests(["1+1"] * 10)
    np.random.seed(1)
    a = ScriptedAgent(twins["proposer"]["random"], name="p", seed=3).act(reqs)
    np.random.seed(2)
    b = ScriptedAgent(twins["proposer"]["random"], name="p", seed=3).act(reqs)
    assert [x.text for x in a] == [x.text for x in b]


@pytest.mark.parametrize("seed", [0, 1])
def test_two_scripted_agents_do_not_share_a_stream(seed):
    twins = scripted_strategies("proposer_solver-v0")
    reqs = _solver_requests(["1+1"] * 5)
    alone = ScriptedAgent(twins["solver"]["random"], name="a", seed=seed).act(reqs)
    x = ScriptedAgent(twins["solver"]["random"], name="a", seed=seed)
    y = ScriptedAgent(twins["solver"]["random"], name="b", seed=seed)
    y.act(reqs)  # drawing from y must not advance x
    assert [a.text for a in x.act(reqs)] == [a.text for a in alone]
