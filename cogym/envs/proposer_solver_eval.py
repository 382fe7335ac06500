"""proposer_solver-v0's ``proposal_difficulty`` evaluator: how hard the posed problems are, measured by the
solver's initial model, a yardstick that does not move with training. It plays and asks the models through
:class:`cogym.envs.evaluation.EvalContext` (see there)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cogym.core import seeding
from cogym.envs.evaluation import EvalContext, EvaluatorError, Model, chat, for_game
from cogym.envs.proposer_solver import GAME_ID
from cogym.envs.registry import make


@dataclass
class ProposalDifficulty:
    """How hard the problems a proposer_solver-v0 game poses are, measured by a fixed yardstick.

    It plays ``games`` games seated as in training (``EvalContext.play``: the trained policies sampling
    as configured, scripted seats with this evaluation's own RNG) and keeps the problems posed (by the
    proposer, or drawn from the game's dataset). The solver policy's *initial* model
    (``EvalContext.initial_model``: its config ``model``, loaded once and never trained) answers each
    problem ``samples`` times, judged by the game's truth (the exact verifier in label-free play). Metrics:
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
        self._initial: Model | None = None

    def _solver_id(self, ctx: EvalContext) -> str:
        pid = ctx.policy_of(self.role)
        if pid is None:
            raise EvaluatorError(f"the {self.role!r} role must be played by a model policy")
        return pid

    def check(self, ctx: EvalContext) -> None:
        for_game(ctx, self.name, "proposal_difficulty", GAME_ID)
        self._solver_id(ctx)

    def _initial_model(self, ctx: EvalContext, pid: str) -> Model:
        if self._initial is None:
            self._initial = ctx.initial_model(pid)
        return self._initial

    def _posed(self, ctx: EvalContext) -> tuple[list[tuple[str, str | None, float]], object]:
        """(problem, reference, the current solver's success rate) of each game that posed a valid problem,
        and the game's truth verifier."""
        games = [make(ctx.game_id, **ctx.game_kwargs) for _ in range(self.games)]
        seeds = seeding.seeds("eval.games", self.seed, n=self.games)
        _, infos = ctx.play(games, seeds, seed=self.seed, label=self.name)
        posed = []
        for game, info in zip(games, infos):
            solver = info.get(game.solvers[0], {})
            if solver.get("problem") is not None:
                posed.append((solver["problem"], solver.get("reference"), float(solver["success_rate"])))
        return posed, games[0].truth

    def evaluate(self, ctx: EvalContext) -> dict[str, float]:
        pid = self._solver_id(ctx)
        with ctx.rng(self.seed):
            posed, truth = self._posed(ctx)
            out = {f"eval/{self.name}/valid": len(posed) / self.games}
            if not posed:
                return out
            system = ctx.system(self.role)
            chats = [chat(system, problem) for problem, _, _ in posed for _ in range(self.samples)]
            # the solver's sampling, as it samples in training
            texts = self._initial_model(ctx, pid).answer(chats, ctx.sampling(pid), batch_size=self.batch_size)
        fails = []
        for i, (problem, reference, _) in enumerate(posed):
            answers = texts[i * self.samples:(i + 1) * self.samples]
            fails.append(1.0 - float(np.mean(truth.judge(problem, reference, answers))))
        out[f"eval/{self.name}/initial_fail"] = float(np.mean(fails))
        out[f"eval/{self.name}/solver_fail"] = float(np.mean([1.0 - rate for _, _, rate in posed]))
        return out
