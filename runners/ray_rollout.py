"""Rollouts on Ray: the driver keeps the loop and the learners, rollout workers play the games.

``run.backend: ray`` (or ``cogym train --ray [ADDRESS]``) connects to a Ray cluster (``ray.address``:
``auto`` for the one ``ray start`` runs on this machine, ``host:port`` for another) or starts a local
one, and creates ``ray.num_rollout_workers`` actors (:class:`RolloutWorker`, ``ray.num_cpus`` and
``ray.num_gpus`` each). Every worker builds the config's games and policies (no learners) and plays
a share of each rollout: worker r plays games r, r + W, r + 2W, ... with the rollout of a one-process
run (:func:`~cogym.runners.rollout.rollout`), the games' own seeds and the rollout's sampling key, so
the gathered result is the one-process result (:mod:`cogym.agents.sampling`). With ``ray.placement``
the workers form one placement group (a bundle each) with that strategy; workers that cannot start
within ``ray.start_timeout_s`` stop the run with one line naming the cluster's resources.

Weights: after every update the driver puts each trained policy's weights in the object store once
(``ray.put``) and every worker loads them with their version before its next rollout
(``ray/sync_s``, ``ray/sync_bytes`` per iteration); every Turn records the version it was sampled
with, and a worker refuses a rollout whose versions it does not hold.

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

import logging
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from cogym.core.errors import ConfigError

from .config import Config
from .rollout import RolloutResult
from .sampling import gather_rollouts, sampling_seed

log = logging.getLogger("cogym.ray")
RAY_EXTRA = "pip install 'cogym[ray]'"
# Passed to every worker: the driver's tokenizer and offline settings. Not CUDA_VISIBLE_DEVICES: Ray sets
# it per actor to the GPUs it was given (ray.num_gpus), and a worker's policies take the GPU it sees.
_ENV_KEYS = ("DS_ACCELERATOR", "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME",
             "HF_HUB_CACHE")


def import_ray():
    """The ``ray`` module, or a one-line ConfigError that names the extra."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"run.backend: ray needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


def _say(text: str) -> None:
    """A line on stderr (above a progress bar) and in the log."""
    log.info(text)
    try:
        from tqdm.auto import tqdm

        tqdm.write(f"[ray] {text}", file=sys.stderr)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        print(f"[ray] {text}", file=sys.stderr)


class RolloutWorker:
    """A Ray actor: the config's games and generation backends (no learners), playing shares of rollouts."""

    def __init__(self, cfg: Config, index: int, cwd: str, env: dict[str, str], threads: int) -> None:
        os.environ.update(env)
        if cwd and os.path.isdir(cwd):  # relative paths in the config (game.modules, models) mean the driver's
            os.chdir(cwd)
        torch.set_num_threads(threads)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # no per-worker weight-loading bars in the driver's output
        from .build import build
        from .rollout import rollout
        from .token_rollout import token_rollout

        self.cfg, self.index = cfg, index
        self.run = build(cfg, rollout_only=True)
        self.play = token_rollout if cfg.game.granularity == "token" else rollout
        self.system = {role: p.system for role, p in cfg.prompts.items()}

    def ping(self) -> dict:
        """Alive: the process id and the weight version of every policy."""
        return {"pid": os.getpid(), "versions": self.versions(), "node": _node_ip()}

    def versions(self) -> dict[str, int]:
        return {pid: p.backend.version for pid, p in self.run.policies.items()}

    def load_weights(self, pids: list[str], versions: dict[str, int], *weights) -> dict[str, int]:
        """Load ``weights[i]`` (:func:`to_wire` form, from the object store) into policy ``pids[i]``."""
        for pid, wire in zip(pids, weights):
            self.run.policies[pid].backend.load_weights(from_wire(wire), versions[pid])
        return self.versions()

    def rollout(self, indices: list[int], seeds: list[int], episode_prefix: str, group_size: int,
                sampling_key: int | None, iteration: int, versions: dict[str, int]) -> RolloutResult:
        """Play games ``indices`` of the rollout (their places in its game list) with ``seeds``."""
        mine = self.versions()
        wrong = {pid: (mine.get(pid), v) for pid, v in versions.items() if mine.get(pid) != v}
        if wrong:
            raise RuntimeError(f"rollout worker {self.index} holds weight versions {mine}, the rollout needs {versions}")
        torch.manual_seed(sampling_seed(self.cfg.run.seed, iteration))
        self.run.reseed_scripted(iteration, self.index)
        games = [self.run.games[g] for g in indices]
        return self.play(games, self.run.seat_map, self.system, seeds, episode_prefix=episode_prefix,
                         group_size=group_size, game_indices=indices, sampling_key=sampling_key)


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def state_of(policy) -> dict[str, torch.Tensor]:
    """The weights a rollout worker needs: every trainable parameter, on the CPU (tied weights once).
    CPU parameters are not copied here: ``ray.put`` copies them into the object store at once."""
    with policy.gather(), torch.no_grad():
        return {name: p.detach().to("cpu") for name, p in policy.model.named_parameters() if p.requires_grad}


def to_wire(state: dict[str, torch.Tensor]) -> dict:
    """A state dict as numpy arrays, which Ray stores without pickling and a worker reads in place from
    shared memory (a torch tensor is pickled on put and copied on get: about 3x slower); bfloat16,
    which numpy lacks, travels as its 16-bit pattern."""
    bf16 = [k for k, t in state.items() if t.dtype == torch.bfloat16]
    arrays = {k: (t.view(torch.int16) if k in bf16 else t).numpy() for k, t in state.items()}
    return {"arrays": arrays, "bf16": bf16}


def from_wire(wire: dict) -> dict[str, torch.Tensor]:
    """:func:`to_wire`'s state dict as tensors over the (read-only) object-store memory: load them
    with ``load_state_dict``, which copies; never write to them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.from_numpy on a read-only array
        out = {k: torch.from_numpy(a) for k, a in wire["arrays"].items()}
    return {k: (t.view(torch.bfloat16) if k in wire["bf16"] else t) for k, t in out.items()}


@dataclass
class Pending:
    """A submitted rollout: each worker's call (resubmitted after a restart) and what it needs."""

    shares: list[list[int]]
    calls: list[tuple]  # per worker: the rollout's arguments
    versions: dict[str, int]  # the weight versions it samples with
    refs: dict[Any, int] = field(default_factory=dict)  # object ref -> worker
    what: str = "a rollout"


def connect(rc) -> tuple[Any, bool]:
    """The ray module, connected to ``rc.address`` or to a local cluster it starts, and whether this
    call connected (False when the process was connected already: then the caller's connection)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    if rc.address:
        ray.init(address=rc.address, **kwargs)
    else:
        ray.init(num_cpus=max(math.ceil(rc.num_rollout_workers * rc.num_cpus), os.cpu_count() or 1), **kwargs)
    return ray, True


class ActorPool:
    """Ray actors of one class, each started with ``args_of(index)``, that play shares of work; one that
    dies is restarted by Ray (at most ``rc.max_restarts`` times) and its share played again."""

    def __init__(self, rc, actor_cls: type, args_of, kind: str = "rollout worker") -> None:
        self.ray, self.connected = connect(rc)
        self.rc, self.kind, self.pg, self.workers = rc, kind, None, []
        w = rc.num_rollout_workers
        actor = self.ray.remote(actor_cls)
        base = dict(num_cpus=rc.num_cpus, num_gpus=rc.num_gpus, max_restarts=rc.max_restarts, max_task_retries=0)
        t0 = time.perf_counter()
        try:
            options = [{}] * w
            if rc.placement:  # one placement group, a bundle per worker (a restarted worker keeps its bundle)
                from ray.util.placement_group import placement_group
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                bundle = {"CPU": rc.num_cpus, **({"GPU": rc.num_gpus} if rc.num_gpus else {})}
                self.pg = placement_group([dict(bundle) for _ in range(w)], strategy=rc.placement)
                self.ray.get(self.pg.ready(), timeout=rc.start_timeout_s)
                options = [{"scheduling_strategy": PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i)}
                           for i in range(w)]
            self.workers = [actor.options(**base, **options[i]).remote(*args_of(i)) for i in range(w)]
            self.info = self.ray.get([x.ping.remote() for x in self.workers], timeout=rc.start_timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            have = self.ray.cluster_resources()
            self.close()
            raise RuntimeError(
                f"{w} {kind}s of {rc.num_cpus:g} CPU and {rc.num_gpus:g} GPU each"
                + (f" (placement {rc.placement})" if rc.placement else "")
                + f" could not start within ray.start_timeout_s = {rc.start_timeout_s:g} s; the cluster has "
                f"{have.get('CPU', 0):g} CPUs and {have.get('GPU', 0):g} GPUs in all: lower ray.num_rollout_workers, "
                "ray.num_cpus or ray.num_gpus, or add nodes") from None
        self.restarts = [0] * len(self.workers)
        where = f"cluster at {rc.address}" if rc.address else "local cluster"
        _say(f"{len(self.workers)} {kind}s ready in {time.perf_counter() - t0:.1f} s ({where}; "
             f"{rc.num_cpus:g} CPU{'s' if rc.num_cpus != 1 else ''}"
             + (f", {rc.num_gpus:g} GPU" if rc.num_gpus else "") + " each"
             + (f", placement {rc.placement}" if rc.placement else "") + "; pids "
             + ", ".join(str(i["pid"]) for i in self.info) + ")")

    def _recover(self, r: int, exc: Exception, what: str) -> None:
        """Worker ``r`` died: wait for Ray to restart it, or fail when it has used its restarts."""
        self.restarts[r] += 1
        pid = self.info[r].get("pid")
        if self.restarts[r] > self.rc.max_restarts:
            raise RuntimeError(f"{self.kind} {r} (pid {pid}) died during {what} and has no restarts left "
                               f"(ray.max_restarts = {self.rc.max_restarts}): {type(exc).__name__}") from exc
        _say(f"{self.kind} {r} (pid {pid}) died during {what}; restarting it "
             f"(restart {self.restarts[r]} of at most {self.rc.max_restarts})")
        t0 = time.perf_counter()
        self.info[r] = self._wait_alive(r)
        self._restarted(r)
        _say(f"{self.kind} {r} restarted in {time.perf_counter() - t0:.1f} s (pid {self.info[r]['pid']})")

    def _restarted(self, r: int) -> None:
        """Worker ``r`` is a fresh process (its state is what its constructor made)."""

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
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.pg)
            self.pg = None
        if self.connected:  # a local cluster this pool started stops; a joined one only loses the driver
            self.ray.shutdown()


class RayRollout(ActorPool):
    """The driver's side: rollout workers, weight sync, restarts. ``play`` has the signature of
    :func:`~cogym.runners.rollout.rollout` (the training loop's samplers call it); ``submit`` and
    ``collect`` split it for one-step off-policy."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        threads = cfg.run.threads or max(1, int(cfg.ray.num_cpus))
        env = {k: os.environ[k] for k in _ENV_KEYS if k in os.environ}
        super().__init__(cfg.ray, RolloutWorker, lambda i: (cfg, i, os.getcwd(), env, threads))
        self.held = [dict(i["versions"]) for i in self.info]  # per worker: the versions it holds
        self._weights: dict[str, dict[int, Any]] = {}  # policy -> version -> object ref (the newest few)
        self._loading: dict[int, tuple] = {}  # worker -> (its load call under way, the versions)
        self.versions: dict[str, int] = dict(self.held[0])  # the versions rollouts sample with

    # ------------------------------------------------------------------ weights
    def sync(self, policies: dict, versions: dict[str, int], wait: bool = True) -> dict[str, float]:
        """Give every worker the weights of ``versions`` (policy -> version) it does not hold: each
        policy's weights go to the object store once, and every worker loads them. ``wait``: return
        when all have loaded (else the loads queue behind a rollout under way, and the next
        :meth:`submit` waits for them). Metrics: ``ray/sync_s`` and ``ray/sync_bytes`` (one copy)."""
        t0 = time.perf_counter()
        sent = 0
        for pid, version in versions.items():
            kept = self._weights.setdefault(pid, {})
            if version not in kept and any(h.get(pid) != version for h in self.held):
                state = state_of(policies[pid])
                sent += sum(t.numel() * t.element_size() for t in state.values())
                kept[version] = self.ray.put(to_wire(state))
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

    def _load(self, r: int, versions: dict[str, int]):
        """Worker ``r``'s load call for the versions it lacks (None when it holds them all)."""
        need = [pid for pid, v in versions.items() if self.held[r].get(pid) != v]
        if not need:
            return None
        for pid in need:
            if versions[pid] not in self._weights.get(pid, {}):
                raise RuntimeError(f"weights of {pid!r} version {versions[pid]} are no longer kept for a worker "
                                   f"that lacks them (ray.max_staleness = {self.rc.max_staleness})")
        refs = [self._weights[pid][versions[pid]] for pid in need]
        self.held[r] = {**self.held[r], **{pid: None for pid in need}}  # unknown until the call returns
        return self.workers[r].load_weights.remote(need, dict(versions), *refs)

    def _load_into(self, r: int, versions: dict[str, int]) -> None:
        """Worker ``r`` holds ``versions`` when this returns (restarting it as often as it dies)."""
        while (ref := self._load(r, versions)) is not None:
            try:
                self.held[r] = dict(self.ray.get(ref))
            except self.ray.exceptions.RayActorError as exc:
                self._recover(r, exc, f"a weight sync to {versions}")

    def _finish_loads(self) -> None:
        """Wait for the loads :meth:`sync` queued; a worker that died meanwhile is restarted and loaded."""
        loading, self._loading = self._loading, {}
        for r, (ref, versions) in loading.items():
            try:
                self.held[r] = dict(self.ray.get(ref))
            except self.ray.exceptions.RayActorError as exc:
                self._recover(r, exc, f"a weight sync to {versions}")
                self._load_into(r, versions)

    def _restarted(self, r: int) -> None:
        self.held[r] = dict(self.info[r]["versions"])
        self._loading.pop(r, None)

    # ------------------------------------------------------------------ rollouts
    def submit(self, games: Sequence, seat_map, system: dict, seeds: Sequence[int], episode_prefix: str = "ep",
               group_size: int = 1, sampling_key: int | None = None, iteration: int = 0,
               versions: dict[str, int] | None = None) -> Pending:
        """Start a rollout of ``len(games)`` games (the workers hold their own copies) and return at once;
        it samples with the versions of the last :meth:`sync` (or ``versions``)."""
        if not callable(seat_map):
            raise ConfigError("run.backend: ray plays one seat map for every game (no league or per-game seating)")
        self._finish_loads()
        versions = dict(self.versions if versions is None else versions)
        for r in range(len(self.workers)):  # e.g. a worker restarted since the last sync
            self._load_into(r, versions)
        n, w = len(games), len(self.workers)
        shares = [list(range(r, n, w)) for r in range(w)]
        calls = [(shares[r], [int(seeds[g]) for g in shares[r]], episode_prefix, group_size, sampling_key, iteration)
                 for r in range(w)]
        pending = Pending(shares, calls, versions, what=f"rollout {episode_prefix}")
        for r in range(w):
            if shares[r]:
                pending.refs[self.workers[r].rollout.remote(*calls[r], versions)] = r
        return pending

    def collect(self, pending: Pending) -> RolloutResult:
        """Wait for every share of ``pending``; replay the share of a worker that died; gather."""
        def replay(r: int):
            self._load_into(r, pending.versions)  # the weights the interrupted rollout sampled with
            _say(f"replaying {len(pending.shares[r])} games of {pending.what} on worker {r} with the same seeds")
            return self.workers[r].rollout.remote(*pending.calls[r], pending.versions)

        results = self.gather(pending.refs, replay, pending.what)
        order = [r for r in range(len(self.workers)) if pending.shares[r]]
        return gather_rollouts([results[r] for r in order], [pending.shares[r] for r in order])

    def play(self, games: Sequence, seat_map, system: dict, seeds: Sequence[int], episode_prefix: str = "ep",
             group_size: int = 1, sampling_key: int | None = None, iteration: int = 0) -> RolloutResult:
        """A whole rollout on the workers (the signature of :func:`~cogym.runners.rollout.rollout`)."""
        return self.collect(self.submit(games, seat_map, system, seeds, episode_prefix, group_size, sampling_key,
                                        iteration))



# ------------------------------------------------------------------------------------------ tournaments
class TournamentWorker:
    """A Ray actor of ``cogym tournament --ray``: its own players (loaded as its shares need them, at
    most ``spec.max_loaded`` at once) and games; plays shares of batches and returns their result rows."""

    def __init__(self, spec, index: int, cwd: str, env: dict[str, str], threads: int, modules: list[str]) -> None:
        os.environ.update(env)
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)
        torch.set_num_threads(threads)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        from cogym.envs import make

        from .build import import_game_modules
        from .tournament import _Agents, _seating

        import_game_modules(modules)  # games registered by --module / modules: in the driver
        self.spec, self.index, self.agents, self.envs = spec, index, _Agents(spec), []
        self.sides, self.fixed = _seating(spec, make(spec.game, **spec.game_kwargs))

    def ping(self) -> dict:
        return {"pid": os.getpid(), "node": _node_ip()}

    def play(self, batch: list, seeds: list[int], batch_no: int) -> list[dict]:
        from cogym.envs import make

        from .tournament import _play_batch

        spec = self.spec
        self.agents.keep_only({k.a for k in batch} | {k.b for k in batch}, spec.max_loaded)
        self.envs.extend(make(spec.game, **spec.game_kwargs) for _ in range(len(batch) - len(self.envs)))
        return _play_batch(spec, batch, self.envs, self.agents, self.sides, self.fixed, seeds, batch_no)


class RayTournament(ActorPool):
    """The driver's side of ``cogym tournament --ray``: each batch is cut into one contiguous share per
    worker (a pairing's games stay together, so a worker loads few players); a worker that dies is
    restarted and its share replayed, and only a whole batch's rows reach ``results.jsonl``. Every
    game's draws are keyed by its id, so the rows are those of a one-process tournament."""

    def __init__(self, spec, rc, modules: Sequence[str] = ()) -> None:
        threads = max(1, int(rc.num_cpus))
        env = {k: os.environ[k] for k in _ENV_KEYS if k in os.environ}
        super().__init__(rc, TournamentWorker, lambda i: (spec, i, os.getcwd(), env, threads, list(modules)),
                         kind="tournament worker")

    def play(self, batch: list, seeds: list[int], batch_no: int) -> list[dict]:
        w = len(self.workers)
        cuts = [round(len(batch) * r / w) for r in range(w + 1)]
        shares = {r: batch[cuts[r]:cuts[r + 1]] for r in range(w) if cuts[r + 1] > cuts[r]}

        def replay(r: int):
            _say(f"replaying {len(shares[r])} games of tournament batch {batch_no} on worker {r}")
            return self.workers[r].play.remote(shares[r], seeds, batch_no)

        refs = {self.workers[r].play.remote(share, seeds, batch_no): r for r, share in shares.items()}
        results = self.gather(refs, replay, f"tournament batch {batch_no}")
        return [row for r in sorted(results) for row in results[r]]
