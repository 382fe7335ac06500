"""The training loop on a tiny random model: run directory, checkpoints, resume, summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from cogym.core.threads import ThreadPolicy
from cogym.runners.train import loop as train_mod
from cogym.runners.config.load import load_config
from cogym.runners.train.checkpoint import last_checkpoint
from cogym.runners.train.iteration import iteration_seeds
from cogym.runners.train.loop import train
from cogym.runners.train.metrics import rollout_metrics


def _overrides(model_dir, iterations: int = 2, engine: str = "torch", extra: list[str] | None = None) -> list[str]:
    return [f"policies.proposer.model={model_dir}", f"policies.solver.model={model_dir}",
            f"learners.solver.engine={engine}", f"learners.proposer.engine={engine}",
            f"run.iterations={iterations}", "game.num_games=2", "game.kwargs.num_solvers=2", "eval.evaluators.heldout.size=20",
            *(extra or [])]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _iteration_rows(run_dir: Path) -> list[dict]:
    return [r for r in _rows(run_dir) if "rollout_s" in r]


@pytest.fixture(scope="module")
def run2(tiny_model_dir, tmp_path_factory):
    """One finished 2-iteration run (torch engine); tests that modify it work on a copy."""
    cfg = load_config(None, _overrides(tiny_model_dir))
    path = tmp_path_factory.mktemp("train") / "run"
    summary = train(cfg, run_path=path, progress=False)
    return cfg, path, summary


def test_run_directory_layout(run2):
    cfg, path, summary = run2
    assert yaml.safe_load((path / "config.yaml").read_text()) == cfg.to_dict()
    assert load_config(path / "config.yaml").to_dict() == cfg.to_dict()  # what --resume reloads
    its = _iteration_rows(path)
    assert [r["iteration"] for r in its] == [1, 2]
    for r in its:
        # a random model's proposals are all invalid, so no solver answers and solver/reward is absent
        assert {"proposer/reward", "tokens_per_s", "turns", "update_s"} <= set(r)
        assert r["proposer/invalid"] == 1.0 and "solver/reward" not in r
        assert "proposer/loss" in r  # the proposer always moves, so its learner always updates
    evals = [r for r in _rows(path) if "heldout_acc" in r]
    assert [r["iteration"] for r in evals] == [0, 2]
    assert all(0.0 <= r["heldout_acc"] <= 1.0 for r in evals)
    events = list((path / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    png = path / "learning_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_contents(run2):
    _, path, _ = run2
    ckpts = sorted(p.name for p in (path / "checkpoints").iterdir())
    assert ckpts == ["step_000002"]  # checkpoint_every=20 > iterations: only the final one, no temp dirs left
    ck = path / "checkpoints" / "step_000002"
    assert json.loads((ck / "trainer_state.json").read_text())["iteration"] == 2
    for pid in ("proposer", "solver"):
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            assert (ck / "policies" / pid / f).is_file(), f"{pid}/{f}"
        assert (ck / "learners" / pid / "optimizer.pt").is_file()
    assert json.loads((ck / "learners" / "proposer" / "state.json").read_text())["steps"] == 2
    assert last_checkpoint(path) == ck


def test_checkpoint_loads_as_a_policy(run2):
    from cogym.agents.policy import Policy

    _, path, _ = run2
    p = Policy.from_pretrained(path / "checkpoints" / "step_000002" / "policies" / "solver")
    assert p.render([{"role": "user", "content": "1+1"}])


def test_summary(run2):
    _, path, summary = run2
    on_disk = json.loads((path / "summary.json").read_text())
    assert on_disk == summary
    assert summary["engines"] == ["torch"]
    assert summary["iterations"] == 2
    assert summary["run_dir"] == str(path)
    assert "heldout_acc_before" in summary and "heldout_acc_after" in summary
    its = _iteration_rows(path)
    # two iterations: the first and the last window are one iteration each (they never overlap)
    assert summary["proposer_reward_first5"] == pytest.approx(its[0]["proposer/reward"])
    assert summary["proposer_reward_last5"] == pytest.approx(its[-1]["proposer/reward"])
    assert summary["wall_s"] >= 0


def test_resume_continues_from_the_last_checkpoint(run2, tmp_path, monkeypatch, tiny_model_dir):
    _, src, _ = run2
    path = tmp_path / "run"
    shutil.copytree(src, path)
    ck = path / "checkpoints" / "step_000002"
    # Mark the checkpoint's weights so we can tell them from the config's model.
    from safetensors.torch import load_file, save_file

    weights_file = ck / "policies" / "solver" / "model.safetensors"
    weights = load_file(str(weights_file))
    weights["model.norm.weight"] = weights["model.norm.weight"] + 0.5
    save_file(weights, str(weights_file), metadata={"format": "pt"})

    seen = {}
    real_build = train_mod.build

    def spy_build(cfg, policy_dirs=None, critic_dirs=None, **kwargs):
        run = real_build(cfg, policy_dirs, critic_dirs, **kwargs)
        seen["policy_dirs"] = policy_dirs
        seen["solver_norm"] = run.policies["solver"].model.state_dict()["model.norm.weight"].clone()
        return run

    monkeypatch.setattr(train_mod, "build", spy_build)
    before = _rows(path)
    cfg3 = load_config(path / "config.yaml", ["run.iterations=3"])
    summary = train(cfg3, run_path=path, resume=True, progress=False)

    assert seen["policy_dirs"] == {"proposer": ck / "policies" / "proposer", "solver": ck / "policies" / "solver"}
    assert torch.equal(seen["solver_norm"], weights["model.norm.weight"])
    after = _rows(path)
    assert after[: len(before)] == before  # appended, not rewritten
    new_its = [r for r in after[len(before):] if "rollout_s" in r]
    assert [r["iteration"] for r in new_its] == [3]
    assert [r["iteration"] for r in _iteration_rows(path)] == [1, 2, 3]
    ck3 = path / "checkpoints" / "step_000003"
    assert last_checkpoint(path) == ck3
    assert json.loads((ck3 / "trainer_state.json").read_text())["iteration"] == 3
    assert json.loads((ck3 / "learners" / "proposer" / "state.json").read_text())["steps"] == 3  # 2 restored + 1
    assert summary["iterations"] == 3 and summary["engines"] == ["torch"]


def test_resume_replays_the_same_iteration(run2, tmp_path, tiny_model_dir):
    """2 iterations + resume to 3 gives the same iteration 3 as 3 iterations straight through."""
    _, src, _ = run2
    resumed = tmp_path / "resumed"
    shutil.copytree(src, resumed)
    train(load_config(resumed / "config.yaml", ["run.iterations=3"]), run_path=resumed, resume=True, progress=False)
    straight = tmp_path / "straight"
    train(load_config(None, _overrides(tiny_model_dir, iterations=3)), run_path=straight, progress=False)
    a, b = _iteration_rows(resumed)[-1], _iteration_rows(straight)[-1]
    for key in ("proposer/reward", "proposer/loss", "turns", "proposer/response_tokens"):
        assert a[key] == b[key], key


def test_resume_without_checkpoint_fails(tmp_path, tiny_model_dir):
    cfg = load_config(None, _overrides(tiny_model_dir))
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        train(cfg, run_path=tmp_path / "empty", resume=True, progress=False)


def test_last_checkpoint_ignores_partial_and_temporary_dirs(tmp_path):
    ck = tmp_path / "checkpoints"

    def make(name: str, complete: bool = True) -> Path:
        d = ck / name
        (d / "policies").mkdir(parents=True)
        if complete:
            (d / "trainer_state.json").write_text(json.dumps({"iteration": 1}))
        return d

    assert last_checkpoint(tmp_path) is None
    s2 = make("step_000002")
    assert last_checkpoint(tmp_path) == s2
    make(".tmp_step_000004")  # being written (has its trainer_state already): never picked
    make("step_000003", complete=False)  # no trainer_state.json: incomplete
    assert last_checkpoint(tmp_path) == s2
    s10 = make("step_000010")
    assert last_checkpoint(tmp_path) == s10  # numeric order, not a plain string race


def test_iteration_seeds_are_a_pure_function():
    assert iteration_seeds(0, 3, 4) == iteration_seeds(0, 3, 4)
    assert iteration_seeds(0, 3, 4) != iteration_seeds(0, 4, 4)
    assert iteration_seeds(0, 3, 4) != iteration_seeds(1, 3, 4)
    assert len(set(iteration_seeds(0, 1, 16))) == 16


def test_no_checkpoint_when_disabled(tmp_path, tiny_model_dir):
    cfg = load_config(None, _overrides(tiny_model_dir, iterations=1,
                                       extra=["run.checkpoint_every=0", "run.tensorboard=false", "run.plot=false",
                                              "eval.declared=false"]))
    summary = train(cfg, run_path=tmp_path / "r", progress=False)
    assert not (tmp_path / "r" / "checkpoints").exists()
    assert not (tmp_path / "r" / "tb").exists() and not (tmp_path / "r" / "learning_curve.png").exists()
    assert "heldout_acc_before" not in summary
    assert [r["iteration"] for r in _rows(tmp_path / "r")] == [1]


def test_dataset_recipe_trains_the_solver_only(tmp_path, tiny_model_dir):
    from importlib import resources

    data = str(resources.files("cogym.envs").joinpath("data", "arithmetic_heldout.jsonl"))
    cfg_file = tmp_path / "dataset.yaml"
    cfg_file.write_text(yaml.safe_dump({
        "run": {"name": "ds", "iterations": 1, "checkpoint_every": 1, "tensorboard": False, "plot": False},
        "game": {"id": "proposer_solver-v0", "num_games": 2,
                 "kwargs": {"num_solvers": 3, "source": "dataset", "dataset": data}},
        "seats": {"solver": "solver"},
        "policies": {"solver": {"model": str(tiny_model_dir), "sampling": {"max_new_tokens": 4}}},
        "learners": {"solver": {"algorithm": "rloo", "engine": "torch", "lr": 1e-3}},
        "prompts": {"solver": {"system": "Solve."}},
        "eval": {"evaluators": {"heldout": {"size": 10}}},
    }))
    summary = train(load_config(cfg_file), run_path=tmp_path / "r", progress=False)
    (row,) = _iteration_rows(tmp_path / "r")
    assert row["turns"] == 6.0
    assert 6 <= row["solver/response_tokens"] <= 6 * 4
    assert summary["engines"] == ["torch"]
    assert (tmp_path / "r" / "checkpoints" / "step_000001" / "policies" / "solver" / "config.json").is_file()


@pytest.mark.slow
def test_summary_names_the_deepspeed_engine(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    cfg = load_config(None, _overrides(tiny_model_dir, iterations=1, engine="deepspeed",
                                       extra=["run.tensorboard=false", "run.plot=false"]))
    summary = train(cfg, run_path=tmp_path / "r", progress=False)
    assert summary["engines"] == ["deepspeed"]
    assert (tmp_path / "r" / "checkpoints" / "step_000001" / "learners" / "solver" / "optimizer.pt").is_file()


def test_mixed_engines_are_all_named(tmp_path, tiny_model_dir):
    cfg = load_config(None, _overrides(tiny_model_dir, iterations=1,
                                       extra=["learners.proposer.algorithm=frozen", "run.tensorboard=false",
                                              "run.plot=false", "run.checkpoint_every=0", "eval.declared=false"]))
    summary = train(cfg, run_path=tmp_path / "r", progress=False)
    assert summary["engines"] == ["torch"]  # the frozen proposer has no engine
    cfg = load_config(None, _overrides(tiny_model_dir, iterations=1,
                                       extra=["learners.proposer.algorithm=frozen", "learners.solver.algorithm=frozen",
                                              "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=0",
                                              "eval.declared=false"]))
    assert train(cfg, run_path=tmp_path / "r2", progress=False)["engines"] == ["none (all frozen)"]


# ------------------------------------------------------------------ bugs
def test_solver_accuracy_counts_only_solvers_that_answered():
    from cogym.agents.scripted import ScriptedAgent
    from cogym.envs import make, scripted_strategies
    from cogym.runners.rollout.loop import RolloutResult
    from cogym.runners.rollout.turns import rollout

    twins = scripted_strategies("proposer_solver-v0")
    oracle = ScriptedAgent(twins["solver"]["oracle"], name="oracle")

    def play(proposer_twin):
        proposer = ScriptedAgent(twins["proposer"][proposer_twin], name=proposer_twin)
        agents = {"proposer": proposer, "solver": oracle}
        return rollout([make("proposer_solver-v0", num_solvers=2) for _ in range(2)],
                       lambda seat, role: (role, agents[role]), {}, seeds=[0, 1])

    good, bad = play("random"), play("garbage")
    mixed = RolloutResult(turns=[], returns=good.returns + bad.returns, infos=good.infos + bad.infos)
    m = rollout_metrics(mixed, ("proposer", "solver"))
    assert m["solver/correct"] == 1.0  # every solver that answered was right


def test_resume_after_a_crash_between_checkpoints_has_no_duplicate_iterations(run2, tmp_path):
    _, src, _ = run2
    path = tmp_path / "run"
    shutil.copytree(src, path)
    # Simulate a crash after iteration 2 was logged but before its checkpoint: only step_1 exists.
    ck = path / "checkpoints"
    shutil.copytree(ck / "step_000002", ck / "step_000001")
    (ck / "step_000001" / "trainer_state.json").write_text(json.dumps({"iteration": 1, "seed": 0}))
    shutil.rmtree(ck / "step_000002")
    train(load_config(path / "config.yaml", ["run.iterations=3"]), run_path=path, resume=True, progress=False)
    assert [r["iteration"] for r in _iteration_rows(path)] == [1, 2, 3]


@pytest.mark.parametrize(("overrides", "cores", "expected", "adaptive"), [
    ([], 8, 7, True),                                                                       # torch's default
    ([], 4, 4, True),                                                                       # at most the cores
    (["run.threads=3"], 8, 3, False),                                                       # asked for: pinned
    (["run.threads=12"], 8, 12, False),                                                     # ... even past the cores
    (["game.granularity=token"], 8, 1, False),
    (["run.backend=ray"], 8, 7, True),                                                      # sync: they take turns
    (["run.backend=ray", "run.async=one_step"], 8, 6, True),                                # 2 workers x 1 thread
    (["run.backend=ray", "run.async=one_step"], 2, 1, True),
    (["run.backend=ray", "run.async=one_step"], 64, 7, True),                               # at most torch's default
    (["run.backend=ray", "run.async=one_step", "ray.num_rollout_workers=1", "ray.num_cpus=4"], 2, 1, True),  # >= 1
    (["run.backend=ray", "run.async=one_step", "ray.num_cpus=0.5"], 2, 1, True),            # a worker runs 1 thread
    (["run.backend=ray", "run.async=one_step", "ray.num_cpus=1.5"], 8, 6, True),
    (["run.backend=ray", "run.async=one_step", "run.threads=2"], 2, 2, False),
    (["run.backend=ray", "run.async=one_step", "ray.address=local"], 8, 6, True),          # Ray's word for null
    (["run.backend=ray", "run.async=one_step", "ray.address=auto"], 8, 7, True),           # workers maybe elsewhere
    (["run.backend=ray", "run.async=one_step", "ray.learners=separate"], 8, 7, True),      # the driver does not update
    (["run.backend=ray", "run.async=one_step", "ray.num_gpus=0.5"], 8, 7, True),
])
def test_driver_threads(overrides, cores, expected, adaptive) -> None:
    """The driver's ceiling: torch's default (7 here) capped by the cores; one-step on a local cluster takes
    the cores the workers leave, since the driver updates while they roll out. Below it, the count follows
    the load unless pinned."""
    from importlib import resources

    cfg = load_config(Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml"))), overrides)
    policy = train_mod.driver_threads(cfg, cores, 7)
    assert (policy.threads, policy.ceiling, policy.adaptive) == (expected, expected, adaptive and expected > 1)


@pytest.mark.parametrize(("cores", "world", "expected"), [(8, 2, 4), (8, 3, 2), (2, 2, 1), (2, 4, 1)])
def test_driver_threads_of_a_data_parallel_rank(cores, world, expected) -> None:
    """With --nproc, a rank computes with its share of the cores (the others' ranks take the rest)."""
    from importlib import resources

    cfg = load_config(Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml"))), [])
    assert train_mod.driver_threads(cfg, cores, 16, world).ceiling == expected


def test_train_runs_with_the_driver_threads_and_restores_them(monkeypatch, tmp_path) -> None:
    from importlib import resources

    seen = []
    monkeypatch.setattr(train_mod, "driver_threads", lambda *a: ThreadPolicy(pinned=3))
    monkeypatch.setattr(train_mod, "_train", lambda *a, **k: seen.append(torch.get_num_threads()) or {})
    before = torch.get_num_threads()
    cfg = load_config(Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml"))),
                      [f"run.out_dir={tmp_path}", "run.iterations=1"])
    train(cfg, tmp_path / "run", progress=False)
    assert seen == [3] and torch.get_num_threads() == before
