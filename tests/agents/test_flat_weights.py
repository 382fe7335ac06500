"""The one flat layout of a state dict (agents/flat_weights.py) through every weight transport: shared
memory (runners/ray/weights.py), the object store's wire form (runners/ray/wire.py), a gloo broadcast
(agents/backends/broadcast.py, into a rollout worker and into a vLLM worker) and the bytes a vLLM
engine's workers reload from (agents/backends/vllm.py). Each brings back the sender's tensors bit for
bit, in every dtype, as views of the buffer it arrived in."""

from __future__ import annotations

import dataclasses
import json
import pickle
import socket
import threading

import pytest
import torch

from cogym.agents.backends.broadcast import Groups, Meet
from cogym.agents.backends.vllm import reload_args, WeightReceiver
from cogym.agents.flat_weights import ALIGN, as_tensor, digest, Layout, pack, spec, unpack
from cogym.runners.ray.weights import read, WeightSlots
from cogym.runners.ray.wire import from_wire, to_wire


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"f32": torch.randn(3, 5, generator=g), "bf16": torch.randn(7, generator=g).to(torch.bfloat16),
            "f16": torch.randn(2, 2, generator=g).half(), "f64": torch.randn(3, generator=g).double(),
            "i64": torch.arange(-4, 5), "i32": torch.arange(6, dtype=torch.int32).view(2, 3),
            "i8": torch.tensor([-128, 0, 127], dtype=torch.int8), "u8": torch.arange(250, 256, dtype=torch.uint8),
            "bool": torch.tensor([True, False, True]), "nan": torch.tensor([float("nan"), -0.0, float("inf")]),
            "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4), "strided": torch.randn(4, 6, generator=g).t()}


def _bits(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    for k, t in want.items():
        assert got[k].dtype == t.dtype and got[k].shape == t.shape and _bits(got[k]) == _bits(t), k


def _views_of(got: dict[str, torch.Tensor], memory: torch.Tensor) -> bool:
    lo, hi = memory.data_ptr(), memory.data_ptr() + memory.numel()
    return all(lo <= t.data_ptr() < hi for t in got.values() if t.numel())


def test_the_layout_puts_every_tensor_at_an_aligned_offset_in_order() -> None:
    state = _state()
    layout, buf = pack(state)
    assert [e.name for e in layout.entries] == list(state) and layout.spec() == spec(state)
    assert all(e.offset % ALIGN == 0 and e.nbytes == t.numel() * t.element_size()
               for e, t in zip(layout.entries, state.values()))
    assert buf.dtype == torch.uint8 and buf.numel() == layout.size == Layout.from_spec(spec(state)).size
    back = unpack(buf, layout)
    _same(back, state)
    assert _views_of(back, buf)  # views, not copies
    with pytest.raises(RuntimeError, match="a flat buffer of 10 bytes arrived, the layout holds"):
        unpack(buf[:10], layout)
    with pytest.raises(ValueError, match="parameter 'c' has dtype complex64, which it cannot send"):
        Layout.of({"c": torch.zeros(2, dtype=torch.complex64)})


def test_shared_memory_brings_back_the_layout_bit_for_bit() -> None:
    state = _state()
    slots = WeightSlots(state, slots=1)
    cache: dict = {}
    try:
        desc = slots.write(4, state)
        assert desc.layout == Layout.of(state)
        got = read(desc, cache)
        _same(got, state)
        assert digest(got) == digest(state)
        del got
    finally:
        for seg in cache.values():
            seg.close()
        slots.close()


def test_the_object_store_wire_form_brings_back_the_layout_bit_for_bit() -> None:
    state = _state()
    wire = to_wire(state)
    assert wire["layout"] == Layout.of(state) and wire["buffer"].dtype.name == "uint8"
    arrived = pickle.loads(pickle.dumps(wire, protocol=5))  # what ray.put and ray.get do with it
    arrived["buffer"].flags.writeable = False  # the object store's memory is read-only
    got = from_wire(arrived)
    _same(got, state)
    assert _views_of(got, as_tensor(arrived["buffer"]))


class _FakeVllmWorker(WeightReceiver):
    """A vLLM worker as far as :class:`WeightReceiver` sees one: its in-place reload keeps what it got."""

    def reload_weights(self, weights_iterator, is_checkpoint_format: bool) -> None:
        assert is_checkpoint_format
        self.got = {k: t.clone() for k, t in weights_iterator}


def test_a_vllm_workers_reload_gets_the_layout_bit_for_bit_with_tied_names() -> None:
    state = _state()
    names, blob, aliases = reload_args(state, {"f32": ["tied.f32"]})
    names = json.loads(json.dumps(names))  # vLLM's RPC gives tuples back as lists
    worker = _FakeVllmWorker()
    assert worker.cogym_reload_weights(names, blob, aliases) == len(state) + 1
    _same({k: worker.got[k] for k in state}, state)
    assert _bits(worker.got["tied.f32"]) == _bits(state["f32"])


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("into", ["rollout worker", "vllm worker"])
def test_a_gloo_broadcast_brings_back_the_layout_bit_for_bit(into: str) -> None:
    state = _state()
    meet = Meet(f"flat/{into}", "127.0.0.1", _port(), 2, "gloo", 30.0)
    got, errors = {}, []

    def receive() -> None:
        try:
            names = json.loads(json.dumps(spec(state)))  # as an RPC hands it over
            if into == "vllm worker":
                worker = _FakeVllmWorker()
                loaded, seen = worker.cogym_receive_broadcast(dataclasses.asdict(meet), 1, names, {}, check=True)
                got.update(worker.got, loaded=loaded, seen=seen)
            else:
                got.update(Groups().receive(meet, 1, names))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=receive)
    thread.start()
    sent = Groups().send(meet, state)
    thread.join(60)
    assert not errors and sent == Layout.of(state).size
    if into == "vllm worker":
        assert got.pop("loaded") == len(state) and got.pop("seen") == digest(state)
    _same(got, state)
