"""Weights through shared memory (runners/ray/weights.py): what a worker reads is bit for bit what the
driver wrote, in every dtype; slots are reused oldest first; a read of a replaced version fails; the
segments go when closed; a worker's attach leaves the driver's segment alone when the worker exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cogym.agents.flat_weights import ALIGN, Layout
from cogym.runners.ray.weights import HEADER, WeightSlots, check, read


def _state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(33, 7, generator=g), "b": torch.randn(5, generator=g).to(torch.bfloat16),
            "h": torch.randn(3, 3, generator=g).half(), "i": torch.arange(11, dtype=torch.int64) * seed,
            "empty": torch.zeros(0), "scalar": torch.tensor(float(seed)),
            "strided": torch.randn(6, 4, generator=g).t()}  # not contiguous


def test_a_segment_holds_the_header_then_the_flat_buffer() -> None:
    lay = Layout.of(_state(1))
    assert lay.entries[0].offset == 0 and all(e.offset % ALIGN == 0 for e in lay.entries)
    assert [e.nbytes for e in lay.entries] == [33 * 7 * 4, 5 * 2, 9 * 2, 11 * 8, 0, 4, 24 * 4]
    assert lay.size >= lay.entries[-1].offset + lay.entries[-1].nbytes
    slots = WeightSlots(_state(1), slots=1)
    try:
        assert slots.size == HEADER + lay.size and slots.segments[0].size >= slots.size
    finally:
        slots.close()


def test_a_read_is_the_written_state_bit_for_bit_and_slots_rotate() -> None:
    slots = WeightSlots(_state(1), slots=2)
    cache: dict = {}
    try:
        first = slots.write(1, _state(1))
        second = slots.write(2, _state(2))
        assert first.segment != second.segment and slots.has(1) and slots.has(2)
        for desc, seed in ((first, 1), (second, 2)):
            got = read(desc, cache)
            want = _state(seed)
            assert got.keys() == want.keys()
            for k in want:
                assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
                assert torch.equal(got[k], want[k]), k
            check(desc, cache)
        third = slots.write(3, _state(3))  # replaces version 1, the oldest
        assert third.segment == first.segment and not slots.has(1) and slots.has(2)
        with pytest.raises(RuntimeError, match="holds weight version 3, not 1"):
            read(first, cache)
        with pytest.raises(KeyError, match="version 1 is no longer"):
            slots.read_back(1)
        back = slots.read_back(2)
        assert torch.equal(back["w"], _state(2)["w"]) and back["w"].data_ptr() != read(second, cache)["w"].data_ptr()
        assert slots.fits(_state(5)) and not slots.fits({"w": torch.zeros(2)})
    finally:
        names = [s.name for s in slots.segments]
        for seg in cache.values():
            seg.close()
        slots.close()
    assert names and not any(Path("/dev/shm", n).exists() for n in names)


def test_a_worker_that_attached_and_exited_leaves_the_segment_to_the_driver(tmp_path: Path) -> None:
    """Before Python 3.13 attaching registers a segment with the process's resource tracker, which
    unlinks it when that process exits: a finished (or killed) worker would take the driver's weights
    with it."""
    slots = WeightSlots(_state(1), slots=1)
    try:
        desc = slots.write(7, _state(1))
        code = ("import sys, torch; from cogym.runners.ray.weights import ShmWeights, read\n"
                "from cogym.agents.flat_weights import Entry, Layout\n"
                f"d = {desc!r}\n"
                "cache = {}\nprint(float(read(d, cache)['w'].sum()))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert float(done.stdout) == pytest.approx(float(_state(1)["w"].sum()), rel=1e-6)
        assert "leaked" not in done.stderr and "resource_tracker" not in done.stderr
        cache: dict = {}
        assert slots.has(7) and torch.equal(read(desc, cache)["w"], _state(1)["w"])  # still there
        cache.clear()
    finally:
        slots.close()


def test_slots_that_do_not_fit_in_shared_memory_are_refused(monkeypatch) -> None:
    """Writing past a full /dev/shm kills the process with SIGBUS: refuse up front instead."""
    from cogym.runners.ray import weights as shm_weights

    need = 2 * (HEADER + Layout.of(_state(1)).size)
    monkeypatch.setattr(shm_weights, "free_bytes", lambda: need)  # 90% of it is not enough
    with pytest.raises(OSError, match="shared memory has 0 MiB free, the weights need 2 x 0 MiB"):
        WeightSlots(_state(1), slots=2)
    monkeypatch.setattr(shm_weights, "free_bytes", lambda: 2 * need)
    WeightSlots(_state(1), slots=2).close()


def test_a_policy_with_nothing_to_send_writes_an_empty_slot() -> None:
    slots = WeightSlots({}, slots=1)
    try:
        cache: dict = {}
        assert read(slots.write(3, {}), cache) == {} and slots.has(3)
        cache.clear()
    finally:
        slots.close()
