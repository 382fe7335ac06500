"""The runner's side of evaluation: :class:`RunContext`, what every evaluator is given, and
:class:`PolicyModel`, a policy as the :class:`cogym.envs.evaluation.Model` an evaluator asks.

``RunContext`` implements :class:`cogym.envs.evaluation.EvalContext` (the interface documented there,
which games' evaluators are written against) over a built run (:class:`cogym.runners.train.build.Run`:
``cogym train`` builds it with learners, ``cogym eval`` without). A runner-level evaluator (``vs_scripted``,
or a kind registered with :func:`cogym.runners.evaluation.evaluators.register_evaluator`) may also read
the whole run, ``ctx.run``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

from cogym.agents.policy import Policy
from cogym.agents.reply_probs import reply_distributions
from cogym.core import seeding
from cogym.core.types import SamplingParams
from cogym.envs.evaluation import Chat, Classifier, EvaluatorError
from cogym.runners.rollout.agents import AgentFactory, model_agent, twin_name
from cogym.runners.rollout.seating import Seating
from cogym.runners.rollout.turns import rollout


@contextlib.contextmanager
def forked_rng(seed: int):
    """Run a block on its own torch RNG stream (CPU and every CUDA device), then restore the caller's."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        seeding.torch_seed("eval.sampling", seed)
        yield


class PolicyModel:
    """A policy as an evaluator's :class:`cogym.envs.evaluation.Model`: chats rendered with its template."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def answer(self, chats: Sequence[Chat], params: SamplingParams, *, batch_size: int | None = None) -> list[str]:
        prompts = [self.policy.render(list(c)) for c in chats]
        step = batch_size or max(len(prompts), 1)
        texts: list[str] = []
        for start in range(0, len(prompts), step):
            texts += [g.text for g in self.policy.generate(prompts[start:start + step], params)]
        return texts

    def reply_distributions(self, chats: Sequence[Chat], classifiers: Sequence[Classifier], params: SamplingParams, *,
                            min_prob: float, max_branches: int) -> list:
        prompts = [self.policy.render(list(c)) for c in chats]
        return reply_distributions(self.policy, prompts, list(classifiers), params, min_prob=min_prob,
                                   max_branches=max_branches)


def evaluated_policy(name: str, policy: str, run) -> str:
    """The policy an evaluator named ``name`` evaluates: ``policy`` when given (it must play a seat), else
    the first trained policy with a seat."""
    if policy:
        if policy not in run.policies:
            raise EvaluatorError(f"{policy!r} plays no seat (policies with seats: {', '.join(run.policies)})", key="policy")
        return policy
    trained = [pid for pid in run.learners if pid in run.policies] or (
        [] if run.learners else list(run.policies))  # a run built without learners (cogym eval): any model seat
    if not trained:
        raise EvaluatorError("no trained policy plays a seat; name one with policy:")
    return trained[0]


class RunContext:
    """:class:`cogym.envs.evaluation.EvalContext` over a built run (``run``)."""

    def __init__(self, run) -> None:
        self.run = run
        self.game_id: str = run.cfg.game.id
        self.game_kwargs: dict[str, Any] = dict(run.cfg.game.kwargs)

    def policy_of(self, role: str) -> str | None:
        pid = self.run.cfg.seats.get(role) if role in self.run.roles else None
        return pid if pid in self.run.policies else None

    def evaluated(self, name: str, policy: str = "") -> str:
        return evaluated_policy(name, policy, self.run)

    def sampling(self, policy: str) -> SamplingParams:
        return self.run.cfg.policies[policy].sampling

    def system(self, role: str) -> str:
        prompts = self.run.cfg.prompts
        return prompts[role].system if role in prompts else ""

    def model(self, policy: str) -> PolicyModel:
        return PolicyModel(self.run.policies[policy])

    def initial_model(self, policy: str) -> PolicyModel:
        pc = self.run.cfg.policies[policy]
        return PolicyModel(Policy.from_pretrained(pc.model, name=f"{policy}:initial", **pc.load_options()))

    def systems(self) -> dict[str, str]:
        """role -> system message, as the play loop takes them."""
        return {role: p.system for role, p in self.run.cfg.prompts.items()}

    def seated_as_in_training(self, game, factory: AgentFactory) -> dict[str, tuple[str, Any]]:
        """seat -> (player id, agent) as the run seats ``game``: model seats sampling as configured, the
        config's scripted twins with agents of ``factory`` (the evaluation's own), any other agent as it is."""
        players = {}
        for seat in game.possible_agents:
            pid, agent = self.run.seats[seat]
            if pid in self.run.policies:
                players[seat] = (pid, model_agent(self.run.policies[pid], self.run.cfg.policies[pid].sampling, f"eval:{pid}"))
            elif twin_name(pid) is not None:
                players[seat] = (pid, factory.scripted(twin_name(pid), game.role_of(seat)))
            else:
                players[seat] = (pid, agent)
        return players

    def play(self, games: Sequence[Any], seeds: Sequence[int], *, seed: int, label: str
             ) -> tuple[list[dict[str, float]], list[dict[str, dict]]]:
        seating = Seating(self.seated_as_in_training(games[0], AgentFactory(self.game_id, seed=seed)))
        res = rollout(list(games), seating, self.systems(), list(seeds), episode_prefix=f"eval-{label}")
        return res.returns, res.infos

    def rng(self, seed: int):
        return forked_rng(seed)
