"""Evaluations a run measures: before training, every ``run.eval_every`` iterations, and after.

A game declares its evaluators (``GameSpec.evaluators``: name -> ``{kind, ...settings}``), and a
config adds or overrides them under ``eval.evaluators`` (an entry with a declared name is merged
over the declaration key by key; ``null`` drops it; ``eval.declared: false`` drops them all)::

    eval:
      evaluators:
        vs_nash: {kind: vs_scripted, opponent: nash, games: 200}   # metrics eval/vs_nash/...

An evaluator is a small object with ``name`` and ``evaluate(ctx) -> {metric: value}`` (and
optionally ``check(ctx)``, run when the run is built), made from its mapping: ``kind`` names a
registered class and the other keys are its fields, typed and checked like any config section.
``ctx`` is a :class:`~cogym.runners.evaluation.context.RunContext`, the runner's implementation of
:class:`cogym.envs.evaluation.EvalContext` (that module documents the interface: the game, the
policies by role, their models as :class:`~cogym.envs.evaluation.Model`, playing the game seated as
in training, a private RNG stream); a runner-level kind may also read the whole run, ``ctx.run``.

This module names no game: it holds the registry, the loop, and ``vs_scripted`` (the policy in its
own seats against a scripted twin of any game, over fixed seeds: ``eval/<name>/win_rate``,
``return``, ``invalid``). The kinds the shipped games declare live with the games, in ``cogym.envs``,
named by :data:`cogym.envs.evaluation.GAME_KINDS`; the registry reads that table and ``vs_scripted`` on
its first lookup, so :func:`kinds` is every kind whatever was imported. ``cogym eval --game ID`` runs a
game's.

An evaluation never moves training: it plays on its own game copies (at turn level, whatever the
training granularity), with its own scripted agents, and inside a forked torch RNG, so a run with
evaluators logs the same training numbers as without.
Register your own kind with :func:`register_evaluator` in a module listed under ``game.modules``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from cogym.core import seeding
from cogym.core.errors import ConfigError
from cogym.core.names import did_you_mean
from cogym.core.processes import load_object
from cogym.envs import make
from cogym.envs.evaluation import EvaluatorError, GAME_KINDS
from cogym.runners.evaluation.context import RunContext, evaluated_policy
from cogym.runners.rollout.agents import AgentFactory, model_agent, twin_name
from cogym.runners.rollout.seating import Seating, seats_of
from cogym.runners.rollout.turns import rollout
from cogym.runners.config.schema import EvalConfig
from cogym.runners.results.scoring import game_score


EVALUATORS: dict[str, type] = {}  # the one evaluator registry: kind -> class (read it through kinds())


def register_evaluator(kind: str) -> Callable[[type], type]:
    """Class decorator: make ``kind`` usable under ``eval.evaluators``."""

    def add(cls: type) -> type:
        known = kinds()
        if kind in known and known[kind] is not cls:
            raise ConfigError(f"evaluator kind {kind!r} is already registered ({known[kind].__name__})")
        EVALUATORS[kind] = cls
        return cls

    return add


def kinds() -> dict[str, type]:
    """Every evaluator kind: the shipped games' (:data:`cogym.envs.evaluation.GAME_KINDS`), ``vs_scripted``
    and those registered with :func:`register_evaluator`, registering the shipped ones on the first call."""
    for kind, ref in GAME_KINDS.items():
        if kind not in EVALUATORS:
            EVALUATORS[kind] = load_object(ref)
    EVALUATORS.setdefault("vs_scripted", VsScripted)
    return dict(EVALUATORS)


def context_of(ctx_or_run: Any) -> RunContext:
    """``ctx_or_run`` as a :class:`RunContext` (a built run is wrapped)."""
    return ctx_or_run if isinstance(ctx_or_run, RunContext) else RunContext(ctx_or_run)


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

    def _seating(self, run, game, pid: str) -> tuple[dict, list[str], list[str]]:
        """seat -> (policy id, agent) for the evaluation games, the policy's seats and the twin's."""
        if self.seats:
            twin = seats_of(game, self.seats, f"eval.evaluators.{self.name}.seats")
        else:  # the seats the policy does not hold; in self-play (it holds all), those of the game's last role
            twin = [s for s in game.possible_agents if run.seats[s][0] != pid]
            twin = twin or [s for s in game.possible_agents if game.role_of(s) == game.spec.roles[-1]]
        mine = [s for s in game.possible_agents if run.seats[s][0] == pid and s not in twin]
        if not mine or not twin:
            raise EvaluatorError(f"policy {pid!r} needs a seat of its own and the twin one "
                                 f"(policy seats: {mine}, twin seats: {twin})")
        # Every other seat as the run seats it (a config's twin with this evaluation's RNG, a frozen judge as is).
        factory = AgentFactory(run.cfg.game.id, seed=self.seed)
        seating = RunContext(run).seated_as_in_training(game, factory)
        sampling = run.cfg.policies[pid].sampling
        if self.greedy:
            sampling = dataclasses.replace(sampling, temperature=0.0)
        for seat in mine:
            seating[seat] = (pid, model_agent(run.policies[pid], sampling, f"eval:{pid}"))
        for seat in twin:
            seating[seat] = (f"scripted:{self.opponent}", factory.scripted(self.opponent, game.role_of(seat)))
        return seating, mine, twin

    def check(self, ctx) -> None:
        """Fail at build time, not after training, on a policy or seats the game cannot seat this way."""
        ctx = context_of(ctx)
        self._seating(ctx.run, ctx.run.games[0], ctx.evaluated(self.name, self.policy))

    def evaluate(self, ctx) -> dict[str, float]:
        ctx = context_of(ctx)
        run, pid = ctx.run, ctx.evaluated(self.name, self.policy)
        games = [make(ctx.game_id, **ctx.game_kwargs) for _ in range(self.games)]
        seating, mine, twin = self._seating(run, games[0], pid)
        seeds = seeding.seeds("eval.games", self.seed, n=self.games)
        with ctx.rng(self.seed):
            res = rollout(games, Seating(seating), ctx.systems(), seeds, episode_prefix=f"eval-{self.name}")
        scores = [game_score(ret, mine, twin) for ret in res.returns]
        out = {f"eval/{self.name}/win_rate": float(np.mean(scores)),
               f"eval/{self.name}/return": float(np.mean([sum(ret.get(s, 0.0) for s in mine) for ret in res.returns]))}
        invalid = [bool(info[s].get("invalid")) for info in res.infos for s in mine if s in info and "invalid" in info[s]]
        if invalid:
            out[f"eval/{self.name}/invalid"] = float(np.mean(invalid))
        return out


def evaluator_from(name: str, spec: dict, build_section: Callable) -> object:
    """An evaluator from its ``eval.evaluators.<name>`` mapping (``build_section`` types and checks the
    fields, as for any config section)."""
    where = f"eval.evaluators.{name}"
    known = kinds()
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ConfigError(f"{where} must be a mapping with a kind (one of {', '.join(sorted(known))})")
    kind = spec["kind"]
    if kind not in known:
        hint = did_you_mean(kind, known)
        raise ConfigError(f"{where}.kind: unknown evaluator {kind!r}{hint}; known: {', '.join(sorted(known))}. "
                          "Register your own with cogym.runners.evaluation.evaluators.register_evaluator in a game.modules module")
    fields = {k: v for k, v in spec.items() if k != "kind"}
    fields.setdefault("name", name)
    return build_section(known[kind], fields, where)


def declared(settings: EvalConfig, spec) -> dict[str, dict]:
    """name -> evaluator mapping a run measures: the game's declared evaluators (``spec.evaluators``,
    unless ``eval.declared`` is false), each overridden key by key by the config's ``eval.evaluators``
    entry of the same name (``null`` drops it), then the config's other entries, in order. ``settings``:
    the config's ``eval`` section."""
    out = {name: dict(ev) for name, ev in spec.evaluators.items()} if settings.declared else {}
    for name, ev in settings.evaluators.items():
        if not settings.declared and isinstance(ev, dict) and "kind" not in ev and name in spec.evaluators:
            continue  # settings of a declared evaluator that eval.declared: false turned off
        if ev is None:
            out.pop(name, None)
        elif isinstance(ev, dict) and name in out:
            out[name] = {**out[name], **ev}
        else:
            out[name] = ev
    return out


def evaluators_of(settings: EvalConfig, spec, build_section: Callable) -> list:
    """Every evaluator a run with the ``eval`` section ``settings`` measures (:func:`declared`), built and checked."""
    return [evaluator_from(name, ev, build_section) for name, ev in declared(settings, spec).items()]


@contextlib.contextmanager
def _config_key_of(ev):
    """An :class:`EvaluatorError` raised inside as the ConfigError of ``eval.evaluators.<name>`` (and its key)."""
    try:
        yield
    except EvaluatorError as exc:
        key = f"eval.evaluators.{ev.name}" + (f".{exc.key}" if exc.key else "")
        raise ConfigError(f"{key}: {exc}") from exc


def check(evaluators, run) -> None:
    """Every evaluator's ``check`` (those that have one) on a built run, given its :class:`RunContext`:
    a setting the game cannot meet fails when the run is built, not after training."""
    ctx = context_of(run)
    for ev in evaluators:
        if hasattr(ev, "check"):
            with _config_key_of(ev):
                ev.check(ctx)


def require_evaluators(cfg, evaluators: list) -> None:
    """``cogym eval``'s check: a run with nothing to measure is an error naming how to add an evaluator."""
    if not evaluators:
        raise ConfigError(f"{cfg.game.id} declares no evaluator and the config adds none; add one, e.g. "
                          f"eval.evaluators.vs_random='{{kind: vs_scripted, opponent: random}}'")


def evaluate(evaluators, run) -> dict[str, float]:
    """Every evaluator's metrics, in order, each given the run's :class:`RunContext` (``run`` may be one)."""
    ctx = context_of(run)
    metrics: dict[str, float] = {}
    for ev in evaluators:
        with _config_key_of(ev):  # an evaluator without a check meets its settings here
            metrics.update(ev.evaluate(ctx))
    return metrics
