"""A state dict as one flat byte buffer: the layout every weight transport uses.

Weights travel between processes as the bytes of every tensor, one after another in the state
dict's order, each starting at a multiple of :data:`ALIGN` bytes, so any dtype (bfloat16 included)
arrives bit for bit and the receiver's tensors are views of the buffer (no copy). A :class:`Layout`
says where each tensor is (name, dtype, shape, offset, bytes) and the buffer's size; what travels with
a buffer is its :meth:`Layout.spec` (names, dtypes and shapes, plain lists and strings that any RPC
carries), from which the receiver rebuilds the same layout.

The transports: shared memory (:mod:`cogym.runners.ray.weights`, the buffer after a segment's header),
Ray's object store (:mod:`cogym.runners.ray.wire`, the buffer as one numpy array), a process-group
broadcast (:mod:`cogym.agents.backends.broadcast`) and the bytes a vLLM engine's workers reload from
(:class:`cogym.agents.backends.vllm.WeightReceiver`).
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch

from cogym.core.errors import CogymError

ALIGN = 64  # each tensor starts at a multiple of this many bytes (a cache line; any dtype's alignment)
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool)}

Spec = list[tuple[str, str, tuple[int, ...]]]  # [(name, dtype name, shape)] in the buffer's order


class WeightSyncError(CogymError, ValueError):
    """A model whose weights the flat buffer cannot carry (a parameter of a dtype it does not send)."""


@dataclass(frozen=True)
class Entry:
    """One tensor's place in the buffer."""

    name: str
    dtype: str  # a key of DTYPES, e.g. "float32"
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Layout:
    """Where each tensor of a state dict lies in its flat buffer, and the buffer's size in bytes."""

    entries: tuple[Entry, ...]
    size: int

    @staticmethod
    def of(state: Mapping[str, torch.Tensor]) -> "Layout":
        return Layout.from_spec(spec(state))

    @staticmethod
    def from_spec(names: Spec) -> "Layout":
        """The layout of :func:`spec` ``names`` (as it arrives from an RPC too: lists for tuples)."""
        entries, offset = [], 0
        for name, dtype, shape in names:
            d = DTYPES.get(dtype)
            if d is None:
                raise WeightSyncError(f"weight sync: parameter {name!r} has dtype {dtype}, which it cannot send")
            n = torch.Size(shape).numel() * d.itemsize
            entries.append(Entry(name, dtype, tuple(shape), offset, n))
            offset += -(-n // ALIGN) * ALIGN
        return Layout(tuple(entries), offset)

    def spec(self) -> Spec:
        return [(e.name, e.dtype, e.shape) for e in self.entries]


def spec(state: Mapping[str, torch.Tensor]) -> Spec:
    """``[(name, dtype, shape)]`` of a state dict, in its order: what a receiver rebuilds the layout from."""
    return [(k, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for k, t in state.items()]


def write(state: Mapping[str, torch.Tensor], layout: Layout, out: torch.Tensor | np.ndarray) -> None:
    """Copy each tensor of ``state`` (the names of ``layout``) into its place in ``out`` (uint8, ``layout.size``
    bytes). Into CPU memory numpy copies, on this thread (torch's copy would wake its intra-op threads)."""
    if isinstance(out, torch.Tensor) and out.device.type == "cpu":
        out = out.numpy()
    for e in layout.entries:
        if not e.nbytes:
            continue
        src = state[e.name].detach().contiguous().reshape(-1).view(torch.uint8)
        if isinstance(out, np.ndarray):
            np.copyto(out[e.offset:e.offset + e.nbytes], src.cpu().numpy())
        else:
            out[e.offset:e.offset + e.nbytes].copy_(src)


def pack(state: Mapping[str, torch.Tensor], device: torch.device | str = "cpu") -> tuple[Layout, torch.Tensor]:
    """``state``'s layout and its flat buffer (a uint8 tensor on ``device``, padding zeroed)."""
    layout = Layout.of(state)
    cpu = torch.device(device).type == "cpu"
    buf = torch.from_numpy(np.zeros(layout.size, np.uint8)) if cpu else torch.zeros(layout.size, dtype=torch.uint8,
                                                                                    device=device)
    write(state, layout, buf)
    return layout, buf


def unpack(buf: torch.Tensor, layout: Layout) -> dict[str, torch.Tensor]:
    """The state dict in ``buf`` (a uint8 tensor of ``layout.size`` bytes), as views of it."""
    if buf.numel() != layout.size:
        raise RuntimeError(f"weight sync: a flat buffer of {buf.numel()} bytes arrived, the layout holds {layout.size}")
    return {e.name: buf[e.offset:e.offset + e.nbytes].view(DTYPES[e.dtype]).view(e.shape) for e in layout.entries}


def as_tensor(memory, offset: int = 0, count: int = -1) -> torch.Tensor:
    """``count`` bytes (-1: the rest) of ``memory`` (bytes, bytearray, a memoryview or a numpy array) from
    ``offset``, as a uint8 tensor over that memory (no copy; it keeps ``memory`` alive, not a mapping
    under it: a shared-memory segment must stay open while its views are used). Read-only memory is
    allowed: never write to the tensor."""
    n = memoryview(memory).nbytes - offset if count == -1 else count
    if not n:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only buffer
        return torch.frombuffer(memory, dtype=torch.uint8, count=n, offset=offset)


def digest(state: Mapping[str, torch.Tensor]) -> str:
    """A hash of a state dict's names, dtypes, shapes and bytes: equal digests, equal tensors bit for bit
    (tests compare what a receiver holds with what the sender sent)."""
    layout, buf = pack(state)
    h = hashlib.blake2b(repr(layout.spec()).encode(), digest_size=16)
    h.update(buf.numpy())
    return h.hexdigest()
