"""Exact reply-class probabilities (agents/reply_probs.py) against the policy's own sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.agents.reply_probs import reply_distributions
from cogym.envs.kuhn_poker import classify_reply, reply_classifier, turn_text
from cogym.runners.rollout.loop import chat_messages


@pytest.fixture(scope="module")
def embedded() -> Policy:
    """The embedded tiny model: trained, so its replies are short and its mass is on few paths."""
    return Policy.from_pretrained("tiny")


def _prompt(policy, card: str, history: tuple) -> list[int]:
    return policy.render(chat_messages("Poker.", turn_text(card, history)))


def test_the_exact_distribution_matches_the_sampler(embedded) -> None:
    policy = embedded
    sampling = SamplingParams(max_new_tokens=4, temperature=1.0)
    prompt = _prompt(policy, "K", ())
    (exact,) = reply_distributions(policy, [prompt], reply_classifier(()), sampling)
    assert sum(exact.probs.values()) + exact.unresolved == pytest.approx(1.0, abs=1e-6)  # float32 softmax
    assert exact.unresolved < 1e-3 and len(exact.probs) == 3  # untrained for poker, it writes all three kinds
    n = 3000
    torch.manual_seed(0)
    gens = policy.generate([prompt] * n, sampling)
    counts = {label: 0 for label in exact.probs}
    for g in gens:
        counts[classify_reply(g.text, (), True)] += 1
    for label, p in exact.probs.items():
        sigma = np.sqrt(p * (1 - p) / n)
        assert abs(counts[label] / n - p) <= 4 * sigma + exact.unresolved, (label, counts[label] / n, p)


def test_greedy_puts_all_mass_on_the_greedy_reply(policy) -> None:
    sampling = SamplingParams(max_new_tokens=4, temperature=0.0)
    histories = [(), ("check",), ("bet",), ("check", "bet")]
    prompts = [_prompt(policy, "Q", h) for h in histories]
    dists = reply_distributions(policy, prompts, [reply_classifier(h) for h in histories], sampling)
    gens = policy.generate(prompts, sampling)
    for h, d, g in zip(histories, dists, gens):
        assert d.unresolved == 0.0
        assert d.probs == {classify_reply(g.text, h, True): pytest.approx(1.0)}


def test_batching_and_min_prob_do_not_change_the_result(embedded) -> None:
    policy = embedded
    sampling = SamplingParams(max_new_tokens=3, temperature=1.3)
    prompts = [_prompt(policy, c, ()) for c in "JQK"]
    whole = reply_distributions(policy, prompts, reply_classifier(()), sampling, batch_size=256)
    small = reply_distributions(policy, prompts, reply_classifier(()), sampling, batch_size=2)
    for a, b in zip(whole, small):
        assert a.probs.keys() == b.probs.keys()
        assert all(a.probs[k] == pytest.approx(b.probs[k], abs=1e-6) for k in a.probs)
    coarse = reply_distributions(policy, prompts, reply_classifier(()), sampling, min_prob=1e-2)
    for fine, rough in zip(whole, coarse):
        assert rough.unresolved > fine.unresolved and rough.forwards < fine.forwards
        for k, p in rough.probs.items():  # what it resolved it resolved exactly; the rest is unresolved
            assert p <= fine.probs[k] + 1e-9 and fine.probs[k] <= p + rough.unresolved + 1e-9


def test_filtered_sampling_is_refused(policy) -> None:
    with pytest.raises(ValueError, match="top_p 1.0 and top_k 0"):
        reply_distributions(policy, [_prompt(policy, "K", ())], reply_classifier(()), SamplingParams(top_p=0.9))


def test_the_model_is_left_in_its_mode(policy) -> None:
    policy.model.train()
    reply_distributions(policy, [_prompt(policy, "K", ())], reply_classifier(()), SamplingParams(max_new_tokens=2))
    assert policy.model.training
