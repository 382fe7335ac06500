"""proposer_solver-v0's ``proposal_difficulty`` evaluator: how hard the posed problems are, measured by the
solver's initial model, a yardstick that does not move with training."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cogym.agents.policy import Policy
from cogym.core.errors import ConfigError
from cogym.envs import make
from cogym.envs.proposer_solver import GAME_ID
from cogym.runners.evaluation.evaluators import forked_rng, register_evaluator
from cogym.runners.rollout.agents import AgentFactory, model_agent, twin_name
from cogym.runners.rollout.loop import chat_messages
from cogym.runners.rollout.turns import rollout


@register_evaluator("proposal_difficulty")
@dataclass
class ProposalDifficulty:
    """How hard the problems a proposer_solver-v0 game poses are, measured by a fixed yardstick.

    It plays ``games`` games seated as in training (the trained policies sampling as configured,
    scripted seats with this evaluation's own RNG) and keeps the problems posed (by the proposer, or
    drawn from the game's dataset). The solver policy's *initial* model (its config ``model``, loaded
    once and never trained) answers each problem ``samples`` times, judged by the game's truth (the
    exact verifier in label-free play). Metrics:
    ``eval/<name>/initial_fail`` (the initial model's failure rate, mean over the posed problems: the
    difficulty, on a scale that does not move with training), ``eval/<name>/solver_fail`` (the current
    solver's failure rate on the same problems, from the games: what the proposer is paid on) and
    ``eval/<name>/valid`` (the share of games whose proposal was a valid problem). The initial model
    is a second copy of the solver's weights in memory.
    """

    name: str = "difficulty"
    role: str = "solver"
    games: int = 64
    samples: int = 8
    seed: int = 4321
    batch_size: int = 512  # prompts per generate call of the initial model

    def __post_init__(self) -> None:
        bad = [f"{k}={getattr(self, k)!r}" for k in ("games", "samples", "batch_size") if getattr(self, k) < 1]
        if bad:
            raise ValueError(f"{', '.join(bad)}: must be >= 1")
        self._initial = None

    def _solver_id(self, run) -> str:
        pid = run.cfg.seats.get(self.role)
        if pid not in run.policies:
            raise ConfigError(f"eval.evaluators.{self.name}: the {self.role!r} role must be played by a model policy, "
                              f"got {pid!r}")
        return pid

    def check(self, run) -> None:
        if run.cfg.game.id != GAME_ID:
            raise ConfigError(f"eval.evaluators.{self.name}: proposal_difficulty is for {GAME_ID}, not {run.cfg.game.id}")
        self._solver_id(run)

    def _initial_policy(self, run, pid: str):
        if self._initial is None:
            pc = run.cfg.policies[pid]
            self._initial = Policy.from_pretrained(pc.model, name=f"{pid}:initial", **pc.load_options())
        return self._initial

    def _posed(self, run) -> tuple[list[tuple[str, str | None, float]], object]:
        """(problem, reference, the current solver's success rate) of each game that posed a valid problem,
        and the game's truth verifier."""
        cfg = run.cfg
        games = [make(cfg.game.id, **cfg.game.kwargs) for _ in range(self.games)]
        factory = AgentFactory(cfg.game.id, seed=self.seed)
        seating = {}
        for seat in games[0].possible_agents:
            pid, agent = run.seats[seat]
            if pid in run.policies:
                seating[seat] = (pid, model_agent(run.policies[pid], cfg.policies[pid].sampling, f"eval:{pid}"))
            elif twin_name(pid) is not None:
                seating[seat] = (pid, factory.scripted(twin_name(pid), games[0].role_of(seat)))
            else:
                seating[seat] = (pid, agent)
        seeds = [int(s) for s in np.random.SeedSequence([self.seed]).generate_state(self.games)]
        system = {role: p.system for role, p in cfg.prompts.items()}
        res = rollout(games, lambda seat, role: seating[seat], system, seeds, episode_prefix=f"eval-{self.name}")
        posed = []
        for game, info in zip(games, res.infos):
            solver = info.get(game.solvers[0], {})
            if solver.get("problem") is not None:
                posed.append((solver["problem"], solver.get("reference"), float(solver["success_rate"])))
        return posed, games[0].truth

    def evaluate(self, run) -> dict[str, float]:
        pid = self._solver_id(run)
        with forked_rng(self.seed):
            posed, truth = self._posed(run)
            out = {f"eval/{self.name}/valid": len(posed) / self.games}
            if not posed:
                return out
            initial = self._initial_policy(run, pid)
            system = run.cfg.prompts[self.role].system if self.role in run.cfg.prompts else ""
            sampling = run.cfg.policies[pid].sampling  # the solver's, as it samples in training
            prompts = [initial.render(chat_messages(system, problem)) for problem, _, _ in posed for _ in range(self.samples)]
            texts = []
            for start in range(0, len(prompts), self.batch_size):
                texts += [g.text for g in initial.generate(prompts[start:start + self.batch_size], sampling)]
        fails = []
        for i, (problem, reference, _) in enumerate(posed):
            answers = texts[i * self.samples:(i + 1) * self.samples]
            fails.append(1.0 - float(np.mean(truth.judge(problem, reference, answers))))
        out[f"eval/{self.name}/initial_fail"] = float(np.mean(fails))
        out[f"eval/{self.name}/solver_fail"] = float(np.mean([1.0 - rate for _, _, rate in posed]))
        return out
