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

Learners (``ray.learners``): in the driver, or a :class:`LearnerWorker` actor per trained policy in
the workers' placement group, sharing a worker's bundle (``colocated``) or in one of its own
(``separate``); the driver reaches it through a :class:`RemoteLearner`, which the training loop
uses as it uses a learner.

Weights: after every update the driver writes each trained policy's weights once, into shared memory
for the workers on its machine (:mod:`cogym.runners.ray.weights`, ``ray.weight_sync: auto``) and into
the object store (``ray.put``) for the others (a learner actor puts its own), and every worker loads
them with their version before its next rollout (``ray/sync_s``, ``ray/sync_bytes`` per iteration);
every Turn records the version it was sampled with, and a worker refuses a rollout whose versions it
does not hold.

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
import logging
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import torch

from cogym.core.errors import ConfigError

from cogym.runners.train.build import trained_policies
from cogym.runners.config.schema import Config
from cogym.runners.rollout.loop import RolloutResult
from cogym.runners.train.iteration import gather_rollouts, sampling_seed

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


def actor_threads(cpus: float) -> int:
    """The torch threads of a Ray actor given ``cpus`` CPUs (unless ``run.threads`` says otherwise)."""
    return max(1, int(cpus))


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
        _enter(cwd, env, threads)
        from cogym.runners.train.build import build
        from cogym.runners.rollout.turns import rollout
        from cogym.runners.rollout.tokens import token_rollout

        self.cfg, self.index = cfg, index
        self.run = build(cfg, rollout_only=True)
        self.play = token_rollout if cfg.game.granularity == "token" else rollout
        self.system = {role: p.system for role, p in cfg.prompts.items()}
        self.members: dict = {}  # league member name -> its agent (a frozen copy of the league policy)
        self.segments: dict = {}  # the driver's shared-memory segments this worker has attached

    def ping(self) -> dict:
        """Alive: the process id and the weight version of every policy."""
        return {"pid": os.getpid(), "versions": self.versions(), "node": _node_ip()}

    def sees(self, segment: str, token: bytes) -> bool:
        """Whether the driver's shared-memory segment ``segment`` is here and holds ``token`` (this
        worker is on the driver's machine and can load weights from shared memory)."""
        from cogym.runners.ray.weights import attach

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
        from cogym.runners.ray.weights import ShmWeights, check, read

        for pid, w in zip(pids, weights):
            backend = self.run.policies[pid].backend
            if isinstance(w, ShmWeights):
                backend.load_weights(read(w, self.segments), versions[pid])
                check(w, self.segments)
            else:
                backend.load_weights(from_wire(w), versions[pid])
        return self.versions()

    def set_members(self, add: list[str], drop: list[str], *weights) -> list[str]:
        """League members: build ``add[i]`` as a frozen copy of the league policy holding ``weights[i]``
        (:func:`to_wire` form, every parameter), forget ``drop``; return the names held."""
        from cogym.agents.policy import Policy

        from cogym.runners.rollout.agents import model_agent
        from cogym.runners.config.schema import league_policy
        from cogym.runners.train.league import PREFIX, _freeze

        for name in drop:
            self.members.pop(name, None)
        pid = league_policy(self.cfg)
        base = self.run.policies[pid]
        for name, wire in zip(add, weights):
            with base.gather():
                model = _freeze(copy.deepcopy(base.model))
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
        mine = self.versions()
        wrong = {pid: (mine.get(pid), v) for pid, v in versions.items() if mine.get(pid) != v}
        if wrong:
            raise RuntimeError(f"rollout worker {self.index} holds weight versions {mine}, the rollout needs {versions}")
        torch.manual_seed(sampling_seed(self.cfg.run.seed, iteration))
        self.run.reseed_scripted(iteration, self.index)
        games = [self.run.games[g] for g in indices]
        seat_map = self.run.seat_map
        if league is not None:
            from cogym.runners.train.league import LeagueSeating

            opponents, seats = league
            seat_map = [self.run.seat_map if o is None else
                        LeagueSeating(o, self.members[o], frozenset(seats), self.run.seat_map, ()) for o in opponents]
        return self.play(games, seat_map, self.system, seeds, episode_prefix=episode_prefix,
                         group_size=group_size, game_indices=indices, sampling_key=sampling_key,
                         on_error=self.cfg.game.on_error)


def _enter(cwd: str, env: dict[str, str], threads: int) -> None:
    """An actor's start: the driver's environment keys and working directory (relative paths in the
    config, game.modules and models, mean the driver's), its torch threads, no loading bars."""
    os.environ.update(env)
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    torch.set_num_threads(threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no per-actor weight-loading bars in the driver's output


class LearnerWorker:
    """A Ray actor (``ray.learners``: colocated or separate): one trained policy and its learner. After
    each update it puts the new weights in the object store itself, so they go from here to the rollout
    workers without passing through the driver."""

    def __init__(self, cfg: Config, pid: str, cwd: str, env: dict[str, str], threads: int,
                 policy_dir: str | None, critic_dir: str | None) -> None:
        _enter(cwd, env, threads)
        from cogym.runners.train.build import build_learner

        self.pid = pid
        self.policy, self.learner = build_learner(cfg, pid, Path(policy_dir) if policy_dir else None,
                                                  Path(critic_dir) if critic_dir else None)

    def ping(self) -> dict:
        return {"pid": os.getpid(), "node": _node_ip(), "steps": self.learner.steps,
                "engine": self.learner.engine.name}

    def update(self, turns: list) -> tuple[dict, int, list]:
        """The learner's step on ``turns``: its metrics, its step count and :meth:`weights`."""
        rec = self.learner.update(turns)
        return rec, self.learner.steps, self.weights()

    def weights(self) -> list:
        """``[object ref of the weights (to_wire form), their bytes]`` (a list, so the caller gets the ref)."""
        import ray

        state = state_of(self.policy)
        return [ray.put(to_wire(state)), nbytes(state)]

    def group_decisions(self, turns: list) -> dict:
        return self.learner.group_decisions(turns)

    def save(self, directory: str) -> None:
        self.learner.save(Path(directory))

    def load(self, directory: str) -> int:
        self.learner.load(Path(directory))
        return self.learner.steps


class RemoteLearner:
    """The driver's handle on a :class:`LearnerWorker`, with the surface of
    :class:`~cogym.learners.learner.Learner` the training loop uses (``steps``, ``cfg``, ``engine.name``,
    ``save``, ``load``, ``group_decisions``), and ``start_update``/``finish_update`` in place of
    ``update`` (:class:`RemoteUpdates`), so that several learner actors update at once. A learner actor is not restarted (its optimizer state
    would be lost): one that dies stops the run, which ``--resume`` continues from its checkpoint."""

    def __init__(self, ray, handle, pid: str, cfg, info: dict, bundle: int = 0) -> None:
        self.ray, self.handle, self.pid, self.cfg, self.info = ray, handle, pid, cfg, info
        self.bundle = bundle  # its placement bundle: learners that share one update one after another
        self.steps = int(info["steps"])
        self.engine = SimpleNamespace(name=info["engine"])
        self._weights: tuple[int, Any, int] | None = None  # (version, object ref, bytes) of the newest weights

    def _get(self, ref, what: str):
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            raise RuntimeError(f"the learner actor of policy {self.pid!r} (pid {self.info.get('pid')}) died during "
                               f"{what}; learner actors are not restarted (their optimizer state is lost with "
                               "them): `cogym train --resume` continues from the last checkpoint") from exc

    def start_update(self, turns: list):
        return self.handle.update.remote(list(turns))

    def finish_update(self, ref) -> dict[str, float]:
        rec, self.steps, (wref, size) = self._get(ref, f"update {self.steps + 1}")
        self._weights = (self.steps, wref, size)
        return rec

    def weights(self) -> tuple[Any, int]:
        """The object ref and bytes of the weights of version ``steps``."""
        if self._weights is None or self._weights[0] != self.steps:
            wref, size = self._get(self.handle.weights.remote(), "a weight fetch")
            self._weights = (self.steps, wref, size)
        return self._weights[1], self._weights[2]

    def group_decisions(self, turns: list) -> dict:
        return self._get(self.handle.group_decisions.remote(list(turns)), "dynamic sampling")

    def save(self, directory: Path) -> None:  # a path the actor's node sees: one machine, or a shared file system
        self._get(self.handle.save.remote(str(directory)), "a checkpoint")

    def load(self, directory: Path) -> None:
        self.steps = self._get(self.handle.load.remote(str(directory)), "a resume")


class RemoteUpdates:
    """One batch's updates on learner actors: every actor starts at once, except actors that share a
    placement bundle (``colocated``: one worker's CPUs or GPU), which take turns, since two updates at
    once on the same cores or GPU only slow each other down. :meth:`finish` must be called in the
    learners' order."""

    def __init__(self, learners: dict, batches: dict[str, list]) -> None:
        self.remote = {pid: lr for pid, lr in learners.items() if isinstance(lr, RemoteLearner)}
        self.batches, self.turns, self.refs = batches, {}, {}
        for pid, lr in self.remote.items():
            self.turns.setdefault(lr.bundle, []).append(pid)
        for pids in self.turns.values():
            self.refs[pids[0]] = self.remote[pids[0]].start_update(batches[pids[0]])

    def __contains__(self, pid: str) -> bool:
        return pid in self.remote

    def finish(self, pid: str) -> dict[str, float]:
        """``pid``'s update metrics (waiting for it); starts the next update in its bundle."""
        rec = self.remote[pid].finish_update(self.refs.pop(pid))
        queue = self.turns[self.remote[pid].bundle]
        nxt = queue.index(pid) + 1
        if nxt < len(queue):
            self.refs[queue[nxt]] = self.remote[queue[nxt]].start_update(self.batches[queue[nxt]])
        return rec


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def state_of(policy, trainable_only: bool = True) -> dict[str, torch.Tensor]:
    """The weights a rollout worker needs: every trainable parameter (every parameter, for a frozen
    league member), on the CPU (tied weights once). CPU parameters are not copied here (``ray.put``
    copies them into the object store at once), except a ZeRO-3 learner's, gathered from their
    partitions for this call only."""
    with policy.gather(), torch.no_grad():
        return {name: (p.detach().to("cpu", copy=hasattr(p, "ds_status")))
                for name, p in policy.model.named_parameters() if p.requires_grad or not trainable_only}


def nbytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


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
class Sent:
    """One version of a policy's weights as the workers get it: an object ref (``to_wire`` form) for
    workers elsewhere and learner actors' weights, shared memory for workers on the driver's machine."""

    ref: Any = None
    shm: Any = None  # a shm_weights.ShmWeights


@dataclass
class Pending:
    """A submitted rollout: each worker's call (resubmitted after a restart) and what it needs."""

    shares: list[list[int]]
    calls: list[tuple]  # per worker: the rollout's arguments (versions and league included)
    versions: dict[str, int]  # the weight versions it samples with
    refs: dict[Any, int] = field(default_factory=dict)  # object ref -> worker
    what: str = "a rollout"
    league: "LeaguePlan | None" = None


@dataclass
class LeaguePlan:
    """A rollout's league games: each game's opponent (a member name, or None for self-play), the
    league's seats, the members then in the league, and the driver's agent of each opponent."""

    opponents: list
    seats: tuple
    members: tuple
    agents: dict

    @staticmethod
    def of(seat_map, n: int) -> "LeaguePlan | None":
        """The plan behind one rollout's seat map(s), or None when every game has the run's seat map."""
        from cogym.runners.train.league import LeagueSeating

        if callable(seat_map) and not isinstance(seat_map, LeagueSeating):
            return None
        maps = [seat_map] * n if callable(seat_map) else list(seat_map)
        league = [m for m in maps if isinstance(m, LeagueSeating)]
        base = league[0].base if league else maps[0]
        if any(not isinstance(m, LeagueSeating) and m is not base for m in maps):
            raise ConfigError("run.backend: ray plays the run's seat map or league seatings; a hook that seats "
                              "players another way needs run.backend: local")
        if not league:
            return None
        return LeaguePlan([m.opponent if isinstance(m, LeagueSeating) else None for m in maps],
                          tuple(sorted(league[0].league_seats)), league[0].members,
                          {m.opponent: m.agent for m in league})


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
            raise ConfigError(_no_cluster(rc.address, exc)) from exc
    else:
        cpus = rc.num_rollout_workers * rc.num_cpus
        if n_learners and rc.learners == "separate":
            cpus += n_learners * rc.learner_num_cpus
        # "local": a private cluster even where `ray start` runs one or RAY_ADDRESS names one (a bare
        # ray.init() would join those, and then refuse num_cpus)
        ray.init(address="local", num_cpus=max(math.ceil(cpus), os.cpu_count() or 1), **kwargs)
    return ray, True


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
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

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
            self.info = self.ray.get([x.ping.remote() for x in self.workers], timeout=rc.start_timeout_s)
            self.restarts = [0] * len(self.workers)
            where = f"cluster at {rc.address}" if rc.address else "local cluster"
            _say(f"{len(self.workers)} {kind}s ready in {time.perf_counter() - t0:.1f} s ({where}; "
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

    def _placed(self) -> None:
        """The workers are starting (their constructors run): start other actors of ``self.plan`` here."""

    def _started(self) -> None:
        """The workers are up: wait for the actors :meth:`_placed` started (GetTimeoutError past the timeout)."""

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
    :func:`~cogym.runners.rollout.turns.rollout` (the training loop's samplers call it); ``submit`` and
    ``collect`` split it for one-step off-policy."""

    def __init__(self, cfg: Config, ckpt: Path | None = None) -> None:
        """Rollout workers and, with ``ray.learners`` colocated or separate, a learner actor per trained
        policy (:attr:`learners`; from checkpoint ``ckpt`` when resuming)."""
        self.cfg, self.ckpt, self.learners, self._learner_handles = cfg, ckpt, {}, {}
        self._shm: dict[str, Any] = {}  # policy -> its WeightSlots (workers on this machine read them)
        rc = cfg.ray
        threads = cfg.run.threads or actor_threads(rc.num_cpus)
        self._env = {k: os.environ[k] for k in _ENV_KEYS if k in os.environ}
        self._trained = trained_policies(cfg) if rc.learners != "driver" else []
        super().__init__(rc, RolloutWorker, lambda i: (cfg, i, os.getcwd(), self._env, threads),
                         n_learners=len(self._trained))
        self.held = [dict(i["versions"]) for i in self.info]  # per worker: the versions it holds
        # policy -> version -> Sent (the newest max_staleness + 1): an object ref and/or shared memory
        self._weights: dict[str, dict[int, Sent]] = {}
        self.local: set[int] = set()  # the workers that load the driver's weights from shared memory
        self._shm_ok = rc.weight_sync == "auto"  # False also once shared memory had no room
        if self._shm_ok:
            self.local = {r for r in range(len(self.workers)) if self._sees_shm(r)}
        if self.local:
            n, w = len(self.local), len(self.workers)
            _say("weights reach " + (f"the {w} rollout workers" if n == w else f"{n} of {w} rollout workers")
                 + " through shared memory (on this machine)"
                 + ("" if n == w else f", the other {w - n} through the object store"))
        self._loading: dict[int, tuple] = {}  # worker -> (its load call under way, the versions)
        self._member_refs: dict[str, Any] = {}  # league member -> object ref of its weights
        self.members_held: list[set[str]] = [set() for _ in self.workers]  # per worker: league members it holds
        self.versions: dict[str, int] = dict(self.held[0])  # the versions rollouts sample with

    # ------------------------------------------------------------------ learner actors
    def _placed(self) -> None:
        if not self._trained:
            return
        rc, cfg = self.rc, self.cfg
        cpus = rc.num_cpus if rc.learners == "colocated" else rc.learner_num_cpus
        threads = cfg.run.threads or actor_threads(cpus)
        actor = self.ray.remote(LearnerWorker)
        self._t_learners = time.perf_counter()
        for k, pid in enumerate(self._trained):
            pdir = str(self.ckpt / "policies" / pid) if self.ckpt else None
            cdir = str(self.ckpt / "learners" / pid / "critic") if self.ckpt else None
            if cdir and not os.path.isdir(cdir):
                cdir = None
            self._learner_handles[pid] = actor.options(max_restarts=0, **self.plan.learners[k]).remote(
                cfg, pid, os.getcwd(), self._env, threads, pdir, cdir)

    def _started(self) -> None:
        if not self._trained:
            return
        handles = self._learner_handles
        infos = self.ray.get([h.ping.remote() for h in handles.values()], timeout=self.rc.start_timeout_s)
        self.learners = {pid: RemoteLearner(self.ray, h, pid, self.cfg.learners[pid], info,
                                            bundle=self.plan.learner_bundles[k])
                         for k, ((pid, h), info) in enumerate(zip(handles.items(), infos))}
        _say(f"{len(handles)} learner actors ({self.rc.learners}) ready in "
             f"{time.perf_counter() - self._t_learners:.1f} s: "
             + ", ".join(f"{pid} (pid {info['pid']})" for pid, info in zip(handles, infos)))

    def refresh(self, policies: dict) -> None:
        """Load the learner actors' newest weights into the driver's copies of their policies (for the
        evaluations and checkpoints the driver makes)."""
        for pid, learner in self.learners.items():
            backend = policies[pid].backend
            if backend.version != learner.steps:
                ref, _ = learner.weights()
                backend.load_weights(from_wire(self.ray.get(ref)), learner.steps)

    def _sees_shm(self, r: int) -> bool:
        """Whether worker ``r`` can read this process's shared memory (it runs on this machine)."""
        from multiprocessing import shared_memory

        token = os.urandom(16)
        try:
            probe = shared_memory.SharedMemory(name=f"cogym-probe-{token.hex()[:12]}", create=True, size=len(token))
        except OSError as exc:  # no /dev/shm here: the object store for everyone
            log.warning("no shared memory for weights (%s): they go through the object store", exc)
            return False
        try:
            probe.buf[:len(token)] = token
            try:
                return bool(self.ray.get(self.workers[r].sees.remote(probe.name, token)))
            except self.ray.exceptions.RayError:
                return False  # died already (probed again when restarted), or could not look
        finally:
            probe.close()
            probe.unlink()

    def close(self) -> None:
        for slots in self._shm.values():
            slots.close()
        self._shm = {}
        for h in self._learner_handles.values():
            try:
                self.ray.kill(h)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._learner_handles, self.learners = {}, {}
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
            from cogym.runners.ray.weights import WeightSlots

            slots = self._shm.get(pid)
            if slots is None or not slots.fits(state):
                if slots is not None:
                    slots.close()
                try:
                    slots = self._shm[pid] = WeightSlots(state, self.rc.max_staleness + 1)
                except OSError as exc:  # e.g. a container's small /dev/shm: the object store for everyone
                    _say(f"weights of {pid!r} go through the object store, not shared memory: {exc}")
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
        weights = [self._weights_for(r, pid, versions[pid]) for pid in need]
        self.held[r] = {**self.held[r], **{pid: None for pid in need}}  # unknown until the call returns
        return self.workers[r].load_weights.remote(need, dict(versions), *weights)

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
        self.members_held[r] = set()
        self._loading.pop(r, None)
        if self._shm_ok:  # the new process may be on another machine
            self.local.discard(r)
            if self._sees_shm(r):
                self.local.add(r)

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
            _say(f"replaying {len(pending.shares[r])} games of {pending.what} on worker {r} with the same seeds")
            return self.workers[r].rollout.remote(*pending.calls[r])

        results = self.gather(pending.refs, replay, pending.what)
        order = [r for r in range(len(self.workers)) if pending.shares[r]]
        return gather_rollouts([results[r] for r in order], [pending.shares[r] for r in order])

    def play(self, games: Sequence, seat_map, system: dict, seeds: Sequence[int], episode_prefix: str = "ep",
             group_size: int = 1, sampling_key: int | None = None, iteration: int = 0) -> RolloutResult:
        """A whole rollout on the workers (the signature of :func:`~cogym.runners.rollout.turns.rollout`)."""
        return self.collect(self.submit(games, seat_map, system, seeds, episode_prefix, group_size, sampling_key,
                                        iteration))



# ------------------------------------------------------------------------------------------ tournaments
class TournamentWorker:
    """A Ray actor of ``cogym tournament --ray``: its own players (loaded as its shares need them, at
    most ``spec.max_loaded`` at once) and games; plays shares of batches and returns their result rows."""

    def __init__(self, spec, index: int, cwd: str, env: dict[str, str], threads: int, modules: list[str]) -> None:
        _enter(cwd, env, threads)
        from cogym.envs import make

        from cogym.runners.train.build import import_game_modules
        from cogym.runners.tournament.run import Agents
        from cogym.runners.tournament.settle import sides_and_fixed

        import_game_modules(modules)  # games registered by --module / modules: in the driver
        self.spec, self.index, self.agents, self.envs = spec, index, Agents(spec), []
        self.sides, self.fixed = sides_and_fixed(spec, make(spec.game, **spec.game_kwargs))

    def ping(self) -> dict:
        return {"pid": os.getpid(), "node": _node_ip()}

    def play(self, batch: list, seeds: list[int], batch_no: int) -> list[dict]:
        from cogym.envs import make

        from cogym.runners.tournament.run import play_batch

        spec = self.spec
        self.agents.keep_only({k.a for k in batch} | {k.b for k in batch}, spec.max_loaded)
        self.envs.extend(make(spec.game, **spec.game_kwargs) for _ in range(len(batch) - len(self.envs)))
        return play_batch(spec, batch, self.envs, self.agents, self.sides, self.fixed, seeds, batch_no)


class RayTournament(ActorPool):
    """The driver's side of ``cogym tournament --ray``: each batch is cut into one contiguous share per
    worker (a pairing's games stay together, so a worker loads few players); a worker that dies is
    restarted and its share replayed, and only a whole batch's rows reach ``results.jsonl``. Every
    game's draws are keyed by its id, so the rows are those of a one-process tournament."""

    def __init__(self, spec, rc, modules: Sequence[str] = ()) -> None:
        threads = actor_threads(rc.num_cpus)
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
