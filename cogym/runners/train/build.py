"""Instantiate a config: games, policies, the agent behind every seat, and a learner per trained policy.

Everything that depends on the game (which roles and seats exist, which scripted twins it has)
is checked here, before any run directory is written, with a one-line error: the config's checks
against the game are :mod:`cogym.runners.config.validate`'s, who sits where
:mod:`cogym.runners.rollout.seating`'s.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from cogym.agents.backends import make_backend
from cogym.agents.lora import is_adapter_dir, LoraBases
from cogym.agents.policy import Policy
from cogym.agents.scripted import ScriptedAgent
from cogym.core import seeding
from cogym.core.errors import GameError
from cogym.core.types import Agent
from cogym.envs import make
from cogym.envs.checks import prompts_that_depend_on_play
from cogym.envs.contract import ContractViolation
from cogym.envs.token_level import DEFAULT_MAX_TURN_TOKENS
from cogym.learners import registry
from cogym.learners.learner import Learner
from cogym.runners.config.load import build_section
from cogym.runners.config.modules import import_game_modules
from cogym.runners.config.schema import Config
from cogym.runners.config.validate import (check_groups, check_league_seats, check_outcomes, check_role_keys,
                                           check_token_seats, league_policy, make_game)
from cogym.runners.evaluation.evaluators import check as check_evaluators
from cogym.runners.evaluation.evaluators import evaluators_of
from cogym.runners.rollout.agents import AgentFactory, twin_name
from cogym.runners.rollout.loop import reproduce_command
from cogym.runners.rollout.seating import assign, seats_of
from cogym.runners.rollout.tokens import ChatCodec
from cogym.runners.rundir import RunDirError
from cogym.runners.train.league import League
from cogym.runners.train.rewards import reward_models


def _make_games(cfg: Config, policies: dict[str, Policy], seat_pids: set[str]) -> list:
    """``num_games`` copies of the game; at token level each speaks the seats' tokenizer."""
    if cfg.game.granularity == "turn":
        return [make(cfg.game.id, **cfg.game.kwargs) for _ in range(cfg.game.num_games)]
    llm = [pid for pid in sorted(seat_pids) if pid in policies]
    check_token_seats({pid: policies[pid].tokenizer for pid in llm})
    codec = ChatCodec(policies[llm[0]], {role: p.system for role, p in cfg.prompts.items()})
    # The game's bound on a message; each policy's own max_new_tokens is enforced by the rollout, and
    # scripted seats (whose moves may be longer than a model's) get at least the default bound.
    max_tokens = cfg.game.max_turn_tokens or max(DEFAULT_MAX_TURN_TOKENS, *(cfg.policies[pid].sampling.max_new_tokens for pid in llm))
    return [make(cfg.game.id, granularity="token", codec=codec, max_turn_tokens=max_tokens, **cfg.game.kwargs)
            for _ in range(cfg.game.num_games)]


@dataclass
class Run:
    """Everything a config builds: games, policies, agents, learners, and who sits where."""

    cfg: Config
    games: list
    policies: dict[str, Policy]
    learners: dict[str, Learner]
    roles: tuple[str, ...]
    seats: dict[str, tuple[str, Agent]]  # seat name -> (policy id, agent)
    league: League | None = None  # league.seats set: past selves of a policy play those seats
    evaluators: list = field(default_factory=list)  # eval: held-out arithmetic, vs_scripted, ... (runners.evaluation)

    def seat_map(self, seat: str, role: str) -> tuple[str, Agent]:
        return self.seats[seat]

    def policy_for_role(self, role: str) -> Policy | None:
        pid = self.cfg.seats.get(role)
        return self.policies.get(pid) if pid else None

    def reseed_scripted(self, iteration: int, rank: int = 0) -> None:
        """Scripted agents draw from a stream fixed by (run seed, iteration, seat), and the process's
        rank in a data-parallel run, so an iteration replays exactly on resume."""
        for k, (_, (_, agent)) in enumerate(sorted(self.seats.items())):
            if isinstance(agent, ScriptedAgent):
                agent.rng = seeding.rng("scripted.iteration", self.cfg.run.seed, iteration, k, rank)


def _warn_mixed_groups(cfg: Config, game, assignment: dict[str, tuple[str, str]]) -> None:
    """game.group_size groups a role's turns by seed; where the role's first prompt depends on other seats'
    moves (scripted play of one seed asks it different things), a group-based estimator compares answers
    to different questions: say so, and how to group by prompt instead."""
    if cfg.game.group_size == 1 or cfg.game.group_by != "seed":
        return
    grouped_roles = set()
    for pid, role in assignment.values():
        lc = cfg.learners.get(pid)
        if lc is not None and lc.algorithm != "frozen" and registry.get(lc.role_algorithms.get(role, lc.algorithm)).grouped:
            grouped_roles.add(role)
    if not grouped_roles:
        return
    try:
        depends = prompts_that_depend_on_play(cfg.game.id, cfg.game.kwargs, grouped_roles)
    except ContractViolation as exc:
        raise GameError(f"game {cfg.game.id} broke the game contract when its scripted twins played it (to check "
                        f"game.group_size's groups): {exc}\nReproduce it against cogym's game contract:\n  "
                        f"{reproduce_command(cfg.game.id, dict(cfg.game.kwargs))}") from None
    for role, (a, b) in sorted(depends.items()):
        warnings.warn(
            f"game.group_size: {cfg.game.group_size} groups the {role!r} turns of games played from one seed, but in "
            f"{cfg.game.id} what a {role!r} seat is asked depends on the other seats' moves (one seed gave {a[:40]!r} "
            f"and {b[:40]!r}), so a group-based estimator compares answers to different questions; set "
            "game.group_by: prompt to group by the prompt the seat saw (<policy>/mixed_prompt_groups counts such groups)",
            UserWarning, stacklevel=2)


def _league_seats(cfg: Config, game, assignment: dict[str, tuple[str, str]]) -> tuple[list[str], list[str]]:
    """league.seats as seats of the game (a role stands for its seats), and the learner's seats (the
    league policy's other seats); every league seat must be the league policy's in ``seats``."""
    pid = league_policy(cfg)
    league = seats_of(game, cfg.league.seats, "league.seats")
    check_league_seats(cfg, league, assignment)
    return league, [s for s, (p, _) in assignment.items() if p == pid and s not in league]


def _load_lora_policy(cfg: Config, pid: str, path, bases: LoraBases, device: str = "auto") -> Policy:
    """Policy ``pid`` as a LoRA adapter on the base model it shares with every LoRA policy of that base:
    fresh (``policies.<id>.lora``), or from ``path`` when it is an adapter directory."""
    pc = cfg.policies[pid]
    adapter_dir = Path(path) if is_adapter_dir(path) else None
    if adapter_dir is None and str(path) != str(pc.model):
        where = f"policies.{pid}.lora"
        raise RunDirError(f"{where}.r > 0, but {str(path)!r} (the checkpoint being resumed) is a full model, not a LoRA "
                          f"adapter directory; resume with the lora settings the run was started with ({where}.r: 0)")
    model, tokenizer = bases.add(pid, pc.model, pc.lora, adapter_dir, trainable=cfg.learners[pid].algorithm != "frozen",
                                 seed=cfg.run.seed, device=device, **pc.load_options())
    return Policy(model, tokenizer, name=pid)


def _assign_seats(cfg: Config, game, factory: AgentFactory) -> dict[str, tuple[str, str]]:
    """seat -> (policy id, role) for every seat of the game, from ``seats`` (a seat name wins over its role)."""
    check_role_keys(cfg, game.spec.roles)
    policies = assign(game, cfg.seats, "seats", missing="seat {seat!r} (role {role!r}) has no policy; add seats.{role}: <policy id>")
    assignment: dict[str, tuple[str, str]] = {}
    for seat, pid in policies.items():
        role = game.role_of(seat)
        if twin_name(pid) is not None:
            factory.check_twin(twin_name(pid), role)
        assignment[seat] = (pid, role)
    return assignment


def _load_policies(cfg: Config, used: set[str], policy_dirs: dict[str, Path], lora_bases: LoraBases,
                   engines: bool = True, rollout_only: bool = False) -> dict[str, Policy]:
    """Every seated policy (every adapter), from ``policy_dirs`` when resuming, else its config model;
    with the generation backend its config names (``engines``; else HF, which starts nothing).
    ``rollout_only``: a rollout worker, where a model only a vLLM engine generates with stays on the
    CPU (it is the copy the engine starts from; the engine holds the device's copy)."""
    policies, shared = {}, {}  # shared: the vLLM engine each base model's LoRA policies share

    def on_host(pid: str) -> bool:
        pc = cfg.policies[pid]
        if not rollout_only or pc.generation.backend != "vllm":
            return False
        return not pc.lora.enabled or all(o.generation.backend == "vllm" for o in cfg.policies.values()
                                          if o.lora.enabled and o.model == pc.model)

    for pid, pc in cfg.policies.items():
        if pid not in used or pc.endpoint is not None:
            continue  # its seats were given to a scripted twin by an override, or an endpoint plays them: nothing to load
        path = policy_dirs.get(pid, pc.model)
        device = "cpu" if on_host(pid) else "auto"
        if pc.lora.enabled:
            policies[pid] = _load_lora_policy(cfg, pid, path, lora_bases, device)
        else:
            policies[pid] = Policy.from_pretrained(path, name=pid, device=device, **pc.load_options())
        if engines and pc.generation.backend != "hf":  # the policy's own model keeps training; another engine generates
            policies[pid].backend = make_backend(pc.generation.backend, policies[pid], pc.generation.vllm, shared=shared)
    return policies


def _make_learners(cfg: Config, policies: dict[str, Policy], policy_dirs: dict[str, Path],
                   critic_dirs: dict[str, Path], lora_bases: LoraBases) -> dict[str, Learner]:
    """A learner per trained policy (after every policy is loaded: critics and PRMs copy them)."""
    learners = {}
    for pid, policy in policies.items():
        pc, lc = cfg.policies[pid], cfg.learners[pid]
        if lc.algorithm == "frozen":
            continue
        path = policy_dirs.get(pid, pc.model)
        # The KL anchor and PRIME's pi_ref are the config's model, not a checkpoint being resumed.
        needs_ref = (lc.kl_in_reward != "off" or lc.kl_in_loss != "off"
                     or any(registry.get(name).needs_reference for name in lc.algorithm_names()))
        if needs_ref and pc.lora.enabled and not is_adapter_dir(pc.model):
            # A LoRA policy starts as its base model (a fresh adapter adds zero): the base with every
            # adapter disabled is the reference, sharing the base weights instead of copying them.
            reference = lora_bases.reference(pc.model)
        else:
            reference = (Policy.from_pretrained(pc.model, **pc.load_options()).model
                         if needs_ref and path != pc.model else None)
        critic = critic_dirs.get(pid)
        learners[pid] = Learner(policy, lc, temperature=pc.sampling.temperature, reference=reference,
                                critic_weights=critic if critic is not None and critic.is_dir() else None,
                                game_id=cfg.game.id, max_new_tokens=pc.sampling.max_new_tokens,
                                policies={other: p for other, p in policies.items() if other != pid}, seed=cfg.run.seed)
    return learners


def _game_of(cfg: Config):
    """An instance of the config's game (after importing ``game.modules``, which may register it)."""
    import_game_modules(cfg.game.modules)
    return make_game(cfg.game.id, cfg.game.kwargs)


def build(cfg: Config, policy_dirs: dict[str, Path] | None = None, critic_dirs: dict[str, Path] | None = None,
          rollout_only: bool = False, learners: dict | None = None) -> Run:
    """Instantiate a config; ``policy_dirs`` overrides model paths (resume), while KL reference
    models always come from the config's original ``policies.<id>.model``; ``critic_dirs`` holds
    saved PPO critics to resume from. ``rollout_only``: games, policies and seats, no learners,
    evaluators or league (a Ray rollout worker's share of a run). ``learners``: learners made
    elsewhere (Ray learner actors, :func:`build_learner`), used instead of making them here."""
    game = _game_of(cfg)
    factory = AgentFactory(cfg.game.id, seed=cfg.run.seed)
    assignment = _assign_seats(cfg, game, factory)
    check_groups(cfg, game, assignment)
    _warn_mixed_groups(cfg, game, assignment)
    check_outcomes(cfg, game, assignment)
    evaluators = [] if rollout_only else evaluators_of(cfg.eval, game.spec, build_section)  # after game.modules: they may register kinds
    league_seats = _league_seats(cfg, game, assignment) if cfg.league.seats and not rollout_only else None
    used = {pid for pid, _ in assignment.values()}
    lora_bases = LoraBases()  # base model directory -> the one model its LoRA policies share
    # On Ray the rollout workers generate; the driver's policies only evaluate (greedy, which every
    # backend answers alike: tests/agents/test_backend_contract.py), so the driver starts no engine.
    engines = rollout_only or cfg.run.backend != "ray"
    policies = _load_policies(cfg, used | reward_models(cfg.learners), policy_dirs or {}, lora_bases, engines, rollout_only)
    if learners is None:
        learners = {} if rollout_only else _make_learners(cfg, policies, policy_dirs or {}, critic_dirs or {},
                                                          lora_bases)
    games = _make_games(cfg, policies, used)
    sampling = {pid: pc.sampling for pid, pc in cfg.policies.items()}
    endpoints = {pid: pc.endpoint for pid, pc in cfg.policies.items() if pc.endpoint is not None}
    seats = {seat: (pid, factory.seat(pid, role, policies, sampling, endpoints)) for seat, (pid, role) in assignment.items()}
    league = None
    if league_seats is not None:  # its members are added when training starts (League.start)
        pid = league_policy(cfg)
        league = League(cfg.league, pid, policies[pid], cfg.policies[pid].sampling, *league_seats, seed=cfg.run.seed)
    run = Run(cfg, games, policies, learners, game.spec.roles, seats, league, evaluators)
    check_evaluators(evaluators, run)
    return run


def trained_policies(cfg: Config) -> list[str]:
    """The policies a run trains: those with a seat (after scripted twins and overrides) and a learner
    that is not frozen, in config order (what :func:`build` makes learners for)."""
    game = _game_of(cfg)
    used = {pid for pid, _ in _assign_seats(cfg, game, AgentFactory(cfg.game.id, seed=cfg.run.seed)).values()}
    used |= reward_models(cfg.learners)  # reward models train without a seat
    return [pid for pid in cfg.policies if pid in used and cfg.learners[pid].algorithm != "frozen"]


def build_learner(cfg: Config, pid: str, policy_dir: Path | None = None, critic_dir: Path | None = None
                  ) -> tuple[Policy, Learner]:
    """Policy ``pid`` and its learner alone (a Ray learner actor's share of a run), from ``policy_dir``
    and ``critic_dir`` when resuming."""
    import_game_modules(cfg.game.modules)  # a game's module may register the algorithms or rewards it trains with
    pc = cfg.policies[pid]
    path = policy_dir or pc.model
    bases = LoraBases()  # a LoRA policy: its base model, holding this policy's adapter alone
    policy = (_load_lora_policy(cfg, pid, path, bases) if pc.lora.enabled
              else Policy.from_pretrained(path, name=pid, **pc.load_options()))
    made = _make_learners(cfg, {pid: policy}, {pid: policy_dir} if policy_dir else {},
                          {pid: critic_dir} if critic_dir else {}, bases)
    if pid not in made:
        raise ValueError(f"policy {pid!r} is not trained (learners.{pid}.algorithm: frozen)")
    return policy, made[pid]
