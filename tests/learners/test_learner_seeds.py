"""The learners' random draws follow run.seed: SFT's order of a file's rows, PF-PPO's redraw of a batch and
clip_cov's tokens to cut come from generators of (run seed, learner, pass / update / step) (the learner
streams of cogym/core/seeding.py, given to the algorithms by their Context), so the same seed gives the same
numbers, another seed others, in one process and in a Ray learner actor (built by the same build_learner),
whatever torch's global generator holds."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import torch
from test_learner import _turns

from cogym.agents.policy import Policy
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner
from cogym.runners.config.load import load_config
from cogym.runners.train.build import build_learner

DEFAULT = Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml")))


def sft_file(tmp_path: Path, n: int = 12) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "response": f"r{i}"}) + "\n" for i in range(n)))
    return str(path)


def sft_order(policy: Policy, data: str, seed: int, n: int = 12) -> list[str]:
    """The responses of the first pass over the file, in the order SFT takes them."""
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="sft", engine="torch", sft_data=data, sft_batch_size=n),
                      seed=seed)
    return [row.response for row in learner.algorithm.next_rows()]


def test_sft_order_follows_the_run_seed_and_the_learner(policy, tmp_path):
    data = sft_file(tmp_path)
    first = sft_order(policy, data, seed=0)
    assert sft_order(policy, data, seed=0) == first
    other = sft_order(policy, data, seed=1)
    assert other != first and sorted(other) == sorted(first) == sorted(f"r{i}" for i in range(12))
    policy.name = "another_learner"  # two learners of one run draw apart
    assert sft_order(policy, data, seed=0) != first


def test_a_ray_learner_actor_draws_what_one_process_draws(tiny_model_dir, tmp_path):
    """build_learner (what a Ray learner actor runs) gives the algorithm run.seed and the policy's id."""
    data = sft_file(tmp_path)
    cfg = load_config(DEFAULT, ["run.seed=7", f"policies.solver.model={tiny_model_dir}", "learners.solver.engine=torch",
                                "learners.solver.algorithm=sft", f"learners.solver.sft_data={data}",
                                "learners.solver.sft_batch_size=12"])
    _, actor = build_learner(cfg, "solver")
    assert actor.algorithm.ctx.seed == 7
    in_process = sft_order(Policy.from_pretrained(tiny_model_dir, name="solver"), data, seed=7)
    assert [row.response for row in actor.algorithm.next_rows()] == in_process
    assert in_process != sft_order(Policy.from_pretrained(tiny_model_dir, name="solver"), data, seed=0)


def pf_ppo_draw(policy: Policy, turns, seed: int) -> list[str]:
    learner = Learner(policy, LearnerConfig(algorithm="pf_ppo", engine="torch", lr=1e-3), seed=seed)
    return [t.seat + t.episode_id for t in learner.algorithm.train_batch(learner, turns).batch.turns]


def test_pf_ppo_draw_follows_the_run_seed(policy):
    turns = _turns(policy, n_groups=4, per_group=4)  # 8 rewarded rows: the draw picks 16 of them
    first = pf_ppo_draw(policy, turns, seed=0)
    assert pf_ppo_draw(policy, turns, seed=0) == first
    assert pf_ppo_draw(policy, turns, seed=1) != first


CLIP_COV = dict(algorithm="grpo", engine="torch", lr=1e-2, policy_loss="clip_cov", clip_cov_ratio=0.25,
                clip_cov_lb=-1e9, clip_cov_ub=1e9)  # every token a candidate: a quarter of them cut, drawn


def clip_cov_update(tiny_model_dir, turns, seed: int, global_seed: int) -> dict[str, torch.Tensor]:
    """The weights after one clip_cov update with run seed ``seed``, torch's global generator at ``global_seed``."""
    policy = Policy.from_pretrained(tiny_model_dir)
    learner = Learner(policy, LearnerConfig.from_flat(**CLIP_COV), seed=seed)
    torch.manual_seed(global_seed)
    metrics = learner.update(turns)
    assert 0.2 < metrics["pg_clipfrac"] <= 0.25
    return {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def test_clip_cov_picks_follow_the_run_seed_not_torchs_global_generator(tiny_model_dir):
    turns = _turns(Policy.from_pretrained(tiny_model_dir))
    first = clip_cov_update(tiny_model_dir, turns, seed=0, global_seed=1)
    again = clip_cov_update(tiny_model_dir, turns, seed=0, global_seed=2)
    other = clip_cov_update(tiny_model_dir, turns, seed=1, global_seed=1)
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert any(not torch.equal(first[n], other[n]) for n in first)


def test_a_plugin_of_ones_own_draws_from_the_plugin_streams_by_seed_learner_and_stream(policy):
    """docs/write_your_own_algorithm.md: a user's algorithm draws from learners.plugin(_torch) with a stream
    number of its own; the draw follows the run seed, the learner and that number, and never torch's global."""
    from cogym.learners.algorithm import Context

    def draws(seed: int, stream: int, name: str = "solver") -> tuple[list[int], list[float]]:
        policy.name = name
        ctx = Context(policy=policy, cfg=LearnerConfig.from_flat(), seed=seed)
        torch.manual_seed(seed + 1000 * stream)  # the global generator must not matter
        return (ctx.plugin_rng(stream, 0).integers(0, 2**31, 4).tolist(),
                torch.rand(4, generator=ctx.plugin_generator(stream, 0)).tolist())

    first = draws(0, 1)
    assert draws(0, 1) == first
    for other in (draws(1, 1), draws(0, 2), draws(0, 1, name="proposer")):
        assert other[0] != first[0] and other[1] != first[1]
