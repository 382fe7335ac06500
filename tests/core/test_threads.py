"""core/threads.py: the cores a process may use, the load other processes put on them, and the torch
threads that follow it (pinned, capped, down under load and back, with hysteresis)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cogym.core.threads import cgroup_cpu_quota, cpu_capacity, LoadMonitor, ThreadPolicy


class FakeMonitor:
    def __init__(self, loads):
        self.loads = list(loads)

    def sample(self):
        return self.loads.pop(0)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_cgroup_v2_quota_is_read_along_the_path(tmp_path: Path) -> None:
    (tmp_path / "user.slice" / "job").mkdir(parents=True)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "user.slice" / "cpu.max").write_text("250000 100000\n")
    (tmp_path / "user.slice" / "job" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota("0::/user.slice/job\n", root=tmp_path) == pytest.approx(2.5)
    assert cgroup_cpu_quota("0::/\n", root=tmp_path) is None  # no quota anywhere on the path


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    d = tmp_path / "cpu,cpuacct" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("150000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    text = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"
    assert cgroup_cpu_quota(text, root=tmp_path) == pytest.approx(1.5)
    (d / "cpu.cfs_quota_us").write_text("-1\n")  # v1's "no quota"
    assert cgroup_cpu_quota(text, root=tmp_path) is None


def test_capacity_is_at_most_the_affinity() -> None:
    assert 1 <= cpu_capacity() <= len(os.sched_getaffinity(0))


def test_pinned_threads_never_move() -> None:
    clock = Clock()
    policy = ThreadPolicy(pinned=3, capacity=2, monitor=FakeMonitor([1.9] * 5), clock=clock)
    for _ in range(3):
        clock.t += 5
        assert policy.adjust() == 3
    assert torch.get_num_threads() == 3 and not policy.changes and not policy.adaptive


def test_the_ceiling_is_the_cores_left_and_torch_default() -> None:
    assert ThreadPolicy(ceiling=16, capacity=4, monitor=FakeMonitor([])).ceiling == 4
    assert ThreadPolicy(ceiling=3, capacity=8, monitor=FakeMonitor([])).ceiling == 3
    assert ThreadPolicy(ceiling=16, capacity=8, reserved=6, monitor=FakeMonitor([])).ceiling == 2
    assert ThreadPolicy(ceiling=16, capacity=2, reserved=6, monitor=FakeMonitor([])).ceiling == 1  # at least 1


def test_threads_follow_the_load_with_hysteresis() -> None:
    """2 cores: more than 0.3 cores of other load cost a thread; it comes back at 0.2 or less."""
    loads = [0.0, 0.29, 0.31, 0.25, 0.21, 0.19, 1.0, 1.9, 0.0]
    expected = [2, 2, 1, 1, 1, 2, 1, 1, 2]
    clock = Clock()
    policy = ThreadPolicy(ceiling=2, capacity=2, monitor=FakeMonitor(loads), clock=clock, interval_s=1.0, seen=2)
    got = []
    for _ in loads:
        clock.t += 1.0
        got.append(policy.adjust())
        assert torch.get_num_threads() == got[-1]
    assert got == expected
    assert [(a, b) for a, b, _ in policy.changes] == [(2, 1), (1, 2), (2, 1), (1, 2)]


def test_a_quota_below_the_cores_counts_only_the_cores_left() -> None:
    """A container with a 2-core quota on a 64-core host: 40 cores of other tenants' load still leave it
    its 2; 63 leave one."""
    clock = Clock()
    policy = ThreadPolicy(ceiling=8, capacity=2, monitor=FakeMonitor([40.0, 63.0]), clock=clock, seen=64)
    assert policy.ceiling == 2
    clock.t = 2
    assert policy.adjust() == 2
    clock.t = 4
    assert policy.adjust() == 1


def test_no_measure_before_the_interval() -> None:
    clock = Clock()
    monitor = FakeMonitor([1.5])
    policy = ThreadPolicy(ceiling=2, capacity=2, monitor=monitor, clock=clock, interval_s=2.0, seen=2)
    clock.t = 1.0
    assert policy.adjust() == 2 and monitor.loads == [1.5]  # not measured yet
    clock.t = 2.5
    assert policy.adjust() == 1 and monitor.loads == []


def test_an_unreadable_load_keeps_the_count() -> None:
    clock = Clock()
    policy = ThreadPolicy(ceiling=2, capacity=2, monitor=FakeMonitor([None, None]), clock=clock, seen=2)
    clock.t = 5
    assert policy.adjust() == 2 and not policy.changes


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="needs Linux /proc")
def test_the_monitor_sees_another_process_and_not_its_own_children() -> None:
    """A spinning child of this process is its own work; a spinning process it did not start is load.
    (The spinners are started from a separate launcher process so they are not our descendants.)"""
    spin = [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"]
    monitor = LoadMonitor(cores=sorted(os.sched_getaffinity(0)))
    child = subprocess.Popen(spin)
    child.wait()
    own = monitor.sample()
    # a spinner that is not our descendant: started by a shell that exits at once (it is reparented)
    subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'import time\nt=time.time()\nwhile time.time()-t<1.5: pass' &"],
                   check=True)
    time.sleep(1.5)
    other = monitor.sample()
    assert own is not None and other is not None
    assert other > own + 0.5, (own, other)  # ~1 core of other load against ~0 (the machine's own noise aside)
