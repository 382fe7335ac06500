"""A keyed rollout is the same however its games are split: one call, or shares played apart
(data-parallel ranks, Ray rollout workers) and gathered, give the same Turns bit for bit."""

from __future__ import annotations

import pytest

from cogym.agents.llm import LLMAgent
from cogym.core.types import SamplingParams
from cogym.core.types import Action
from cogym.envs import make
from cogym.runners.rollout.turns import rollout
from cogym.runners.train.iteration import gather_rollouts, rollout_key
from tests.rounding import same

SYSTEM = {"proposer": "Propose a problem.", "solver": "Solve."}


class FixedProposer:
    """Proposes one well-formed problem (a random-init model's proposals rarely are), so solvers play."""

    name = "fixed"

    def act(self, requests):
        return [Action(text="12+30") for _ in requests]


def _play(policy, indices, seeds, key):
    agents = {"proposer": FixedProposer(),
              "solver": LLMAgent(policy, SamplingParams(max_new_tokens=8, temperature=1.0), name="solver")}
    games = [make("proposer_solver-v0", num_solvers=4) for _ in indices]
    return rollout(games, lambda seat, role: (role, agents[role]), SYSTEM, [seeds[g] for g in indices],
                   episode_prefix="it3", group_size=1, game_indices=indices, sampling_key=key)


def _view(res):
    return ([(t.game_index, t.episode_id, t.seat, t.prompt_ids, t.response_ids, t.logprobs, t.reward, t.finished,
              t.group_key) for t in res.turns], res.returns, res.generated_tokens)


@pytest.mark.parametrize("shares", [[[0, 2, 4], [1, 3, 5]], [[0, 1, 2, 3], [4], [5]]], ids=["interleaved", "uneven"])
def test_shares_gathered_equal_one_rollout(any_policy, shares):
    seeds = [11, 12, 13, 14, 15, 16]
    key = rollout_key(0, 3)
    whole = _play(any_policy, list(range(6)), seeds, key)
    parts = [_play(any_policy, ix, seeds, key) for ix in shares]
    assert same(_view(gather_rollouts(parts, shares)), _view(whole))  # log-probs: to rounding (batch shapes differ)
    assert len(whole.turns) == 6 * 4  # every solver answered
    assert not same(_view(_play(any_policy, list(range(6)), seeds, rollout_key(0, 4))), _view(whole))  # the key matters
