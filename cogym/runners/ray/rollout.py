"""Rollouts on Ray: the driver keeps the loop, rollout workers play the games, learners train in the
driver or in learner actors.

``run.backend: ray`` (or ``cogym train --ray [ADDRESS]``) connects to a Ray cluster (``ray.address``:
``auto`` for the one ``ray start`` runs on this machine, ``host:port`` for another) or starts a local
one, and creates ``ray.num_rollout_workers`` actors (:class:`~cogym.runners.ray.worker.RolloutWorker`, ``ray.num_cpus`` and
``ray.num_gpus`` each). Every worker builds the config's games and policies (no learners) and plays
a share of each rollout: worker r plays games r, r + W, r + 2W, ... with the rollout of a one-process
run (:func:`~cogym.runners.rollout.turns.rollout`), the games' own seeds and the rollout's sampling key, so
the gathered result is the one-process result (:mod:`cogym.agents.sampling`). With ``ray.placement``
the workers form one placement group (a bundle each) with that strategy; workers that cannot start
within ``ray.start_timeout_s`` stop the run with one line naming the cluster's resources.

Learners (``ray.learners``): in the driver, or learner actors (:mod:`cogym.runners.ray.learners`:
one per trained policy, or a data-parallel group of ``ray.learner_workers``) in the workers' placement
group, sharing a worker's bundle (``colocated``) or in one of its own (``separate``); the driver
reaches them through a :class:`~cogym.runners.ray.learners.RemoteLearner`, which the training loop uses as it
uses a learner.
Colocated on GPUs, the workers' vLLM engines sleep during the update (:mod:`cogym.runners.ray.colocate`).

Weights: after every update the driver writes each trained policy's weights once, into shared memory
for the workers on its machine (:mod:`cogym.runners.ray.weights`, ``ray.weight_sync: auto``) and into
the object store (``ray.put``) for the others (a learner actor puts its own), and every worker loads
them with their version before its next rollout (``ray/sync_s``, ``ray/sync_bytes`` per iteration;
``ray.weight_sync: collective``: one broadcast from the driver or the learner actor instead, to the
workers or their vLLM engines, :mod:`cogym.agents.backends.broadcast`; the two paths are
:mod:`cogym.runners.ray.sync`); every Turn records the version it was sampled with, and a worker
refuses a rollout whose versions it does not hold.

Leagues: a rollout whose games meet league members (:class:`~cogym.runners.train.league.LeagueSeating`)
sends each worker the members its share needs, once each (``RolloutWorker.set_members``), and
each game's opponent; the worker seats its own copies.

Faults: a worker that dies (its process killed, its node lost) is restarted by Ray (at most
``ray.max_restarts`` times); the driver gives it the weights of the interrupted rollout again and
replays that worker's whole share of games with the same seeds and keys, so the rollout is the one
an uninterrupted run makes. Only whole shares are gathered, so no episode is lost or counted twice.

One-step off-policy (``run.async: one_step``): :meth:`RayRollout.submit` returns at once, so the
training loop starts iteration i+1's rollout before iteration i's update; its Turns are sampled with
weights one update old, and the learner corrects with their behaviour log-probs.

The training loop reaches all this through :class:`~cogym.runners.ray.execution.RayExecution`.
Tournaments (``cogym tournament --ray``) have their own pool (:mod:`cogym.runners.ray.tournament`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

from cogym.runners.config.schema import Config
from cogym.runners.ray.colocate import engines_sleep, Sleepers, with_sleep_mode
from cogym.runners.ray.learners import LearnerActors
from cogym.runners.ray.pool import actor_threads, ActorPool, driver_env, say, StaleWorker
from cogym.runners.ray.sync import weight_sync, WeightSync
from cogym.runners.ray.wire import LeaguePlan, Pending, state_of, to_wire
from cogym.runners.ray.worker import RolloutWorker
from cogym.runners.rollout.loop import RolloutResult
from cogym.runners.train.build import trained_policies
from cogym.runners.train.iteration import gather_rollouts


class RayRollout(ActorPool):
    """The driver's side: rollout workers, their record (the weight versions and league members each
    holds), weight sync through :attr:`weights` (:mod:`cogym.runners.ray.sync`), learner actors
    (:attr:`learners`), restarts. ``play`` has the signature of :func:`~cogym.runners.rollout.turns.rollout`
    (the training loop's samplers call it); ``submit`` and ``collect`` split it for one-step off-policy."""

    def __init__(self, cfg: Config, ckpt: Path | None = None, fresh: frozenset = frozenset(), stage: int = 0) -> None:
        """Rollout workers and, with ``ray.learners`` colocated or separate, a learner actor per trained
        policy (:attr:`learners`; from checkpoint ``ckpt`` when resuming, but for the learners of
        ``fresh``, which a stage starts anew); ``stage``: the index of the run's stage they serve."""
        self.cfg, self.ckpt, self.learners, self.stage = cfg, ckpt, {}, stage
        rc = cfg.ray
        threads = cfg.run.threads or actor_threads(rc.num_cpus)
        self._env = driver_env()
        trained = trained_policies(cfg) if rc.learners != "driver" else []
        self.actors = LearnerActors(cfg, trained, fresh, stage)
        self.weights: WeightSync | None = None  # how new weights reach the workers (ray.weight_sync)
        sleeps = engines_sleep(cfg)
        wcfg = with_sleep_mode(cfg) if sleeps else cfg
        pinned = bool(cfg.run.threads)
        super().__init__(rc, RolloutWorker, lambda i: (wcfg, i, os.getcwd(), self._env, threads, pinned),
                         n_learners=len(trained) * rc.learner_workers)
        self._sleepers = Sleepers(self, sleeps)  # vLLM engines asleep during colocated updates (GPU)
        self.held = [self._built(i) for i in self.info]  # per worker: the versions it holds
        self.stale = [0] * len(self.workers)  # per worker: repairs in a row without a restart (StaleWorker)
        self._loading: dict[int, tuple] = {}  # worker -> (its load call under way, the versions)
        self._member_refs: dict[str, Any] = {}  # league member -> object ref of its weights
        self.members_held: list[set[str]] = [set() for _ in self.workers]  # per worker: league members it holds
        self.versions: dict[str, int] = dict(self.info[0]["versions"])  # the versions rollouts sample with
        self.weights = weight_sync(self)

    # ------------------------------------------------------------------ learner actors
    def _placed(self) -> None:
        if not self.actors.trained:
            return
        rc, cfg = self.rc, self.cfg
        cpus = rc.num_cpus if rc.learners == "colocated" else rc.learner_num_cpus
        threads = cfg.run.threads or actor_threads(cpus)
        self.actors.start(self.ray, self.plan.learners, (os.getcwd(), self._env, threads, bool(cfg.run.threads)), self.ckpt)

    def _started(self) -> None:
        if self.actors.trained:
            self.learners = self.actors.ready(self.plan.learner_bundles)

    def refresh(self, policies: dict) -> None:
        """Load the learner actors' newest weights into the driver's copies of their policies (for the
        evaluations and checkpoints the driver makes)."""
        for pid, learner in self.learners.items():
            learner.refresh(policies[pid].backend)

    def close(self) -> None:
        if self.weights is not None:
            self.weights.close()
        self.actors.close()
        self.learners = {}
        super().close()

    # ------------------------------------------------------------------ weights
    def sync(self, policies: dict, versions: dict[str, int], wait: bool = True) -> dict[str, float]:
        """Give every worker the weights of ``versions`` (policy -> version) it does not hold: the weight
        path publishes them (:mod:`cogym.runners.ray.sync`: written once, or broadcast) and every worker
        that lacks some loads them. ``wait``: return when all have loaded (else the loads queue behind a
        rollout under way, and the next :meth:`submit` waits for them). Metrics: ``ray/sync_s`` and
        ``ray/sync_bytes`` (one copy)."""
        t0 = time.perf_counter()
        self._sleepers.wake()
        sent, calls = self.weights.publish(policies, versions)
        self.versions = dict(versions)
        for r in range(len(self.workers)):
            ref = calls[r] if r in calls else self._load(r, versions)
            if ref is not None:
                self._loading[r] = (ref, dict(versions))
        if wait:
            sent += self.finish_loads()
        if not sent:
            return {}
        return {"ray/sync_s": time.perf_counter() - t0, "ray/sync_bytes": float(sent)}

    def _load(self, r: int, versions: dict[str, int]):
        """Worker ``r``'s load call for the versions it lacks (None when it holds them all)."""
        need = [pid for pid, v in versions.items() if self.held[r].get(pid) != v]
        return self.weights.load(r, need, versions) if need else None

    def _load_into(self, r: int, versions: dict[str, int]) -> None:
        """Worker ``r`` holds ``versions`` when this returns (restarting it as often as it dies)."""
        while (ref := self._load(r, versions)) is not None:
            try:
                self.held[r] = dict(self.ray.get(ref))
            except self.ray.exceptions.RayActorError as exc:
                self._recover(r, exc, f"a weight sync to {versions}")
            except StaleWorker as exc:
                self._repair(r, exc, f"a weight sync to {versions}")
            finally:
                self.weights.finish_sends()

    def finish_loads(self) -> int:
        """Wait for the loads :meth:`sync` queued; a worker that died meanwhile is restarted and loaded.
        Returns the bytes the broadcasts among them sent (``ray.weight_sync: collective``)."""
        loading, self._loading = self._loading, {}
        for r, (ref, versions) in loading.items():
            try:
                self.held[r] = dict(self.ray.get(ref))
            except self.ray.exceptions.RayActorError as exc:
                self._recover(r, exc, f"a weight sync to {versions}")
                self._load_into(r, versions)
            except StaleWorker as exc:
                self._repair(r, exc, f"a weight sync to {versions}")
                self._load_into(r, versions)
        return self.weights.finish_sends()

    # ------------------------------------------------------------------ restarts
    def _built(self, info: dict) -> dict[str, int]:
        """The versions a worker holds as built (``info``: its ping). In a stage after the first, none: it built
        the config's weights as version 0, but a learner's version 0 there is the stage's start (a LoRA
        policy's adapter from the boundary checkpoint), so the driver sends every worker its weights."""
        return {} if self.stage else dict(info["versions"])

    def _restarted(self, r: int) -> None:
        self.held[r] = self._built(self.info[r])
        self.members_held[r] = set(self.info[r].get("members", ()))
        self.stale[r] = 0
        self._loading.pop(r, None)
        self.weights.restarted(r)

    def _repair(self, r: int, exc: StaleWorker, what: str) -> None:
        """Worker ``r`` answered with state other than the driver's record (:class:`StaleWorker`). A new
        process (Ray restarted it between two calls, before the driver saw it die) counts as a restart;
        either way the driver takes what the worker says it holds, and the caller loads what it lacks and
        calls again. The same worker stale again without a restart, more than ``ray.max_restarts`` times
        in a row, stops the run (something other than a restart keeps it stale)."""
        held, old = exc.held, self.info[r]
        if held.get("boot") != old.get("boot"):
            self._count_restart(r, exc, f"was restarted during {what}")
            say(f"{self.kind} {r} (pid {old.get('pid')}) was restarted by Ray before the driver saw it die "
                f"(now pid {held.get('pid')}; restart {self.restarts[r]} of at most {self.rc.max_restarts}); "
                f"sending it the weights of {what} again")
            self.info[r] = held
            self._restarted(r)
        else:
            self.stale[r] += 1
            if self.stale[r] > self.rc.max_restarts:
                raise RuntimeError(f"{self.kind} {r} is still stale after {self.rc.max_restarts} repairs: {exc}") from exc
            say(f"{exc}; sending it what it lacks for {what} again")
            self.held[r] = dict(held["versions"])
            self.members_held[r] = set(held.get("members", ()))
        self.weights.stale(r, exc)

    # ------------------------------------------------------------------ league members
    def _members_into(self, r: int, plan: LeaguePlan | None, share: list[int], versions: dict[str, int]) -> None:
        """Worker ``r`` holds the league members its ``share`` of games plays against (each member's weights
        go to the object store once) and no member that left the league."""
        if plan is None:
            return
        for name in [n for n in self._member_refs if n not in plan.members]:
            del self._member_refs[name]
        while True:
            need = sorted({plan.opponents[g] for g in share} - {None} - self.members_held[r])
            drop = sorted(self.members_held[r] - set(plan.members))
            if not need and not drop:
                return
            for name in need:
                if name not in self._member_refs:
                    self._member_refs[name] = self.ray.put(to_wire(state_of(plan.agents[name].policy, trainable_only=False)))
            try:
                held = self.ray.get(self.workers[r].set_members.remote(need, drop, *[self._member_refs[n] for n in need]))
                self.members_held[r] = set(held)
            except self.ray.exceptions.RayActorError as exc:
                self._recover(r, exc, f"a league member load ({', '.join(need)})")
                self._load_into(r, versions)

    # ------------------------------------------------------------------ rollouts
    def submit(self, games: Sequence, seat_map, system: dict, seeds: Sequence[int], episode_prefix: str = "ep",
               group_size: int = 1, sampling_key: int | None = None, iteration: int = 0,
               versions: dict[str, int] | None = None, greedy: Sequence[str] = (),
               game_indices: Sequence[int] | None = None) -> Pending:
        """Start a rollout of ``len(games)`` games (the workers hold their own copies) and return at once;
        it samples with the versions of the last :meth:`sync` (or ``versions``); ``greedy`` and
        ``game_indices`` (the games' places, which key their draws): as in
        :func:`~cogym.runners.rollout.turns.rollout`."""
        n, w = len(games), len(self.workers)
        self._sleepers.wake()
        plan = LeaguePlan.of(seat_map, n)  # league games: each worker plays its own copies of the members
        self.finish_loads()
        versions = dict(self.versions if versions is None else versions)
        for r in range(w):  # e.g. a worker restarted since the last sync
            self._load_into(r, versions)
        shares = [list(range(r, n, w)) for r in range(w)]
        calls = [(shares[r], [int(seeds[g]) for g in shares[r]], episode_prefix, group_size, sampling_key, iteration,
                  versions, None if plan is None else ([plan.opponents[g] for g in shares[r]], plan.seats), tuple(greedy),
                  None if game_indices is None else [int(game_indices[g]) for g in shares[r]])
                 for r in range(w)]
        pending = Pending(shares, calls, versions, what=f"rollout {episode_prefix}", league=plan)
        for r in range(w):
            if shares[r]:
                self._members_into(r, plan, shares[r], versions)
                pending.refs[self.workers[r].rollout.remote(*calls[r])] = r
        return pending

    def collect(self, pending: Pending) -> RolloutResult:
        """Wait for every share of ``pending``; replay the share of a worker that died; gather."""
        def replay(r: int):
            self._load_into(r, pending.versions)  # the weights the interrupted rollout sampled with
            self._members_into(r, pending.league, pending.shares[r], pending.versions)
            say(f"replaying {len(pending.shares[r])} games of {pending.what} on worker {r} with the same seeds")
            return self.workers[r].rollout.remote(*pending.calls[r])

        results = self.gather(pending.refs, replay, pending.what)
        self._sleepers.sleep()  # the update comes next
        self.stale = [0] * len(self.workers)
        order = [r for r in range(len(self.workers)) if pending.shares[r]]
        return gather_rollouts([results[r] for r in order], [pending.shares[r] for r in order])

    def summary(self) -> dict:
        return {**super().summary(), **({"ray_engine_sleeps": self._sleepers.slept} if self._sleepers.on else {})}

    def play(self, games: Sequence, seat_map, system: dict, seeds: Sequence[int], episode_prefix: str = "ep",
             group_size: int = 1, sampling_key: int | None = None, iteration: int = 0,
             greedy: Sequence[str] = (), game_indices: Sequence[int] | None = None) -> RolloutResult:
        """A whole rollout on the workers (the signature of :func:`~cogym.runners.rollout.turns.rollout`)."""
        return self.collect(self.submit(games, seat_map, system, seeds, episode_prefix, group_size, sampling_key,
                                        iteration, greedy=greedy, game_indices=game_indices))
