"""Leagues: self-play against past snapshots of a trained policy, with PFSP and streaming ratings.

With ``league.seats`` set, the league seats of every game (seats or roles of the game, all played by
``league.policy`` in ``seats``) are taken by an *opponent*: a frozen snapshot of that policy drawn from
the league, or, with probability ``latest_prob``, the current policy itself (plain self-play). The
opponent is drawn per group of ``game.group_size`` episodes (a group shares its start and its
opponent) from a stream fixed by (run seed, iteration, rollout round), so a resumed run draws the
same. A snapshot's turns carry the policy id ``league:<member>``, which no learner trains on; the
learner trains on its own seats (and on the league seats of plain self-play games).

Members are named ``it<N>``: the policy's weights after iteration N's update (``it0``: the initial
weights, added when training starts). A snapshot is added every ``league.every`` iterations; with
``league.size`` > 0 only the most recent ``size`` stay (memory: one model copy each).

Sampling: ``uniform`` over the members, or ``pfsp`` ("hard" prioritized fictitious self-play, as in
AlphaStar): member ``o`` has weight ``(1 - p_win(o)) ** pfsp_power`` with ``p_win(o) = (wins + 1) /
(games + 2)`` the learner's win rate against ``o`` so far (a draw is half a win), so the opponents
the learner beats least are drawn most (:func:`pfsp_weights`).

Results: a game's score is the sign of (sum of the learner seats' returns) - (sum of the league
seats' returns): 1, 0, or 0.5 for a draw, as in tournaments. Each league game updates the win counts
and an openskill :class:`~cogym.runners.results.live_ratings.StreamingRatings` table in which the learner is
``current`` and members are rated by name. Checkpoints hold ``league/league.json`` (members, counts,
ratings state) and one HF model directory per member (``league/it<N>/``, loadable as a tournament
player); ``--resume`` restores them exactly.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy
from cogym.core import seeding
from cogym.core.text import brief
from cogym.core.types import SamplingParams
from cogym.runners import rundir

from cogym.runners.rollout.agents import model_agent
from cogym.runners.config.schema import LeagueConfig
from cogym.runners.train.hooks import TrainHook
from cogym.runners.results.ratings import Result
from cogym.runners.results.live_ratings import StreamingRatings
from cogym.runners.results.scoring import game_score  # the learner's seats as side a, the league's as side b

PREFIX = "league:"  # policy id of a member's seats: no learner has it
CURRENT = "current"  # the learner's name in the ratings table
STATE_FILE = "league.json"


def pfsp_weights(wins: Sequence[float], games: Sequence[int], power: float = 1.0) -> np.ndarray:
    """Sampling probabilities of "hard" PFSP: ``(1 - p) ** power`` normalised, ``p = (wins + 1) / (games + 2)``
    the learner's win rate against each opponent (draws as half wins) with a uniform prior. ``power`` 0
    is uniform; larger powers focus on the hardest opponents. Never zero: the prior keeps ``p < 1``."""
    w = np.asarray(wins, dtype=float)
    g = np.asarray(games, dtype=float)
    if w.shape != g.shape or w.ndim != 1 or not len(w):
        raise ValueError(f"wins and games must be equal-length, non-empty 1-d sequences, got {w.shape} and {g.shape}")
    if (w < 0).any() or (w > g).any():
        raise ValueError("need 0 <= wins <= games for every opponent")
    weights = (1.0 - (w + 1.0) / (g + 2.0)) ** float(power)
    return weights / weights.sum()


@dataclass
class Member:
    name: str
    iteration: int
    agent: LLMAgent


def freeze(model):
    model.eval()
    model.requires_grad_(False)
    return model


@dataclass(frozen=True)
class LeagueSeating:
    """A league game's seat map: member ``opponent`` in ``league_seats``, ``base`` elsewhere. Its fields
    let a Ray rollout worker rebuild it around its own copy of the member (``members``: every member's
    name when it was made)."""

    opponent: str
    agent: LLMAgent
    league_seats: frozenset
    base: Callable
    members: tuple

    def __call__(self, seat: str, role: str):
        return (PREFIX + self.opponent, self.agent) if seat in self.league_seats else self.base(seat, role)


class League:
    """The snapshots of one policy, their results against it, and per-game opponent seat maps."""

    def __init__(self, cfg: LeagueConfig, policy_id: str, policy: Policy, sampling: SamplingParams,
                 league_seats: Sequence[str], learner_seats: Sequence[str], seed: int) -> None:
        self.cfg, self.policy_id, self.policy, self.sampling = cfg, policy_id, policy, sampling
        self.league_seats, self.learner_seats = tuple(league_seats), tuple(learner_seats)
        self.seed = seed
        self.members: list[Member] = []
        self.wins: dict[str, float] = {}  # learner's wins (draws 0.5) against each member ever in the league
        self.games: dict[str, int] = {}
        self.ratings = StreamingRatings()
        self.iterations: dict[str, int] = {}  # every member ever added -> its iteration

    # -- members ---------------------------------------------------------------------------------

    def _member(self, name: str, iteration: int, policy: Policy) -> Member:
        return Member(name, iteration, model_agent(policy, self.sampling, PREFIX + name))

    def add(self, iteration: int) -> None:
        """Snapshot the policy's current weights as member ``it<iteration>``; drop the oldest beyond ``size``."""
        with self.policy.gather():
            model = freeze(copy.deepcopy(self.policy.model))
        name = f"it{iteration}"
        self._append(self._member(name, iteration, Policy(model, self.policy.tokenizer, name=PREFIX + name)))

    def _append(self, member: Member) -> None:
        self.members = [m for m in self.members if m.name != member.name] + [member]
        self.iterations[member.name] = member.iteration
        self.wins.setdefault(member.name, 0.0)
        self.games.setdefault(member.name, 0)
        if self.cfg.size:
            self.members = self.members[-self.cfg.size:]

    def after_update(self, iteration: int) -> None:
        if iteration % self.cfg.every == 0:
            self.add(iteration)

    # -- sampling --------------------------------------------------------------------------------

    def probabilities(self) -> np.ndarray:
        """The chance of each member (in ``members`` order) to be a league game's opponent."""
        n = len(self.members)
        if self.cfg.sampling == "uniform":
            return np.full(n, 1.0 / n)
        return pfsp_weights([self.wins[m.name] for m in self.members], [self.games[m.name] for m in self.members],
                            self.cfg.pfsp_power)

    def sample(self, iteration: int, groups: int, round_: int = 0) -> list[str | None]:
        """One opponent per group (a member name, or None: the current policy); a pure function of the
        league's state and (run seed, iteration, round)."""
        rng = seeding.rng("league.draw", self.seed, iteration, round_)
        probs = self.probabilities()
        latest = rng.random(groups) < self.cfg.latest_prob
        picks = rng.choice(len(self.members), size=groups, p=probs)
        return [None if cur else self.members[k].name for cur, k in zip(latest, picks)]

    def assign(self, seat_map: Callable, iteration: int, n_games: int, group_size: int, round_: int = 0
               ) -> tuple[list[Callable], list[str | None]]:
        """Per-game seat maps for one rollout, and each game's opponent (None: plain self-play)."""
        per_group = self.sample(iteration, n_games // group_size, round_)
        opponents = [o for o in per_group for _ in range(group_size)]
        agents = {m.name: m.agent for m in self.members}
        league_seats = frozenset(self.league_seats)
        maps = {name: LeagueSeating(name, agents[name], league_seats, seat_map, tuple(agents))
                for name in set(o for o in opponents if o is not None)}
        return [seat_map if o is None else maps[o] for o in opponents], opponents

    # -- results ---------------------------------------------------------------------------------

    def record(self, returns: Sequence[dict[str, float]], opponents: Sequence[str | None], iteration: int
               ) -> dict[str, float]:
        """Rate each league game of a rollout (in game order); return the iteration's league metrics."""
        probs = self.probabilities()
        scores = []
        for ret, opp in zip(returns, opponents):
            if opp is None:
                continue
            s = game_score(ret, self.learner_seats, self.league_seats)
            scores.append(s)
            self.wins[opp] += s
            self.games[opp] += 1
            self.ratings.update(Result(CURRENT, opp, s))
        played = [o for o in opponents if o is not None]
        m = {"league/size": float(len(self.members)), "league/games": float(len(played)),
             "league/opponent_entropy": 0.0 - float((probs * np.log(probs)).sum())}
        if self.cfg.latest_prob:
            m["league/latest_frac"] = 1.0 - len(played) / max(len(opponents), 1)
        if played:
            m["league/win_rate"] = float(np.mean(scores))
            m["league/opponents"] = float(len(set(played)))
            m["league/opponent_age"] = float(np.mean([iteration - self.iterations[o] for o in played]))
        if CURRENT in self.ratings.ratings():
            mu, sigma = self.ratings.ratings()[CURRENT]
            m["league/current_mu"], m["league/current_sigma"] = mu, sigma
        return m

    def leaderboard(self) -> list[dict]:
        """Every member ever in the league and the learner (``current``), by rating mu, best first."""
        ratings = self.ratings.ratings()
        active = {m.name for m in self.members}
        rows = []
        for name, iteration in self.iterations.items():
            mu, sigma = ratings.get(name, (self.ratings.params["mu"], self.ratings.params["sigma"]))
            g = self.games[name]
            rows.append({"member": name, "iteration": iteration, "active": name in active, "mu": mu, "sigma": sigma,
                         "games": g, "learner_win_rate": self.wins[name] / g if g else None})
        if CURRENT in ratings:
            mu, sigma = ratings[CURRENT]
            rows.append({"member": CURRENT, "iteration": None, "active": True, "mu": mu, "sigma": sigma,
                         "games": sum(self.games.values()), "learner_win_rate": None})
        return sorted(rows, key=lambda r: -r["mu"])

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {"version": 1, "policy": self.policy_id, "members": [m.name for m in self.members],
                "iterations": dict(self.iterations), "wins": dict(self.wins), "games": dict(self.games),
                "ratings": self.ratings.state_dict()}

    def save(self, path: Path) -> None:
        """``league.json`` and one HF model directory per active member."""
        path.mkdir(parents=True, exist_ok=True)
        for m in self.members:
            m.agent.policy.save(path / m.name)
        (path / STATE_FILE).write_text(json.dumps(self.state_dict(), indent=1))

    def load(self, path: Path) -> None:
        """Restore a saved league exactly (members' weights, counts, ratings); ``size`` applies after."""
        state = read_league_state(path / STATE_FILE)
        dtype, device = next(self.policy.model.parameters()).dtype, str(self.policy.device)
        self.members = []
        for name in state["members"]:
            snap = Policy.from_pretrained(path / name, name=PREFIX + name, dtype=dtype, device=device)
            freeze(snap.model)
            self.members.append(self._member(name, int(state["iterations"][name]), snap))
        if self.cfg.size:
            self.members = self.members[-self.cfg.size:]
        self.iterations = {k: int(v) for k, v in state["iterations"].items()}
        self.wins = {k: float(v) for k, v in state["wins"].items()}
        self.games = {k: int(v) for k, v in state["games"].items()}
        try:
            self.ratings = StreamingRatings.from_state_dict(state["ratings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise rundir.RunDirError(f"{path / STATE_FILE}: its ratings cannot be read ({brief(str(exc))})") from None

    def start(self, iteration: int, checkpoint: Path | None) -> None:
        """At the start of training (``iteration`` = the last one done): the checkpoint's league, or, with
        none saved there, a league of one member, the current weights."""
        if checkpoint is not None and (checkpoint / "league" / STATE_FILE).is_file():
            self.load(checkpoint / "league")
        else:
            self.add(iteration)


def read_league_state(file: Path) -> dict:
    """A checkpoint's ``league.json`` (a checkpoint may come from anyone): a version-1 state whose members
    are plain directory names of that folder (no path leaves it) and whose counts are numbers keyed by
    them, else a one-line :class:`~cogym.runners.rundir.RunDirError`."""
    try:
        state = rundir.parse_json(rundir.read_text(file, file.parent))
    except ValueError as exc:
        raise rundir.RunDirError(f"{file}: not a league state ({brief(str(exc))})") from None
    if not isinstance(state, dict) or state.get("version") != 1:
        version = state.get("version") if isinstance(state, dict) else None
        raise rundir.RunDirError(f"{file}: unsupported league state version {brief(version)}")
    members = state.get("members")
    names_ok = isinstance(members, list) and all(
        isinstance(m, str) and m not in ("", ".", "..") and "/" not in m and "\\" not in m and "\0" not in m
        for m in members)
    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, int) or math.isfinite(v))
    counts_ok = all(isinstance(state.get(k), dict) and all(isinstance(n, str) and number(v) for n, v in state[k].items())
                    for k in ("iterations", "wins", "games"))
    if not names_ok or not counts_ok or not set(members) <= set(state["iterations"]) \
            or not isinstance(state.get("ratings"), dict):
        raise rundir.RunDirError(f"{file}: a league state of the wrong shape (members must be directory names "
                                 "in that folder, iterations/wins/games numbers keyed by name)")
    return state


class LeagueHook(TrainHook):
    """A league as a training hook: it seats its opponents, rates their games, snapshots the policy,
    checkpoints itself under ``league/`` and puts its table in the summary."""

    def __init__(self, league: League) -> None:
        self.league = league

    def start(self, iteration: int, checkpoint: Path | None) -> None:
        self.league.start(iteration, checkpoint)

    def seat_maps(self, seat_map, iteration: int, n_games: int, group_size: int, round_: int = 0):
        return self.league.assign(seat_map, iteration, n_games, group_size, round_)

    def after_rollout(self, result, context, iteration: int) -> dict[str, float]:
        failed = set(result.failed)  # games that raised and were skipped have no result to rate
        return self.league.record(result.returns, [None if g in failed else o for g, o in enumerate(context)], iteration)

    def after_update(self, iteration: int) -> None:
        self.league.after_update(iteration)  # a snapshot every league.every iterations

    def reads_policies(self, iteration: int) -> bool:
        return iteration % self.league.cfg.every == 0  # only a snapshot reads the weights

    def save(self, checkpoint: Path) -> None:
        self.league.save(checkpoint / "league")  # its members (HF dirs), win counts and ratings

    def summary(self) -> dict:
        return {"league": self.league.leaderboard()}
