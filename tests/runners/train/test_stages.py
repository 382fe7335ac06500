"""A run in stages (``stages``): each trains its iterations with its own learner keys, the weights carry over,
a learner whose keys change starts fresh with the stage's start as its KL reference, and a run stopped
inside a stage or at a boundary and resumed logs what the uninterrupted run logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from cogym.core.errors import ConfigError
from cogym.envs import registry
from cogym.runners.config.load import load_config
from cogym.runners.rundir import RunDirError
from cogym.runners.train.build import build
from cogym.runners.train.loop import train
from cogym.runners.train.stages import plan
from tests.processes import sigkill_once_written
from tests.runners.train.test_runners_identity_learning import GAME_ID, IdentityEnv, SCRIPTED

TIMING = ("rollout_s", "update_s", "iteration_s", "tokens_per_s", "threads")  # differ between any two runs
STAGES = [{"name": "imitate", "learners": {"player": {"algorithm": "spin", "spin_refresh": 5}}, "run": {"iterations": 2}},
          {"name": "rl", "learners": {"player": {"algorithm": "grpo", "kl_in_loss": "k3", "kl_loss_coef": 0.1}},
           "run": {"iterations": 3}}]


@pytest.fixture
def identity_game(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register(GAME_ID, IdentityEnv, scripted=SCRIPTED)
    return GAME_ID


def _config(tmp_path: Path, model: Path, overrides=(), stages=STAGES):
    tree = {
        "run": {"seed": 1, "checkpoint_every": 0, "tensorboard": False, "plot": False, "transcripts_every": 0},
        "game": {"id": GAME_ID, "num_games": 8, "kwargs": {"num_players": 4}},
        "seats": {"player": "player"},
        "policies": {"player": {"model": str(model), "sampling": {"temperature": 1.0, "max_new_tokens": 1}}},
        "learners": {"player": {"engine": "torch", "lr": 3e-2}},
        "prompts": {"player": {"system": ""}},
        "eval": {"declared": False},
        "stages": stages,
    }
    path = tmp_path / "staged.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return load_config(path, list(overrides))


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows if "rollout_s" in r]


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


def test_two_stages_train_in_order_with_their_own_algorithm(identity_game, tiny_model_dir, tmp_path):
    cfg = _config(tmp_path, tiny_model_dir)
    assert cfg.run.iterations == 5  # the stages' sum
    run_dir = tmp_path / "run"
    summary = train(cfg, run_path=run_dir, progress=False)
    rows = _rows(run_dir)
    assert [(r["iteration"], r["stage"]) for r in rows] == [(1, "imitate"), (2, "imitate"), (3, "rl"), (4, "rl"), (5, "rl")]
    assert all("player/spin_pairs" in r for r in rows[:2]) and not any("player/spin_pairs" in r for r in rows[2:])
    assert all("player/kl_loss" in r for r in rows[2:]) and not any("player/kl_loss" in r for r in rows[:2])
    assert summary["iterations"] == 5
    # The boundary checkpoint (checkpoint_every is 0) holds the stage that wrote it.
    boundary = run_dir / "checkpoints" / "step_000002"
    assert json.loads((boundary / "stage.json").read_text()) == {"index": 0, "name": "imitate", "first": 1, "last": 2,
                                                                   "fresh": [], "anchors": {}}
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002"]
    # The rl learner started fresh: its KL reference is the policy at the stage's start (SPIN's result), not
    # the config's model.
    stages = plan(cfg)
    assert stages[1].fresh == {"player"} and stages[1].anchors == {"player": 2}
    run = build(stages[1].config(run_dir / "checkpoints"), {"player": boundary / "policies" / "player"})
    ref = run.learners["player"].ref_model.state_dict()
    start, original = _weights(boundary / "policies" / "player"), _weights(tiny_model_dir)
    assert any(not torch.equal(start[k], original[k]) for k in original), "SPIN should have moved the weights"
    assert all(torch.equal(ref[k], start[k]) for k in start)


@pytest.mark.parametrize("stop", [4, 2], ids=["inside_stage_2", "at_the_boundary"])
def test_a_run_stopped_and_resumed_logs_the_uninterrupted_rows(identity_game, tiny_model_dir, tmp_path, stop):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(_config(tmp_path, tiny_model_dir, ["run.checkpoint_every=1"]), run_path=straight, progress=False)
    # run.iterations below the stages' sum ends the run there (its last checkpoint is the state to resume).
    train(_config(tmp_path, tiny_model_dir, ["run.checkpoint_every=1", f"run.iterations={stop}"]), run_path=stopped,
          progress=False)
    assert [r["iteration"] for r in _rows(stopped)] == list(range(1, stop + 1))
    resumed = load_config(stopped / "config.yaml", ["run.iterations=null"])
    train(resumed, run_path=stopped, resume=True, progress=False)
    a, b = _rows(straight), _rows(stopped)
    assert [r["iteration"] for r in b] == [1, 2, 3, 4, 5]
    assert a == b  # tokens, rewards and losses of every iteration, exactly


def test_resume_refuses_stages_that_move_the_checkpoint_into_another_stage(identity_game, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    train(_config(tmp_path, tiny_model_dir, ["run.checkpoint_every=1", "run.iterations=3"]), run_path=run_dir,
          progress=False)
    moved = load_config(run_dir / "config.yaml", ["run.iterations=null", "stages.0.run.iterations=3"])
    with pytest.raises(RunDirError, match=r"iteration 3\) was written in stage 'rl' \(from iteration 3\), and this "
                                          r"config puts iteration 3 in stage 'imitate'"):
        train(moved, run_path=run_dir, resume=True, progress=False)


def test_resume_refuses_an_earlier_stage_whose_learner_keys_changed(identity_game, tiny_model_dir, tmp_path):
    """Made the same as stage 2's, stage 1's learner keys would no longer restart the learner at the boundary (nor
    anchor its KL at the boundary's weights): the checkpoint records what it restarted, and the resume refuses."""
    run_dir = tmp_path / "run"
    train(_config(tmp_path, tiny_model_dir, ["run.checkpoint_every=1", "run.iterations=3"]), run_path=run_dir,
          progress=False)
    same = [dict(STAGES[0], learners=STAGES[1]["learners"]), STAGES[1]]
    (tmp_path / "edited").mkdir()
    with pytest.raises(RunDirError, match=r"was written when stage 'rl' restarted the learners of \['player'\] .* "
                                          r"and this config restarts \[\]"):
        train(_config(tmp_path / "edited", tiny_model_dir, stages=same), run_path=run_dir, resume=True, progress=False)
    train(_config(tmp_path / "edited", tiny_model_dir), run_path=run_dir, resume=True, progress=False)  # as started


@pytest.mark.parametrize("stage, needle", [
    ({"name": "x", "lerners": {}, "run": {"iterations": 1}}, "unknown config key 'stages.0.lerners' (did you mean 'learners'?)"),
    ({"run": {"iteration": 1}}, "unknown config key 'stages.0.run.iteration' (did you mean 'iterations'?)"),
    ({"game": {"num_games": 8}, "run": {"iterations": 1}},
     "stages.0.game: a stage sets only name, learners and run.iterations; game is the whole run's"),
    ({"run": {"iterations": 1, "seed": 3}}, "stages.0.run.seed: a stage sets only name, learners and run.iterations"),
    ({"learners": {"player": {"lrr": 1}}, "run": {"iterations": 1}},
     "unknown config key 'stages.0.learners.player.lrr' (did you mean 'lr'?)"),
    ({"learners": {"playr": {"lr": 1}}, "run": {"iterations": 1}}, "stages.0.learners.playr: no learner 'playr'"),
    ({"learners": {"player": {"algorithm": "spin", "entropy_coef": 0.1}}, "run": {"iterations": 1}},
     "stages.0 (stage0): learners.player: spin: SPIN has its own objective"),
    ({"name": "x"}, "stages.0.run.iterations must be >= 1"),
])
def test_a_wrong_stage_is_one_line_naming_its_key(identity_game, tiny_model_dir, tmp_path, stage, needle):
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, tiny_model_dir, stages=[stage])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_stages_on_ray_load_each_with_its_own_learner_keys(identity_game, tiny_model_dir, tmp_path):
    stages = plan(_config(tmp_path, tiny_model_dir, ["run.backend=ray"]))  # trained: tests/runners/ray/test_ray_stages.py
    assert [s.cfg.learners["player"].algorithm for s in stages] == ["spin", "grpo"]
    assert all(s.cfg.run.backend == "ray" for s in stages) and stages[1].fresh == {"player"}


def test_run_iterations_beyond_the_stages_is_refused(identity_game, tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"run.iterations is 9, but the stages train 5 iterations in all"):
        _config(tmp_path, tiny_model_dir, ["run.iterations=9"])
    assert _config(tmp_path, tiny_model_dir, ["stages.1.run.iterations=7"]).run.iterations == 9


def test_a_config_without_stages_is_one_stage_and_writes_no_stage(identity_game, tiny_model_dir, tmp_path):
    cfg = _config(tmp_path, tiny_model_dir, ["run.iterations=4"], stages=[])
    (only,) = plan(cfg)
    assert (only.first, only.last, only.name, only.cfg) == (1, 4, "", cfg)
    assert "stages" not in cfg.to_dict() and cfg.to_dict()["run"]["iterations"] == 4


# ------------------------------------------------------------------ the shipped config, as real processes
COGYM = Path(sys.executable).with_name("cogym")
SHIPPED = ["game.num_games=2", "game.kwargs.num_solvers=2", "policies.solver.sampling.max_new_tokens=4",
           "policies.proposer.sampling.max_new_tokens=4", "eval.declared=false", "run.tensorboard=false",
           "run.plot=false", "run.checkpoint_every=1", "run.eval_every=0", "stages.0.run.iterations=3",
           "stages.0.learners.solver.sft_batch_size=4", "stages.1.run.iterations=20"]


def _cogym(args: list[str], **kwargs):
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    return subprocess.Popen([str(COGYM), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def _finished(proc) -> None:
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"cogym failed:\n{err[-3000:]}"


def test_sft_then_grpo_loads_with_its_two_stages():
    stages = plan(load_config("configs/sft_then_grpo.yaml"))
    assert [(s.name, s.first, s.last) for s in stages] == [("sft", 1, 30), ("grpo", 31, 200)]
    assert [s.cfg.learners["solver"].algorithm for s in stages] == ["sft", "grpo"]
    assert stages[1].fresh == {"solver"}  # the proposer's learner is the same in both: it trains on


@pytest.mark.slow
def test_sft_then_grpo_killed_inside_stage_2_and_resumed_equals_the_uninterrupted_run(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    _finished(_cogym(["train", "configs/sft_then_grpo.yaml", "--run-dir", str(straight), "--no-progress", *SHIPPED]))
    proc = _cogym(["train", "configs/sft_then_grpo.yaml", "--run-dir", str(killed), "--no-progress", *SHIPPED])
    sigkill_once_written(proc, killed / "checkpoints" / "step_000005" / "trainer_state.json", timeout=300)
    assert 5 <= len(_rows(killed)) < 23
    _finished(_cogym(["train", "--resume", str(killed), "--no-progress"]))
    a, b = _rows(straight), _rows(killed)
    assert [(r["iteration"], r["stage"]) for r in b] == [(i, "sft" if i <= 3 else "grpo") for i in range(1, 24)]
    assert all("solver/sft_rows" in r for r in a[:3]) and all("solver/kl_loss" in r for r in a[3:])
    assert a == b  # every metric of every iteration, exactly
    # The solver's learner started again at the boundary; the proposer's, the same in both stages, went on.
    steps = {pid: json.loads((killed / "checkpoints" / "step_000023" / "learners" / pid / "state.json").read_text())["steps"]
             for pid in ("solver", "proposer")}
    assert steps == {"solver": 20, "proposer": 23}
