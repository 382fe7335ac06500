"""configs/policy_rm.yaml: a policy paid by a reward model that trains beside it (``reward_from``).

The seam (cogym/runners/train/rewards.py): the solver's turns get the reward model's scores before any
learner steps, and the reward model's learner trains on those turns with the game's rewards."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from safetensors.torch import load_file

from cogym.core.errors import ConfigError
from cogym.learners.pairs import reward_pairs
from cogym.runners.config.load import load_config
from cogym.runners.train.build import build
from cogym.runners.train.execution import InProcess
from cogym.runners.train.iteration import Sampler
from cogym.runners.train.loop import train
from cogym.runners.train.rewards import learned_rewards

PATH = Path(str(resources.files("cogym.configs").joinpath("policy_rm.yaml")))
SMALL = ["game.num_games=4", "game.kwargs.num_solvers=4", "eval.evaluators.heldout.size=20", "run.tensorboard=false",
         "run.plot=false"]


def test_the_solver_is_paid_by_the_reward_model_which_trains_on_the_game_rewards(tmp_path):
    run = build(load_config(PATH, [*SMALL, f"run.out_dir={tmp_path}"]))
    assert "rm" in run.learners and not any(pid == "rm" for pid, _ in run.seats.values())  # trained, seated nowhere
    res, batches, metrics = Sampler(run, InProcess(run.cfg).rollouts()).sample(1)
    truth = [t for t in res.turns if t.policy_id == "solver"]
    assert batches["rm"] == truth  # the game's rewards, for the reward model to train on
    expected = run.learners["rm"].algorithm.rewards(truth)
    assert [t.reward for t in batches["solver"]] == pytest.approx(expected)
    assert metrics["solver/rm_reward"] == pytest.approx(sum(expected) / len(expected))
    assert batches["proposer"] == [t for t in res.turns if t.policy_id == "proposer"]  # paid by the game
    # a batch with no reward_from is left as it is
    before = dict(batches)
    run.cfg.learners["solver"].reward_from = ""
    assert learned_rewards(run, batches) == {} and batches == before


@pytest.mark.slow
def test_policy_rm_config_trains_two_iterations_and_checkpoints_the_reward_model(tmp_path):
    cfg = load_config(PATH, [*SMALL, "run.iterations=2", "run.checkpoint_every=2", f"run.out_dir={tmp_path}"])
    summary = train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "rollout_s" in r]
    assert summary["iterations"] == 2 and [r["iteration"] for r in rows] == [1, 2]
    for row in rows:
        assert row["rm/rm/pairs"] > 0 and 0 <= row["rm/rm/accuracy"] <= 1 and "rm/rm/loss" in row
        assert "solver/rm_reward" in row and "solver/loss" in row and "solver/reward" in row
    saved = tmp_path / "run" / "checkpoints" / "step_000002" / "learners" / "rm" / "reward_model" / "critic.safetensors"
    head = load_file(str(saved))["head.weight"]
    assert head.abs().sum() > 0  # the head starts at zero: it trained
    # resumed, the reward model has its trained weights back and the run goes on
    more = load_config(PATH, [*SMALL, "run.iterations=3", "run.checkpoint_every=0", f"run.out_dir={tmp_path}"])
    assert train(more, tmp_path / "run", resume=True, progress=False)["iterations"] == 3


@pytest.mark.parametrize("overrides, match", [
    (["learners.solver.reward_from=judge"], "reward_from must name another policy whose learner has algorithm: reward_model"),
    (["learners.solver.reward_from=proposer"], "reward_from must name another policy"),
    (["learners.solver.reward_from=solver"], "reward_from must name another policy"),
    (["learners.solver.dynamic_sampling=std_gt_0"], "set dynamic_sampling: off"),
])
def test_reward_from_refuses_what_cannot_run(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(PATH, overrides)



def test_the_rewards_and_the_accuracy_are_of_answers_to_one_problem(tmp_path):
    """The reward model scores the problem with the answer (its prompt ids hold the problem), each pair is two
    answers to one problem, and rm_accuracy is the share of those pairs its scores order right."""
    run = build(load_config(PATH, [*SMALL, f"run.out_dir={tmp_path}"]))
    res, batches, metrics = Sampler(run, InProcess(run.cfg).rollouts()).sample(1)
    truth, tok = batches["rm"], run.policies["rm"].tokenizer
    problems = {t.episode_id: t.info.get("problem") for t in truth}
    for t in truth:
        assert problems[t.episode_id] and problems[t.episode_id] in tok.decode(t.prompt_ids)
    pairs = reward_pairs(truth, "all")
    assert pairs and all(truth[c].prompt_ids == truth[r].prompt_ids and truth[c].reward > truth[r].reward
                         for c, r in pairs)
    scores = [t.reward for t in batches["solver"]]
    right = sum(scores[c] > scores[r] for c, r in pairs) / len(pairs)
    assert metrics["solver/rm_accuracy"] == pytest.approx(right)


def test_warmup_pays_nothing_until_the_reward_model_has_trained(tmp_path):
    run = build(load_config(PATH, [*SMALL, "learners.rm.rm_warmup=2", f"run.out_dir={tmp_path}"]))
    sampler = Sampler(run, InProcess(run.cfg).rollouts())
    res, batches, metrics = sampler.sample(1)
    assert batches["solver"] == []  # no batch: the solver takes no step (a critic or entropy would move it)
    assert any(t.reward > 0 for t in batches["rm"])  # the reward model trains on the game's rewards
    assert 0 <= metrics["solver/rm_accuracy"] <= 1  # and is measured all the while
    run.learners["rm"].algorithm.updates = 2
    res, batches, metrics = sampler.sample(2)
    assert [t.reward for t in batches["solver"]] == pytest.approx(run.learners["rm"].algorithm.rewards(batches["rm"]))
