"""On-policy distillation (cogym.learners.algorithms.distill): the student's samples, a teacher's per-token
log-probs as the target, advantage -(logp_student - logp_teacher)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams, Turn
from cogym.learners.batch import TokenBatch, response_logp
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner
from cogym.learners.rows import RoleRows
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train

WORDS = ["".join(random.Random(k).choice("abcd") for _ in range(3)) for k in range(24)]
TRAIN, HELD_OUT = WORDS[:16], WORDS[16:]


def cfg(**kw) -> LearnerConfig:
    return LearnerConfig.from_flat(**{"algorithm": "distill", "engine": "torch", "lr": 1e-2, **kw})


def prompt(policy: Policy, word: str) -> list[int]:
    return policy.render([{"role": "user", "content": word}])


@pytest.fixture
def teacher_dir(tiny_model_dir, tmp_path):
    """A teacher unlike the random student: the tiny model after a few SFT steps of echoing a word."""
    data = tmp_path / "echo.jsonl"
    data.write_text("".join(json.dumps({"prompt": w, "response": w}) + "\n" for w in TRAIN))
    teacher = Policy.from_pretrained(tiny_model_dir)
    learner = Learner(teacher, LearnerConfig.from_flat(algorithm="sft", engine="torch", lr=1e-2, sft_data=str(data),
                                                       sft_batch_size=16))
    dummy = Turn(0, "e", "s", "r", "p", [1], [2], [0.0], "", True)
    for _ in range(15):
        learner.update([dummy])
    teacher.save(tmp_path / "teacher")
    return tmp_path / "teacher"


def samples(policy: Policy, words, per_word: int = 4, seed: int = 0) -> list[Turn]:
    torch.manual_seed(seed)
    gens = policy.generate([prompt(policy, w) for w in words for _ in range(per_word)],
                           SamplingParams(max_new_tokens=4, temperature=1.0))
    return [Turn(0, f"e{i}", "solver_0", "solver", policy.name, g.prompt_ids, g.response_ids, g.logprobs, g.text, g.finished,
                 group_key=f"e{i}") for i, g in enumerate(gens)]


@torch.no_grad()
def first_token_kl(student: torch.nn.Module, teacher: torch.nn.Module, policy: Policy, words) -> float:
    """Exact KL(student || teacher) of the first response token's distribution, averaged over the prompts."""
    kl = 0.0
    for w in words:
        ids = torch.tensor([prompt(policy, w)])
        s = torch.log_softmax(student(ids).logits[0, -1].float(), -1)
        t = torch.log_softmax(teacher(ids).logits[0, -1].float(), -1)
        kl += float((s.exp() * (s - t)).sum())
    return kl / len(words)


def test_distillation_lowers_the_kl_to_the_teacher_on_held_out_prompts(policy, teacher_dir):
    learner = Learner(policy, cfg(distill_teacher=str(teacher_dir)))
    teacher = learner.algorithm.teacher
    before = first_token_kl(policy.model, teacher, policy, HELD_OUT)
    estimates = [learner.update(samples(policy, TRAIN, seed=step))["solver/distill_reverse_kl"] for step in range(30)]
    after = first_token_kl(policy.model, teacher, policy, HELD_OUT)
    assert after < 0.7 * before, f"held-out KL(student || teacher) {before:.3f} -> {after:.3f}"
    assert sum(estimates[-5:]) < 0.5 * sum(estimates[:5]), estimates  # the sampled estimate (the metric) falls too


def test_the_advantage_is_minus_the_log_ratio_to_the_teacher(policy, teacher_dir):
    learner = Learner(policy, cfg(distill_teacher=str(teacher_dir)))
    b = TokenBatch.from_turns(samples(policy, TRAIN[:3]), policy.tokenizer.pad_token_id)
    res = learner.algorithm.advantages(RoleRows("solver", torch.arange(len(b.turns)), b, torch.zeros_like(b.mask)))
    expected = -(b.logp_old - response_logp(learner.algorithm.teacher, b)) * b.mask
    assert torch.allclose(res.adv, expected, atol=1e-6)
    assert res.metrics["distill_reverse_kl"] == pytest.approx(float(-expected.sum() / b.mask.sum()), abs=1e-6)
    assert bool((res.adv != 0).any())


def test_the_teacher_may_be_another_policy_of_the_run(policy, tiny_model_dir, teacher_dir):
    teacher = Policy.from_pretrained(teacher_dir, name="teacher")
    learner = Learner(policy, cfg(distill_teacher="teacher"), policies={"teacher": teacher})
    assert learner.algorithm.teacher is teacher.model  # the run's own copy, not another load
    with pytest.raises(ValueError, match="is the student itself"):
        Learner(policy, cfg(distill_teacher=policy.name), policies={"teacher": teacher})
    with pytest.raises(ValueError, match=r"'nobody' is neither another policy of the run \(teacher\) nor a model directory"):
        Learner(policy, cfg(distill_teacher="nobody"), policies={"teacher": teacher})


@pytest.mark.parametrize("keys, message", [
    ({}, "distill_teacher must name the teacher"),
    ({"distill_teacher": "tiny", "kl_in_reward": "k1"}, "kl_in_reward must be 'off'"),
])
def test_config_errors(keys, message):
    with pytest.raises(ValueError, match=message):
        cfg(**keys).validate()


def test_a_run_distills_from_a_frozen_policy_with_a_seat(tmp_path, teacher_dir):
    """Through build: the solver distills from policy 'proposer' (the teacher, frozen, seated as one of the
    solvers; a scripted twin proposes), which build hands it."""
    config = load_config(None, ["run.iterations=2", f"run.out_dir={tmp_path}", "run.checkpoint_every=0", "run.eval_every=0",
                                "game.num_games=2", "game.kwargs.num_solvers=2", f"policies.proposer.model={teacher_dir}",
                                "seats.proposer=scripted:random", "seats.solver_0=proposer",
                                "learners.proposer.algorithm=frozen", "learners.solver.algorithm=distill",
                                "learners.solver.distill_teacher=proposer", "learners.solver.engine=torch"])
    train(config, run_path=tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    kls = [r["solver/distill_reverse_kl"] for r in rows if "solver/distill_reverse_kl" in r]
    assert len(kls) == 2 and all(k == k for k in kls)  # two updates, finite estimates
