"""Rollout workers killed at every kind of moment (run.backend: ray): during a weight sync, idle between
two calls and restarted by Ray before the driver saw it die, while another worker restarts, and in the
last iteration's rollout. Each run ends as the
uninterrupted one-process run: the same metrics (to float rounding for those built on behaviour
log-probs, exactly for tokens and rewards), every game played once. The moments are made exact by
killing from inside the driver's own calls; scripts/ray_faults.py kills from outside at random moments.
On a local 2-CPU cluster with the tiny model (tests/runners/ray/ray_runs.py: the shrunken config)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cogym.runners.train.loop import train
from tests.rounding import same
from tests.runners.ray.ray_runs import metric_rows, small_config

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    """The one-process run of SMALL (runs before any Ray fixture needs the CPUs)."""
    out = tmp_path_factory.mktemp("local")
    train(small_config(out), out / "run", progress=False)
    return metric_rows(out / "run")


def _restarted_by_ray(handle, old_pid: int, timeout: float = 120.0) -> int:
    """Wait until Ray has restarted the actor behind ``handle`` on its own (a new process answers); its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = ray.get(handle.ping.remote(), timeout=10)["pid"]
            if pid != old_pid:
                return pid
        except ray.exceptions.RayActorError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"Ray did not restart pid {old_pid} within {timeout} s")


def test_a_worker_restarted_by_ray_between_calls_gets_its_weights_again(reference, local_cluster, tmp_path: Path,
                                                                        monkeypatch, capsys) -> None:
    """The crash the fault trials found: a worker killed idle after it loaded version 1, and restarted by
    Ray before the driver called it again, holds the initial weights; the driver's record says version 1.
    The next rollout call meets the fresh process, which says what it holds (StaleWorker): the driver
    counts a restart, sends the weights again and replays the share, rather than stop the run."""
    from cogym.runners.ray import rollout as ray_rollout

    sync = ray_rollout.RayRollout.sync
    killed: list[tuple[int, int]] = []

    def sync_then_kill_idle(self, policies, versions, wait=True):
        out = sync(self, policies, versions, wait)
        if versions.get("solver") == 1 and not killed:  # worker 1 holds version 1 and is idle
            old = self.pids()[1]
            os.kill(old, signal.SIGKILL)
            killed.append((old, _restarted_by_ray(self.workers[1], old)))
        return out

    monkeypatch.setattr(ray_rollout.RayRollout, "sync", sync_then_kill_idle)
    summary = train(small_config(tmp_path, "run.backend=ray"), tmp_path / "run", progress=False)
    err = capsys.readouterr().err
    assert killed, "the test never killed a worker"
    old, new = killed[0]
    assert (f"rollout worker 1 (pid {old}) was restarted by Ray before the driver saw it die (now pid {new}; "
            "restart 1 of at most 3)") in err
    assert summary["ray_worker_restarts"] == 1
    rows = metric_rows(tmp_path / "run")
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert same(rows, reference)  # no game lost or played twice, every sample with the right weights


def test_workers_killed_during_a_sync_while_another_restarts_and_in_the_last_rollout(
        reference, local_cluster, tmp_path: Path, monkeypatch, capsys) -> None:
    """Worker 0 is killed while it loads version 1 (its load call is under way); while the driver waits for
    Ray to restart it, worker 1 is killed too, idle, and Ray restarts it unseen; in iteration 3, the last,
    worker 0 is killed mid-rollout. The run ends as the uninterrupted one, with three restarts counted."""
    from cogym.runners.ray import rollout as ray_rollout

    load, wait_alive, submit = (ray_rollout.RayRollout._load, ray_rollout.RayRollout._wait_alive,
                                ray_rollout.RayRollout.submit)
    events: list[str] = []

    def load_then_kill(self, r, versions):
        ref = load(self, r, versions)
        if ref is not None and r == 0 and versions.get("solver") == 1 and "sync" not in events:
            events.append("sync")
            os.kill(self.pids()[0], signal.SIGKILL)  # the load call is sent: it dies loading (or before)
        return ref

    def wait_alive_and_kill_the_other(self, r):
        if r == 0 and "other" not in events:
            events.append("other")
            os.kill(self.pids()[1], signal.SIGKILL)  # worker 1 dies while worker 0 restarts
        return wait_alive(self, r)

    def submit_then_kill(self, *args, **kwargs):
        pending = submit(self, *args, **kwargs)
        if kwargs.get("iteration") == 3 and "last" not in events:
            events.append("last")
            os.kill(self.pids()[0], signal.SIGKILL)
        return pending

    monkeypatch.setattr(ray_rollout.RayRollout, "_load", load_then_kill)
    monkeypatch.setattr(ray_rollout.RayRollout, "_wait_alive", wait_alive_and_kill_the_other)
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit_then_kill)
    summary = train(small_config(tmp_path, "run.backend=ray"), tmp_path / "run", progress=False)
    err = capsys.readouterr().err
    assert events == ["sync", "other", "last"]
    assert "weights reach the 2 rollout workers through shared memory" in err  # ray.weight_sync: auto
    assert "rollout worker 0" in err and "died during a weight sync to" in err
    assert "died during rollout it3" in err and "replaying" in err
    assert summary["ray_worker_restarts"] == 3
    rows = metric_rows(tmp_path / "run")
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert same(rows, reference)


def test_the_fault_script_kills_from_outside_and_every_trial_ends_as_the_uninterrupted_run(tmp_path: Path) -> None:
    """One trial of scripts/ray_faults.py, with its own runs and clusters, killing from outside at random
    moments of the drawn kinds (CI affords one: each run starts a cluster and its actors; two trials take 2
    minutes on 2 cores): no crash, the run's metrics the uninterrupted run's. 20 trials are measured by hand."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ray_faults.py"), "--trials", "1", "--iterations", "2",
                          "--seed", "5", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    report = json.loads((tmp_path / "report.json").read_text())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert report["faulted"] == 1 and report["crashes"] == 0 and report["different"] == 0
    assert report["kills"] >= 1 and report["trials"] <= 3, out.stdout
    assert "with a kill that landed" in out.stdout


class _Broken:
    """A worker whose constructor raises (a game or a config that fails inside the worker)."""

    def __init__(self, index: int) -> None:
        raise ValueError(f"worker {index}: the game could not be built")

    def ping(self) -> dict:
        return {"pid": os.getpid()}


@pytest.mark.timeout(120)
def test_a_worker_whose_constructor_raises_stops_the_pool_at_once(local_cluster, tmp_path: Path) -> None:
    """Not mistaken for a worker that died while starting (which is waited for, up to ray.start_timeout_s):
    a constructor that raised would raise again, so its error stops the pool at once."""
    from cogym.runners.ray.pool import ActorPool

    rc = small_config(tmp_path, "run.backend=ray", "ray.start_timeout_s=600").ray
    # (the workers cannot import this test module by name, which fails their constructors the same way)
    with pytest.raises(ray.exceptions.RayActorError, match="error raised in its creation task"):
        ActorPool(rc, _Broken, lambda i: (i,), kind="broken worker")
