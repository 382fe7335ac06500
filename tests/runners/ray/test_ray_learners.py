"""Learners on Ray (ray.learners: colocated | separate): each trained policy's learner in an actor of the
rollout workers' placement group trains as the driver would, through a killed driver and --resume, with
LoRA adapters and one-step off-policy; a learner actor killed mid-update resumes the run from its
checkpoint by itself. ZeRO-3 in learner actors (a group of 2): test_ray_learner_groups.py.
On a local 2-CPU cluster with the tiny model (tests/runners/ray/ray_runs.py: the shrunken config)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from cogym.runners.train.loop import train
from tests.runners.ray.ray_runs import ONE_THREAD, metric_rows, raw_rows, small_config

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def one_thread_reference(tmp_path_factory) -> list[dict]:
    """SMALL with one thread, the held-out evaluation every 2 iterations, in-process learners."""
    out = tmp_path_factory.mktemp("one_thread")
    train(small_config(out, "run.threads=1", "eval.declared=true", "run.eval_every=2"), out / "run", progress=False)
    return metric_rows(out / "run")


@pytest.mark.parametrize(("where", "bundles", "kill"), [("colocated", 2, True)])
def test_learner_actors_train_as_the_driver_would(one_thread_reference, local_cluster, tmp_path: Path, where,
                                                  bundles, kill, monkeypatch, capsys) -> None:
    """ray.learners colocated: each trained policy's learner in an actor sharing a worker's bundle of the
    workers' placement group. The same updates and evaluations (the driver's copies take the actors'
    weights) as in-process learners. The solver's actor is also SIGKILLed as its second update starts
    (its optimizer state dies with it): the run resumes by itself from the checkpoint of iteration 1
    with new actors (which load the checkpoint's learner state) and ends as the uninterrupted run.
    ``separate`` learner actors: the one-step test below, the LoRA test and the learner groups
    (tests/runners/ray/test_ray_learner_groups.py: separate bundles, ZeRO-3 weights gathered for each sync);
    a driver killed and --resume: the LoRA test below."""
    from ray.util import placement_group_table

    from cogym.runners.ray import rollout as ray_rollout
    from cogym.runners.ray.learners import RemoteLearner

    submit, start_update = ray_rollout.RayRollout.submit, RemoteLearner.start_update
    seen: dict = {}
    killed: list[int] = []

    def look_in_iteration_3(self, *args, **kwargs):
        if kwargs.get("iteration") == 3 and not seen:
            groups = [g for g in placement_group_table().values() if g["state"] == "CREATED"]
            seen.update(bundles=[len(g["bundles"]) for g in groups], learners=dict(self.learners))
        return submit(self, *args, **kwargs)

    def kill_then_update(self, turns):
        if kill and self.pid == "solver" and self.steps == 1 and not killed:
            killed.append(self.info["pid"])
            os.kill(self.info["pid"], signal.SIGKILL)
        return start_update(self, turns)

    cfg = small_config(tmp_path, "run.backend=ray", f"ray.learners={where}", "eval.declared=true", "run.eval_every=2",
                       "run.checkpoint_every=1", *ONE_THREAD)
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", look_in_iteration_3)
    monkeypatch.setattr(RemoteLearner, "start_update", kill_then_update)
    summary = train(cfg, tmp_path / "run", progress=False)
    err = capsys.readouterr().err
    assert seen["bundles"] == [bundles]  # the workers and the learner actors in one group
    assert sorted(seen["learners"]) == ["proposer", "solver"]
    assert {lr.info["pid"] for lr in seen["learners"].values()}.isdisjoint({os.getpid()})
    assert f"2 learner actors ({where}) ready" in err
    saved = tmp_path / "run" / "checkpoints" / "step_000002" / "learners" / "solver"
    assert json.loads((saved / "state.json").read_text())["steps"] == 2  # written by the actor
    if kill:
        assert killed
        assert (f"the learner actor of policy 'solver' (pid {killed[0]}) died during update 2: resuming from "
                "checkpoint step_000001 with new actors (resume 1 of at most 3)") in err
    assert summary["ray_learner_restarts"] == (1 if kill else 0)
    assert summary["iterations"] == 3 and summary["engines"] == ["torch"]
    assert metric_rows(tmp_path / "run") == one_thread_reference


def test_lora_policies_on_ray_sync_only_their_adapters(local_cluster, tmp_path: Path, monkeypatch) -> None:
    """LoRA policies (peft adapters on a shared base): the workers and the learner actors build the same
    fresh adapters, only the adapters travel, and a run with learner actors, killed and resumed from its
    adapter checkpoints, logs the in-process run's metrics."""
    pytest.importorskip("peft", reason="LoRA needs peft (cogym[lora])")
    from cogym.runners.ray import rollout as ray_rollout

    lora = ["policies.proposer.lora.r=4", "policies.solver.lora.r=4", "run.checkpoint_every=1", *ONE_THREAD]
    train(small_config(tmp_path, *lora), tmp_path / "local", progress=False)
    submit = ray_rollout.RayRollout.submit

    def die_in_iteration_3(self, *args, **kwargs):
        if kwargs.get("iteration") == 3:
            raise KeyboardInterrupt
        return submit(self, *args, **kwargs)

    cfg = small_config(tmp_path, *lora, "run.backend=ray", "ray.learners=separate")
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", die_in_iteration_3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "ray", progress=False)
    assert (tmp_path / "ray" / "checkpoints" / "step_000002" / "policies" / "solver" / "adapter_config.json").is_file()
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit)
    train(cfg, tmp_path / "ray", resume=True, progress=False)
    assert metric_rows(tmp_path / "ray") == metric_rows(tmp_path / "local")
    raw = raw_rows(tmp_path / "ray")
    # Two rank-4 adapters (~32 KB each) a sync, not two whole models (~8.6 MB).
    assert all(r["ray/sync_bytes"] < 1e5 for r in raw)


def test_one_step_with_separate_learner_actors_is_the_one_step_run_of_the_driver(local_cluster, tmp_path) -> None:
    runs = {}
    for name, extra in (("driver", []), ("actors", ["ray.learners=separate"])):
        cfg = small_config(tmp_path, "run.backend=ray", "run.async=one_step", *ONE_THREAD, *extra)
        train(cfg, tmp_path / name, progress=False)
        runs[name] = raw_rows(tmp_path / name)
    assert [r["ray/staleness"] for r in runs["actors"]] == [0.0, 1.0, 1.0]
    assert metric_rows(tmp_path / "actors") == metric_rows(tmp_path / "driver")
    # The actor put its weights in the object store itself: the same bytes as the driver's put.
    assert [r["ray/sync_bytes"] for r in runs["actors"]] == [r["ray/sync_bytes"] for r in runs["driver"]]


def test_a_learner_death_before_the_first_checkpoint_starts_the_run_again_and_no_resumes_left_stops_it(
        tmp_path: Path, monkeypatch) -> None:
    """The loop around the training (no Ray needed: the run is a stand-in that loses a learner actor).
    Before any checkpoint the run starts again from iteration 1, the attempt's rows gone; once
    ``ray.max_restarts`` resumes are used it stops, with how to go on."""
    from cogym.core.errors import LearnerDied
    from cogym.runners.train import loop

    calls: list[tuple[int, bool]] = []
    ckpt = tmp_path / "b" / "checkpoints" / "step_000004"

    def dies(cfg, stages, execution, run_path, start_it, ckpt_, t_start, progress, threads):
        calls.append((start_it, (run_path / "metrics.jsonl").exists() or (run_path / "tb").exists()))
        run_path.mkdir(parents=True, exist_ok=True)
        if run_path.name == "b" and start_it == 1:  # run b's first attempt saved iteration 4's checkpoint
            ckpt.mkdir(parents=True)
            (ckpt / "trainer_state.json").write_text(json.dumps({"iteration": 4}))
            (ckpt / ".cogym-checkpoint").write_text("")
        (run_path / "metrics.jsonl").write_text('{"iteration": 0}\n')  # what an attempt logs before it dies
        (run_path / "tb").mkdir(exist_ok=True)
        raise LearnerDied("the learner actor of policy 'solver' (pid 1) died during update 1")

    monkeypatch.setattr(loop, "_train", dies)
    cfg = small_config(tmp_path, "run.backend=ray", "ray.max_restarts=2")
    with pytest.raises(LearnerDied, match=r"died during update 1; ray.max_restarts = 2 resumes were used: the run "
                                          r"stops \(it had no checkpoint yet: run it again\)"):
        train(cfg, tmp_path / "a", progress=False)
    assert calls == [(1, False), (1, False), (1, False)]  # the run, then twice from the beginning, each on a clean slate
    # (the checkpoint appears during the run, as cogym writes it: a new run refuses a directory holding an
    # earlier run's checkpoints, runners/rundir.py)
    monkeypatch.setattr(loop, "last_checkpoint", lambda run_path: ckpt if ckpt.is_dir() else None)
    calls.clear()
    with pytest.raises(LearnerDied, match=r"ray.max_restarts = 2 resumes were used: the run stops.*cogym train --resume"):
        train(cfg, tmp_path / "b", progress=False)
    assert [c[0] for c in calls] == [1, 5, 5]  # the run, then two resumes from iteration 4's checkpoint
