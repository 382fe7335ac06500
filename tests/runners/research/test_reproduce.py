"""cogym reproduce (runners/reproduce.py, runners/claims.py): every shipped claim runs one iteration per
arm end to end, the judges apply their thresholds, and the command's output and errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cogym.core.errors import CogymError
from cogym.runners.cli import main
from cogym.runners.research.claim import VERDICTS
from cogym.runners.research.reproduce import all_claims, claim_named, format_results, reproduce

CLAIMS = ["kuhn_nash", "ttrl", "reward_hacking", "azr_curriculum", "prime_dense", "debate_truth", "mae_collusion"]
# one iteration per arm, smaller evaluations: what is tested is that every arm runs and every measure is read
QUICK = ["run.iterations=1", "run.eval_every=0"]
SMALL_EVAL = {"kuhn_nash": [], "reward_hacking": ["eval.evaluators.heldout.size=50"], "prime_dense": ["eval.evaluators.heldout.size=50"],
              "azr_curriculum": ["eval.evaluators.heldout.size=50", "eval.evaluators.difficulty.games=4", "eval.evaluators.difficulty.samples=2"]}


def test_the_seven_claims_are_listed(capsys: pytest.CaptureFixture) -> None:
    assert [c.name for c in all_claims()] == CLAIMS
    assert main(["reproduce", "--list"]) == 0
    text = capsys.readouterr().out
    assert all(f"{name}  (" in text for name in CLAIMS)
    assert max(len(line) for line in text.splitlines()) <= 80


@pytest.mark.parametrize("name", CLAIMS)
def test_every_claim_runs_one_iteration_per_arm(name: str, tmp_path: Path) -> None:
    claim = claim_named(name)
    extra = [*QUICK, *SMALL_EVAL.get(name, ["eval.evaluators.heldout.size=50"] if name != "debate_truth" else [])]
    results = reproduce(claim, 1, tmp_path, extra)
    assert set(results.values) == {a.name for a in claim.arms}
    for arm in claim.arms:
        assert (tmp_path / arm.name / "seed0" / "metrics.jsonl").is_file()
        for m in claim.measures:
            (value,) = results.values[arm.name][m.name]
            assert isinstance(value, float)
            if m.read.__qualname__.startswith(("after", "before", "gain")):
                assert not math.isnan(value), (arm.name, m.name)  # an evaluation always ran before and after
    assert results.verdict in VERDICTS and results.reason
    table = format_results(claim, results)
    assert f"verdict: {results.verdict}" in table and all(a.name in table for a in claim.arms)


def test_a_measure_an_arm_does_not_log_reads_not_logged_in_the_table() -> None:
    from cogym.runners.research.reproduce import Results

    claim = claim_named("ttrl")
    nan = float("nan")
    values = {"ground_truth": {"heldout_gain": [0.16, 0.17], "majority_correct": [nan, nan], "reward": [0.6, 0.7]},
              "label_free": {"heldout_gain": [-0.1, -0.2], "majority_correct": [0.3, nan], "reward": [0.8, 0.8]}}
    values = {arm: {m.name: v.get(m.name, [nan, nan]) for m in claim.measures} for arm, v in values.items()}
    results = Results("ttrl", [0, 1], values, cpu_s={arm: [60, 60] for arm in values},
                      verdict="not reproduced", reason="r")
    rows = {tuple(line.split()[:2]): line for line in format_results(claim, results).splitlines()
            if line.strip().startswith("majority_correct")}
    assert rows[("majority_correct", "ground_truth")].split()[2:] == ["not", "logged"]
    assert "nan" not in rows[("majority_correct", "ground_truth")]
    assert "0.300" in rows[("majority_correct", "label_free")]  # one seed logged it: shown with the other's nan


def test_the_kuhn_judge_needs_every_variant_at_or_below_the_target() -> None:
    judge = claim_named("kuhn_nash").judge
    good, blind = [0.10, 0.12, 0.14], [0.33, 0.34, 0.335]
    assert judge({"self_play": {"exploitability": good}, "league": {"exploitability": good},
                  "pfsp": {"exploitability": good}})[0] == "reproduced"
    assert judge({"self_play": {"exploitability": blind}, "league": {"exploitability": good},
                  "pfsp": {"exploitability": good}})[0] == "partially"
    assert judge({"self_play": {"exploitability": blind}, "league": {"exploitability": blind},
                  "pfsp": {"exploitability": blind}})[0] == "not reproduced"
    verdict, reason = judge({arm: {"exploitability": blind, "avg_exploitability": good} for arm in ("self_play", "league", "pfsp")})
    assert verdict == "not reproduced" and "average strategy: self_play 0.120" in reason  # shown, the last iterate judged


def test_the_ttrl_judge_compares_the_pass_at_1_gains_and_shows_the_greedy_ones() -> None:
    judge = claim_named("ttrl").judge

    def arms(truth: list[float], free: list[float], greedy=([0.1] * 3, [0.0] * 3)) -> dict:
        return {"ground_truth": {"sampled_gain": truth, "heldout_gain": greedy[0]},
                "label_free": {"sampled_gain": free, "heldout_gain": greedy[1]}}

    assert judge(arms([0.10, 0.12, 0.08], [0.09, 0.08, 0.08]))[0] == "reproduced"  # 0.083 >= 0.8 * 0.1
    assert judge(arms([0.10, 0.12, 0.08], [0.07, 0.08, 0.08]))[0] == "not reproduced"
    assert judge(arms([-0.01, 0.0, 0.0], [0.0, 0.0, 0.0]))[0] == "not reproduced"  # nothing to match
    # the greedy gains are shown, not judged: greedy decoding already drops most slips
    verdict, reason = judge(arms([0.30, 0.32, 0.34], [0.28, 0.30, 0.29], greedy=([0.1] * 3, [0.06] * 3)))
    assert verdict == "reproduced"
    assert "pass@1: label-free gain +0.290 vs ground-truth gain +0.320 (ratio 0.91)" in reason
    assert "greedy: label-free gain +0.060 vs ground-truth gain +0.100 (ratio 0.60)" in reason
    verdict, reason = judge(arms([0.40, 0.42, 0.44], [0.0, 0.01, -0.01]))
    assert verdict == "not reproduced" and "label-free gain +0.000 vs ground-truth gain +0.420 (ratio 0.00" in reason


def test_the_reward_hacking_judge_asks_for_a_rising_hack_and_a_guard_at_half_and_five_points() -> None:
    judge = claim_named("reward_hacking").judge
    base = {"accepted_wrong": [0.8, 0.8, 0.8], "accepted_wrong_rise": [0.1, 0.2, 0.1], "heldout_gain": [0.0, 0.0, 0.0]}
    flat = {**base, "accepted_wrong_rise": [0.0, -0.1, 0.0]}  # the frozen verifier was never hacked harder
    good = {"accepted_wrong": [0.4, 0.4, 0.4], "heldout_gain": [0.06, 0.05, 0.07]}
    weak = {"accepted_wrong": [0.41, 0.41, 0.41], "heldout_gain": [0.06, 0.06, 0.06]}
    poor = {"accepted_wrong": [0.1, 0.1, 0.1], "heldout_gain": [0.04, 0.04, 0.04]}  # 4 points more: short of 5
    assert judge({"verifier_only": base, "cooper": good, "truth_mix": good})[0] == "reproduced"
    verdict, reason = judge({"verifier_only": base, "cooper": good, "truth_mix": weak})
    assert verdict == "reproduced" and "cooper: accepted_wrong 0.400, gain +0.060 (holds)" in reason
    assert "truth_mix: accepted_wrong 0.410, gain +0.060 (does not hold)" in reason
    assert judge({"verifier_only": flat, "cooper": good, "truth_mix": weak})[0] == "partially"
    assert judge({"verifier_only": base, "cooper": poor, "truth_mix": weak})[0] == "partially"
    assert judge({"verifier_only": flat, "cooper": weak, "truth_mix": poor})[0] == "not reproduced"
    # how strict a guarded verifier got is shown (a verifier that rejects everything accepts no wrong answer)
    strict = {**good, "rejected_right": [0.9, 0.8, 0.85]}
    verdict, reason = judge({"verifier_only": base, "cooper": strict, "truth_mix": weak})
    assert verdict == "reproduced" and "cooper: accepted_wrong 0.400, rejects 0.850 of the right, gain +0.060 (holds)" in reason


def test_the_azr_judge_asks_for_the_gain_and_a_difficulty_that_rises_with_the_solver() -> None:
    judge = claim_named("azr_curriculum").judge

    def arms(learn_gain: float, learn_rise: float) -> dict:
        return {"learnability": {"heldout_gain": [learn_gain] * 3, "difficulty_rise": [learn_rise] * 3},
                "random": {"heldout_gain": [0.10] * 3, "difficulty_rise": [0.01] * 3},
                "uniform_file": {"heldout_gain": [0.12] * 3, "difficulty_rise": [-0.01] * 3}}

    assert judge(arms(0.10, 0.05))[0] == "reproduced"
    assert judge(arms(0.09, 0.05))[0] == "partially"  # teaches less than the random proposer
    assert judge(arms(0.11, 0.01))[0] == "partially"  # its difficulty does not rise above the fixed arms'
    verdict, reason = judge(arms(0.05, 0.0))
    assert verdict == "not reproduced" and "difficulty rise" in reason


def test_the_command_writes_json_and_plot_and_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "debate"
    assert main(["reproduce", "debate_truth", "--seeds", "2", "--out", str(out), "--quiet", *QUICK]) == 0
    printed = capsys.readouterr().out
    data = json.loads((out / "results.json").read_text())
    assert data["seeds"] == [0, 1] and data["verdict"] in VERDICTS
    assert len(data["arms"]["rae_oracle_judge"]["measures"]["truth_end"]["values"]) == 2
    assert (out / "results.png").stat().st_size > 1000
    assert "truth_rise" in printed and "verdict:" in printed
    assert main(["reproduce", "debate_truth", "--out", str(out), *QUICK]) == 2  # not empty
    assert "not empty" in capsys.readouterr().err
    assert main(["reproduce", "ttlr", "--out", str(tmp_path / "x")]) == 2
    assert "did you mean 'ttrl'" in capsys.readouterr().err


def test_a_bad_override_fails_before_any_run(tmp_path: Path) -> None:
    with pytest.raises(CogymError):
        reproduce(claim_named("ttrl"), 1, tmp_path, ["run.iterashuns=1"])
    assert not any(tmp_path.iterdir())
