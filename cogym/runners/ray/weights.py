"""Weights to rollout workers on the driver's machine through shared memory (``ray.weight_sync: auto``).

``ray.put`` of a state dict costs more than copying it: on the 2-core machine 8.5 MB (the default
config's two tiny policies) took about 9 ms to put, against 0.3 ms to copy, and the worker's call then
fetched it from the object store. A worker on the driver's machine can instead read the weights from a
POSIX shared-memory segment the driver writes once per update (:class:`WeightSlots`): the driver copies
each tensor into it, the worker's load copies them out into its model (:func:`read`). After the
segment's header the weights lie as one flat buffer (:mod:`cogym.agents.flat_weights`, the layout of
every weight transport).

A policy has ``slots`` segments (``ray.max_staleness + 1``, as many versions as the driver keeps for
one-step runs and for replays after a worker restart), written in turn, so a write replaces the oldest
version kept. Each segment starts with a 64-byte header holding the version it holds (``-1`` while the
driver writes), which a reader checks before and after its copy, so a load that overlapped a write
fails rather than use half-overwritten weights (a bug: the driver waits for every load of a slot
before it writes the slot again).

Segments are created and unlinked by the driver (its ``multiprocessing`` resource tracker removes them
if the driver is killed); workers only attach, and do not register them with a tracker of their own
(one that would unlink the driver's segment when the worker exits).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import numpy as np
import torch

from cogym.agents.flat_weights import as_tensor, Layout, unpack, write
from cogym.runners.ray.pool import log

HEADER = 64  # bytes before the flat buffer: the version (int64), then padding to a cache line
WRITING = -1
_OWN: set[str] = set()  # the segments this process created (and its resource tracker unlinks if it dies)


@dataclass(frozen=True)
class ShmWeights:
    """What a worker needs to load one version from shared memory (small: sent with the load call)."""

    segment: str
    version: int
    layout: Layout  # of the flat buffer after the segment's header


class WeightSlots:
    """The driver's segments for one policy's weights: :meth:`write` puts a version in its slot and
    returns the :class:`ShmWeights` a worker reads it with."""

    def __init__(self, state: dict[str, torch.Tensor], slots: int, tag: str = "cogym") -> None:
        self.layout = Layout.of(state)
        self.size = HEADER + self.layout.size
        self.slots = max(int(slots), 1)
        self.segments: list[shared_memory.SharedMemory] = []
        room = free_bytes()
        if room is not None and self.slots * self.size > room * 0.9:  # writing past it would crash (SIGBUS)
            raise OSError(f"shared memory has {room / 2**20:.0f} MiB free, the weights need "
                          f"{self.slots} x {self.size / 2**20:.0f} MiB")
        try:
            for _ in range(self.slots):
                self.segments.append(shared_memory.SharedMemory(
                    name=f"{tag}-{secrets.token_hex(6)}", create=True, size=self.size))
                _header(self.segments[-1])[0] = WRITING
                _OWN.add(self.segments[-1].name)
        except BaseException:
            self.close()
            raise
        self.held: list[int | None] = [None] * self.slots  # the version in each slot
        self.writes = 0

    def fits(self, state: dict[str, torch.Tensor]) -> bool:
        return Layout.of(state) == self.layout

    def write(self, version: int, state: dict[str, torch.Tensor]) -> ShmWeights:
        """Copy ``state`` (CPU tensors, as ``state_of`` gives them, in the layout this was made for) into
        the slot written longest ago, with numpy on this thread (torch's copy would wake its intra-op
        threads, which then spin against the worker that starts loading)."""
        k = self.writes % self.slots
        self.writes += 1
        seg = self.segments[k]
        head = _header(seg)
        head[0] = WRITING
        self.held[k] = None
        write(state, self.layout, np.ndarray((self.layout.size,), dtype=np.uint8, buffer=seg.buf, offset=HEADER))
        head[0] = version
        self.held[k] = version
        return ShmWeights(seg.name, version, self.layout)

    def has(self, version: int) -> bool:
        return version in self.held

    def read_back(self, version: int) -> dict[str, torch.Tensor]:
        """A copy of ``version`` (for a worker that cannot attach: it goes by the object store)."""
        if not self.has(version):
            raise KeyError(f"weight version {version} is no longer in shared memory")
        seg = self.segments[self.held.index(version)]
        return {n: t.clone() for n, t in _views(seg, self.layout).items()}

    def close(self) -> None:
        """Unmap and unlink every segment (workers' mappings stay valid until they exit)."""
        for seg in self.segments:
            _OWN.discard(seg.name)
            try:
                seg.close()
            except BufferError:  # a view still exported: unlinking is what matters
                pass
            try:
                seg.unlink()
            except FileNotFoundError:
                pass
        self.segments = []


def sees_shm(ray, worker) -> bool:
    """Whether the Ray actor ``worker`` (a rollout worker, :meth:`sees`) can read this process's shared
    memory: it runs on this machine."""
    token = os.urandom(16)
    try:
        probe = shared_memory.SharedMemory(name=f"cogym-probe-{token.hex()[:12]}", create=True, size=len(token))
    except OSError as exc:  # no /dev/shm here: the object store for everyone
        log.warning("no shared memory for weights (%s): they go through the object store", exc)
        return False
    try:
        probe.buf[:len(token)] = token
        try:
            return bool(ray.get(worker.sees.remote(probe.name, token)))
        except ray.exceptions.RayError:
            return False  # died already (probed again when restarted), or could not look
    finally:
        probe.close()
        probe.unlink()


def free_bytes() -> int | None:
    """The free bytes of ``/dev/shm`` (where Linux keeps the segments; a container's is often 64 MiB), or
    None where it is not a directory."""
    if not os.path.isdir("/dev/shm"):
        return None
    return shutil.disk_usage("/dev/shm").free


def attach(name: str) -> shared_memory.SharedMemory:
    """Open the driver's segment ``name`` without handing it to this process's resource tracker (which
    would unlink it, and warn, when this process exits); in the process that created it, as usual."""
    if name in _OWN:
        return shared_memory.SharedMemory(name=name)
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)

    seg = shared_memory.SharedMemory(name=name)
    try:
        resource_tracker.unregister(seg._name, "shared_memory")  # noqa: SLF001 - the documented workaround before 3.13
    except Exception:  # noqa: BLE001 - no tracker running: nothing registered
        pass
    return seg


def _header(seg: shared_memory.SharedMemory) -> np.ndarray:
    """The segment's version field (the first 8 of its header's bytes)."""
    return np.ndarray((1,), dtype=np.int64, buffer=seg.buf)


def version_in(seg: shared_memory.SharedMemory) -> int:
    return int(_header(seg)[0])


def read(desc: ShmWeights, cache: dict) -> dict[str, torch.Tensor]:
    """The tensors of ``desc`` as views of the segment (``cache``: segment name -> attached segment, which
    the caller keeps for as long as it uses the views: the segment is unmapped when its entry goes).
    Copy them out (``load_state_dict`` does) and then call :func:`check`."""
    seg = cache.get(desc.segment)
    if seg is None:
        seg = cache[desc.segment] = attach(desc.segment)
    if seg.size < HEADER + desc.layout.size:
        raise RuntimeError(f"shared-memory segment {desc.segment} holds {seg.size} bytes, the weights need "
                           f"{HEADER + desc.layout.size}")
    check(desc, cache)
    return _views(seg, desc.layout)


def _views(seg: shared_memory.SharedMemory, layout: Layout) -> dict[str, torch.Tensor]:
    return unpack(as_tensor(seg.buf, HEADER, layout.size), layout)


def check(desc: ShmWeights, cache: dict) -> None:
    """Raise unless ``desc``'s segment holds ``desc.version`` (before a load, and after it: a load that
    overlapped a write would fail here rather than train on torn weights)."""
    held = version_in(cache[desc.segment])
    if held != desc.version:
        raise RuntimeError(f"shared-memory segment {desc.segment} holds weight version {held}, not {desc.version} "
                           "(overwritten during the load)")
