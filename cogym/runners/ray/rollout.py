"""Rollouts on Ray: the driver keeps the loop, rollout workers play the games, learners train in the
driver or in learner actors.

``run.backend: ray`` (or ``cogym train --ray [ADDRESS]``) connects to a Ray cluster (``ray.address``:
``auto`` for the one ``ray start`` runs on this machine, ``host:port`` for another) or starts a local
one, and creates ``ray.num_rollout_workers`` actors (:class:`RolloutWorker`, ``ray.num_cpus`` and
``ray.num_gpus`` each). Every worker builds the config's games and policies (no learners) and plays
a share of each rollout: worker r plays games r, r + W, r + 2W, ... with the rollout of a one-process
run (:func:`~cogym.runners.rollout.turns.rollout`), the games' own seeds and the rollout's sampling key, so
the gathered result is the one-process result (:mod:`cogym.agents.sampling`). With ``ray.placement``
the workers form one placement group (a bundle each) with that strategy; workers that cannot start
within ``ray.start_timeout_s`` stop the run with one line naming the cluster's resources.

Learners (``ray.learners``): in the driver, or learner actors (:mod:`cogym.runners.ray.learners`:
one per trained policy, or a data-parallel group of ``ray.learner_workers``) in the workers' placement
group, sharing a worker's bundle (``colocated``) or in one of its own (``separate``); the driver
reaches them through a :class:`RemoteLearner`, which the training loop uses as it uses a learner.
Colocated on GPUs, the workers' vLLM engines sleep during the update (:mod:`cogym.runners.ray.colocate`).

Weights: after every update the driver writes each trained policy's weights once, into shared memory
for the workers on its machine (:mod:`cogym.runners.ray.weights`, ``ray.weight_sync: auto``) and into
the object store (``ray.put``) for the others (a learner actor puts its own), and every worker loads
them with their version before its next rollout (``ray/sync_s``, ``ray/sync_bytes`` per iteration;
``ray.weight_sync: collective``: one broadcast from the driver or the learner actor instead, to the
workers or their vLLM engines, :mod:`cogym.agents.backends.broadcast`); every Turn records the
version it was sampled with, and a worker refuses a rollout whose versions it does not hold.

Leagues: a rollout whose games meet league members (:class:`~cogym.runners.train.league.LeagueSeating`)
sends each worker the members its share needs, once each (:meth:`RolloutWorker.set_members`), and
each game's opponent; the worker seats its own copies.

Faults: a worker that dies (its process killed, its node lost) is restarted by Ray (at most
``ray.max_restarts`` times); the driver gives it the weights of the interrupted rollout again and
replays that worker's whole share of games with the same seeds and keys, so the rollout is the one
an uninterrupted run makes. Only whole shares are gathered, so no episode is lost or counted twice.

One-step off-policy (``run.async: one_step``): :meth:`RayRollout.submit` returns at once, so the
training loop starts iteration i+1's rollout before iteration i's update; its Turns are sampled with
weights one update old, and the learner corrects with their behaviour log-probs.

Tournaments (``cogym tournament --ray``): :class:`RayTournament` gives each :class:`TournamentWorker`
a contiguous share of every batch of games and gathers the rows; the driver writes them.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from cogym.agents.backends.checks import bind_cpu_threads
from cogym.agents.policy import Policy
from cogym.runners.config.schema import Config
from cogym.runners.config.validate import league_policy
from cogym.core.errors import LearnerDied
from cogym.agents.backends.broadcast import COLLECTIVE_TIMEOUT_S, gpu_id, Groups, Meet, Sending, spec
from cogym.runners.ray.colocate import engines_sleep, sleep_all, Sleepers, wake_all, with_sleep_mode
from cogym.runners.ray.learners import first_error_first, RemoteLearner, start_learners
from cogym.runners.ray.pool import actor_threads, ActorPool, adjust_threads, driver_env, enter, log, node_ip, say, StaleWorker
from cogym.runners.ray.weights import attach, check, read, sees_shm, ShmWeights, WeightSlots
from cogym.core.processes import free_port
from cogym.runners.ray.wire import from_wire, LeaguePlan, nbytes, Pending, Sent, state_of, to_wire
from cogym.runners.rollout.agents import model_agent
from cogym.runners.rollout.loop import RolloutResult
from cogym.runners.rollout.tokens import token_rollout
from cogym.runners.rollout.turns import rollout
from cogym.runners.train.build import build, trained_policies
from cogym.runners.train.iteration import gather_rollouts, sampling_seed
from cogym.runners.train.league import freeze, LeagueSeating, PREFIX


class RolloutWorker:
    """A Ray actor: the config's games and generation backends (no learners), playing shares of rollouts."""

    def __init__(self, cfg: Config, index: int, cwd: str, env: dict[str, str], threads: int,
                 pinned: bool = True) -> None:
        enter(cwd, env, threads, pinned)
        self.cfg, self.index = cfg, index
        if any(pc.generation.backend == "vllm" for pc in cfg.policies.values()):
            bind_cpu_threads(index, threads)  # the engines this worker starts get cores of their own
        self.run = build(cfg, rollout_only=True)
        self.play = token_rollout if cfg.game.granularity == "token" else rollout
        self.system = {role: p.system for role, p in cfg.prompts.items()}
        self.members: dict = {}  # league member name -> its agent (a frozen copy of the league policy)
        self.segments: dict = {}  # the driver's shared-memory segments this worker has attached
        self.boot = os.urandom(8).hex()  # this process's start: a restart (seen or not by the driver) has another
        self.groups = Groups()  # weight groups (ray.weight_sync: collective)

    def ping(self) -> dict:
        """Alive: the process id, this start's token, the weight version of every policy and the league
        members held."""
        return {"pid": os.getpid(), "boot": self.boot, "versions": self.versions(), "node": node_ip(),
                "members": sorted(self.members), "gpu": gpu_id()}

    def sees(self, segment: str, token: bytes) -> bool:
        """Whether the driver's shared-memory segment ``segment`` is here and holds ``token`` (this
        worker is on the driver's machine and can load weights from shared memory)."""
        try:
            seg = attach(segment)
        except OSError:  # not there: another machine
            return False
        try:
            return bytes(seg.buf[:len(token)]) == token
        finally:
            seg.close()

    def versions(self) -> dict[str, int]:
        return {pid: p.backend.version for pid, p in self.run.policies.items()}

    def load_weights(self, pids: list[str], versions: dict[str, int], *weights) -> dict[str, int]:
        """Load ``weights[i]`` into policy ``pids[i]``: a :func:`to_wire` dict (from the object store) or a
        :class:`~cogym.runners.ray.weights.ShmWeights` (read from the driver's shared memory)."""
        for pid, w in zip(pids, weights):
            backend = self.run.policies[pid].backend
            if isinstance(w, ShmWeights):
                try:
                    state = read(w, self.segments)
                except FileNotFoundError:  # e.g. restarted on another machine since the driver last looked
                    raise StaleWorker(f"rollout worker {self.index} cannot open the driver's shared memory "
                                      f"{w.segment}", self.ping(), shm=False) from None
                backend.load_weights(state, versions[pid])
                check(w, self.segments)
            else:
                backend.load_weights(from_wire(w), versions[pid])
        return self.versions()

    def sleep(self) -> list[str]:
        """Engines beside a colocated learner release their GPU memory for its update (:mod:`colocate`)."""
        return sleep_all(self.run.policies)

    def wake(self) -> None:
        wake_all(self.run.policies)

    def state(self, pid: str) -> dict:
        """The weights of this worker's policy ``pid``'s model (:func:`to_wire` form), for checks (a started
        vLLM engine holds a copy of its own, which new weights reach without passing through the model)."""
        return to_wire(state_of(self.run.policies[pid]))

    def receive_weights(self, pid: str, version: int, meet: Meet, rank: int, layout: list) -> dict[str, int]:
        """Load ``pid``'s weights of ``version`` from the broadcast of group ``meet`` (rank ``rank``); a
        started vLLM engine of one worker joins the group itself (``joins_broadcast``)."""
        backend = self.run.policies[pid].backend
        engine = getattr(backend, "joins_broadcast", False)
        try:
            state = backend.receive_broadcast(meet, rank, layout, version) if engine else self.groups.receive(
                meet, rank, layout)
        except RuntimeError as exc:  # the sender or another member died: the driver sends them again
            raise StaleWorker(f"rollout worker {self.index} did not receive {pid!r} version {version} "
                              f"({str(exc).splitlines()[0][:200]})", self.ping()) from None
        if not engine:
            backend.load_weights(state, version)
        return self.versions()

    def set_members(self, add: list[str], drop: list[str], *weights) -> list[str]:
        """League members: build ``add[i]`` as a frozen copy of the league policy holding ``weights[i]``
        (:func:`to_wire` form, every parameter), forget ``drop``; return the names held."""
        for name in drop:
            self.members.pop(name, None)
        pid = league_policy(self.cfg)
        base = self.run.policies[pid]
        for name, wire in zip(add, weights):
            with base.gather():
                model = freeze(copy.deepcopy(base.model))
            with torch.no_grad():
                model.load_state_dict(from_wire(wire), strict=False)
            member = Policy(model, base.tokenizer, name=PREFIX + name)
            self.members[name] = model_agent(member, self.cfg.policies[pid].sampling, PREFIX + name)
        return sorted(self.members)

    def rollout(self, indices: list[int], seeds: list[int], episode_prefix: str, group_size: int,
                sampling_key: int | None, iteration: int, versions: dict[str, int],
                league: tuple | None = None) -> RolloutResult:
        """Play games ``indices`` of the rollout (their places in its game list) with ``seeds``; ``league``:
        (each game's league opponent or None, the league's seats)."""
        adjust_threads()
        mine = self.versions()
        wrong = {pid: (mine.get(pid), v) for pid, v in versions.items() if mine.get(pid) != v}
        lacking = sorted({o for o in league[0] if o is not None} - set(self.members)) if league is not None else []
        if wrong or lacking:
            raise StaleWorker(f"rollout worker {self.index} holds weight versions {mine}, the rollout needs {versions}"
                              + (f"; it lacks league members {lacking}" if lacking else ""), self.ping())
        torch.manual_seed(sampling_seed(self.cfg.run.seed, iteration))
        self.run.reseed_scripted(iteration, self.index)
        games = [self.run.games[g] for g in indices]
        seat_map = self.run.seat_map
        if league is not None:
            opponents, seats = league
            seat_map = [self.run.seat_map if o is None else
                        LeagueSeating(o, self.members[o], frozenset(seats), self.run.seat_map, ()) for o in opponents]
        return self.play(games, seat_map, self.system, seeds, episode_prefix=episode_prefix,
                         group_size=group_size, game_indices=indices, sampling_key=sampling_key,
                         on_error=self.cfg.game.on_error, max_prompt_chars=self.cfg.game.max_prompt_chars)


class RayRollout(ActorPool):
    """The driver's side: rollout workers, weight sync, restarts. ``play`` has the signature of
    :func:`~cogym.runners.rollout.turns.rollout` (the training loop's samplers call it); ``submit`` and
    ``collect`` split it for one-step off-policy."""

    def __init__(self, cfg: Config, ckpt: Path | None = None) -> None:
        """Rollout workers and, with ``ray.learners`` colocated or separate, a learner actor per trained
        policy (:attr:`learners`; from checkpoint ``ckpt`` when resuming)."""
        self.cfg, self.ckpt, self.learners, self._learner_handles = cfg, ckpt, {}, {}
        self._shm: dict[str, Any] = {}  # policy -> its WeightSlots (workers on this machine read them)
        rc = cfg.ray
        threads = cfg.run.threads or actor_threads(rc.num_cpus)
        self._env = driver_env()
        self._trained = trained_policies(cfg) if rc.learners != "driver" else []
        sleeps = engines_sleep(cfg)
        wcfg = with_sleep_mode(cfg) if sleeps else cfg
        pinned = bool(cfg.run.threads)
        super().__init__(rc, RolloutWorker, lambda i: (wcfg, i, os.getcwd(), self._env, threads, pinned),
                         n_learners=len(self._trained) * rc.learner_workers)
        self._sleepers = Sleepers(self, sleeps)  # vLLM engines asleep during colocated updates (GPU)
        self.held = [dict(i["versions"]) for i in self.info]  # per worker: the versions it holds
        self.stale = [0] * len(self.workers)  # per worker: repairs in a row without a restart (StaleWorker)
        # policy -> version -> Sent (the newest max_staleness + 1): an object ref and/or shared memory
        self._weights: dict[str, dict[int, Sent]] = {}
        self.local: set[int] = set()  # the workers that load the driver's weights from shared memory
        self._shm_ok = rc.weight_sync == "auto"  # False also once shared memory had no room
        if self._shm_ok:
            self.local = {r for r in range(len(self.workers)) if sees_shm(self.ray, self.workers[r])}
        if self.local:
            n, w = len(self.local), len(self.workers)
            say("weights reach " + (f"the {w} rollout workers" if n == w else f"{n} of {w} rollout workers")
                 + " through shared memory (on this machine)"
                 + ("" if n == w else f", the other {w - n} through the object store"))
        self._loading: dict[int, tuple] = {}  # worker -> (its load call under way, the versions)
        self._member_refs: dict[str, Any] = {}  # league member -> object ref of its weights
        self.members_held: list[set[str]] = [set() for _ in self.workers]  # per worker: league members it holds
        self.versions: dict[str, int] = dict(self.held[0])  # the versions rollouts sample with
        # ray.weight_sync: collective: the driver's ends of its weight groups, each group's Meet by
        # (policy, its receivers and their starts), each policy's weight layout, the driver's policies
        self.collective = rc.weight_sync == "collective"
        self._groups, self._meets, self._layouts, self._policies = Groups(), {}, {}, {}
        self._sending: list[tuple] = []  # broadcasts under way: (group key, learner or None, its call)
        self._meet_count = 0
        for lr in self.learners.values():
            lr.put = not self.collective

    # ------------------------------------------------------------------ learner actors
    def _placed(self) -> None:
        if not self._trained:
            return
        rc, cfg = self.rc, self.cfg
        cpus = rc.num_cpus if rc.learners == "colocated" else rc.learner_num_cpus
        threads = cfg.run.threads or actor_threads(cpus)
        self._t_learners = time.perf_counter()
        self._learner_handles = start_learners(self.ray, cfg, self._trained, self.plan.learners,
                                               (os.getcwd(), self._env, threads, bool(cfg.run.threads)), self.ckpt)

    def _started(self) -> None:
        if not self._trained:
            return
        n = self.rc.learner_workers
        started = self._learner_handles
        infos = first_error_first(self.ray, [ref for _, builds in started.values() for ref in builds],
                                  timeout=self.rc.start_timeout_s)
        self.learners = {pid: RemoteLearner(self.ray, hs, pid, self.cfg.learners[pid], infos[k * n:(k + 1) * n],
                                            bundles=self.plan.learner_bundles[k * n:(k + 1) * n])
                         for k, (pid, (hs, _)) in enumerate(started.items())}
        groups = f" (groups of {n})" if n > 1 else ""
        say(f"{len(infos)} learner actors ({self.rc.learners}){groups} ready in "
             f"{time.perf_counter() - self._t_learners:.1f} s: "
             + ", ".join(f"{pid} (pid{'s' if n > 1 else ''} {', '.join(map(str, lr.pids()))})"
                         for pid, lr in self.learners.items()))

    def refresh(self, policies: dict) -> None:
        """Load the learner actors' newest weights into the driver's copies of their policies (for the
        evaluations and checkpoints the driver makes)."""
        for pid, learner in self.learners.items():
            backend = policies[pid].backend
            if backend.version != learner.steps:
                ref, _ = learner.weights()
                backend.load_weights(from_wire(self.ray.get(ref)), learner.steps)

    def close(self) -> None:
        for slots in self._shm.values():
            slots.close()
        self._shm = {}
        for h in (h for hs, _ in self._learner_handles.values() for h in hs):
            try:
                self.ray.kill(h)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._learner_handles, self.learners = {}, {}
        self._groups, self._meets = Groups(), {}
        super().close()

    # ------------------------------------------------------------------ weights
    def sync(self, policies: dict, versions: dict[str, int], wait: bool = True) -> dict[str, float]:
        """Give every worker the weights of ``versions`` (policy -> version) it does not hold: each
        policy's weights are written once (the driver's into shared memory for the workers on this
        machine and the object store for the others; a learner actor's into the object store by the
        actor), and every worker loads them. ``wait``: return when all have loaded (else the
        loads queue behind a rollout under way, and the next :meth:`submit` waits for them). Metrics:
        ``ray/sync_s`` and ``ray/sync_bytes`` (one copy)."""
        t0 = time.perf_counter()
        sent = 0
        self._policies = policies
        self._sleepers.wake()
        if self.collective:
            return self._sync_collective(versions, t0)
        for pid, version in versions.items():
            kept = self._weights.setdefault(pid, {})
            lacking = [r for r, h in enumerate(self.held) if h.get(pid) != version]
            if version not in kept and lacking:
                if pid in self.learners:
                    ref, size = self.learners[pid].weights()
                    kept[version] = Sent(ref=ref)
                    sent += size
                else:
                    state = state_of(policies[pid])
                    sent += nbytes(state)
                    kept[version] = self._send(pid, version, state, lacking)
                for old in sorted(kept)[:-(self.rc.max_staleness + 1)]:
                    del kept[old]  # a rollout needs at most max_staleness versions back
        self.versions = dict(versions)
        for r in range(len(self.workers)):
            ref = self._load(r, versions)
            if ref is not None:
                self._loading[r] = (ref, dict(versions))
        if wait:
            self._finish_loads()
        if not sent:
            return {}
        return {"ray/sync_s": time.perf_counter() - t0, "ray/sync_bytes": float(sent)}

    def _send(self, pid: str, version: int, state: dict[str, torch.Tensor], lacking: list[int]) -> "Sent":
        """The driver's weights of ``pid`` at ``version``: written to its shared-memory slots when a worker
        on this machine lacks them, put in the object store when another worker does."""
        sent = Sent()
        if any(r in self.local for r in lacking):
            slots = self._shm.get(pid)
            if slots is None or not slots.fits(state):
                if slots is not None:
                    slots.close()
                try:
                    slots = self._shm[pid] = WeightSlots(state, self.rc.max_staleness + 1)
                except OSError as exc:  # e.g. a container's small /dev/shm: the object store for everyone
                    say(f"weights of {pid!r} go through the object store, not shared memory: {exc}")
                    self._shm.pop(pid, None)
                    self.local, self._shm_ok = set(), False
                    slots = None
            if slots is not None:
                self._finish_loads()  # no load may still read the slot this write replaces
                sent.shm = slots.write(version, state)
        if any(r not in self.local for r in lacking):
            sent.ref = self.ray.put(to_wire(state))
        return sent

    def _weights_for(self, r: int, pid: str, version: int):
        """What worker ``r`` loads ``pid``'s ``version`` from: shared memory on this machine, else an
        object ref (put now from shared memory if no worker needed one before, e.g. a worker restarted
        on another machine)."""
        sent = self._weights.get(pid, {}).get(version)
        slots = self._shm.get(pid)
        in_shm = sent is not None and sent.shm is not None and slots is not None and slots.has(version)
        if sent is None or (not in_shm and sent.ref is None):
            raise RuntimeError(f"weights of {pid!r} version {version} are no longer kept for a worker "
                               f"that lacks them (ray.max_staleness = {self.rc.max_staleness})")
        if r in self.local and in_shm:
            return sent.shm
        if sent.ref is None:
            sent.ref = self.ray.put(to_wire(slots.read_back(version)))
        return sent.ref

    def _load(self, r: int, versions: dict[str, int]):
        """Worker ``r``'s load call for the versions it lacks (None when it holds them all)."""
        need = [pid for pid, v in versions.items() if self.held[r].get(pid) != v]
        if not need:
            return None
        if self.collective:  # a broadcast to this worker alone, per policy; the last call returns its versions
            return [self._broadcast(pid, versions[pid], [r])[r] for pid in need][-1]
        weights = [self._weights_for(r, pid, versions[pid]) for pid in need]
        self.held[r] = {**self.held[r], **{pid: None for pid in need}}  # unknown until the call returns
        return self.workers[r].load_weights.remote(need, dict(versions), *weights)

    def _sync_collective(self, versions: dict[str, int], t0: float) -> dict[str, float]:
        """:meth:`sync` through weight groups: per policy, one broadcast to every worker that lacks it."""
        self._finish_loads()
        self.versions = dict(versions)
        for pid, version in versions.items():
            lacking = [r for r, h in enumerate(self.held) if h.get(pid) != version]
            if lacking:
                for r, ref in self._broadcast(pid, version, lacking).items():
                    self._loading[r] = (ref, dict(versions))  # a worker's calls run in order: its last one
        sent = self._finish_loads()
        if not sent:
            return {}
        return {"ray/sync_s": time.perf_counter() - t0, "ray/sync_bytes": float(sent)}

    def _broadcast(self, pid: str, version: int, receivers: list[int]) -> dict[int, Any]:
        """Start sending ``pid``'s newest weights (``version``) to workers ``receivers`` in one broadcast
        from the driver (in a thread) or the policy's learner actor; returns each worker's receive call.
        :meth:`_finish_loads` waits for the sender."""
        learner = self.learners.get(pid)
        have = learner.steps if learner is not None else self._policies[pid].backend.version
        if have != version:
            raise RuntimeError(f"collective weight sync: {pid!r} version {version} is asked for, the sender holds "
                               f"{have} (it keeps only its newest weights)")
        if pid not in self._layouts:
            self._layouts[pid] = learner.layout() if learner is not None else spec(state_of(self._policies[pid]))
        for r in receivers:
            self.held[r] = {**self.held[r], pid: None}  # unknown until its call returns
        key = (pid, tuple((r, self.info[r].get("boot")) for r in receivers))
        meet = self._meets.get(key)
        if meet is None:
            if learner is not None:
                addr, port = learner._get_all([learner.handle.rendezvous.remote()], "a weight group's start")[0]
            else:
                addr, port = node_ip(), free_port()
                addr = "127.0.0.1" if addr == "?" else addr
            self._meet_count += 1  # a new name: a member never takes a group it left for this one
            meet = self._meets[key] = Meet(f"{pid}/{self._meet_count}", addr, port, len(receivers) + 1,
                                           self._backend(pid, receivers), COLLECTIVE_TIMEOUT_S)
        refs = {r: self.workers[r].receive_weights.remote(pid, version, meet, k + 1, self._layouts[pid])
                for k, r in enumerate(receivers)}
        if learner is not None:
            self._sending.append((key, learner, learner.start_send(meet)))
        else:
            self._sending.append((key, None, Sending(self._groups, meet, state_of(self._policies[pid]))))
        return refs

    def _senders_done(self) -> int:
        """Wait for the broadcasts under way; the bytes they sent. One that failed (a receiver died: its
        receive call says so) is forgotten; a learner actor that died raises :class:`LearnerDied`."""
        sent, sending, self._sending = 0, self._sending, []
        for key, learner, call in sending:
            try:
                sent += learner._get_all(call, "a weight broadcast")[0] if learner is not None else call.result()
            except LearnerDied:
                raise
            except RuntimeError as exc:
                log.warning("weight broadcast %s failed: %s", self._meets.get(key, key), str(exc).splitlines()[0])
                self._meets.pop(key, None)
        return sent

    def _forget_meets(self, r: int) -> None:
        for key in [k for k in self._meets if any(w == r for w, _ in k[1])]:
            del self._meets[key]

    def _backend(self, pid: str, receivers: list[int]) -> str:
        """``nccl`` where the sender and the receivers each have a GPU of their own, else ``gloo`` (which
        also serves processes that share one GPU: NCCL refuses two members on one device)."""
        learner = self.learners.get(pid)
        gpus = [learner.info.get("gpu") if learner is not None else None] + [self.info[r].get("gpu") for r in receivers]
        return "nccl" if None not in gpus and len(set(gpus)) == len(gpus) else "gloo"

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
                if self.collective:
                    self._senders_done()

    def _finish_loads(self) -> int:
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
        return self._senders_done()

    def _restarted(self, r: int) -> None:
        self._forget_meets(r)
        self.held[r] = dict(self.info[r]["versions"])
        self.members_held[r] = set(self.info[r].get("members", ()))
        self.stale[r] = 0
        self._loading.pop(r, None)
        if self._shm_ok:  # the new process may be on another machine
            self.local.discard(r)
            if sees_shm(self.ray, self.workers[r]):
                self.local.add(r)

    def _repair(self, r: int, exc: StaleWorker, what: str) -> None:
        """Worker ``r`` answered with state other than the driver's record (:class:`StaleWorker`). A new
        process (Ray restarted it between two calls, before the driver saw it die) counts as a restart;
        either way the driver takes what the worker says it holds, and the caller loads what it lacks and
        calls again. The same worker stale again without a restart, more than ``ray.max_restarts`` times
        in a row, stops the run (something other than a restart keeps it stale)."""
        held, old = exc.held, self.info[r]
        self._forget_meets(r)  # e.g. a broadcast it did not receive: the next one makes a new group
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
        if not exc.shm:
            self.local.discard(r)

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
               versions: dict[str, int] | None = None) -> Pending:
        """Start a rollout of ``len(games)`` games (the workers hold their own copies) and return at once;
        it samples with the versions of the last :meth:`sync` (or ``versions``)."""
        n, w = len(games), len(self.workers)
        self._sleepers.wake()
        plan = LeaguePlan.of(seat_map, n)  # league games: each worker plays its own copies of the members
        self._finish_loads()
        versions = dict(self.versions if versions is None else versions)
        for r in range(w):  # e.g. a worker restarted since the last sync
            self._load_into(r, versions)
        shares = [list(range(r, n, w)) for r in range(w)]
        calls = [(shares[r], [int(seeds[g]) for g in shares[r]], episode_prefix, group_size, sampling_key, iteration,
                  versions, None if plan is None else ([plan.opponents[g] for g in shares[r]], plan.seats))
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
             group_size: int = 1, sampling_key: int | None = None, iteration: int = 0) -> RolloutResult:
        """A whole rollout on the workers (the signature of :func:`~cogym.runners.rollout.turns.rollout`)."""
        return self.collect(self.submit(games, seat_map, system, seeds, episode_prefix, group_size, sampling_key,
                                        iteration))
