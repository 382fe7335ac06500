"""Seat assignment, config checks that need the game, and exact resume (scripted seats, KL anchor)."""

from __future__ import annotations

import json

import pytest
import torch

from cogym.core.types import Request
from cogym.runners.train.build import build
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError
from cogym.runners.rollout.seating import SeatingError
from cogym.runners.train.loop import train


def _cfg(model_dir, extra=()):
    return load_config(None, [f"policies.proposer.model={model_dir}", f"policies.solver.model={model_dir}",
                              "learners.solver.engine=torch", "learners.proposer.engine=torch",
                              "game.num_games=2", "game.kwargs.num_solvers=2", "eval.evaluators.heldout.size=10",
                              "run.tensorboard=false", "run.plot=false", *extra])


def test_the_same_twin_name_is_a_different_agent_per_role(tiny_model_dir):
    run = build(_cfg(tiny_model_dir, ["seats.proposer=scripted:random", "seats.solver=scripted:random"]))
    proposer, solver = run.seat_map("proposer", "proposer")[1], run.seat_map("solver_0", "solver")[1]
    assert proposer is not solver
    text = proposer.act([Request([{"role": "user", "content": "Propose a problem."}], "proposer", "proposer")])[0].text
    assert any(op in text[1:] for op in "+-*"), f"the proposer twin wrote {text!r}, not a problem"
    answer = solver.act([Request([{"role": "user", "content": "2+2"}], "solver", "solver_0")])[0].text
    assert answer.lstrip("-").isdigit(), f"the solver twin wrote {answer!r}, not a number"


@pytest.mark.parametrize("extra, needle", [
    (["seats={solver: solver}"], "seat 'proposer' (role 'proposer') has no policy"),
    (["prompts.solvr.system=Hi"], "prompts.solvr"),
    (["learners.solver.role_algorithms.solverr=rloo"], "role_algorithms.solverr"),
    (["seats.proposer=scripted:nope"], "no scripted twin 'nope'"),
])
def test_game_dependent_mistakes_fail_before_any_run_directory(tiny_model_dir, tmp_path, extra, needle):
    with pytest.raises((ConfigError, SeatingError)) as err:
        train(_cfg(tiny_model_dir, extra), run_path=tmp_path / "run", progress=False)
    assert needle in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override, needle", [
    ("learners.solver.max_grad_norm=0", "max_grad_norm must be > 0"),
    ("learners.solver.loss_agg=foo", "loss_agg must be one of"),
    ("learners.solver.norm_const=-1", "norm_const must be > 0"),
    ("learners.solver.dual_clip=.nan", "dual_clip must be a finite number, got nan"),
    ("run.seed=-1", "run.seed must be >= 0"),
    ("learners.solver.offload_optimizer=true", "offload_optimizer needs zero_stage >= 1"),
    ("learners.solver.offload_params=true", "offload_params needs zero_stage: 3"),
    ("learners.solver.algorithm=rae learners.solver.rae_decay=1.5", "rae_decay must be in [0, 1]"),
    ("learners.solver.algorithm=rae learners.solver.rae_order=post", "rae_order must be one of pre, update_first"),
    ("learners.solver.dynamic_sampling=std", "dynamic_sampling must be one of off, std_gt_0"),
    ("learners.solver.max_sampling_rounds=0", "max_sampling_rounds must be >= 1"),
    ("learners.solver.overlong_buffer=9", "overlong_buffer must be in [0, policies.solver.sampling.max_new_tokens = 8]"),
    ("learners.solver.algorithm=prime learners.solver.prime_norm=batch", "prime_norm must be one of batch_norm, none"),
    ("learners.solver.algorithm=prime learners.solver.prime_beta=0", "prime_beta must be a finite number > 0.0"),
    ("learners.solver.algorithm=prime learners.solver.prime_model=/nonexistent", "prime_model '/nonexistent' is not a directory"),
    ("learners.solver.algorithm=spin learners.solver.spin_refresh=0", "spin_refresh must be an int >= 1"),
    ("learners.solver.role_algorithms.proposer=spin", "role_algorithms.proposer must be one of"),
    ("learners.solver.algorithm=rae", None),  # valid on its own
    ("game.group_size=5", "game.group_size must be >= 1 and divide game.num_games = 32"),
])
def test_values_that_would_fail_mid_run_fail_at_load(override, needle):
    # An algorithm's own keys are checked when that algorithm trains (keys of another are kept, unused).
    overrides = override.split(" ")
    if needle is None:
        load_config(None, overrides)
        return
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert needle in str(err.value)


@pytest.mark.parametrize("overrides, needle", [
    (["learners.solver.algorithm=rae", "learners.solver.kl_in_reward=k1"], "rae computes advantages from the outcome alone"),
    (["learners.solver.algorithm=spin", "learners.solver.entropy_coef=0.1"], "SPIN has its own objective"),
    (["learners.solver.algorithm=spin", "learners.solver.role_algorithms.proposer=grpo"], "SPIN has its own objective"),
    (["learners.solver.algorithm=spin", "learners.solver.mask_truncated=true"], "SPIN has its own objective"),
    (["learners.solver.algorithm=prime", "learners.solver.overlong_buffer=2"], "prime trains its PRM on the outcome"),
    (["learners.solver.dynamic_sampling_low=0.9", "learners.solver.dynamic_sampling_high=0.1"],
     "dynamic_sampling_low must be <= dynamic_sampling_high"),
])
def test_plugin_combinations_that_cannot_work_fail_at_load(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert needle in str(err.value)


def test_resume_replays_iterations_with_scripted_seats(tiny_model_dir, tmp_path):
    extra = ["seats.proposer=scripted:random", "run.checkpoint_every=2"]
    straight = tmp_path / "straight"
    train(_cfg(tiny_model_dir, extra + ["run.iterations=3"]), run_path=straight, progress=False)
    resumed = tmp_path / "resumed"
    train(_cfg(tiny_model_dir, extra + ["run.iterations=2"]), run_path=resumed, progress=False)
    train(load_config(resumed / "config.yaml", ["run.iterations=3"]), run_path=resumed, resume=True, progress=False)

    def last(path):
        rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
        return [r for r in rows if "rollout_s" in r][-1]

    a, b = last(straight), last(resumed)
    assert a["iteration"] == b["iteration"] == 3
    for key in ("solver/reward", "solver/correct", "solver/loss", "turns"):
        assert a[key] == pytest.approx(b[key], abs=1e-6), key


def test_resume_keeps_the_original_kl_reference(tiny_model_dir, tmp_path):
    extra = ["learners.solver.kl_in_loss=k3", "seats.proposer=scripted:random", "run.checkpoint_every=1",
             "run.iterations=1", "learners.solver.lr=1e-2",
             "learners.solver.entropy_coef=0.1"]  # a gradient even when every answer scores the same
    path = tmp_path / "run"
    train(_cfg(tiny_model_dir, extra), run_path=path, progress=False)
    ckpt = path / "checkpoints" / "step_000001" / "policies"
    run = build(_cfg(tiny_model_dir, extra), policy_dirs={"solver": ckpt / "solver", "proposer": ckpt / "proposer"})
    learner = run.learners["solver"]
    from cogym.agents.policy import Policy

    original = Policy.from_pretrained(tiny_model_dir).model.state_dict()
    resumed = learner.policy.model.state_dict()
    ref = learner.ref_model.state_dict()
    assert any(not torch.equal(resumed[k], original[k]) for k in original), "the checkpoint should differ"
    assert all(torch.equal(ref[k], original[k]) for k in original), "the KL anchor must be the original model"
