"""One agent factory for training, evaluation, tournaments and leagues.

A seat is played by a model (an :class:`~cogym.agents.llm.LLMAgent` over a
:class:`~cogym.agents.policy.Policy`) or by one of the game's scripted twins, named
``scripted:<twin>``. A twin is a strategy *per role* ("scripted:random" plays each role its own
way), so the factory keeps one agent per (twin, role), named ``scripted:<twin>@<role>``, and one
agent per model key.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Collection

from cogym.agents.endpoint import EndpointAgent, EndpointConfig
from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.core.types import Agent
from cogym.envs import scripted_strategies
from cogym.runners.rollout.seating import SeatingError

SCRIPTED_PREFIX = "scripted:"


def twin_name(spec: str) -> str | None:
    """``"nash"`` for ``"scripted:nash"``; None for anything that is not a scripted twin."""
    return spec[len(SCRIPTED_PREFIX):] if spec.startswith(SCRIPTED_PREFIX) else None


def model_agent(policy: Policy, sampling: SamplingParams, name: str) -> LLMAgent:
    """A seat played by ``policy`` (batched generation; ids and behaviour log-probs kept)."""
    return LLMAgent(policy, sampling, name=name)


def greedy_agent(agent: Agent, policy_id: str) -> LLMAgent:
    """A twin of model seat ``agent``: the same policy and reply limit, decoding greedily (temperature 0)."""
    if not isinstance(agent, LLMAgent):
        raise SeatingError(f"policy {policy_id!r} plays a greedy game (its algorithm's baseline is one, e.g. remax), "
                           f"but a {type(agent).__name__} plays its seats, which has no greedy decoding; seat a model")
    return LLMAgent(agent.policy, dataclasses.replace(agent.sampling, temperature=0.0), name=f"{agent.name}@greedy",
                    max_batch=agent.streams.max_batch)


def greedy_seats(seat_map, policies: Collection[str]):
    """``seat_map`` (one map, or one per game) with the seats of ``policies`` played by greedy twins of
    their agents (:func:`greedy_agent`; one twin per agent, so each still answers its seats in one call);
    every other seat as it was. ``seat_map`` itself when ``policies`` is empty."""
    if not policies:
        return seat_map
    twins: dict[int, LLMAgent] = {}

    def greedy(inner):
        def seat(seat: str, role: str) -> tuple[str, Agent]:
            pid, agent = inner(seat, role)
            if pid not in policies:
                return pid, agent
            if id(agent) not in twins:
                twins[id(agent)] = greedy_agent(agent, pid)
            return pid, twins[id(agent)]
        return seat

    return greedy(seat_map) if callable(seat_map) else [greedy(m) for m in seat_map]


class AgentFactory:
    """Agents for the seats of one game; ``seed`` starts every scripted agent's RNG (callers reseed
    them per iteration or batch for replayable streams)."""

    def __init__(self, game_id: str, seed: int = 0) -> None:
        self.game_id, self.seed = game_id, seed
        self.twins = scripted_strategies(game_id)
        self.agents: dict[str, Agent] = {}

    def check_twin(self, twin: str, role: str, where: str = "seats") -> None:
        """A one-line error naming the available twins when ``role`` has no twin ``twin``."""
        if twin not in self.twins.get(role, {}):
            raise SeatingError(f"{where}: no scripted twin {twin!r} for role {role!r} of {self.game_id} "
                              f"(available: {', '.join(self.twins.get(role, {})) or 'none'})")

    def scripted(self, twin: str, role: str, name: str | None = None) -> ScriptedAgent:
        """The agent playing twin ``twin`` in ``role`` (one per name; the name defaults to
        ``scripted:<twin>@<role>``)."""
        key = name or f"{SCRIPTED_PREFIX}{twin}@{role}"
        if key not in self.agents:
            self.check_twin(twin, role)
            self.agents[key] = ScriptedAgent(self.twins[role][twin], name=key, seed=self.seed, twin=twin)
        return self.agents[key]

    def model(self, key: str, policy: Policy | Callable[[], Policy], sampling: SamplingParams,
              wrap: Callable[[Agent], Agent] | None = None) -> Agent:
        """The agent of model ``key`` (built once from ``policy``, or a function that loads it);
        ``wrap`` decorates it (e.g. a player that brings its own prompts)."""
        if key not in self.agents:
            loaded = policy() if callable(policy) and not isinstance(policy, Policy) else policy
            agent = model_agent(loaded, sampling, key)
            self.agents[key] = wrap(agent) if wrap is not None else agent
        return self.agents[key]

    def endpoint(self, key: str, config: EndpointConfig, sampling: SamplingParams, where: str | None = None,
                 wrap: Callable[[Agent], Agent] | None = None, stop_when_dead: bool = True) -> Agent:
        """The agent of endpoint ``key`` (one per key, so its ``max_concurrency`` bounds the whole run);
        ``sampling``: the reply limit and temperature its config's own values override; ``stop_when_dead``:
        the run stops once it fails ``max_consecutive_failures`` requests in a row (a tournament counts them instead)."""
        if key not in self.agents:
            agent = EndpointAgent(config, key, max_tokens=sampling.max_new_tokens, temperature=sampling.temperature,
                                  where=where, stop_when_dead=stop_when_dead)
            self.agents[key] = wrap(agent) if wrap is not None else agent
        return self.agents[key]

    def seat(self, spec: str, role: str, policies: dict[str, Policy], sampling: dict[str, SamplingParams],
             endpoints: dict[str, EndpointConfig] | None = None) -> Agent:
        """A seat's agent from a training config's ``seats`` value: ``scripted:<twin>`` or a policy id
        (a model of ``policies``, or an endpoint of ``endpoints``)."""
        twin = twin_name(spec)
        if twin is not None:
            return self.scripted(twin, role)
        if endpoints and spec in endpoints:
            return self.endpoint(spec, endpoints[spec], sampling[spec], where=f"policies.{spec}.endpoint")
        return self.model(spec, policies[spec], sampling[spec])
