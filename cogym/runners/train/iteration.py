"""Sampling: what one iteration trains on. The rollout, played data-parallel when there are
several processes, with one greedy game per group where an algorithm's baseline is one (ReMax:
:func:`submit_greedy`), then DAPO's dynamic-sampling refill for the learners that enable it.

Every seed is a pure function of (run seed, iteration, round) (cogym/core/seeding.py), so a resumed
run replays the same games; so is every rollout's sampling key (:func:`rollout_key`), from which each game's draws
derive, and the global torch stream of an iteration.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Sequence

from cogym.core import seeding
from cogym.core.errors import CogymError
from cogym.learners import registry, torch_dist as dist
from cogym.learners.dapo import select_groups

from cogym.runners.train.build import Run
from cogym.runners.train.hooks import TrainHook, after_rollout, seat_maps
from cogym.runners.train.metrics import rollout_metrics
from cogym.runners.train.rewards import learned_rewards
from cogym.runners.rollout.loop import RolloutResult


def iteration_seeds(seed: int, iteration: int, n: int) -> list[int]:
    """Game seeds of one iteration: a pure function of (run seed, iteration), so resume replays them."""
    return seeding.seeds("rollout.games", seed, iteration, n=n)


def grouped(seeds: list[int], group_size: int) -> list[int]:
    """Each seed repeated ``group_size`` times: the episodes of a group start from the same state."""
    return [s for s in seeds for _ in range(group_size)]


def refill_seeds(seed: int, iteration: int, round_: int, n: int) -> list[int]:
    """Game seeds of dynamic sampling's extra rollout ``round_`` (>= 1) of an iteration (round 0 is
    :func:`iteration_seeds`); a pure function, so resume replays them too."""
    return seeding.seeds("rollout.games", seed, iteration, round_, n=n)


def rollout_key(seed: int, iteration: int, round_: int = 0) -> int:
    """The sampling key of one rollout (round 0: the iteration's; >= 1: dynamic sampling's extra
    rounds; the round's greedy games share it: :func:`submit_greedy`): every game's draws derive from
    it, its place in the list and its moves (see :func:`~cogym.runners.rollout.turns.rollout`), so they
    are the same however the games are split."""
    return seeding.key("rollout.key", seed, iteration, round_)


def greedy_policies(run: Run) -> list[str]:
    """The trained policies with an algorithm whose baseline is a greedy game (``Algorithm.greedy_baseline``)."""
    return sorted(pid for pid in run.learners
                  if any(registry.get(name).greedy_baseline for name in run.cfg.learners[pid].algorithm_names()))


def submit_greedy(run: Run, rollouts, system: dict, seat_map, seeds: Sequence[int], iteration: int,
                  round_: int = 0) -> list[tuple[str, object]]:
    """Submit the greedy games of one round (``seeds``: the round's, ``game.group_size`` per group) to
    ``rollouts`` (``submit``/``collect``): for each policy of :func:`greedy_policies`, one game per group
    with only that policy's seats decoding greedily. Game j plays group j's first game again: its seed,
    seats, the round's sampling key and its place in the list (j * group_size), so every other seat
    draws what it drew there until play diverges, and the greedy seats meet that game's prompts
    (:func:`attach_greedy` checks). Scripted agents are reseeded before each, as a Ray worker does at
    every rollout it plays. Returns [(policy, submitted)]; none when no learner asks for them."""
    policies = greedy_policies(run)
    if not policies:
        return []
    places = list(range(0, len(seeds), run.cfg.game.group_size))
    maps = seat_map if callable(seat_map) else [seat_map[g] for g in places]
    submitted = []
    for pid in policies:
        run.reseed_scripted(iteration, dist.rank())
        submitted.append((pid, rollouts.submit(
            run.games[:len(places)], maps, system, [seeds[g] for g in places], iteration=iteration,
            episode_prefix=f"it{iteration}{f'r{round_}' if round_ else ''}-greedy-{pid}", group_size=1,
            sampling_key=rollout_key(run.cfg.run.seed, iteration, round_), game_indices=places, greedy=(pid,))))
    return submitted


def attach_greedy(run: Run, rollouts, submitted: list[tuple[str, object]], turns: Sequence) -> dict[str, float]:
    """Collect the greedy games :func:`submit_greedy` started and give their baselines to ``turns``
    (:func:`attach_baselines`); returns their metrics: ``greedy_tokens`` and ``greedy_s`` (what
    they cost) and ``<policy>/remax_prompt_mismatch`` (rows left without a baseline by a prompt mismatch)."""
    m: dict[str, float] = {}
    for pid, pending in submitted:
        res = rollouts.collect(pending)
        m[f"{pid}/remax_prompt_mismatch"] = float(attach_baselines(turns, res, run.cfg.game.group_size, pid))
        m["greedy_tokens"] = m.get("greedy_tokens", 0.0) + res.generated_tokens
        m["greedy_s"] = m.get("greedy_s", 0.0) + res.seconds
    return m


def summed(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """``a`` and ``b`` in one dict, the values of their common keys added (the greedy games' metrics of rounds)."""
    return {**a, **b, **{key: a[key] + b[key] for key in a.keys() & b.keys()}}


def attach_baselines(turns: Sequence, greedy: RolloutResult, group_size: int, policy: str) -> int:
    """Each turn of ``policy`` gets its seat's return in its group's greedy game as ``Turn.baseline``:
    None where that game failed and was skipped, and where the seat's first prompt there is not the
    one of the turn's own game (the baseline would answer another question). In place; returns the
    turns that lost their baseline to such a mismatch."""
    opening: dict[tuple[int, str], tuple[int, ...]] = {}  # (group, seat) -> its first prompt in the greedy game
    for t in greedy.turns:
        opening.setdefault((t.game_index // group_size, t.seat), tuple(t.prompt_ids))
    first = _first_prompts(turns)
    mismatched = 0
    for t in turns:
        if t.policy_id != policy:
            continue
        group = t.game_index // group_size
        t.baseline = greedy.returns[group].get(t.seat)
        if t.baseline is not None and opening.get((group, t.seat)) != first[(t.episode_id, t.seat)]:
            t.baseline = None
            mismatched += 1
    return mismatched


def gather_rollouts(parts: list[RolloutResult], indices: list[list[int]]) -> RolloutResult:
    """The result of the whole game list from each rank's result and its games' places in the list:
    returns and infos in game order, turns in game order (each game's in order of play), generated
    tokens and rollout stats summed, seconds the slowest rank's."""
    n = sum(len(ix) for ix in indices)
    returns: list = [None] * n
    infos: list = [None] * n
    moves: list = [[] for _ in range(n)]
    seeds: list = [None] * n
    errors: list = []
    failed: list[int] = []
    for part, ix in zip(parts, indices):
        for local, g in enumerate(ix):
            returns[g], infos[g] = part.returns[local], part.infos[local]
            if part.moves:
                moves[g] = part.moves[local]
            if part.seeds:
                seeds[g] = part.seeds[local]
        errors += part.errors
        failed += [ix[local] for local in part.failed]
    turns = sorted((t for part in parts for t in part.turns), key=lambda t: t.game_index)  # stable
    stats: dict = {}
    for part in parts:
        for key, value in part.stats.items():
            stats[key] = stats.get(key, 0) + value
    return RolloutResult(turns=turns, returns=returns, infos=infos,
                         generated_tokens=sum(p.generated_tokens for p in parts),
                         generate_seconds=max(p.generate_seconds for p in parts),
                         seconds=max(p.seconds for p in parts), stats=stats, moves=moves, errors=errors,
                         failed=sorted(failed), seeds=seeds if None not in seeds else [])


def data_parallel(play: Callable) -> Callable:
    """``play`` (rollout or token_rollout) for a data-parallel run: this rank plays games r, r + W,
    r + 2W, ... of the list it is given (with their seeds, episode ids and group keys), then every
    rank gets the result of the whole list (:func:`gather_rollouts`). The identity in one process."""
    world, rank = dist.world_size(), dist.rank()
    if world == 1:
        return play

    def play_shard(games, seat_map, system, seeds, **kwargs) -> RolloutResult:
        shares = [list(range(r, len(games), world)) for r in range(world)]
        mine = shares[rank]
        places = kwargs.pop("game_indices", None)  # the games' places in a longer list (the greedy games'), or theirs here
        maps = seat_map if callable(seat_map) else [seat_map[g] for g in mine]  # one map per game (a league)
        try:
            res = play([games[g] for g in mine], maps, system, [seeds[g] for g in mine],
                       game_indices=mine if places is None else [places[g] for g in mine], **kwargs)
        except CogymError as exc:  # a game's or an endpoint's: every rank learns of it (the others would wait in the gather for ever)
            res = exc
        parts = dist.all_gather_objects(res)
        failed = [p for p in parts if isinstance(p, CogymError)]
        if failed:
            raise failed[0]
        return gather_rollouts(parts, shares)

    return play_shard


def _first_prompts(turns: Sequence) -> dict[tuple, tuple[int, ...]]:
    """(episode, seat) -> the prompt ids of that seat's first move in that game."""
    first: dict[tuple, tuple[int, ...]] = {}
    for t in turns:
        first.setdefault((t.episode_id, t.seat), tuple(t.prompt_ids))
    return first


def regroup_by_prompt(turns: Sequence) -> None:
    """``game.group_by: prompt``: each turn's group is the role's seats whose first prompt of the game was
    the same ids (within one rollout round), instead of those that played the same seed. Group-based
    estimators (GRPO, RLOO) then compare answers to one question only. In place."""
    first = _first_prompts(turns)
    for t in turns:
        digest = hashlib.blake2b(repr(first[(t.episode_id, t.seat)]).encode(), digest_size=8).hexdigest()
        t.group_key = (f"{t.episode_id.rsplit('-', 1)[0]}-p{digest}", t.role)


def mixed_prompt_groups(turns: Sequence) -> tuple[int, int]:
    """(groups whose seats saw different first prompts, groups): in such a group a group-based estimator
    compares answers to different questions (``game.group_by: prompt`` groups by prompt instead)."""
    first = _first_prompts(turns)
    prompts: dict = {}
    for t in turns:
        prompts.setdefault(t.group_key, set()).add(first[(t.episode_id, t.seat)])
    return sum(len(p) > 1 for p in prompts.values()), len(prompts)


def dynamic_sampling(run: Run, play, system: dict, iteration: int, first: RolloutResult,
                     batches: dict[str, list], hooks: Sequence[TrainHook] = ()) -> dict[str, float]:
    """DAPO dynamic sampling (docs/algorithms.md §7.2) for every learner that enables it: drop the groups
    its predicate rejects and play more episodes until as many groups pass as the first rollout
    made (at most ``max_sampling_rounds`` rollouts in all), then keep the first that many passing
    groups. Replaces those learners' entries of ``batches`` in place; returns metrics. A learner
    still short after its last round trains on the groups that passed (``<pid>/ds_short`` = 1)."""
    ds = {pid: lr for pid, lr in run.learners.items() if lr.cfg.dynamic_sampling != "off"}
    if not ds:
        return {}
    pool = {pid: list(batches[pid]) for pid in ds}
    target = {pid: len({t.group_key for t in batches[pid]}) for pid in ds}
    decisions = {pid: lr.group_decisions(pool[pid]) for pid, lr in ds.items()}
    rounds = 1
    m: dict[str, float] = {}  # the greedy games' metrics, summed over rounds (submit_greedy)

    def short() -> list[str]:
        return [pid for pid, lr in ds.items()
                if sum(decisions[pid].values()) < target[pid] and rounds < lr.cfg.max_sampling_rounds]

    while short():
        k = run.cfg.game.group_size
        seeds = grouped(refill_seeds(run.cfg.run.seed, iteration, rounds, len(run.games) // k), k)
        seat_map, contexts = seat_maps(hooks, run.seat_map, iteration, len(run.games), k, rounds)
        res = play(run.games, seat_map, system, seeds, episode_prefix=f"it{iteration}r{rounds}", group_size=k,
                   sampling_key=rollout_key(run.cfg.run.seed, iteration, rounds))
        played = Played(play)
        m = summed(m, attach_greedy(run, played, submit_greedy(run, played, system, seat_map, seeds, iteration, rounds),
                                    res.turns))
        if run.cfg.game.group_by == "prompt":
            regroup_by_prompt(res.turns)
        after_rollout(hooks, res, contexts, iteration)  # e.g. the league rates these games too; metrics: round 0's
        for pid in short():
            new = [t for t in res.turns if t.policy_id == pid]
            pool[pid] += new
            decisions[pid].update(ds[pid].group_decisions(new))
        rounds += 1
    for pid in ds:
        chosen = set(select_groups(decisions[pid], target[pid]))
        batches[pid] = [t for t in pool[pid] if t.group_key in chosen]
        m[f"{pid}/ds_rounds"] = float(rounds)
        m[f"{pid}/ds_pass_rate"] = sum(decisions[pid].values()) / max(len(decisions[pid]), 1)
        m[f"{pid}/ds_groups"] = float(len(chosen))
        m[f"{pid}/ds_short"] = float(len(chosen) < target[pid])
    return m


class Played:
    """Rollouts played where they are asked for: :meth:`submit` plays the whole rollout with ``play``
    (:func:`~cogym.runners.rollout.turns.rollout`'s signature) and :meth:`collect` returns it."""

    def __init__(self, play: Callable) -> None:
        self.play = play

    def submit(self, games, seat_map, system: dict, seeds: Sequence[int], iteration: int = 0, **kwargs) -> RolloutResult:
        return self.play(games, seat_map, system, seeds, **kwargs)

    def collect(self, result: RolloutResult) -> RolloutResult:
        return result


class Sampler:
    """Plays one iteration's games and returns each learner's batch with the rollout's metrics.

    ``rollouts``: what plays them, with ``submit`` (start a rollout), ``collect`` (wait for it) and
    ``play`` (both): an execution's (:meth:`~cogym.runners.train.execution.Execution.rollouts`), or a
    play function, which :class:`Played` wraps. With ``run.async: one_step``, :meth:`take` starts the
    next iteration's rollout before the caller updates on this one's: workers elsewhere play it during
    the update; played here, it samples with weights one update old either way."""

    def __init__(self, run: Run, rollouts, hooks: Sequence[TrainHook] = (), last: int | None = None) -> None:
        self.run, self.hooks = run, list(hooks)
        self.rollouts = rollouts if hasattr(rollouts, "submit") else Played(rollouts)
        self.play = self.rollouts.play
        self.system = {role: p.system for role, p in run.cfg.prompts.items()}
        self.ahead = run.cfg.run.async_ == "one_step"
        self.last = last or run.cfg.run.iterations  # one step ahead, no rollout after it (a stage's last iteration)
        self.started: tuple | None = None  # one step ahead: the next iteration's rollout, under way

    def take(self, iteration: int) -> tuple[RolloutResult, dict[str, list], dict[str, float]]:
        """:meth:`sample` of ``iteration``; one step ahead, the rollout started by the call before (or now),
        and the next iteration's rollout is started before this returns (none after :attr:`last`)."""
        if not self.ahead:
            return self.sample(iteration)
        out = self.finish(self.started if self.started is not None else self.start(iteration))
        self.started = self.start(iteration + 1) if iteration < self.last else None
        return out

    def sample(self, iteration: int) -> tuple[RolloutResult, dict[str, list], dict[str, float]]:
        """(the rollout, {policy id: its turns}, metrics) of ``iteration``."""
        return self.finish(self.start(iteration))

    def start(self, iteration: int) -> tuple:
        """Begin ``iteration``'s rollout (submit it: played elsewhere, it returns at once)."""
        run, cfg = self.run, self.run.cfg
        seeding.torch_seed("rollout.sampling", cfg.run.seed, iteration, dist.rank())  # replayed exactly on resume; a rank its own
        k = cfg.game.group_size
        seeds = grouped(iteration_seeds(cfg.run.seed, iteration, len(run.games) // k), k)
        run.reseed_scripted(iteration, dist.rank())
        seat_map, contexts = seat_maps(self.hooks, run.seat_map, iteration, len(run.games), k)
        args = (run.games, seat_map, self.system, seeds)
        kwargs = dict(episode_prefix=f"it{iteration}", group_size=k, sampling_key=rollout_key(cfg.run.seed, iteration))
        played = self.rollouts.submit(*args, iteration=iteration, **kwargs)
        greedy = submit_greedy(run, self.rollouts, self.system, seat_map, seeds, iteration)  # the same weights sample both
        return iteration, contexts, played, greedy

    def finish(self, started: tuple) -> tuple[RolloutResult, dict[str, list], dict[str, float]]:
        """The rollout :meth:`start` began, each learner's batch (dynamic sampling applied) and metrics."""
        iteration, contexts, res, greedy = started
        run = self.run
        res = self.rollouts.collect(res)
        greedy_metrics = attach_greedy(run, self.rollouts, greedy, res.turns)
        if run.cfg.game.group_by == "prompt":
            regroup_by_prompt(res.turns)
        metrics = rollout_metrics(res, run.roles)
        metrics.update(after_rollout(self.hooks, res, contexts, iteration))
        batches = {pid: [t for t in res.turns if t.policy_id == pid] for pid in run.learners}
        metrics.update(learned_rewards(run, batches))  # reward_from: a reward model pays, and trains on the game's rewards
        metrics.update(summed(greedy_metrics, dynamic_sampling(run, self.play, self.system, iteration, res, batches,
                                                               self.hooks)))
        return res, batches, metrics
