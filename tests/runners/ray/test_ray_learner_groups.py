"""Learner groups on Ray (``ray.learner_workers``): a policy's learner as 2 Ray actors in one
torch.distributed group (gloo) trains as one process does.

* One update on a fixed global batch (tests/runners/train/test_distributed.py's: uneven groups and lengths),
  GRPO and PPO on the torch engine and DeepSpeed ZeRO-1/2/3, by a group of 2 :class:`LearnerWorker`
  actors and by one learner in this process: the same metrics (loss, grad_norm, ...) and weights to
  1e-5 relative. The two actors are started once and build each case's learner in turn.
* ``cogym train --ray`` with the solver's learner a ZeRO-3 group of 2 (separate bundles) sending its
  weights by a collective broadcast, checkpointing every iteration, one of its actors SIGKILLed as its
  second update starts: the run resumes from the last checkpoint with a new group by itself and ends
  with the uninterrupted one-process run's metrics (those built on log-probs to 1e-5; tokens, rewards
  and everything else exactly).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from cogym.runners.train.loop import train
from tests.runners.ray.ray_runs import metric_rows, raw_rows, ROUNDED, small_config
from tests.runners.train.test_distributed import _make_turns

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = pytest.mark.slow

RTOL, ATOL = 1e-5, 1e-6
CASES = {  # the learner of policy "solver", besides lr=1e-3
    "torch_grpo": dict(engine="torch", algorithm="grpo", micro_batch_size=3),
    "zero1_grpo": dict(engine="deepspeed", zero_stage=1, algorithm="grpo", micro_batch_size=1),
    "zero2_grpo": dict(engine="deepspeed", zero_stage=2, algorithm="grpo", micro_batch_size=2),
    "zero3_grpo": dict(engine="deepspeed", zero_stage=3, algorithm="grpo", micro_batch_size=2),
    "torch_ppo": dict(engine="torch", algorithm="ppo", micro_batch_size=4, critic_lr=1e-3),
    "zero1_ppo": dict(engine="deepspeed", zero_stage=1, algorithm="ppo", micro_batch_size=5, critic_lr=1e-3),
    "zero2_ppo": dict(engine="deepspeed", zero_stage=2, algorithm="ppo", micro_batch_size=3, critic_lr=1e-3),
    "zero3_ppo": dict(engine="deepspeed", zero_stage=3, algorithm="ppo", micro_batch_size=2, critic_lr=1e-3),
}


def _case_config(tmp_path: Path, model: Path, case: dict):
    keys = {"lr": 1e-3, **case}
    return small_config(tmp_path, f"policies.solver.model={model}", f"policies.proposer.model={model}",
                        *(f"learners.solver.{k}={v}" for k, v in keys.items()))


def _weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().float() for k, v in state.items()}


def test_a_group_of_two_learner_actors_updates_like_one_process(local_cluster, tiny_model_dir: Path,
                                                                 tmp_path: Path) -> None:
    from cogym.core.types import Turn
    from cogym.runners.ray.learners import LearnerWorker
    from cogym.runners.ray.pool import driver_env
    from cogym.runners.ray.wire import from_wire, state_of
    from cogym.runners.train.build import build_learner

    rows = _make_turns(tiny_model_dir)
    turns = [Turn(**{**r, "group_key": tuple(r["group_key"])}) for r in rows]
    actor = ray.remote(LearnerWorker)
    env = {**driver_env(), "DS_ACCELERATOR": "cpu"}
    group = [actor.options(num_cpus=1).remote(os.getcwd(), env, 1, rank, 2) for rank in range(2)]
    meet = ray.get(group[0].rendezvous.remote())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the actors: the reference rounds the same way within each rank's share
    report = {}
    try:
        for name, case in CASES.items():
            cfg = _case_config(tmp_path / name, tiny_model_dir, case)
            infos = ray.get([h.build.remote(cfg, "solver", None, None, meet) for h in group])
            assert [i["rank"] for i in infos] == [0, 1] and {i["world"] for i in infos} == {2}
            out = ray.get([h.update.remote(turns) for h in group])
            (m2, steps, (wref, size)), (m2b, _, (none, zero)) = out
            assert m2 == m2b and none is None and zero == 0, f"{name}: rank 1 reports otherwise, or sent weights"
            assert steps == 1 and size > 0
            w2 = _weights(from_wire(ray.get(wref)))

            policy, learner = build_learner(cfg, "solver")
            before = _weights(state_of(policy))
            m1 = learner.update(turns)
            w1 = _weights(state_of(policy))
            assert set(m1) == set(m2), f"{name}: metric keys {sorted(set(m1) ^ set(m2))}"
            for key, v1 in m1.items():
                assert m2[key] == pytest.approx(v1, rel=RTOL, abs=ATOL), f"{name}: {key} {m2[key]!r} vs {v1!r}"
            assert set(w1) == set(w2)
            worst = max(float((w2[k] - w1[k]).abs().max()) for k in w1)
            moved = max(float((w1[k] - before[k]).abs().max()) for k in w1)
            for key in w1:
                torch.testing.assert_close(w2[key], w1[key], rtol=RTOL, atol=ATOL, msg=lambda m, k=key, n=name: f"{n}: {k}: {m}")
            assert worst < 1e-2 * moved, f"{name}: weights differ by {worst}, the update itself is {moved}"
            report[name] = {"loss_rel": abs(m2["loss"] - m1["loss"]) / abs(m1["loss"]),
                            "grad_norm_rel": abs(m2["grad_norm"] - m1["grad_norm"]) / m1["grad_norm"],
                            "max_weight_diff": worst, "max_update": moved}
    finally:
        torch.set_num_threads(threads)
        for h in group:
            ray.kill(h)
    print(json.dumps(report, indent=1))
    assert all(abs(r["loss_rel"]) <= RTOL for r in report.values())


# Built on log-probs, which the group computes on each rank's rows: to float rounding
GROUP_ROUNDED = (*ROUNDED, "/mismatch_abs", "/mismatch_k3")


def _close(a: list[dict], b: list[dict]) -> None:
    """Rows alike: float-rounded metrics (``GROUP_ROUNDED``) to 1e-5 relative, everything else (tokens,
    rewards, counts) exactly."""
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert set(ra) == set(rb), sorted(set(ra) ^ set(rb))
        for key, va in ra.items():
            if key.endswith(GROUP_ROUNDED) and isinstance(va, float):
                assert rb[key] == pytest.approx(va, rel=RTOL, abs=ATOL), f"iteration {ra.get('iteration')}: {key}"
            else:
                assert rb[key] == va, f"iteration {ra.get('iteration')}: {key} {rb[key]!r} vs {va!r}"


def test_a_zero3_learner_group_with_collective_sync_resumes_by_itself_when_an_actor_dies(local_cluster, tmp_path: Path,
                                                                                       monkeypatch, capsys) -> None:
    """The solver's learner on DeepSpeed ZeRO-3 as a group of 2 actors (separate bundles), its weights
    gathered from both ranks' partitions and broadcast by rank 0 to the workers (ray.weight_sync:
    collective), checkpoints every iteration. Rank 1 is SIGKILLed as the second update starts (rank 0
    then waits for it in a collective): the driver notices at once, and the run resumes from
    iteration 1's checkpoint with a new group (each rank loading its ZeRO partition) and ends as the
    one-process run."""
    from cogym.runners.ray.learners import RemoteLearner

    base = ("learners.proposer.algorithm=frozen", "learners.solver.engine=deepspeed", "learners.solver.zero_stage=3",
            "run.threads=1", "run.checkpoint_every=1", "run.iterations=2")
    train(small_config(tmp_path / "one", *base), tmp_path / "one" / "run", progress=False)
    reference = metric_rows(tmp_path / "one" / "run")

    start_update = RemoteLearner.start_update
    killed: list[int] = []

    def kill_then_update(self, turns):
        if self.steps == 1 and not killed:
            killed.append(self.pids()[1])  # rank 1: rank 0 then waits for it in a collective
            os.kill(killed[0], signal.SIGKILL)
        return start_update(self, turns)

    monkeypatch.setattr(RemoteLearner, "start_update", kill_then_update)
    cfg = small_config(tmp_path / "group", *base, "run.backend=ray", "ray.learners=separate", "ray.learner_workers=2",
                       "ray.weight_sync=collective", "ray.num_cpus=0.5", "ray.learner_num_cpus=0.5")
    summary = train(cfg, tmp_path / "group" / "run", progress=False)
    err = capsys.readouterr().err
    assert "2 learner actors (separate) (groups of 2) ready" in err
    assert killed and "a learner actor of policy 'solver' (group of 2, pids " in err and f"{killed[0]})" in err
    assert "died during update 2: resuming from checkpoint step_000001 with new actors" in err
    assert summary["ray_learner_restarts"] == 1 and summary["iterations"] == 2
    ckpt = tmp_path / "group" / "run" / "checkpoints" / "step_000002"
    assert json.loads((ckpt / "trainer_state.json").read_text())["learner_workers"] == 2
    saved = ckpt / "learners" / "solver"
    assert json.loads((saved / "state.json").read_text())["steps"] == 2
    assert sorted(p.name for p in saved.glob("zero_optimizer.rank*.pt")) == ["zero_optimizer.rank0.pt",
                                                                            "zero_optimizer.rank1.pt"]
    _close(reference, metric_rows(tmp_path / "group" / "run"))
    raw = raw_rows(tmp_path / "group" / "run")
    assert all(4e6 < r["ray/sync_bytes"] < 5e6 for r in raw[:-1])  # the whole solver, gathered, not a partition


def test_a_resume_needs_the_group_size_that_wrote_the_zero_state(tmp_path: Path) -> None:
    """ZeRO optimizer state is one file per actor of a group: --resume with another ray.learner_workers is
    one line naming the size to use; without ZeRO files (the torch engine) any size resumes."""
    from cogym.runners.rundir import RunDirError
    from cogym.learners.engines import ZERO_FILE
    from cogym.runners.train.checkpoint import check_resume_world

    ckpt = tmp_path / "step_000002"
    (ckpt / "learners" / "solver").mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"iteration": 2, "world_size": 1, "learner_workers": 2}))
    check_resume_world(ckpt, 1, 4)  # no ZeRO state: nothing depends on the count
    for rank in (0, 1):
        (ckpt / "learners" / "solver" / ZERO_FILE.format(rank=rank)).write_bytes(b"")
    check_resume_world(ckpt, 1, 2)
    for workers in (1, 4):
        with pytest.raises(RunDirError, match="learner groups of 2 actors, and this run has ray.learner_workers = "
                                              f"{workers}; resume it with ray.learner_workers=2"):
            check_resume_world(ckpt, 1, workers)
    # an --nproc 2 checkpoint (no learner_workers in its state) still asks for --nproc 2
    (ckpt / "trainer_state.json").write_text(json.dumps({"iteration": 2, "world_size": 2}))
    with pytest.raises(RunDirError, match="resume it with --nproc 2"):
        check_resume_world(ckpt, 1, 1)
