"""benchmarks/grpo_vs_trl.py's building blocks, one small alternating step: both sides start from the
same weights, see the same prompt ids, make the same number of completions and one optimizer step."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from tests.bench_scripts import benchmark_module

pytest.importorskip("trl", reason="TRL is the benchmark extra: pip install -e '.[bench]'")

# TRL itself still asks the model the deprecated name
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("grpo_vs_trl") as module:
        yield module


def test_one_alternating_step_sees_the_same_prompts_and_completions(bench, tmp_path: Path) -> None:
    w = bench.Workload("tiny", prompts=4, group=4, max_new_tokens=4, steps=1, bar=0.7)
    cogym = bench.CogymSide("tiny", bench.HELDOUT, w)
    trl = bench.TRLSide(bench.tiny_model_path(), cogym.problems, cogym.messages, w, steps=1, out_dir=tmp_path / "trl")
    # (a DeepSpeed test earlier in this process may have started torch.distributed: TRL then trains under
    # a one-process DDP, which changes its speed, not what it computes)
    cogym.build()
    cogym_weights = {k: v.detach().cpu() for k, v in cogym.policy.model.state_dict().items()}
    trl_weights = trl.trainer.model.state_dict()
    assert cogym_weights.keys() == trl_weights.keys()
    assert all(torch.equal(cogym_weights[k], trl_weights[k].cpu()) for k in cogym_weights)  # one model

    expected = [cogym.policy.render(cogym.messages(q)) for q, _ in cogym.problems]
    assert len({tuple(p) for p in expected}) == w.prompts  # distinct problems
    assert trl.prompt_ids() == expected  # TRL's own tokenization of the conversations

    trl_stats, cogym_stats = [], []
    trl.train(lambda: cogym_stats.append(cogym.step()), trl_stats)
    assert cogym.prompt_ids == expected  # the rollout's prompts, one per game
    assert [s.completions for s in trl_stats] == [s.completions for s in cogym_stats] == [w.prompts * w.group]
    for s in trl_stats + cogym_stats:
        assert s.seconds > 0 and 0.0 <= s.reward <= 1.0
        assert w.prompts * w.group <= s.completion_tokens <= w.prompts * w.group * w.max_new_tokens
    assert cogym.learner.steps == 1 and trl.trainer.state.global_step == 1  # one optimizer step each
    args = trl.trainer.args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.steps_per_generation,
            args.generation_batch_size, args.num_iterations) == (16, 1, 1, 16, 1)
    assert args.beta == 0.0 and not args.gradient_checkpointing and not args.bf16 and args.learning_rate == 5e-5


def test_the_reward_is_the_games_scoring(bench) -> None:
    reward = bench.exact_match_reward({"63-81": "-18"})
    prompt = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "63-81"}]
    texts = ["-18", "x = -18", "18", ""]
    out = reward([prompt] * 4, [[{"role": "assistant", "content": t}] for t in texts], [[7]] * 4)
    assert out == [1.0, 1.0, 0.0, 0.0]


def test_mid_problems_render_to_the_asked_length(bench, tmp_path: Path) -> None:
    from cogym.agents.policy import Policy

    q, a = bench.long_problem(random.Random(0), 3, 117)
    assert len(q) == 117 and int(a) == sum(int(t) for t in q.split(": ", 1)[1].split("+"))
    path = bench.write_mid_problems(tmp_path / "p.jsonl", 3, 128, "Solve.")
    policy = Policy.from_pretrained("tiny")
    from cogym.envs.datasets import load_problems

    rows = load_problems(path, integer_answers_for="verifier='exact'")
    assert [len(policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": r.question}]))
            for r in rows] == [128] * 3


def test_the_table_fits_80_columns(bench) -> None:
    r = bench.Result(bench.WORKLOADS["mid"], warmup=1)
    r.cogym = [bench.StepStats(s, 64, 1800, 0.0) for s in (20.0, 9.0, 10.0)]
    r.trl = [bench.StepStats(s, 64, 1800, 0.0) for s in (30.0, 20.0, 21.0)]
    text = bench.table([r])
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "9.500" in text and "20.500" in text and "0.463" in text and "<=0.3" in text and "FAIL" in text
    r.cogym = [bench.StepStats(s, 64, 1800, 0.0) for s in (20.0, 5.0, 6.0)]  # 5.5 / 20.5 = 0.268: under the bar
    assert "0.268" in bench.table([r]) and "pass" in bench.table([r])
