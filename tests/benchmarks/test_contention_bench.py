"""benchmarks/contention.py: its modes' overrides, its busy processes (started, then killed with whatever
they started), and one real tiny run's figures (the comparisons themselves are run by hand)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.bench_scripts import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("contention", "contention_bench") as module:
        yield module


def test_modes(bench) -> None:
    assert bench.mode_args("default", 4) == []
    assert bench.mode_args("fixed", 4) == ["run.threads=4"]
    assert bench.mode_args("ray-fixed", 2) == ["run.backend=ray", "run.threads=2"]
    assert bench.mode_args("vllm", 2) == ["policies.solver.generation.backend=vllm"]
    with pytest.raises(SystemExit, match="unknown mode 'fast'"):
        bench.mode_args("fast", 2)


def test_busy_processes_are_killed(bench) -> None:
    spinners = bench.start_spinners(2, "python")
    pids = [p.pid for p in spinners]
    assert all(p.poll() is None for p in spinners)
    bench.stop(spinners)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_one_short_run_alone(bench, tmp_path: Path, capsys) -> None:
    """The whole script on 2 iterations alone (no busy process): the table and its figures."""
    code = bench.main(["--modes", "default", "--busy", "0", "--iterations", "2", "--warmup", "0",
                       "--json", str(tmp_path / "c.json")])
    out = capsys.readouterr().out
    assert code == 0  # no acceptance line applies to a run alone without `fixed`
    row = [line for line in out.splitlines() if line.startswith("default")]
    assert len(row) == 1 and float(row[0].split()[3]) > 0
    fig = json.loads((tmp_path / "c.json").read_text())["default/0"][0]
    assert fig["it_s"] > 0 and fig["threads"] and all(t >= 1 for t in fig["threads"])
