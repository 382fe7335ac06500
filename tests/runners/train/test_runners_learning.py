"""Learning test on the shipped tiny model: GRPO must actually raise held-out accuracy.

In the spirit of Stable-Baselines3's identity tests: a short solver-only run (the proposer seat
played by the game's scripted random twin, so the problem mix is the held-out distribution)
must lift greedy accuracy on 200 held-out problems by a stated margin. Full default runs lift it
by about 20 points in 400 iterations; 40 iterations give about 8, so 4 points leaves room for
platform noise while still failing if the learner stops learning (a sign flip, a wrong mask, a
broken group key all give <= 0).
"""

from __future__ import annotations

import json

import pytest

from cogym.agents.loading import tiny_model_path
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not (tiny_model_path() / "model.safetensors").is_file(), reason="embedded tiny model not built")
def test_grpo_raises_heldout_accuracy_of_the_tiny_model(tmp_path):
    cfg = load_config(None, [
        "seats.proposer=scripted:random", "run.iterations=40", "run.checkpoint_every=0", "run.eval_every=0",
        "run.tensorboard=false", "run.plot=false", "eval.evaluators.heldout.size=200", "learners.solver.engine=torch",
        "learners.solver.lr=5e-5",
    ])
    summary = train(cfg, run_path=tmp_path / "run", progress=False)
    before, after = summary["heldout_acc_before"], summary["heldout_acc_after"]
    assert after >= before + 0.04, f"held-out accuracy {before:.3f} -> {after:.3f}: GRPO did not learn"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    its = [r for r in rows if "rollout_s" in r]
    assert len(its) == 40
    # the solver trains on exactly the ids it generated
    assert max(r["solver/logprob_drift"] for r in its) < 1e-3
    # decode-then-re-encode would differ only on rare replies holding special tokens
    assert sum(r["solver/retokenize_mismatch"] for r in its) / len(its) < 0.01
