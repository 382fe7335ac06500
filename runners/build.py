"""Instantiate a config: games, policies, the agent behind every seat, and a learner per trained policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy, SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.agents.types import Agent
from cogym.envs import make, scripted_strategies
from cogym.learners.learner import Learner

from .config import Config, ConfigError

SCRIPTED_PREFIX = "scripted:"


@dataclass
class Run:
    """Everything a config builds: games, policies, agents, learners."""

    cfg: Config
    games: list
    policies: dict[str, Policy]
    agents: dict[str, Agent]
    learners: dict[str, Learner]
    roles: tuple[str, ...]
    seat_cache: dict = field(default_factory=dict)

    def seat_map(self, seat: str, role: str) -> tuple[str, Agent]:
        key = (seat, role)
        if key not in self.seat_cache:
            pid = self.cfg.seats.get(seat, self.cfg.seats.get(role))
            if pid is None:
                raise ConfigError(f"seat {seat!r} (role {role!r}) has no policy; add seats.{role}: <policy id>")
            self.seat_cache[key] = (pid, self.agents[pid])
        return self.seat_cache[key]

    def policy_for_role(self, role: str) -> Policy | None:
        pid = self.cfg.seats.get(role)
        return self.policies.get(pid) if pid else None


def build(cfg: Config, policy_dirs: dict[str, Path] | None = None) -> Run:
    """Instantiate a config; ``policy_dirs`` overrides model paths (used by resume)."""
    games = [make(cfg.game.id, **cfg.game.kwargs) for _ in range(cfg.game.num_games)]
    roles = games[0].spec.roles
    for key in cfg.seats:
        if key not in roles and key not in games[0].possible_agents:
            raise ConfigError(f"seats.{key}: {cfg.game.id} has no role or seat {key!r} (roles: {', '.join(roles)})")
    policies, agents, learners = {}, {}, {}
    for pid, pc in cfg.policies.items():
        path = (policy_dirs or {}).get(pid, pc.model)
        policies[pid] = Policy.from_pretrained(path, name=pid)
        s = pc.sampling
        agents[pid] = LLMAgent(policies[pid], SamplingParams(s.max_new_tokens, s.temperature, s.top_p, s.top_k), name=pid)
        if cfg.learners[pid].algorithm != "frozen":
            learners[pid] = Learner(policies[pid], cfg.learners[pid], temperature=s.temperature)
    twins = scripted_strategies(cfg.game.id)
    for seat_or_role, pid in cfg.seats.items():
        if pid.startswith(SCRIPTED_PREFIX):
            role = seat_or_role if seat_or_role in roles else games[0].role_of(seat_or_role)
            name = pid[len(SCRIPTED_PREFIX):]
            if name not in twins.get(role, {}):
                raise ConfigError(f"seats.{seat_or_role}: no scripted twin {name!r} for role {role!r} "
                                  f"(available: {', '.join(twins.get(role, {})) or 'none'})")
            agents[pid] = ScriptedAgent(twins[role][name], name=pid, seed=cfg.run.seed)
    return Run(cfg, games, policies, agents, learners, roles)
