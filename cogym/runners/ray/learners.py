"""Learners in Ray actors (``ray.learners: colocated | separate``): the actor, the driver's handle on
a policy's learner (one actor, or a data-parallel group of ``ray.learner_workers`` actors), and one
batch's updates across learners.

A group of N actors is one ``torch.distributed`` process group (gloo on CPU, NCCL on GPU; rank 0's
node holds the rendezvous). Every rank gets the whole batch and trains on its rows (rows ``rank::N``
of each micro-step, :func:`~cogym.learners.batch.micro_batches`), gradients averaged over the group
by the engine: the update of one process up to float rounding, as with ``cogym train --nproc``.
Every call that may gather (weights at ZeRO-3, checkpoints) goes to all ranks; rank 0 answers."""

from __future__ import annotations

import datetime
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from cogym.core.errors import LearnerDied
from cogym.learners import torch_dist as dist
from cogym.core.processes import free_port
from cogym.learners.engines import ZERO_FILE
from cogym.runners.config.schema import Config
from cogym.agents.backends.broadcast import gpu_id, Groups, Meet, spec
from cogym.runners.ray.pool import adjust_threads, enter, node_ip, ray, say  # ray through pool: if missing, the error names the extra
from cogym.runners.ray.wire import from_wire, nbytes, state_of, to_wire
from cogym.runners.train.build import build_learner
from cogym.runners.train.stages import seed_build

GROUP_TIMEOUT_S = 1800.0  # a collective waits this long for a silent rank (a dead one is noticed by the driver first)


def first_error_first(ray, refs: list, timeout: float | None = None) -> list:
    """The results of ``refs`` in their order, as each is ready; the first that failed raises its error
    at once (``ray.get`` of a list would wait on a rank that waits in a collective for the failed one).
    ``timeout``: GetTimeoutError when they are not all ready by then."""
    index = {ref: k for k, ref in enumerate(refs)}
    out: list = [None] * len(refs)
    pending = list(refs)
    deadline = None if timeout is None else time.monotonic() + timeout
    while pending:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        done, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not done:
            raise ray.exceptions.GetTimeoutError(f"{len(pending)} of {len(refs)} calls not done in {timeout:g} s")
        out[index[done[0]]] = ray.get(done[0])
    return out


class LearnerWorker:
    """A Ray actor (``ray.learners``: colocated or separate): rank ``rank`` of a trained policy's learner
    group of ``world`` actors (one, by default). :meth:`join` starts the group, :meth:`build` the policy
    and its learner. After each update, rank 0 puts the new weights in the object store itself, so they
    go from here to the rollout workers without passing through the driver."""

    def __init__(self, cwd: str, env: dict[str, str], threads: int, rank: int = 0, world: int = 1,
                 pinned: bool = True) -> None:
        enter(cwd, env, threads, pinned)
        self.rank, self.world = rank, world
        self.pid, self.policy, self.learner = None, None, None
        self.groups = Groups()  # weight groups with rollout workers (ray.weight_sync: collective)

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0: its node's address and a free port there, for the group's rendezvous."""
        ip = node_ip()
        return ("127.0.0.1" if ip == "?" else ip), free_port()

    def join(self, addr: str, port: int) -> int:
        """Start this actor's process group with the others of its learner (a collective call: every rank
        at once). Returns the rank."""
        if self.world > 1 and not dist.initialized():
            os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(self.rank), LOCAL_RANK="0",
                              WORLD_SIZE=str(self.world), LOCAL_WORLD_SIZE="1")
            if torch.cuda.is_available():
                torch.cuda.set_device(0)  # Ray shows each actor the GPU it was given as device 0
            torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo", init_method="env://",
                                                 rank=self.rank, world_size=self.world,
                                                 timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
        return dist.rank()

    def build(self, cfg: Config, pid: str, policy_dir: str | None, critic_dir: str | None,
              rendezvous: tuple[str, int] | None = None, stage: int = 0) -> dict:
        """Policy ``pid`` and its learner (from a checkpoint's directories when resuming), after joining
        the group at ``rendezvous`` (rank 0's :meth:`rendezvous`; a collective call: every rank at once);
        :meth:`ping`. ``stage``: the run's stage (its index) the learner trains in: torch's generator is
        seeded as the driver seeds it before it builds that stage's learners."""
        if self.world > 1:
            self.join(*rendezvous)
        self.pid = pid
        seed_build(cfg.run.seed, stage)
        self.policy, self.learner = build_learner(cfg, pid, Path(policy_dir) if policy_dir else None,
                                                  Path(critic_dir) if critic_dir else None)
        return self.ping()

    def ping(self) -> dict:
        return {"pid": os.getpid(), "node": node_ip(), "rank": self.rank, "world": self.world, "gpu": gpu_id(),
                "steps": self.learner.steps if self.learner else 0,
                "engine": self.learner.engine.name if self.learner else None}

    def update(self, turns: list, put: bool = True) -> tuple[dict, int, list]:
        """The learner's step on ``turns``: its metrics, its step count and :meth:`weights` (``put``: else
        ``[None, 0]``, when the weights go to the workers by :meth:`send_weights`)."""
        adjust_threads()
        rec = self.learner.update(turns)
        return rec, self.learner.steps, (self.weights() if put else [None, 0])

    def weight_layout(self) -> list:
        """The weights' :func:`~cogym.agents.backends.broadcast.spec` (every rank gathers at ZeRO-3)."""
        return spec(state_of(self.policy))

    def send_weights(self, meet: Meet) -> int:
        """Broadcast the newest weights to the workers of group ``meet`` (rank 0 sends; at ZeRO-3 every
        rank gathers); the bytes sent."""
        state = state_of(self.policy)
        return self.groups.send(meet, state) if not self.rank else 0

    def weights(self) -> list:
        """``[object ref of the weights (to_wire form), their bytes]`` on rank 0 (a list, so the caller
        gets the ref); ``[None, 0]`` on the others, which take part in gathering ZeRO-3 partitions."""
        state = state_of(self.policy)
        if self.rank:
            return [None, 0]
        return [ray.put(to_wire(state)), nbytes(state)]

    def group_decisions(self, turns: list) -> dict:
        return self.learner.group_decisions(turns)

    def save(self, directory: str) -> None:
        """Rank 0 writes the learner's state to ``directory``; rank r > 0 writes into a scratch directory
        and moves in only what it alone holds (its ZeRO optimizer partition)."""
        if not self.rank:
            self.learner.save(Path(directory))
            return
        scratch = Path(f"{directory}.rank{self.rank}")
        shutil.rmtree(scratch, ignore_errors=True)
        self.learner.save(scratch)
        for part in scratch.rglob(ZERO_FILE.format(rank=self.rank)):
            dest = Path(directory) / part.relative_to(scratch)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, dest)
        shutil.rmtree(scratch)

    def load(self, directory: str) -> int:
        self.learner.load(Path(directory))
        return self.learner.steps


class RemoteLearner:
    """The driver's handle on a policy's learner actors (:class:`LearnerWorker`, rank 0 first), with the
    surface of :class:`~cogym.learners.learner.Learner` the training loop uses (``steps``, ``cfg``,
    ``engine.name``, ``save``, ``load``, ``group_decisions``), and ``start_update``/``finish_update`` in
    place of ``update`` (:class:`RemoteUpdates`), so that several learners update at once. A learner
    actor is not restarted in place (its optimizer state is lost with it): one that dies raises
    :class:`LearnerDied` (at once, also while the others wait for it in a collective), and the run
    resumes from its last checkpoint with new actors."""

    def __init__(self, ray, handles: list, pid: str, cfg, infos: list[dict], bundles: list[int] | None = None) -> None:
        self.ray, self.handles, self.pid, self.cfg, self.infos = ray, list(handles), pid, cfg, infos
        self.info = infos[0]
        # its placement bundles: learners whose bundles overlap update one after another
        self.bundles = tuple(bundles or [0])
        self.steps = int(self.info["steps"])
        self.engine = SimpleNamespace(name=self.info["engine"])
        self._weights: tuple[int, Any, int] | None = None  # (version, object ref, bytes) of the newest weights
        self.put = True  # whether an update puts its weights in the object store (not with collective sync)

    @property
    def handle(self):
        """Rank 0's actor."""
        return self.handles[0]

    def pids(self) -> list[int]:
        return [int(i["pid"]) for i in self.infos]

    def _died(self, what: str, exc: Exception) -> LearnerDied:
        n = len(self.handles)
        who = f"the learner actor of policy {self.pid!r} (pid {self.info.get('pid')})" if n == 1 else \
            f"a learner actor of policy {self.pid!r} (group of {n}, pids {', '.join(map(str, self.pids()))})"
        return LearnerDied(f"{who} died during {what}")

    def _get_all(self, refs: list, what: str) -> list:
        """Every rank's result, in rank order; the first actor death raises :class:`LearnerDied` at once
        (not after the others' collectives time out waiting for it)."""
        try:
            return first_error_first(self.ray, refs)
        except self.ray.exceptions.RayActorError as exc:
            raise self._died(what, exc) from exc

    def _call(self, method: str, what: str, *args, everyone: bool = True) -> Any:
        """Rank 0's answer to ``method(*args)``, called on every rank (``everyone``) or rank 0 alone."""
        handles = self.handles if everyone else self.handles[:1]
        return self._get_all([getattr(h, method).remote(*args) for h in handles], what)[0]

    def start_update(self, turns: list) -> list:
        turns = list(turns)
        return [h.update.remote(turns, self.put) for h in self.handles]

    def finish_update(self, refs: list) -> dict[str, float]:
        rec, self.steps, (wref, size) = self._get_all(refs, f"update {self.steps + 1}")[0]
        self._weights = (self.steps, wref, size) if wref is not None else None
        return rec

    def layout(self) -> list:
        return self._call("weight_layout", "a weight layout")

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's address and a free port there, where a weight group it sends to meets."""
        return self._get_all([self.handle.rendezvous.remote()], "a weight group's start")[0]

    def start_send(self, meet: Meet) -> list:
        """Start broadcasting the newest weights to the group ``meet`` (:meth:`finish_send` waits)."""
        return [h.send_weights.remote(meet) for h in self.handles]

    def finish_send(self, refs: list) -> int:
        """The bytes the broadcast :meth:`start_send` started sent, once it is done."""
        return self._get_all(refs, "a weight broadcast")[0]

    def weights(self) -> tuple[Any, int]:
        """The object ref and bytes of the weights of version ``steps``."""
        if self._weights is None or self._weights[0] != self.steps:
            wref, size = self._call("weights", "a weight fetch")
            self._weights = (self.steps, wref, size)
        return self._weights[1], self._weights[2]

    def refresh(self, backend) -> None:
        """Load the newest weights into ``backend`` (the driver's copy of the policy) unless it holds them."""
        if backend.version != self.steps:
            ref, _ = self.weights()
            backend.load_weights(from_wire(self.ray.get(ref)), self.steps)

    def group_decisions(self, turns: list) -> dict:
        return self._call("group_decisions", "dynamic sampling", list(turns), everyone=False)

    def save(self, directory: Path) -> None:  # a path the actors' nodes see: one machine, or a shared file system
        self._call("save", "a checkpoint", str(directory))

    def load(self, directory: Path) -> None:
        self.steps = self._call("load", "a resume", str(directory))


class LearnerActors:
    """The learner actors of a rollout pool (``ray.learners``: colocated or separate): each trained policy's
    ``ray.learner_workers`` actors, started while the rollout workers start (:meth:`start`), then waited
    for as :class:`RemoteLearner` handles (:meth:`ready`), killed by :meth:`close`."""

    def __init__(self, cfg: Config, trained: list[str], fresh: frozenset = frozenset(), stage: int = 0) -> None:
        self.ray, self.cfg, self.trained = None, cfg, trained
        self.fresh = fresh  # learners a stage starts anew: the checkpoint's policy, not its critic
        self.stage = stage  # the stage's index (the seed of the actors' builds)
        self.handles: dict[str, list] = {}  # policy -> its actors in rank order
        self.builds: list = []  # every actor's build call (its answer: the actor's ping)
        self.t0 = 0.0

    def start(self, ray, options: list[dict], args: tuple, ckpt: Path | None) -> None:
        """Start the actors on ``ray`` (``options[k]``: actor k's Ray options, policies in order, ``ray.learner_workers``
        each; ``args``: :class:`LearnerWorker`'s cwd, env, threads and pinned), joining their groups and
        building their learners (from checkpoint ``ckpt`` when resuming)."""
        self.ray, cfg, n = ray, self.cfg, self.cfg.ray.learner_workers
        self.t0 = time.perf_counter()
        actor = ray.remote(LearnerWorker)
        self.handles = {pid: [actor.options(max_restarts=0, **options[i * n + r]).remote(*args[:3], r, n, *args[3:])
                              for r in range(n)] for i, pid in enumerate(self.trained)}
        meet = dict.fromkeys(self.trained)
        if n > 1:  # every group's rank 0 is up (all start at once) and names its rendezvous
            meet = dict(zip(self.trained, ray.get([hs[0].rendezvous.remote() for hs in self.handles.values()],
                                                  timeout=cfg.ray.start_timeout_s)))
        for pid, hs in self.handles.items():
            pdir = str(ckpt / "policies" / pid) if ckpt else None
            cdir = str(ckpt / "learners" / pid / "critic") if ckpt else None
            if cdir and (pid in self.fresh or not os.path.isdir(cdir)):
                cdir = None
            self.builds += [h.build.remote(cfg, pid, pdir, cdir, meet[pid], self.stage) for h in hs]  # all at once: they join

    def ready(self, bundles: list[int]) -> dict[str, "RemoteLearner"]:
        """Each trained policy's :class:`RemoteLearner` once its actors are built (``bundles``: each actor's
        placement bundle); GetTimeoutError past ``ray.start_timeout_s``."""
        n = self.cfg.ray.learner_workers
        infos = first_error_first(self.ray, self.builds, timeout=self.cfg.ray.start_timeout_s)
        learners = {pid: RemoteLearner(self.ray, hs, pid, self.cfg.learners[pid], infos[k * n:(k + 1) * n],
                                       bundles=bundles[k * n:(k + 1) * n])
                    for k, (pid, hs) in enumerate(self.handles.items())}
        groups = f" (groups of {n})" if n > 1 else ""
        say(f"{len(infos)} learner actors ({self.cfg.ray.learners}){groups} ready in "
            f"{time.perf_counter() - self.t0:.1f} s: "
            + ", ".join(f"{pid} (pid{'s' if n > 1 else ''} {', '.join(map(str, lr.pids()))})"
                        for pid, lr in learners.items()))
        return learners

    def close(self) -> None:
        for h in (h for hs in self.handles.values() for h in hs):
            try:
                self.ray.kill(h)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.handles, self.builds = {}, []


class RemoteUpdates:
    """One batch's updates on learner actors: every learner starts at once, except learners whose
    placement bundles overlap (``colocated``: a worker's CPUs or GPU), which take turns, since two
    updates at once on the same cores or GPU only slow each other down. :meth:`finish` must be called
    in the learners' order."""

    def __init__(self, learners: dict, batches: dict[str, list]) -> None:
        self.remote = {pid: lr for pid, lr in learners.items() if isinstance(lr, RemoteLearner)}
        self.batches, self.refs = batches, {}
        order = list(self.remote)
        queues: list[tuple[set, list[str]]] = []  # (bundles, learners in order): overlapping bundle sets merged
        for pid, lr in self.remote.items():
            mine = set(lr.bundles)
            joined = [q for q in queues if q[0] & mine]
            queues = [q for q in queues if not q[0] & mine]
            queues.append((mine.union(*(q[0] for q in joined)),
                           sorted([p for q in joined for p in q[1]] + [pid], key=order.index)))
        self.queue_of = {pid: q[1] for q in queues for pid in q[1]}
        for _, pids in queues:
            self.refs[pids[0]] = self.remote[pids[0]].start_update(batches[pids[0]])

    def __contains__(self, pid: str) -> bool:
        return pid in self.remote

    def finish(self, pid: str) -> dict[str, float]:
        """``pid``'s update metrics (waiting for it); starts the next update in its queue."""
        rec = self.remote[pid].finish_update(self.refs.pop(pid))
        queue = self.queue_of[pid]
        nxt = queue.index(pid) + 1
        if nxt < len(queue):
            self.refs[queue[nxt]] = self.remote[queue[nxt]].start_update(self.batches[queue[nxt]])
        return rec
