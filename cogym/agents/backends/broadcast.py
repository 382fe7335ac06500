"""Weights through a process-group broadcast (``ray.weight_sync: collective``): the process that holds a
policy's new weights (the Ray driver, or a learner actor of rank 0) and the processes that lack them
(rollout workers, or the workers of their vLLM engines, :class:`~cogym.agents.backends.vllm.WeightReceiver`)
form a process group, and the weights go to all of them in one broadcast (gloo over TCP on CPU, NCCL
between GPUs), without passing through shared memory or the object store.

The weights travel as one flat byte buffer (every tensor's bytes, in the sender's order), so any dtype
(bfloat16 included) arrives bit for bit, and a receiver rebuilds the tensors from the sender's
:func:`spec`. A group is made for one set of members (the sender and those receivers, each as of its
last start) and kept for the next sync with the same members; a receiver that restarts joins a new
group. Groups are ``torch.distributed`` process groups made directly on a ``TCPStore`` that the
sender hosts, outside the default group a learner group (``ray.learner_workers``) uses. The module
needs only torch: it lives with the backends because a vLLM engine's worker process joins groups
too (the Ray runner, :mod:`cogym.runners.ray.rollout`, decides who meets whom)."""

from __future__ import annotations

import datetime
import hashlib
import threading
from dataclasses import dataclass
from typing import Any

import torch

from cogym.core.errors import ConfigError

# A group's start and a broadcast wait this long for a silent member: what a worker that dies during a
# collective sync costs the run, before the others give up on it and are sent the weights again.
COLLECTIVE_TIMEOUT_S = 60.0
DTYPES = {str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                              torch.int16, torch.int8, torch.uint8, torch.bool)}


@dataclass(frozen=True)
class Meet:
    """Where and how a group starts: its name (unique per member set), the sender's TCPStore address and
    port, its size (the sender is rank 0, receiver k is rank k + 1) and its backend (``nccl`` where every
    member has a GPU, else ``gloo``; the buffer lives on the GPU or the CPU to match)."""

    name: str
    addr: str
    port: int
    world: int
    backend: str = "gloo"
    timeout_s: float = COLLECTIVE_TIMEOUT_S

    @property
    def device(self) -> str:
        return "cuda" if self.backend == "nccl" else "cpu"


def gpu_id() -> str | None:
    """This process's CUDA device (its UUID), or None without one: NCCL needs one device per member."""
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)


def spec(state: dict[str, torch.Tensor]) -> list[tuple[str, str, tuple[int, ...]]]:
    """``[(name, dtype, shape)]`` of a state dict, in its order: what a receiver needs to rebuild it."""
    return [(k, str(t.dtype), tuple(t.shape)) for k, t in state.items()]


ALIGN = 16  # each tensor starts at a multiple of this many bytes in the buffer (a view needs its dtype's alignment)


def _places(layout: list[tuple[str, str, tuple[int, ...]]]) -> tuple[list[tuple[int, int]], int]:
    """Each tensor's (offset, bytes) in the flat buffer, and the buffer's size."""
    out, offset = [], 0
    for name, dtype, shape in layout:
        d = DTYPES.get(dtype)
        if d is None:
            raise ConfigError(f"collective weight sync: parameter {name!r} has dtype {dtype}, which it cannot send")
        n = torch.Size(shape).numel() * torch.empty((), dtype=d).element_size()
        out.append((offset, n))
        offset += -(-n // ALIGN) * ALIGN
    return out, offset


def flatten(state: dict[str, torch.Tensor], device: torch.device | str = "cpu") -> torch.Tensor:
    """Every tensor's bytes, one after another (each at an offset aligned to :data:`ALIGN`), as one uint8
    tensor on ``device``."""
    places, size = _places(spec(state))
    buf = torch.zeros(size, dtype=torch.uint8, device=device)
    for (offset, n), t in zip(places, state.values()):
        buf[offset:offset + n] = t.detach().contiguous().reshape(-1).view(torch.uint8).to(device)
    return buf


def unflatten(buf: torch.Tensor, layout: list[tuple[str, str, tuple[int, ...]]]) -> dict[str, torch.Tensor]:
    """The state dict :func:`flatten` made, as views of ``buf``."""
    places, size = _places(layout)
    if size != buf.numel():
        raise RuntimeError(f"collective weight sync: the sender sent {buf.numel()} bytes, the layout holds {size}")
    return {name: buf[offset:offset + n].view(DTYPES[dtype]).view(shape)
            for (name, dtype, shape), (offset, n) in zip(layout, places)}


def digest(state: dict[str, torch.Tensor]) -> str:
    """A hash of a state dict's names, dtypes, shapes and bytes: equal digests, equal tensors bit for bit
    (tests compare what a receiver holds with what the sender sent)."""
    h = hashlib.blake2b(repr(spec(state)).encode(), digest_size=16)
    h.update(flatten(state).numpy())
    return h.hexdigest()


def size_of(layout: list[tuple[str, str, tuple[int, ...]]]) -> int:
    return _places(layout)[1]


class Groups:
    """One process's ends of its weight groups, by name (a process may sit in several: one per policy
    it sends or receives, and one more for each set of members)."""

    def __init__(self) -> None:
        self.groups: dict[str, Any] = {}

    def join(self, meet: Meet, rank: int) -> Any:
        """This process's end of group ``meet`` (started now if new: a collective call, every member at once)."""
        pg = self.groups.get(meet.name)
        if pg is None:
            timeout = datetime.timedelta(seconds=meet.timeout_s)
            store = torch.distributed.TCPStore(meet.addr, meet.port, meet.world, rank == 0, timeout=timeout)
            if meet.backend == "nccl":
                pg = torch.distributed.ProcessGroupNCCL(store, rank, meet.world)
            else:
                pg = torch.distributed.ProcessGroupGloo(store, rank, meet.world, timeout)
            self.groups[meet.name] = pg
        return pg

    def send(self, meet: Meet, state: dict[str, torch.Tensor]) -> int:
        """Broadcast ``state`` to the group's receivers (rank 0 sends); returns the bytes sent."""
        buf = flatten(state, meet.device)
        try:
            self.join(meet, 0).broadcast(buf, 0).wait()
        except RuntimeError:
            self.drop(meet.name)  # a member died: this group is done with
            raise
        return int(buf.numel())

    def receive(self, meet: Meet, rank: int, layout: list, on_device: bool = False) -> dict[str, torch.Tensor]:
        """The state dict the sender broadcast to this receiver (rank >= 1): on the CPU, or with
        ``on_device`` where the broadcast landed (an engine's GPU under NCCL)."""
        buf = torch.empty(size_of(layout), dtype=torch.uint8, device=meet.device)
        try:
            self.join(meet, rank).broadcast(buf, 0).wait()
        except RuntimeError:
            self.drop(meet.name)
            raise
        return unflatten(buf if on_device else buf.cpu(), layout)

    def drop(self, name: str) -> None:
        self.groups.pop(name, None)


class Sending:
    """:meth:`Groups.send` in a thread of its own (the driver sends while it waits for the receivers'
    calls); :meth:`result` waits for it and returns the bytes, or raises what it raised."""

    def __init__(self, groups: Groups, meet: Meet, state: dict[str, torch.Tensor]) -> None:
        self._out: list = []
        self._thread = threading.Thread(target=self._run, args=(groups, meet, state), daemon=True,
                                        name=f"cogym-send-{meet.name}")
        self._thread.start()

    def _run(self, groups: Groups, meet: Meet, state: dict[str, torch.Tensor]) -> None:
        try:
            self._out.append(groups.send(meet, state))
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self._out.append(exc)

    def result(self) -> int:
        self._thread.join()
        if isinstance(self._out[0], BaseException):
            raise self._out[0]
        return self._out[0]
