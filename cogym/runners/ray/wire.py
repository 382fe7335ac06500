"""What a rollout sends its workers: weights through Ray's object store (a policy's trainable state as
one flat buffer, :mod:`cogym.agents.flat_weights`, bit-identical on the way back), what each worker
was sent and still has to load, and the league members a rollout's games meet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from cogym.agents.flat_weights import as_tensor, pack, unpack
from cogym.runners.rollout.seating import SeatingError
from cogym.runners.train.league import LeagueSeating


def state_of(policy, trainable_only: bool = True) -> dict[str, torch.Tensor]:
    """The weights a rollout worker needs: every trainable parameter (every parameter, for a frozen
    league member), on the CPU (tied weights once). CPU parameters are not copied here (the transport
    copies them into its flat buffer at once), except a ZeRO-3 learner's, gathered from their
    partitions for this call only."""
    with policy.gather(), torch.no_grad():
        return {name: (p.detach().to("cpu", copy=hasattr(p, "ds_status")))
                for name, p in policy.model.named_parameters() if p.requires_grad or not trainable_only}


def nbytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def to_wire(state: dict[str, torch.Tensor]) -> dict:
    """A state dict as its flat buffer (one numpy array, which Ray stores without pickling and a worker
    reads in place from shared memory) and the buffer's layout."""
    layout, buf = pack(state)
    return {"layout": layout, "buffer": buf.numpy()}


def from_wire(wire: dict) -> dict[str, torch.Tensor]:
    """:func:`to_wire`'s state dict as views of the (read-only) object-store memory: load them with
    ``load_state_dict``, which copies; never write to them."""
    return unpack(as_tensor(wire["buffer"]), wire["layout"])


@dataclass
class Sent:
    """One version of a policy's weights as the workers get it: an object ref (``to_wire`` form) for
    workers elsewhere and learner actors' weights, shared memory for workers on the driver's machine."""

    ref: Any = None
    shm: Any = None  # a weights.ShmWeights


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
        if callable(seat_map) and not isinstance(seat_map, LeagueSeating):
            return None
        maps = [seat_map] * n if callable(seat_map) else list(seat_map)
        league = [m for m in maps if isinstance(m, LeagueSeating)]
        base = league[0].base if league else maps[0]
        if any(not isinstance(m, LeagueSeating) and m is not base for m in maps):
            raise SeatingError("run.backend: ray plays the run's seat map or league seatings; a hook that seats "
                              "players another way needs run.backend: local")
        if not league:
            return None
        return LeaguePlan([m.opponent if isinstance(m, LeagueSeating) else None for m in maps],
                          tuple(sorted(league[0].league_seats)), league[0].members,
                          {m.opponent: m.agent for m in league})
