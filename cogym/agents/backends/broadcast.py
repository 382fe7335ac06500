"""Weights through a process-group broadcast (``ray.weight_sync: collective``): the process that holds a
policy's new weights (the Ray driver, or a learner actor of rank 0) and the processes that lack them
(rollout workers, or the workers of their vLLM engines, :class:`~cogym.agents.backends.vllm.WeightReceiver`)
form a process group, and the weights go to all of them in one broadcast (gloo over TCP on CPU, NCCL
between GPUs), without passing through shared memory or the object store.

The weights travel as one flat byte buffer (:mod:`cogym.agents.flat_weights`, the layout every weight
transport uses), so any dtype (bfloat16 included) arrives bit for bit, and a receiver rebuilds the
tensors from the sender's :func:`spec`. A group is made for one set of members (the sender and those
receivers, each as of its last start) and kept for the next sync with the same members; a receiver
that restarts joins a new group. Groups are ``torch.distributed`` process groups made directly on a
``TCPStore`` that the sender hosts, outside the default group a learner group (``ray.learner_workers``)
uses. The module needs only torch: it lives with the backends because a vLLM engine's worker process
joins groups too (the Ray runner's weight sync, :mod:`cogym.runners.ray.sync`, decides who meets whom)."""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass
from typing import Any

import torch

from cogym.agents.flat_weights import Layout, pack, spec, Spec, unpack

# A group's start and a broadcast wait this long for a silent member: what a worker that dies during a
# collective sync costs the run, before the others give up on it and are sent the weights again.
COLLECTIVE_TIMEOUT_S = 60.0
# spec (flat_weights'): what a receiver is given, by whoever starts a broadcast
__all__ = ["COLLECTIVE_TIMEOUT_S", "gpu_id", "Groups", "Meet", "Sending", "spec"]


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
        _, buf = pack(state, meet.device)
        try:
            self.join(meet, 0).broadcast(buf, 0).wait()
        except RuntimeError:
            self.drop(meet.name)  # a member died: this group is done with
            raise
        return int(buf.numel())

    def receive(self, meet: Meet, rank: int, names: Spec, on_device: bool = False) -> dict[str, torch.Tensor]:
        """The state dict of :func:`~cogym.agents.flat_weights.spec` ``names`` the sender broadcast to this
        receiver (rank >= 1), as views of the buffer: on the CPU, or with ``on_device`` where the
        broadcast landed (an engine's GPU under NCCL)."""
        layout = Layout.from_spec(names)
        buf = torch.empty(layout.size, dtype=torch.uint8, device=meet.device)
        try:
            self.join(meet, rank).broadcast(buf, 0).wait()
        except RuntimeError:
            self.drop(meet.name)
            raise
        return unpack(buf if on_device else buf.cpu(), layout)

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
