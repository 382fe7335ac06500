"""Evaluations a config declares: run before training, every ``run.eval_every`` iterations, and after.

An evaluator is a small object with ``name`` and ``evaluate(run) -> {metric: value}``, made from
a mapping under ``eval.evaluators`` whose ``kind`` names a registered evaluator class and whose
other keys are the fields of that class (typed and checked when the config loads)::

    eval:
      evaluators:
        vs_nash: {kind: vs_scripted, opponent: nash, games: 200}   # metrics eval/vs_nash/...

Shipped kinds:

- ``heldout_arithmetic``: greedy accuracy of the policy behind a role (``solver``) on the fixed
  500-problem arithmetic set, logged as ``heldout_acc``. ``eval.heldout: true`` (the default) adds
  it when the game has that role.
- ``vs_scripted``: the trained policy in its own seats against a scripted twin of the game in the
  other seats (or in ``seats``), over ``games`` games with fixed seeds (the same games every time
  it runs, so before and after are paired; in self-play the twin takes the seats of the game's last
  role): ``eval/<name>/win_rate`` (1 for a win, 0.5 for a draw:
  the sign of the two sides' return difference), ``eval/<name>/return`` (the policy's seats' mean
  return) and ``eval/<name>/invalid`` when the game reports invalid moves.
- ``kuhn_exploitability`` (kuhn_poker-v0): the exact exploitability of the trained policy's strategy
  in both seats, from its move probabilities at the game's 12 information sets:
  ``eval/<name>/exploitability`` (0 at equilibrium), ``card_spread``, ``invalid``, ``unresolved``.
- ``proposal_difficulty`` (proposer_solver-v0): how hard the posed problems are, as the failure
  rate of the solver's initial model on them (``eval/<name>/initial_fail``), beside the current
  solver's (``solver_fail``).

An evaluation never moves training: it plays on its own game copies (at turn level, whatever the
training granularity), with its own scripted agents, and inside a forked torch RNG, so a run with
evaluators logs the same training numbers as without.
Register your own kind with :func:`register_evaluator` in a module listed under ``game.modules``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from cogym.core.errors import ConfigError
from cogym.envs import make

from cogym.runners.rollout.agents import AgentFactory, model_agent, twin_name
from cogym.runners.evaluation.heldout import heldout_accuracy

EVALUATORS: dict[str, type] = {}


def register_evaluator(kind: str) -> Callable[[type], type]:
    """Class decorator: make ``kind`` usable under ``eval.evaluators``."""

    def add(cls: type) -> type:
        if kind in EVALUATORS and EVALUATORS[kind] is not cls:
            raise ConfigError(f"evaluator kind {kind!r} is already registered ({EVALUATORS[kind].__name__})")
        EVALUATORS[kind] = cls
        return cls

    return add


@register_evaluator("heldout_arithmetic")
@dataclass
class HeldoutArithmetic:
    """Greedy accuracy of ``role``'s policy on the held-out arithmetic set (its first ``size`` problems),
    ``heldout_acc``; with ``temperature`` > 0 also ``heldout_sampled_acc``, the mean accuracy of ``samples``
    answers to each problem sampled at that temperature (the pass@1 the papers report)."""

    name: str = "heldout"
    role: str = "solver"
    size: int = 500
    max_new_tokens: int = 8
    batch_size: int = 500  # prompts per generate call
    temperature: float = 0.0
    samples: int = 4
    seed: int = 2468  # the sampling stream of heldout_sampled_acc: the same before and after training

    def __post_init__(self) -> None:
        bad = [f"{k}={getattr(self, k)!r}" for k in ("size", "max_new_tokens", "batch_size", "samples")
               if getattr(self, k) < 1]
        if bad:
            raise ValueError(f"{', '.join(bad)}: must be >= 1")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature={self.temperature!r}: must be >= 0 (0: greedy accuracy only)")

    def evaluate(self, run) -> dict[str, float]:
        policy = run.policy_for_role(self.role) if self.role in run.roles else None
        if policy is None:
            return {}
        return self.accuracies(policy, run.cfg.prompts[self.role].system if self.role in run.cfg.prompts else "")

    def accuracies(self, policy, system: str) -> dict[str, float]:
        """``heldout_acc`` of ``policy`` under the system message ``system`` (and ``heldout_sampled_acc``)."""
        from cogym.envs.arithmetic import load_heldout

        records = load_heldout()[: self.size]
        out = {"heldout_acc": heldout_accuracy(policy, records, system, max_new_tokens=self.max_new_tokens,
                                               batch_size=self.batch_size)}
        if self.temperature > 0:
            with forked_rng(self.seed):  # a fixed stream, and the caller's continues as if nothing ran
                out["heldout_sampled_acc"] = heldout_accuracy(
                    policy, records, system, max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                    temperature=self.temperature, samples=self.samples)
        return out


def evaluated_policy(name: str, policy: str, run) -> str:
    """The policy an evaluator named ``name`` evaluates: ``policy`` when given (it must play a seat), else
    the first trained policy with a seat."""
    if policy:
        if policy not in run.policies:
            raise ConfigError(f"eval.evaluators.{name}.policy: {policy!r} plays no seat "
                              f"(policies with seats: {', '.join(run.policies)})")
        return policy
    trained = [pid for pid in run.learners if pid in run.policies]
    if not trained:
        raise ConfigError(f"eval.evaluators.{name}: no trained policy plays a seat; name one with policy:")
    return trained[0]


@register_evaluator("vs_scripted")
@dataclass
class VsScripted:
    """``policy`` (default: the first trained policy with a seat) against scripted twin ``opponent``."""

    name: str = ""
    opponent: str = "random"
    policy: str = ""
    # Seats or roles the twin plays; []: every seat the policy does not hold (in self-play: the last role's).
    seats: list = field(default_factory=list)
    games: int = 200
    seed: int = 12345
    greedy: bool = False

    def __post_init__(self) -> None:
        self.name = self.name or f"vs_{self.opponent}"
        if self.games < 1:
            raise ValueError(f"games must be >= 1, got {self.games}")

    def _policy_id(self, run) -> str:
        return evaluated_policy(self.name, self.policy, run)

    def _seating(self, run, game, pid: str) -> tuple[dict, list[str], list[str]]:
        """seat -> (policy id, agent) for the evaluation games, the policy's seats and the twin's."""
        factory = AgentFactory(run.cfg.game.id, seed=self.seed)
        sampling = run.cfg.policies[pid].sampling
        if self.greedy:
            sampling = dataclasses.replace(sampling, temperature=0.0)
        if self.seats:
            twin = [s for s in game.possible_agents if s in self.seats or game.role_of(s) in self.seats]
        else:  # the seats the policy does not hold; in self-play (it holds all), those of the game's last role
            twin = [s for s in game.possible_agents if run.seats[s][0] != pid]
            twin = twin or [s for s in game.possible_agents if game.role_of(s) == game.spec.roles[-1]]
        mine = [s for s in game.possible_agents if run.seats[s][0] == pid and s not in twin]
        if not mine or not twin:
            raise ConfigError(f"eval.evaluators.{self.name}: policy {pid!r} needs a seat of its own and the twin one "
                              f"(policy seats: {mine}, twin seats: {twin})")
        seating = {}
        for seat in game.possible_agents:
            role = game.role_of(seat)
            if seat in mine:
                seating[seat] = (pid, model_agent(run.policies[pid], sampling, f"eval:{pid}"))
            elif seat in twin:
                seating[seat] = (f"scripted:{self.opponent}", factory.scripted(self.opponent, role))
            elif twin_name(run.seats[seat][0]) is not None:  # the config's own twin, with this evaluation's RNG
                seating[seat] = (run.seats[seat][0], factory.scripted(twin_name(run.seats[seat][0]), role))
            else:  # a seat the config gives a model (a frozen judge) keeps its player
                seating[seat] = run.seats[seat]
        return seating, mine, twin

    def check(self, run) -> None:
        """Fail at build time, not after training, on a policy or seats the game cannot seat this way."""
        self._seating(run, run.games[0], self._policy_id(run))

    def evaluate(self, run) -> dict[str, float]:
        from cogym.runners.rollout.turns import rollout
        from cogym.runners.tournament.scoring import game_score

        cfg, pid = run.cfg, self._policy_id(run)
        games = [make(cfg.game.id, **cfg.game.kwargs) for _ in range(self.games)]
        seating, mine, twin = self._seating(run, games[0], pid)
        seeds = [int(s) for s in np.random.SeedSequence([self.seed]).generate_state(self.games)]
        system = {role: p.system for role, p in cfg.prompts.items()}
        with forked_rng(self.seed):
            res = rollout(games, lambda seat, role: seating[seat], system, seeds, episode_prefix=f"eval-{self.name}")
        scores = [game_score(ret, mine, twin) for ret in res.returns]
        out = {f"eval/{self.name}/win_rate": float(np.mean(scores)),
               f"eval/{self.name}/return": float(np.mean([sum(ret.get(s, 0.0) for s in mine) for ret in res.returns]))}
        invalid = [bool(info[s].get("invalid")) for info in res.infos for s in mine if s in info and "invalid" in info[s]]
        if invalid:
            out[f"eval/{self.name}/invalid"] = float(np.mean(invalid))
        return out


@register_evaluator("kuhn_exploitability")
@dataclass
class KuhnExploitability:
    """Exact exploitability of ``policy`` in kuhn_poker-v0, both seats played by it.

    Its move probabilities at the 12 information sets are computed exactly from the model
    (:func:`cogym.agents.reply_probs.reply_distributions`: every reply path, each seat prompted as in
    training, with the role's system message), an invalid reply counting as a fold as the game scores
    it (the card written in the game's ``card_style``); then :func:`cogym.envs.kuhn_poker.exploitability`
    of that strategy. Metrics:
    ``eval/<name>/exploitability`` (NashConv / 2; 0 at equilibrium, 1/3 or more for any strategy that
    ignores its card), ``eval/<name>/card_spread`` (mean over the four histories of the largest minus
    the smallest probability of the aggressive move across the three cards: 0 for card-blind play),
    ``eval/<name>/invalid`` (mean probability of an invalid reply) and ``eval/<name>/unresolved`` (the
    largest probability mass left on reply paths below ``min_prob`` or past ``max_branches``, counted
    as invalid: about 1e-4 for the embedded model, more for a model that writes noise).
    With ``average: K``, also ``eval/<name>/avg_exploitability``: the exploitability of the policy
    averaged over its last K evaluations (a hand played by one of those K strategies drawn at random,
    :func:`cogym.envs.kuhn_poker.average_strategy`), the strategy that fictitious play converges
    with; the window counts this run's evaluations since it started (or resumed).
    """

    name: str = "exploitability"
    policy: str = ""
    greedy: bool = False
    min_prob: float = 1e-6  # reply paths less likely than this are not followed
    max_branches: int = 1024  # open reply paths followed at once (a model that writes noise is cut here)
    average: int = 0  # > 0: also the exploitability of the mixture of the last `average` evaluated strategies

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_prob < 1e-2:
            raise ValueError(f"min_prob must be in [0, 0.01), got {self.min_prob}")
        if self.max_branches < 1:
            raise ValueError(f"max_branches must be >= 1, got {self.max_branches}")
        if self.average < 0:
            raise ValueError(f"average must be >= 0, got {self.average}")
        self._history: list = []  # the strategies of this run's evaluations, oldest first (not checkpointed)

    def check(self, run) -> None:
        from cogym.envs.kuhn_poker import GAME_ID

        if run.cfg.game.id != GAME_ID:
            raise ConfigError(f"eval.evaluators.{self.name}: kuhn_exploitability is for {GAME_ID}, not {run.cfg.game.id}")
        sampling = run.cfg.policies[evaluated_policy(self.name, self.policy, run)].sampling
        if sampling.top_p != 1.0 or sampling.top_k:
            raise ConfigError(f"eval.evaluators.{self.name}: exact move probabilities need plain temperature sampling "
                              f"(top_p 1.0, top_k 0), got top_p {sampling.top_p}, top_k {sampling.top_k}")

    def _distributions(self, run) -> list:
        """The policy's reply distribution at each of ``INFOSETS``, in order."""
        from cogym.agents.reply_probs import reply_distributions
        from cogym.envs.kuhn_poker import INFOSETS, ROLES, reply_classifier, turn_text

        from cogym.runners.rollout.loop import chat_messages

        pid = evaluated_policy(self.name, self.policy, run)
        policy, sampling = run.policies[pid], run.cfg.policies[pid].sampling
        if self.greedy:
            sampling = dataclasses.replace(sampling, temperature=0.0)
        style = run.cfg.game.kwargs.get("card_style", "letters")  # the text the game shows its seats
        prompts, classifiers = [], []
        for card, history in INFOSETS:
            moves = tuple(history.split())
            role = ROLES[len(moves) % 2]
            system = run.cfg.prompts[role].system if role in run.cfg.prompts else ""
            prompts.append(policy.render(chat_messages(system, turn_text(card, moves, style))))
            classifiers.append(reply_classifier(moves))
        return reply_distributions(policy, prompts, classifiers, sampling, min_prob=self.min_prob,
                                   max_branches=self.max_branches)

    @staticmethod
    def _table(dists: list) -> dict[tuple[str, str], tuple[float, float, float]]:
        from cogym.envs.kuhn_poker import INFOSETS

        return {info: (d.probs.get("aggressive", 0.0), d.probs.get("passive", 0.0),
                       d.probs.get("invalid", 0.0) + d.unresolved) for info, d in zip(INFOSETS, dists)}

    def strategy(self, run) -> dict[tuple[str, str], tuple[float, float, float]]:
        """(card, history text) -> (P(aggressive), P(passive), P(invalid or unresolved)) of the policy."""
        return self._table(self._distributions(run))

    def evaluate(self, run) -> dict[str, float]:
        from cogym.envs.kuhn_poker import CARDS, average_strategy, exploitability

        dists = self._distributions(run)
        table = self._table(dists)
        spreads = [max(table[(c, h)][0] for c in CARDS) - min(table[(c, h)][0] for c in CARDS)
                   for h in ("", "check", "bet", "check bet")]
        out = {f"eval/{self.name}/exploitability": exploitability(table),
               f"eval/{self.name}/card_spread": float(np.mean(spreads)),
               f"eval/{self.name}/invalid": float(np.mean([t[2] for t in table.values()])),
               f"eval/{self.name}/unresolved": max(d.unresolved for d in dists)}
        if self.average:
            self._history = [*self._history, table][-self.average:]
            out[f"eval/{self.name}/avg_exploitability"] = exploitability(average_strategy(self._history))
        return out


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
        from cogym.envs.proposer_solver import GAME_ID

        if run.cfg.game.id != GAME_ID:
            raise ConfigError(f"eval.evaluators.{self.name}: proposal_difficulty is for {GAME_ID}, not {run.cfg.game.id}")
        self._solver_id(run)

    def _initial_policy(self, run, pid: str):
        if self._initial is None:
            from cogym.agents.policy import Policy

            pc = run.cfg.policies[pid]
            self._initial = Policy.from_pretrained(pc.model, name=f"{pid}:initial", **pc.load_options())
        return self._initial

    def _posed(self, run) -> tuple[list[tuple[str, str | None, float]], object]:
        """(problem, reference, the current solver's success rate) of each game that posed a valid problem,
        and the game's truth verifier."""
        from cogym.runners.rollout.turns import rollout

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
        from cogym.runners.rollout.loop import chat_messages

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


@contextlib.contextmanager
def forked_rng(seed: int):
    """Run a block on its own torch RNG stream (CPU and every CUDA device), then restore the caller's."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def evaluator_from(name: str, spec: dict, build_section: Callable) -> object:
    """An evaluator from its ``eval.evaluators.<name>`` mapping (``build_section`` types and checks the
    fields, as for any config section)."""
    where = f"eval.evaluators.{name}"
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ConfigError(f"{where} must be a mapping with a kind (one of {', '.join(sorted(EVALUATORS))})")
    kind = spec["kind"]
    if kind not in EVALUATORS:
        import difflib

        close = difflib.get_close_matches(str(kind), list(EVALUATORS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{where}.kind: unknown evaluator {kind!r}{hint}; known: {', '.join(sorted(EVALUATORS))}. "
                          "Register your own with cogym.runners.evaluation.evaluators.register_evaluator in a game.modules module")
    fields = {k: v for k, v in spec.items() if k != "kind"}
    fields.setdefault("name", name)
    return build_section(EVALUATORS[kind], fields, where)


def evaluators_of(cfg, build_section: Callable) -> list:
    """Every evaluator a config declares: the held-out arithmetic one (``eval.heldout``), then
    ``eval.evaluators`` in order."""
    out: list = []
    if cfg.eval.heldout:
        out.append(HeldoutArithmetic(size=cfg.eval.size, max_new_tokens=cfg.eval.max_new_tokens,
                                     batch_size=cfg.eval.batch_size, temperature=cfg.eval.temperature,
                                     samples=cfg.eval.samples))
    for name, spec in cfg.eval.evaluators.items():
        out.append(evaluator_from(name, spec, build_section))
    return out


def evaluate(evaluators, run) -> dict[str, float]:
    """Every evaluator's metrics, in order."""
    metrics: dict[str, float] = {}
    for ev in evaluators:
        metrics.update(ev.evaluate(run))
    return metrics
