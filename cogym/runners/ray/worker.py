"""A rollout worker: the Ray actor that holds the config's games and generation backends (no learners),
loads weights by version and plays shares of rollouts (:mod:`cogym.runners.ray.rollout` drives it)."""

from __future__ import annotations

import copy
import os

import torch

from cogym.agents.backends.broadcast import gpu_id, Groups, Meet
from cogym.agents.backends.checks import bind_cpu_threads
from cogym.agents.policy import Policy
from cogym.core import seeding
from cogym.runners.config.schema import Config
from cogym.runners.config.validate import league_policy
from cogym.runners.ray.colocate import sleep_all, wake_all
from cogym.runners.ray.pool import adjust_threads, enter, node_ip, StaleWorker
from cogym.runners.ray.weights import attach, check, read, ShmWeights
from cogym.runners.ray.wire import from_wire, state_of, to_wire
from cogym.runners.rollout.agents import model_agent
from cogym.runners.rollout.loop import RolloutResult
from cogym.runners.rollout.tokens import token_rollout
from cogym.runners.rollout.turns import rollout
from cogym.runners.train.build import build
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
                league: tuple | None = None, greedy: tuple[str, ...] = (),
                places: list[int] | None = None) -> RolloutResult:
        """Play games ``indices`` of the rollout (their places in its game list) with ``seeds``; ``league``:
        (each game's league opponent or None, the league's seats); ``greedy``: the policies whose seats
        decode greedily (a round's greedy baseline games); ``places``: the places that key the games'
        draws, when not ``indices`` (a greedy game replays its group's first game's place)."""
        adjust_threads()
        mine = self.versions()
        wrong = {pid: (mine.get(pid), v) for pid, v in versions.items() if mine.get(pid) != v}
        lacking = sorted({o for o in league[0] if o is not None} - set(self.members)) if league is not None else []
        if wrong or lacking:
            raise StaleWorker(f"rollout worker {self.index} holds weight versions {mine}, the rollout needs {versions}"
                              + (f"; it lacks league members {lacking}" if lacking else ""), self.ping())
        seeding.torch_seed("rollout.sampling", self.cfg.run.seed, iteration)
        self.run.reseed_scripted(iteration, self.index)
        games = [self.run.games[g] for g in indices]
        seat_map = self.run.seat_map
        if league is not None:
            opponents, seats = league
            seat_map = [self.run.seat_map if o is None else
                        LeagueSeating(o, self.members[o], frozenset(seats), self.run.seat_map, ()) for o in opponents]
        return self.play(games, seat_map, self.system, seeds, episode_prefix=episode_prefix,
                         group_size=group_size, game_indices=indices if places is None else places, sampling_key=sampling_key,
                         on_error=self.cfg.game.on_error, max_prompt_chars=self.cfg.game.max_prompt_chars, greedy=greedy)
