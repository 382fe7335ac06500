"""Learned rewards: a policy whose learner sets ``reward_from: <rm>`` is paid by the reward model that
policy ``rm``'s learner (algorithm ``reward_model``) trains, not by the game.

Each iteration, before any learner steps: every seat's moves of one game get the reward model's
reward of the seat's last move there (its prompt holds the whole conversation; :meth:`rewards` of
:class:`cogym.learners.algorithms.reward_model.RewardModelAlgorithm`, with the weights it has before
this batch), and the reward model's batch gets those turns with the game's rewards to train on. While
the reward model warms up (``rm_warmup``) the policy it pays gets no batch, so it does not step. The policy's ``<policy>/reward`` metric stays the
game's; ``<policy>/rm_reward`` is the mean of the reward model's scores and ``<policy>/rm_accuracy``
its pairwise accuracy on this batch's pairs, which it has not trained on yet.
"""

from __future__ import annotations

import dataclasses

import torch

from cogym.core.errors import ConfigError
from cogym.learners.pairs import reward_pairs
from cogym.learners.reward_model import pair_metrics


def reward_models(learners: dict) -> set[str]:
    """The policies that pay others (``learners``: policy id -> LearnerConfig): loaded and trained without a seat."""
    return {lc.reward_from for lc in learners.values() if lc.reward_from}


def learned_rewards(run, batches: dict[str, list]) -> dict[str, float]:
    """Give the turns of every policy with ``reward_from`` the reward model's rewards, in ``batches``
    (policy id -> its turns; the reward model's entry gains them with the game's rewards); metrics."""
    metrics: dict[str, float] = {}
    for pid, lc in run.cfg.learners.items():
        rm = lc.reward_from
        if not rm or pid not in batches:
            continue
        if run.policies[rm].tokenizer.get_vocab() != run.policies[pid].tokenizer.get_vocab():
            raise ConfigError(f"learners.{pid}.reward_from: {rm!r} reads policy {pid!r}'s token ids, so its model needs "
                              f"the same tokenizer; give policies.{rm}.model one of the same tokenizer")
        truth = batches[pid]
        last: dict[tuple, int] = {}
        for i, t in enumerate(truth):
            last[(t.episode_id, t.seat)] = i  # a seat's last move of the game
        rows = sorted(last.values())
        model = run.learners[rm].algorithm
        scores = model.rewards([truth[i] for i in rows])
        score_of = {(truth[i].episode_id, truth[i].seat): s for i, s in zip(rows, scores)}
        # rm_warmup: no batch (so no step, whatever a critic or an entropy bonus would do) until it has trained
        paid = [dataclasses.replace(t, reward=score_of[(t.episode_id, t.seat)]) for t in truth]
        batches[pid] = paid if model.paying else []
        batches[rm] = batches.get(rm, []) + truth
        if scores:
            metrics[f"{pid}/rm_reward"] = sum(scores) / len(scores)
            pairs = reward_pairs([truth[i] for i in rows], "all")
            if pairs:
                s = torch.tensor(scores)
                chosen, rejected = zip(*pairs)
                metrics[f"{pid}/rm_accuracy"] = pair_metrics(s[list(chosen)], s[list(rejected)])["accuracy"]
    return metrics
