"""How new weights reach the rollout workers: one of two paths, chosen once per pool by ``ray.weight_sync``.

- :class:`StoreSync` (``auto``, ``object_store``): each version of a policy's weights is written once,
  into shared memory for the workers on the driver's machine (:mod:`cogym.runners.ray.weights`) and
  into the object store for the others (a learner actor puts its own), and each worker loads what it
  lacks with one call;
- :class:`CollectiveSync` (``collective``): one broadcast per policy from the driver or the policy's
  learner actor to the workers that lack it (or their vLLM engines), in weight groups
  (:mod:`cogym.agents.backends.broadcast`).

Both answer the pool (:class:`~cogym.runners.ray.rollout.RayRollout`) the same questions:
:meth:`~WeightSync.publish` a sync's new versions, :meth:`~WeightSync.load` the versions one worker
lacks, :meth:`~WeightSync.finish_sends` wait for the senders, and forget what a restarted or stale
worker held. The pool keeps the record of what each worker holds (``pool.held``)."""

from __future__ import annotations

from typing import Any

import torch

from cogym.agents.backends.broadcast import COLLECTIVE_TIMEOUT_S, Groups, Meet, Sending, spec
from cogym.core.errors import LearnerDied
from cogym.core.processes import free_port
from cogym.runners.ray.pool import log, node_ip, say, StaleWorker
from cogym.runners.ray.weights import sees_shm, WeightSlots
from cogym.runners.ray.wire import nbytes, Sent, state_of, to_wire


class WeightSync:
    """A pool's weight path. ``pool``: its ``workers``, ``info``, ``held``, ``learners``, ``ray``, ``rc``."""

    def __init__(self, pool) -> None:
        self.pool = pool

    def publish(self, policies: dict, versions: dict[str, int]) -> tuple[int, dict[int, Any]]:
        """A sync's first step: ``versions`` (policy -> version) are the newest; ``policies``: the driver's.
        Returns the bytes written and the load calls started ({worker: its last call})."""
        raise NotImplementedError

    def load(self, r: int, need: list[str], versions: dict[str, int]) -> Any:
        """Worker ``r``'s call that loads policies ``need`` at ``versions``; it answers the versions it holds."""
        raise NotImplementedError

    def finish_sends(self) -> int:
        """Wait for the sends under way (the workers' calls are waited for by the pool); the bytes sent."""
        return 0

    def restarted(self, r: int) -> None:
        """Worker ``r`` is a new process."""

    def stale(self, r: int, exc: StaleWorker) -> None:
        """Worker ``r`` held other state than the pool's record (:class:`StaleWorker`)."""

    def close(self) -> None:
        """Free what the path holds (shared memory, weight groups)."""


def weight_sync(pool) -> WeightSync:
    """The path ``ray.weight_sync`` names."""
    return CollectiveSync(pool) if pool.rc.weight_sync == "collective" else StoreSync(pool)


class StoreSync(WeightSync):
    """Weights written once per version: shared memory for the workers on this machine (:attr:`local`;
    ``ray.weight_sync: auto``), the object store for the others."""

    def __init__(self, pool) -> None:
        super().__init__(pool)
        # policy -> version -> Sent (the newest max_staleness + 1): an object ref and/or shared memory
        self.kept: dict[str, dict[int, Sent]] = {}
        self.slots: dict[str, WeightSlots] = {}  # policy -> its shared-memory slots (workers here read them)
        self.local: set[int] = set()  # the workers that load the driver's weights from shared memory
        self.shm_ok = pool.rc.weight_sync == "auto"  # False also once shared memory had no room
        if self.shm_ok:
            self.local = {r for r in range(len(pool.workers)) if sees_shm(pool.ray, pool.workers[r])}
        if self.local:
            n, w = len(self.local), len(pool.workers)
            say("weights reach " + (f"the {w} rollout workers" if n == w else f"{n} of {w} rollout workers")
                + " through shared memory (on this machine)"
                + ("" if n == w else f", the other {w - n} through the object store"))

    def publish(self, policies: dict, versions: dict[str, int]) -> tuple[int, dict[int, Any]]:
        """Each new version a worker lacks, written once: a learner actor's is in the object store already
        (put by the actor), the driver's goes to shared memory and/or the object store (:meth:`_send`)."""
        pool, sent = self.pool, 0
        for pid, version in versions.items():
            kept = self.kept.setdefault(pid, {})
            lacking = [r for r, h in enumerate(pool.held) if h.get(pid) != version]
            if version not in kept and lacking:
                if pid in pool.learners:
                    ref, size = pool.learners[pid].weights()
                    kept[version] = Sent(ref=ref)
                    sent += size
                else:
                    state = state_of(policies[pid])
                    sent += nbytes(state)
                    kept[version] = self._send(pid, version, state, lacking)
                for old in sorted(kept)[:-(pool.rc.max_staleness + 1)]:
                    del kept[old]  # a rollout needs at most max_staleness versions back
        return sent, {}

    def _send(self, pid: str, version: int, state: dict[str, torch.Tensor], lacking: list[int]) -> Sent:
        """The driver's weights of ``pid`` at ``version``: written to its shared-memory slots when a worker
        on this machine lacks them, put in the object store when another worker does."""
        sent = Sent()
        if any(r in self.local for r in lacking):
            slots = self.slots.get(pid)
            if slots is None or not slots.fits(state):
                if slots is not None:
                    slots.close()
                try:
                    slots = self.slots[pid] = WeightSlots(state, self.pool.rc.max_staleness + 1)
                except OSError as exc:  # e.g. a container's small /dev/shm: the object store for everyone
                    say(f"weights of {pid!r} go through the object store, not shared memory: {exc}")
                    self.slots.pop(pid, None)
                    self.local, self.shm_ok = set(), False
                    slots = None
            if slots is not None:
                self.pool.finish_loads()  # no load may still read the slot this write replaces
                sent.shm = slots.write(version, state)
        if any(r not in self.local for r in lacking):
            sent.ref = self.pool.ray.put(to_wire(state))
        return sent

    def _weights_for(self, r: int, pid: str, version: int):
        """What worker ``r`` loads ``pid``'s ``version`` from: shared memory on this machine, else an
        object ref (put now from shared memory if no worker needed one before, e.g. a worker restarted
        on another machine)."""
        sent = self.kept.get(pid, {}).get(version)
        slots = self.slots.get(pid)
        in_shm = sent is not None and sent.shm is not None and slots is not None and slots.has(version)
        if sent is None or (not in_shm and sent.ref is None):
            raise RuntimeError(f"weights of {pid!r} version {version} are no longer kept for a worker "
                               f"that lacks them (ray.max_staleness = {self.pool.rc.max_staleness})")
        if r in self.local and in_shm:
            return sent.shm
        if sent.ref is None:
            sent.ref = self.pool.ray.put(to_wire(slots.read_back(version)))
        return sent.ref

    def load(self, r: int, need: list[str], versions: dict[str, int]) -> Any:
        pool = self.pool
        weights = [self._weights_for(r, pid, versions[pid]) for pid in need]
        pool.held[r] = {**pool.held[r], **{pid: None for pid in need}}  # unknown until the call returns
        return pool.workers[r].load_weights.remote(need, dict(versions), *weights)

    def restarted(self, r: int) -> None:
        if self.shm_ok:  # the new process may be on another machine
            self.local.discard(r)
            if sees_shm(self.pool.ray, self.pool.workers[r]):
                self.local.add(r)

    def stale(self, r: int, exc: StaleWorker) -> None:
        if not exc.shm:
            self.local.discard(r)

    def close(self) -> None:
        for slots in self.slots.values():
            slots.close()
        self.slots = {}


class CollectiveSync(WeightSync):
    """Weights broadcast in weight groups: per policy, the sender (the driver, from a thread, or the
    policy's learner actor, which then puts nothing in the object store) and the workers that lack it.
    A group is kept by (policy, its receivers and their starts) and used again by the next sync."""

    def __init__(self, pool) -> None:
        super().__init__(pool)
        self.groups = Groups()  # the driver's ends of its weight groups
        self.meets: dict[tuple, Meet] = {}  # each group's Meet by (policy, its receivers and their starts)
        self.layouts: dict[str, list] = {}  # each policy's weight layout
        self.policies: dict = {}  # the driver's policies (of the last publish)
        self.sending: list[tuple] = []  # broadcasts under way: (group key, learner or None, its call)
        self.count = 0  # groups made: each gets a new name
        for lr in pool.learners.values():
            lr.put = False

    def publish(self, policies: dict, versions: dict[str, int]) -> tuple[int, dict[int, Any]]:
        """Per policy, one broadcast to every worker that lacks it."""
        self.policies = policies
        calls: dict[int, Any] = {}
        for pid, version in versions.items():
            lacking = [r for r, h in enumerate(self.pool.held) if h.get(pid) != version]
            if lacking:
                calls.update(self.broadcast(pid, version, lacking))  # a worker's calls run in order: its last one
        return 0, calls

    def load(self, r: int, need: list[str], versions: dict[str, int]) -> Any:
        """A broadcast to this worker alone, per policy; the last call returns its versions."""
        return [self.broadcast(pid, versions[pid], [r])[r] for pid in need][-1]

    def broadcast(self, pid: str, version: int, receivers: list[int]) -> dict[int, Any]:
        """Start sending ``pid``'s newest weights (``version``) to workers ``receivers`` in one broadcast
        from the driver (in a thread) or the policy's learner actor; returns each worker's receive call.
        :meth:`finish_sends` waits for the sender."""
        pool = self.pool
        learner = pool.learners.get(pid)
        have = learner.steps if learner is not None else self.policies[pid].backend.version
        if have != version:
            raise RuntimeError(f"collective weight sync: {pid!r} version {version} is asked for, the sender holds "
                               f"{have} (it keeps only its newest weights)")
        if pid not in self.layouts:
            self.layouts[pid] = learner.layout() if learner is not None else spec(state_of(self.policies[pid]))
        for r in receivers:
            pool.held[r] = {**pool.held[r], pid: None}  # unknown until its call returns
        key = (pid, tuple((r, pool.info[r].get("boot")) for r in receivers))
        meet = self.meets.get(key)
        if meet is None:
            if learner is not None:
                addr, port = learner.rendezvous()
            else:
                addr, port = node_ip(), free_port()
                addr = "127.0.0.1" if addr == "?" else addr
            self.count += 1  # a new name: a member never takes a group it left for this one
            meet = self.meets[key] = Meet(f"{pid}/{self.count}", addr, port, len(receivers) + 1,
                                          self._backend(pid, receivers), COLLECTIVE_TIMEOUT_S)
        refs = {r: pool.workers[r].receive_weights.remote(pid, version, meet, k + 1, self.layouts[pid])
                for k, r in enumerate(receivers)}
        if learner is not None:
            self.sending.append((key, learner, learner.start_send(meet)))
        else:
            self.sending.append((key, None, Sending(self.groups, meet, state_of(self.policies[pid]))))
        return refs

    def finish_sends(self) -> int:
        """Wait for the broadcasts under way; the bytes they sent. One that failed (a receiver died: its
        receive call says so) is forgotten; a learner actor that died raises :class:`LearnerDied`."""
        sent, sending, self.sending = 0, self.sending, []
        for key, learner, call in sending:
            try:
                sent += learner.finish_send(call) if learner is not None else call.result()
            except LearnerDied:
                raise
            except RuntimeError as exc:
                log.warning("weight broadcast %s failed: %s", self.meets.get(key, key), str(exc).splitlines()[0])
                self.meets.pop(key, None)
        return sent

    def _forget(self, r: int) -> None:
        for key in [k for k in self.meets if any(w == r for w, _ in k[1])]:
            del self.meets[key]

    def restarted(self, r: int) -> None:
        self._forget(r)

    def stale(self, r: int, exc: StaleWorker) -> None:
        self._forget(r)  # e.g. a broadcast it did not receive: the next one makes a new group

    def _backend(self, pid: str, receivers: list[int]) -> str:
        """``nccl`` where the sender and the receivers each have a GPU of their own, else ``gloo`` (which
        also serves processes that share one GPU: NCCL refuses two members on one device)."""
        learner = self.pool.learners.get(pid)
        gpus = [learner.info.get("gpu") if learner is not None else None] + [self.pool.info[r].get("gpu")
                                                                               for r in receivers]
        return "nccl" if None not in gpus and len(set(gpus)) == len(gpus) else "gloo"

    def close(self) -> None:
        self.groups, self.meets = Groups(), {}
