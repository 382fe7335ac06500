"""Ray itself: connecting to (or starting) a cluster, planning workers and placement, the actor
pool every Ray path uses, and the settings every actor starts with.

Importing this module imports ray; without it installed, the error names the extra."""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers.utils import logging as hf_logging

from cogym.core.errors import CogymError
from cogym.core.threads import ThreadPolicy

log = logging.getLogger("cogym.ray")
RAY_EXTRA = "pip install 'cogym[ray]'"


class RayError(CogymError, RuntimeError):
    """Ray cannot be used: it is not installed, or the cluster at ``ray.address`` cannot be reached."""


try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError:
    raise RayError(f"Ray is not installed: {RAY_EXTRA}") from None
# Passed to every worker: the driver's tokenizer and offline settings. Not CUDA_VISIBLE_DEVICES: Ray sets
# it per actor to the GPUs it was given (ray.num_gpus), and a worker's policies take the GPU it sees.
ENV_KEYS = ("DS_ACCELERATOR", "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME",
             "HF_HUB_CACHE")
ENV_PREFIXES = ("VLLM_",)  # vLLM's settings (logging, CPU KV cache, thread binding, ...)


def driver_env() -> dict[str, str]:
    """The driver's environment variables an actor takes (:data:`ENV_KEYS`, every ``VLLM_*``)."""
    return {k: v for k, v in os.environ.items() if k in ENV_KEYS or k.startswith(ENV_PREFIXES)}


def import_ray():
    """The ``ray`` module (kept for callers that take it from here)."""
    return ray


def actor_threads(cpus: float) -> int:
    """The torch threads of a Ray actor given ``cpus`` CPUs (unless ``run.threads`` says otherwise)."""
    return max(1, int(cpus))


def say(text: str) -> None:
    """A line on stderr (above a progress bar) and in the log."""
    log.info(text)
    tqdm.write(f"[ray] {text}", file=sys.stderr)


_THREADS: list[ThreadPolicy] = []  # the actor's thread policy (one actor a process)


def enter(cwd: str, env: dict[str, str], threads: int, pinned: bool = True) -> None:
    """An actor's start: the driver's environment keys and working directory (relative paths in the
    config, game.modules and models, mean the driver's), its torch threads, no loading bars. ``threads``
    are kept when ``pinned`` (``run.threads``); else they are a ceiling, capped by the machine's cores,
    under which :func:`adjust_threads` follows the load (core/threads.py)."""
    os.environ.update(env)
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    _THREADS[:] = [ThreadPolicy(pinned=threads) if pinned else ThreadPolicy(ceiling=threads)]
    _THREADS[0].apply()

    hf_logging.disable_progress_bar()  # no per-actor weight-loading bars in the driver's output


def adjust_threads() -> int:
    """The actor's torch threads for the work it starts now (fewer while other processes load its cores)."""
    return _THREADS[0].adjust() if _THREADS else torch.get_num_threads()


def node_ip() -> str:
    try:
        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def _no_cluster(address: str, exc: Exception) -> str:
    """The one line for a cluster address that took no connection, with the usual cause: Ray's token
    authentication, which `ray start` turns on by itself where a token exists (``~/.ray/auth_token``, which
    any local run writes), while a connection by address uses a token only when RAY_AUTH_MODE says so."""
    text = f"ray.address {address}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
    if os.environ.get("RAY_AUTH_MODE") is None:
        text += (" (is `ray start --head` running there? If it said 'Token authentication is enabled', set "
                 "RAY_AUTH_MODE=token here, with the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN; docs/ray.md)")
    return text


def connect(rc, n_learners: int = 0) -> tuple[Any, bool]:
    """The ray module, connected to ``rc.address`` or to a local cluster it starts (with CPUs for every
    worker and ``n_learners`` learner actors, at least this machine's cores), and whether this call
    connected (False when the process was connected already: then the caller's connection)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    if rc.address:
        try:
            ray.init(address=rc.address, **kwargs)
        except ConnectionError as exc:
            raise RayError(_no_cluster(rc.address, exc)) from exc
    else:
        cpus = rc.num_rollout_workers * rc.num_cpus
        if n_learners and rc.learners == "separate":
            cpus += n_learners * rc.learner_num_cpus
        # "local": a private cluster even where `ray start` runs one or RAY_ADDRESS names one (a bare
        # ray.init() would join those, and then refuse num_cpus)
        ray.init(address="local", num_cpus=max(math.ceil(cpus), os.cpu_count() or 1), **kwargs)
    return ray, True


class StaleWorker(RuntimeError):
    """A rollout worker was asked to play or load with state it does not hold: weight versions other
    than the call's, league members it lacks, or a shared-memory segment it cannot open. Its cause is
    usually a restart the driver did not see (Ray restarts a killed actor on its own, between two calls),
    so the driver repairs it (``RayRollout._repair``: the weights and members sent again, the
    call made again) rather than stop the run. ``held``: what the worker holds
    (:meth:`~cogym.runners.ray.worker.RolloutWorker.ping`'s answer)."""

    def __init__(self, message: str, held: dict, shm: bool = True) -> None:
        super().__init__(message)
        self.held, self.shm = held, shm  # shm False: the worker cannot read the driver's shared memory

    def __reduce__(self):  # through Ray's pickling with its fields
        return (type(self), (str(self), self.held, self.shm))


@dataclass
class Plan:
    """Where a pool's actors go: the placement group (or None) and each actor's Ray options."""

    pg: Any
    workers: list[dict]
    learners: list[dict]
    learner_bundles: list[int] = field(default_factory=list)  # each learner actor's bundle index


def plan(rc, n_learners: int = 0) -> Plan:
    """The placement of ``rc.num_rollout_workers`` workers and ``n_learners`` learner actors
    (``rc.learners``): without learner actors, a placement group only when ``rc.placement`` asks for
    one; with them, always one (strategy ``rc.placement``, else PACK). ``colocated``: learner k
    shares worker k mod W's bundle, each actor of a bundle asking for an equal part of it (one GPU
    split this way is the same GPU for all of them); ``separate``: a bundle of
    ``learner_num_cpus``/``learner_num_gpus`` each after the workers' bundles."""
    w = rc.num_rollout_workers
    worker = {"CPU": rc.num_cpus, **({"GPU": rc.num_gpus} if rc.num_gpus else {})}
    learner = {"CPU": rc.learner_num_cpus, **({"GPU": rc.learner_num_gpus} if rc.learner_num_gpus else {})}
    colocated = n_learners and rc.learners == "colocated"
    if not rc.placement and not n_learners:
        return Plan(None, [dict(num_cpus=rc.num_cpus, num_gpus=rc.num_gpus)] * w, [])
    bundles = [dict(worker) for _ in range(w)] + ([] if colocated else [dict(learner) for _ in range(n_learners)])
    pg = placement_group(bundles, strategy=rc.placement or "PACK")

    def at(b: int, part: float = 1.0) -> dict:
        return dict(num_cpus=bundles[b]["CPU"] * part, num_gpus=bundles[b].get("GPU", 0) * part,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=b))

    if colocated:
        sharing = [1 + sum(1 for k in range(n_learners) if k % w == b) for b in range(w)]
        where = [k % w for k in range(n_learners)]
        return Plan(pg, [at(b, 1 / sharing[b]) for b in range(w)], [at(b, 1 / sharing[b]) for b in where], where)
    where = [w + k for k in range(n_learners)]
    return Plan(pg, [at(b) for b in range(w)], [at(b) for b in where], where)


def _cluster_says(ray, what: str, rc) -> str:
    have = ray.cluster_resources()
    return (f"{what} could not start within ray.start_timeout_s = {rc.start_timeout_s:g} s; the cluster has "
            f"{have.get('CPU', 0):g} CPUs and {have.get('GPU', 0):g} GPUs in all")


class ActorPool:
    """Ray actors of one class, each started with ``args_of(index)``, that play shares of work; one that
    dies is restarted by Ray (at most ``rc.max_restarts`` times) and its share played again.
    ``n_learners``: places for that many learner actors are planned with the workers (``self.plan``)."""

    def __init__(self, rc, actor_cls: type, args_of, kind: str = "rollout worker", n_learners: int = 0) -> None:
        self.ray, self.connected = connect(rc, n_learners)
        self.rc, self.kind, self.pg, self.workers = rc, kind, None, []
        w = rc.num_rollout_workers
        actor = self.ray.remote(actor_cls)
        base = dict(max_restarts=rc.max_restarts, max_task_retries=0)
        t0 = time.perf_counter()
        try:
            self.plan = plan(rc, n_learners)
            self.pg = self.plan.pg
            if self.pg is not None:  # a restarted worker keeps its bundle
                self.ray.get(self.pg.ready(), timeout=rc.start_timeout_s)
            self.workers = [actor.options(**base, **self.plan.workers[i]).remote(*args_of(i)) for i in range(w)]
            self._placed()
            self.restarts = [0] * len(self.workers)
            self.info = self._first_pings(t0)
            where = f"cluster at {rc.address}" if rc.address else "local cluster"
            say(f"{len(self.workers)} {kind}s ready in {time.perf_counter() - t0:.1f} s ({where}; "
                 f"{rc.num_cpus:g} CPU{'s' if rc.num_cpus != 1 else ''}"
                 + (f", {rc.num_gpus:g} GPU" if rc.num_gpus else "") + " each"
                 + (f", placement {rc.placement or 'PACK'}" if self.pg is not None else "") + "; pids "
                 + ", ".join(str(i["pid"]) for i in self.info) + ")")
            self._started()
        except self.ray.exceptions.GetTimeoutError:
            said = _cluster_says(self.ray, f"{w} {kind}s of {rc.num_cpus:g} CPU and {rc.num_gpus:g} GPU each"
                                 + (f" and {n_learners} learner actors ({rc.learners})" if n_learners else "")
                                 + (f" (placement {rc.placement})" if rc.placement else ""), rc)
            self.close()
            raise RuntimeError(f"{said}: lower ray.num_rollout_workers, ray.num_cpus or ray.num_gpus"
                               + (", ray.learner_num_cpus or ray.learner_num_gpus" if n_learners else "")
                               + ", or add nodes") from None
        except BaseException:  # a constructor that raised, an interrupt: leave no actor or group behind
            self.close()
            raise

    def _first_pings(self, t0: float) -> list[dict]:
        """Every worker's first answer; one that died while it started (Ray restarts it) counts a restart."""
        refs = [x.ping.remote() for x in self.workers]
        info: list[dict] = []
        for r, ref in enumerate(refs):
            left = max(self.rc.start_timeout_s - (time.perf_counter() - t0), 1.0)
            try:
                info.append(self.ray.get(ref, timeout=left))
            except self.ray.exceptions.RayActorError as exc:
                if getattr(exc, "actor_init_failed", False):  # its constructor raised: a restart would too
                    raise
                self._count_restart(r, exc, "died while starting")
                say(f"{self.kind} {r} died while starting; restarting it (restart {self.restarts[r]} of at most "
                     f"{self.rc.max_restarts})")
                info.append(self._wait_alive(r))
        return info

    def _placed(self) -> None:
        """The workers are starting (their constructors run): start other actors of ``self.plan`` here."""

    def _started(self) -> None:
        """The workers are up: wait for the actors :meth:`_placed` started (GetTimeoutError past the timeout)."""

    def _count_restart(self, r: int, exc: Exception, how: str) -> None:
        """One more restart of worker ``r`` (``how``: what happened to it); past ``ray.max_restarts``, the run stops."""
        self.restarts[r] += 1
        if self.restarts[r] > self.rc.max_restarts:
            raise RuntimeError(f"{self.kind} {r} {how} and has no restarts left "
                               f"(ray.max_restarts = {self.rc.max_restarts}): {type(exc).__name__}") from exc

    def _recover(self, r: int, exc: Exception, what: str) -> None:
        """Worker ``r`` died: wait for Ray to restart it, or fail when it has used its restarts."""
        pid = self.info[r].get("pid")
        self._count_restart(r, exc, f"(pid {pid}) died during {what}")
        say(f"{self.kind} {r} (pid {pid}) died during {what}; restarting it "
             f"(restart {self.restarts[r]} of at most {self.rc.max_restarts})")
        t0 = time.perf_counter()
        self.info[r] = self._wait_alive(r)
        self._restarted(r)
        say(f"{self.kind} {r} restarted in {time.perf_counter() - t0:.1f} s (pid {self.info[r]['pid']})")

    def _restarted(self, r: int) -> None:
        """Worker ``r`` is a fresh process (its state is what its constructor made)."""

    def _repair(self, r: int, exc: StaleWorker, what: str) -> None:
        """Worker ``r`` answered ``what`` with :class:`StaleWorker`: make it hold what the call needs (a pool
        whose workers keep no state between calls has nothing to repair: the error stands)."""
        raise exc

    def _wait_alive(self, r: int) -> dict:
        deadline = time.monotonic() + self.rc.start_timeout_s
        while True:
            try:
                return self.ray.get(self.workers[r].ping.remote(), timeout=max(deadline - time.monotonic(), 1.0))
            except self.ray.exceptions.RayActorError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def gather(self, refs: dict, replay, what: str) -> dict[int, Any]:
        """Each worker's result of ``refs`` (object ref -> worker); a worker that died is restarted and
        ``replay(r)`` (a new ref for its share) is waited for instead."""
        results: dict[int, Any] = {}
        refs = dict(refs)
        while refs:
            done, _ = self.ray.wait(list(refs), num_returns=1)
            r = refs.pop(done[0])
            try:
                results[r] = self.ray.get(done[0])
            except self.ray.exceptions.RayActorError as exc:
                self._recover(r, exc, what)
                refs[replay(r)] = r
            except StaleWorker as exc:  # Ray raises the worker's exception as an instance of its class
                self._repair(r, exc, what)
                refs[replay(r)] = r
        return results

    def pids(self) -> list[int]:
        """The process id of every worker (as of its last start)."""
        return [int(i["pid"]) for i in self.info]

    def summary(self) -> dict:
        return {"ray_workers": len(self.workers), "ray_worker_restarts": sum(self.restarts)}

    def close(self) -> None:
        """Stop the workers and their placement group; disconnect if this pool connected."""
        for w in self.workers:
            try:
                self.ray.kill(w)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.workers = []
        if self.pg is not None:
            remove_placement_group(self.pg)
            self.pg = None
        if self.connected:  # a local cluster this pool started stops; a joined one only loses the driver
            self.ray.shutdown()
