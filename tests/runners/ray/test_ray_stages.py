"""A run in stages on Ray (configs/sft_then_grpo.yaml, shrunk): each stage starts new rollout workers (and
learner actors) from the checkpoint the stage before wrote, as a resume does, so the run logs what the
in-process run logs, and a driver killed inside stage 2 and resumed logs what the uninterrupted run logged.
On a local 2-CPU cluster (tests/runners/ray/ray_runs.py); in-process stages: tests/runners/train/test_stages.py."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train
from tests.rounding import same
from tests.runners.ray.ray_runs import ONE_THREAD, ROUNDED, metric_rows

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = pytest.mark.slow

CONFIG = Path(str(resources.files("cogym.configs").joinpath("sft_then_grpo.yaml")))
# Two SFT iterations (1-2), then three GRPO iterations (3-5) whose KL is anchored at the boundary's weights.
SMALL = ["game.num_games=2", "game.kwargs.num_solvers=2", "policies.solver.sampling.max_new_tokens=4",
         "policies.proposer.sampling.max_new_tokens=4", "eval.declared=false", "run.tensorboard=false",
         "run.plot=false", "run.checkpoint_every=1", "run.eval_every=0", "stages.0.run.iterations=2",
         "stages.0.learners.solver.sft_batch_size=4", "stages.1.run.iterations=3", "run.threads=1"]
STAGE_OF = [(1, "sft"), (2, "sft"), (3, "grpo"), (4, "grpo"), (5, "grpo")]


def _config(tmp_path: Path, *extra: str):
    return load_config(CONFIG, [*SMALL, f"run.out_dir={tmp_path}", *extra])


def _dying_in(iteration: int, submit):
    """``RayRollout.submit`` (``submit``) that raises KeyboardInterrupt, as a kill would mid-run, when asked
    for ``iteration``'s rollout."""

    def dying(self, *args, **kwargs):
        if kwargs.get("iteration") == iteration:
            raise KeyboardInterrupt
        return submit(self, *args, **kwargs)
    return dying


def _exact(rows: list[dict]) -> list[dict]:
    """What was sampled and scored (tokens, rewards, counts, advantages) and what the driver's SFT computed:
    all but what is built on the behaviour log-probs a worker computes with its own threads (docs/ray.md)."""
    return [{k: v for k, v in r.items() if not k.endswith(ROUNDED) and "/mismatch" not in k} for r in rows]


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> list[dict]:
    """The in-process run of the shrunk config (before any Ray fixture needs the CPUs)."""
    out = tmp_path_factory.mktemp("local")
    train(_config(out), out / "run", progress=False)
    return metric_rows(out / "run")


@pytest.fixture(scope="module")
def on_ray(in_process, local_cluster, tmp_path_factory) -> list[dict]:
    """The same run on one Ray rollout worker, learners in the driver."""
    out = tmp_path_factory.mktemp("ray")
    summary = train(_config(out, "run.backend=ray", "ray.num_rollout_workers=1"), out / "run", progress=False)
    assert summary["iterations"] == 5 and summary["ray_workers"] == 1
    return metric_rows(out / "run")


def test_both_stages_on_ray_log_the_in_process_rows(in_process, on_ray) -> None:
    assert [(r["iteration"], r["stage"]) for r in on_ray] == STAGE_OF
    assert all("solver/sft_rows" in r for r in on_ray[:2]) and all("solver/kl_loss" in r for r in on_ray[2:])
    assert _exact(on_ray) == _exact(in_process)
    assert same(on_ray, in_process)  # the losses too, to float rounding


def test_a_driver_killed_inside_stage_2_resumes_on_ray_with_the_uninterrupted_rows(on_ray, tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """The driver dies in iteration 4 (after the checkpoint of iteration 3, the GRPO stage's first); --resume
    starts the GRPO stage's workers again from that checkpoint, its learner state included."""
    from cogym.runners.ray import rollout as ray_rollout

    submit = ray_rollout.RayRollout.submit
    die_in_iteration_4 = _dying_in(4, submit)
    cfg = _config(tmp_path, "run.backend=ray", "ray.num_rollout_workers=1")
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", die_in_iteration_4)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", progress=False)
    assert [r["iteration"] for r in metric_rows(tmp_path / "run")] == [1, 2, 3]
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit)
    summary = train(cfg, tmp_path / "run", resume=True, progress=False)
    assert summary["iterations"] == 5
    assert metric_rows(tmp_path / "run") == on_ray  # every metric of every iteration, exactly


LORA = ["policies.proposer.lora.r=4", "policies.solver.lora.r=4"]


@pytest.mark.parametrize("where, lora", [("colocated", []), ("separate", LORA)], ids=["colocated", "separate_lora"])
def test_learner_actors_start_the_changed_learner_fresh_at_the_boundary(in_process, local_cluster, tmp_path: Path,
                                                                        where, lora) -> None:
    """ray.learners colocated | separate: the boundary starts new learner actors; the solver's (SFT -> GRPO)
    builds from the boundary's weights with a new optimizer and step count, the proposer's (the same keys)
    loads its state. With LoRA the new workers build a fresh adapter (version 0, as the fresh learner's), so
    the boundary's adapter must be sent to them: else stage 2's first rollout samples with the wrong one
    (its tokens may even agree; the log-probs the learner recomputes do not: solver/mismatch_abs)."""
    reference = in_process
    if lora:
        pytest.importorskip("peft", reason="LoRA needs peft (cogym[lora])")
        train(_config(tmp_path, *lora), tmp_path / "local", progress=False)
        reference = metric_rows(tmp_path / "local")
    train(_config(tmp_path, *lora, "run.backend=ray", f"ray.learners={where}", *ONE_THREAD), tmp_path / "run",
          progress=False)
    rows = metric_rows(tmp_path / "run")
    assert [(r["iteration"], r["stage"]) for r in rows] == STAGE_OF
    assert _exact(rows) == _exact(reference)
    assert same(rows, reference) and rows[2]["solver/mismatch_abs"] < 1e-5
    last = tmp_path / "run" / "checkpoints" / "step_000005" / "learners"
    steps = {pid: json.loads((last / pid / "state.json").read_text())["steps"] for pid in ("solver", "proposer")}
    assert steps == {"solver": 3, "proposer": 5}  # written by the actors


def test_lora_workers_resumed_inside_stage_2_get_the_learners_adapter_before_its_first_step(local_cluster, tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """Stage 2 is VAPO with a critic warm-up of one update: iteration 3 trains the critic alone, so the solver's
    learner is still at version 0 in checkpoint 3. The driver dies in iteration 4 and --resume builds new workers
    inside stage 2 (no learner starts fresh): they must still get the boundary's adapter, which a fresh adapter
    (version 0 too) is not, else iteration 4 samples with other weights than the learner recomputes."""
    pytest.importorskip("peft", reason="LoRA needs peft (cogym[lora])")
    from cogym.runners.ray import rollout as ray_rollout

    submit = ray_rollout.RayRollout.submit
    die_in_iteration_4 = _dying_in(4, submit)
    cfg = _config(tmp_path, *LORA, "stages.1.learners.solver.algorithm=vapo", "stages.1.learners.solver.vapo_critic_warmup=1",
                  "stages.1.run.iterations=2", "run.backend=ray", "ray.num_rollout_workers=1")
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", die_in_iteration_4)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", progress=False)
    state = tmp_path / "run" / "checkpoints" / "step_000003" / "learners" / "solver" / "state.json"
    assert json.loads(state.read_text())["steps"] == 0  # the warm-up update: no policy step yet
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit)
    train(cfg, tmp_path / "run", resume=True, progress=False)
    rows = metric_rows(tmp_path / "run")
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert rows[3]["solver/mismatch_abs"] < 1e-5


def test_a_fresh_ppo_learner_actor_builds_as_the_driver_would(local_cluster, tmp_path: Path, monkeypatch) -> None:
    """Stage 2 is PPO: its learner starts fresh with a new critic, which a learner actor builds after seeding
    torch as the driver does at a later stage's build (stream stage.build), so the rows are the in-process run's.
    One step ahead (run.async: one_step), the sampler submits no rollout past a stage's last iteration (the
    stage's workers end there); with one iteration a stage, every rollout samples the weights it would in sync."""
    from cogym.runners.ray import rollout as ray_rollout

    submit, submitted = ray_rollout.RayRollout.submit, []

    def record(self, *args, **kwargs):
        submitted.append(kwargs.get("iteration"))
        return submit(self, *args, **kwargs)

    ppo = ["stages.1.learners.solver.algorithm=ppo", "stages.0.run.iterations=1", "stages.1.run.iterations=1"]
    train(_config(tmp_path, *ppo), tmp_path / "local", progress=False)
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", record)
    train(_config(tmp_path, *ppo, "run.backend=ray", "ray.learners=colocated", "run.async=one_step", *ONE_THREAD),
          tmp_path / "run", progress=False)
    assert submitted == [1, 2]
    rows, reference = metric_rows(tmp_path / "run"), metric_rows(tmp_path / "local")
    assert [r["iteration"] for r in rows] == [1, 2] and "solver/vf_loss" in rows[1]
    assert _exact(rows) == _exact(reference)
    assert same(rows, reference)
