"""benchmarks/scaling.py: the configs each curve varies, the fit, and one ``--quick`` run end to end
(every curve measured on its two smallest points, the table, the JSON and the PNG written). No timing
is asserted: the benchmark itself is run by hand (docs/performance.md)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.bench_scripts import benchmark_module, benchmark_path

BENCH = benchmark_path("scaling")


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("scaling", "scaling_bench") as module:
        yield module


def test_each_curve_changes_one_thing_of_the_default_config(bench) -> None:
    base = bench.base_tree()
    assert bench.games_tree(128)["game"]["num_games"] == 128
    seats = bench.seats_tree(5)
    assert seats["game"]["kwargs"]["num_solvers"] == 4 and seats["seats"] == base["seats"]
    assert bench.policies_tree(2) == base  # two policies: the default config itself
    one = bench.policies_tree(1)
    assert set(one["seats"].values()) == {"shared"} and list(one["learners"]) == ["shared"]
    assert one["learners"]["shared"]["role_algorithms"] == {"proposer": base["learners"]["proposer"]["algorithm"]}
    four = bench.policies_tree(4)
    assert set(four["policies"]) == set(four["learners"]) == {"proposer", "solver_p0", "solver_p1", "solver_p2"}
    solvers = [four["seats"][f"solver_{i}"] for i in range(base["game"]["kwargs"]["num_solvers"])]
    assert sorted(set(solvers)) == ["solver_p0", "solver_p1", "solver_p2"] and "solver" not in four["seats"]
    with pytest.raises(ValueError):
        bench.seats_tree(1)


def test_the_fit_recovers_a_power_law_and_a_line(bench) -> None:
    xs = [2, 4, 8, 16]
    a, b = bench.fit(xs, [0.5 * x ** 1.5 for x in xs])
    assert a == pytest.approx(0.5) and b == pytest.approx(1.5)
    c0, c1 = bench.fit_linear(xs, [0.2 + 0.05 * x for x in xs])
    assert c0 == pytest.approx(0.2) and c1 == pytest.approx(0.05)


def test_quick_run_measures_every_curve_and_writes_the_plot(tmp_path) -> None:
    out = tmp_path / "plots" / "scaling.png"
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--out", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads(out.with_suffix(".json").read_text())
    assert set(report["curves"]) == {"games", "seats", "policies", "players"}
    for curve, r in report["curves"].items():
        assert len(r["x"]) == len(r["seconds"]) >= 2, curve
        assert all(s > 0 for s in r["seconds"]), curve
        assert math.isfinite(r["b"]) and math.isfinite(r["a"]) and r["a"] > 0, curve
    assert all(p["games"] > 0 for p in report["curves"]["players"]["points"])
    for curve in ("games", "seats", "policies", "players"):  # the table and the progress name every curve
        assert any(line.startswith(curve) for line in done.stdout.splitlines()), done.stdout
        assert f"[scaling] {curve} 1/2" in done.stderr
    assert str(out) in done.stdout
