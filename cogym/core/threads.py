"""How many torch threads a process should compute with: never more than the cores it can get.

torch's intra-op threads meet at a barrier after every parallel operation, and OpenMP (GNU libgomp, which
torch's CPU wheels use) spins at that barrier for milliseconds before it sleeps. On a machine where another
process holds a core, one of the threads is descheduled behind it while the others spin: the default run
of this repository went from 0.27 s an iteration alone to 1.0 s beside one busy process and 5.0 s beside two
on 2 cores, while one thread gave 0.36 s and 0.60 s (docs/performance.md). So:

* :func:`cpu_capacity` is the cores this process may use: its CPU affinity, capped by its cgroup's CPU quota
  (a container's ``--cpus``), at least 1.
* :class:`ThreadPolicy` decides the threads from that capacity, from what cogym itself runs beside this
  process (``reserved``: e.g. Ray rollout workers computing while the driver updates), and, unless the
  count is pinned (``run.threads``), from the load: every :meth:`ThreadPolicy.adjust` (at most once a
  ``interval_s``) measures what *other* processes used of this process's cores since the last measure
  (:class:`LoadMonitor`; this process and its descendants, a local Ray cluster's, a sandbox's and a vLLM
  engine's processes included, do not count) and computes with the cores left, at least 1.

A thread count adds floats in another order (a matrix product's partial sums, a reduction's chunks), so a
run whose threads followed the load agrees with one that kept them to float rounding; every iteration logs
the count it used (``threads`` in metrics.jsonl). ``run.threads`` pins it: the same number every iteration,
whatever the load, and a run then repeats bit for bit.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import torch

__all__ = ["cpu_capacity", "cgroup_cpu_quota", "LoadMonitor", "ThreadPolicy"]

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def _quota_v2(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / max(1, int(period))


def _quota_v1(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 else quota / max(1, period)


def cgroup_cpu_quota(proc_cgroup: str | None = None, root: Path = _CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (``cpu.max``, or v1's ``cpu.cfs_quota_us``), the
    smallest along its path up to the root; None where there is none (or no cgroup file system)."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    quotas: list[float] = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2: the unified hierarchy
            base, read = root, _quota_v2
        elif "cpu" in controllers.split(","):
            base, read = root / controllers, _quota_v1
            if not base.is_dir():
                base = root / "cpu"
        else:
            continue
        rel = Path(path.lstrip("/"))
        for directory in {base / rel, *(base / p for p in rel.parents), base}:  # a container sees its own as the root
            q = read(directory)
            if q is not None:
                quotas.append(q)
    return min(quotas) if quotas else None


def cpu_capacity() -> int:
    """The cores this process may use: its affinity, capped by its cgroup's CPU quota (rounded down), >= 1."""
    cores = len(_affinity())
    quota = cgroup_cpu_quota()
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota + 1e-9)))
    return max(1, cores)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()  # after "pid (comm) ", whatever the comm holds


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            out.extend(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except (OSError, ValueError):
            continue
    return out


def _tree_cpu_s(pid: int) -> float | None:
    """CPU seconds of ``pid`` and every live descendant, each with its reaped children's (stat fields
    utime, stime, cutime, cstime); None where /proc cannot say."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        fields = _stat_fields(p)
        if fields is None:
            if p == pid:
                return None
            continue  # it ended in between: its time is in its parent's cutime once reaped
        total += sum(int(f) for f in fields[11:15])
        todo.extend(_children(p))
    return total / _CLK_TCK


def _cores_busy_s(cores: list[int]) -> tuple[float, float] | None:
    """(busy, all) CPU seconds the kernel counted on ``cores`` since boot (/proc/stat)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    want, busy, total = {f"cpu{c}" for c in cores}, 0, 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in want:
            v = [int(x) for x in rest.split()[:8]]  # user nice system idle iowait irq softirq steal
            busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
            total += sum(v)
    return (busy / _CLK_TCK, total / _CLK_TCK) if total else None


class LoadMonitor:
    """What other processes use of this process's cores, in cores, between one :meth:`sample` and the next.

    Busy time on the cores of this process's affinity (/proc/stat, a hypervisor's steal included) less the
    CPU time of this process and its descendants. None where /proc cannot say (not Linux, a sandboxed
    /proc): the policy then keeps its count."""

    def __init__(self, pid: int | None = None, cores: list[int] | None = None) -> None:
        self.pid = pid or os.getpid()
        self.cores = cores if cores is not None else _affinity()
        self._last = self._read()

    def _read(self) -> tuple[float, float, float] | None:
        busy, mine = _cores_busy_s(self.cores), _tree_cpu_s(self.pid)
        if busy is None or mine is None:
            return None
        return busy[0], busy[1], mine

    def sample(self) -> float | None:
        now, last = self._read(), self._last
        self._last = now
        if now is None or last is None:
            return None
        span = (now[1] - last[1]) / max(1, len(self.cores))  # wall seconds the kernel counted per core
        if span <= 0:
            return None
        return max(0.0, ((now[0] - last[0]) - (now[2] - last[2])) / span)


class ThreadPolicy:
    """The torch threads of one process, decided again at most every ``interval_s`` by :meth:`adjust`.

    ``pinned`` (``run.threads``) is kept whatever happens. Otherwise the ceiling is ``ceiling`` (torch's
    default, which respects ``OMP_NUM_THREADS``) capped by :func:`cpu_capacity` less ``reserved`` cores
    (what cogym runs beside this process), at least 1; under it, the count follows the load: the cores
    left by other processes, rounded so that more than 0.3 of a core of other load already costs a thread
    (a neighbour that takes a core now and then stalls every barrier it lands on), given back only when
    at most 0.2 of one is in use. ``adaptive=False`` keeps the ceiling (token-level play, which
    runs on one thread whatever the machine)."""

    DOWN_AT, UP_BELOW = 0.3, 0.2  # cores of other load that cost a thread, and that give it back

    def __init__(self, pinned: int = 0, ceiling: int | None = None, reserved: float = 0.0, capacity: int | None = None,
                 adaptive: bool = True, interval_s: float = 1.0, monitor: LoadMonitor | None = None,
                 clock=time.monotonic, seen: int | None = None) -> None:
        self.capacity = capacity if capacity is not None else cpu_capacity()
        # the cores the load is measured on (the affinity's): a cgroup quota below them caps the threads,
        # but other processes' load on them leaves min(quota, cores - load), not quota - load
        self.seen = seen if seen is not None else len(monitor.cores) if isinstance(monitor, LoadMonitor) else \
            len(_affinity())
        if pinned:
            self.ceiling = pinned
        else:
            room = max(1, math.floor(self.capacity - reserved + 1e-9))
            self.ceiling = max(1, min(ceiling or room, room))
        self.pinned = bool(pinned)
        self.adaptive = adaptive and not pinned and self.ceiling > 1  # at 1 there is nothing to give back
        self.threads = self.ceiling
        self.interval_s = interval_s
        self._clock = clock
        self._monitor = monitor if monitor is not None or not self.adaptive else LoadMonitor()
        self._since = clock()
        self.changes: list[tuple[int, int, float]] = []  # (from, to, other load in cores)
        self.last_load: float | None = None

    def _target(self, load: float) -> int:
        free = min(self.capacity, max(self.seen, self.capacity) - load)
        down = math.floor(free + self.DOWN_AT)  # 2 cores: over 0.3 cores of other load leave 1 thread
        up = math.floor(free + self.UP_BELOW)  # ... and the second comes back at 0.2 or less
        target = down if down < self.threads else up if up > self.threads else self.threads
        return max(1, min(self.ceiling, target))

    def adjust(self) -> int:
        """The count to compute with now (measured again if ``interval_s`` passed); sets torch's if it changed."""
        if self.adaptive and self._monitor is not None and self._clock() - self._since >= self.interval_s:
            self._since = self._clock()
            load = self._monitor.sample()
            if load is not None:
                self.last_load = load
                target = self._target(load)
                if target != self.threads:
                    self.changes.append((self.threads, target, load))
                    self.threads = target
        self.apply()
        return self.threads

    def apply(self) -> None:
        """Set torch's intra-op threads to :attr:`threads` (nothing if they already are)."""
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
