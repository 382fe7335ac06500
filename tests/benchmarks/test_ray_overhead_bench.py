"""benchmarks/ray_overhead.py's table: its modes, its pooling of rounds and the ratios it prints, on
made-up timings (the benchmark itself runs `cogym train` per mode and is run by hand)."""

from __future__ import annotations


import pytest

from tests.bench_scripts import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("ray_overhead") as module:
        yield module


def test_the_modes_split_the_cores_and_the_one_thread_pair_leaves_the_driver_one(bench) -> None:
    modes = dict(bench.modes([1, 2], cores=4))
    assert modes["in-process"] == []
    assert "ray.num_cpus=4" in modes["ray sync, 1w"] and "ray.num_cpus=2" in modes["ray sync, 2w"]
    assert "run.async=one_step" in modes["ray one_step, 2w"] and "run.async=one_step" not in modes["ray sync, 2w"]
    assert {"ray.num_cpus=3", "run.threads=1"} <= set(modes["ray sync, 1w, 1 thread"])
    assert "ray.learners=separate" in modes["ray one_step, 1w, learners separate"]
    one, two = modes["ray sync, 1w, learner group 1"], modes["ray sync, 1w, learner group 2"]
    assert "ray.learner_workers=1" in one and "ray.learner_workers=2" in two
    assert set(one) - {"ray.learner_workers=1", "ray.learner_num_cpus=1"} == set(two) - {"ray.learner_workers=2",
                                                                                        "ray.learner_num_cpus=0.5"}
    assert not any("1 thread" in name for name in dict(bench.modes([1], cores=1)))  # no core to leave


def test_rounds_are_pooled_and_each_rounds_ratio_is_shown(bench, monkeypatch, capsys, tmp_path) -> None:
    # in-process 1.0 s an iteration; Ray sync 1.1 s in round 0 and 1.3 s in round 1; one-step 0.5 s
    times = {("in-process", 0): 1.0, ("in-process", 1): 1.0, ("ray sync, 1w", 0): 1.1, ("ray sync, 1w", 1): 1.3,
             ("ray one_step, 1w", 0): 0.5, ("ray one_step, 1w", 1): 0.5}
    calls = []

    def run_mode(name, extra, iterations, out):
        calls.append((name, tuple(extra), out.name))
        t = times[(name, int(out.name[-1]))]
        rows = [{"iteration": i, "iteration_s": t, "rollout_s": t / 2, "update_s": t / 2} for i in range(2, iterations + 1)]
        return bench._summary(name, rows)

    monkeypatch.setattr(bench, "run_mode", run_mode)
    results = bench.iteration_table(4, [1], tmp_path, gpu=True, match=r"^ray (sync|one_step), 1w$", extra=["a=b"],
                                    repeats=2)
    # every chosen mode once a round, in rounds; in-process always, and without the GPU share
    assert [(c[0], c[2]) for c in calls] == [(m, f"round{k}") for k in range(2)
                                             for m in ("in-process", "ray sync, 1w", "ray one_step, 1w")]
    assert calls[0][1] == ("a=b",) and "ray.num_gpus=0.25" in calls[1][1] and calls[1][1][-1] == "a=b"
    by = {r["mode"]: r for r in results}
    assert by["ray sync, 1w"]["iter_s"] == pytest.approx(1.2)  # the median of 3 x 1.1 and 3 x 1.3
    out = capsys.readouterr().out
    assert "1 worker: Ray sync +20.0% over in-process (rounds +10.0% to +30.0%); one_step 2.40x" in out
    assert "2 rounds" in out and "one GPU shared by every process" in out


def test_the_one_thread_pair_is_compared_with_its_sync_run_and_in_process(bench, monkeypatch, capsys, tmp_path) -> None:
    times = {"in-process": 0.3, "ray sync, 1w, 1 thread": 0.4, "ray one_step, 1w, 1 thread": 0.25}
    monkeypatch.setattr(bench, "run_mode", lambda name, extra, iterations, out: bench._summary(
        name, [{"iteration": 2, "iteration_s": times[name], "rollout_s": 0.1, "update_s": 0.1}]))
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    bench.iteration_table(2, [1], tmp_path, match="1 thread")
    out = capsys.readouterr().out
    assert "1 worker: with 1 thread a process one_step 1.60x the iterations/s of sync and 1.20x in-process" in out
    assert "Ray sync +" not in out  # no plain sync run was chosen
