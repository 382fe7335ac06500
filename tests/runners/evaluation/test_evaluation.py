"""Declared evaluators (runners/evaluation.py): config checks, determinism, paired seeds, and that
an evaluation never moves training."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cogym.core.errors import CogymError
from cogym.runners.train.build import build
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError
from cogym.envs import make
from cogym.envs.arithmetic_eval import HeldoutArithmetic, heldout_accuracy
from cogym.envs.kuhn_poker_eval import KuhnExploitability
from cogym.runners.evaluation.context import PolicyModel, RunContext, forked_rng
from cogym.runners.evaluation.evaluators import EVALUATORS, VsScripted, evaluate, evaluators_of, register_evaluator
from cogym.runners.train.loop import train

KUHN = str(Path(__file__).resolve().parents[3] / "cogym" / "configs" / "kuhn_poker.yaml")
TIMING = ("rollout_s", "update_s", "iteration_s", "tokens_per_s")


def _kuhn(model: Path, extra: list[str] = ()) -> list[str]:
    return [f"policies.player.model={model}", "game.num_games=8", "run.iterations=2", "run.checkpoint_every=0",
            "run.tensorboard=false", "run.plot=false", "learners.player.lr=1e-2", *extra]


def test_vs_scripted_is_deterministic_and_leaves_the_torch_stream_alone(tiny_model_dir: Path) -> None:
    import torch

    run = build(load_config(KUHN, _kuhn(tiny_model_dir)))
    assert [type(e) for e in run.evaluators] == [VsScripted, VsScripted, KuhnExploitability]
    torch.manual_seed(7)
    expected_next = torch.rand(3)
    torch.manual_seed(7)
    first = evaluate(run.evaluators, run)
    assert torch.equal(torch.rand(3), expected_next)  # the caller's stream continues as if nothing ran
    assert evaluate(run.evaluators, run) == first  # fixed hands, fixed sampling stream
    assert set(first) == ({f"eval/{n}/{m}" for n in ("vs_random", "vs_nash") for m in ("win_rate", "return", "invalid")}
                          | {f"eval/exploitability/{m}" for m in ("exploitability", "card_spread", "invalid", "unresolved")})
    assert all(0.0 <= first[f"eval/{n}/win_rate"] <= 1.0 for n in ("vs_random", "vs_nash"))


def test_kuhn_summary_reports_the_evaluation_before_and_after(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = load_config(KUHN, _kuhn(tiny_model_dir, ["eval.evaluators.vs_nash.games=40", "eval.evaluators.vs_random.games=40"]))
    summary = train(cfg, tmp_path / "run", progress=False)
    for key in ("eval/vs_nash/win_rate", "eval/vs_random/return"):
        assert f"{key}_before" in summary and f"{key}_after" in summary
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/vs_nash/win_rate" in r]
    assert [r["iteration"] for r in evals] == [0, 2]


def test_an_evaluation_does_not_change_the_training_numbers(tiny_model_dir: Path, tmp_path: Path) -> None:
    def iterations(extra: list[str], out: str) -> list[dict]:
        train(load_config(KUHN, _kuhn(tiny_model_dir, extra)), tmp_path / out, progress=False)
        rows = [json.loads(line) for line in (tmp_path / out / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in TIMING} for r in rows if "rollout_s" in r]

    with_eval = iterations(["eval.evaluators.vs_nash.games=16", "eval.evaluators.vs_random.games=16"], "a")
    without = iterations(["eval.evaluators={}"], "b")
    assert with_eval == without and len(without) == 2


def test_self_play_gives_the_twin_the_last_role(tiny_model_dir: Path) -> None:
    run = build(load_config(KUHN, _kuhn(tiny_model_dir, ["seats.second=player"])))
    seating, mine, twin = run.evaluators[0]._seating(run, run.games[0], "player")
    assert mine == ["player_0"] and twin == ["player_1"]
    assert seating["player_1"][0] == "scripted:random"


@pytest.mark.parametrize("extra, message", [
    (["eval.evaluators.x={kind: vs_scriptd}"], "did you mean 'vs_scripted'"),
    (["eval.evaluators.x={kind: vs_scripted, oponent: nash}"], "did you mean 'opponent'"),
    (["eval.evaluators.x={kind: vs_scripted, opponent: bluff}"], "no scripted twin 'bluff'"),
    (["eval.evaluators.x={kind: vs_scripted, games: 0}"], "eval.evaluators.x.games must be >= 1"),
    (["eval.evaluators.x=3"], "must be a mapping with a kind"),
])
def test_bad_evaluator_specs_are_one_line_errors(tiny_model_dir: Path, extra: list[str], message: str) -> None:
    cfg = load_config(KUHN, _kuhn(tiny_model_dir, ["eval.evaluators={}", *extra]))
    with pytest.raises(CogymError, match=message):
        run = build(cfg)
        evaluate(run.evaluators, run)


def test_a_user_evaluator_kind_registers_and_runs(tiny_model_dir: Path) -> None:
    @dataclasses.dataclass
    class Constant:  # config sections are dataclasses: their fields are the keys a config may set
        name: str = "c"
        value: float = 0.0

        def evaluate(self, run) -> dict[str, float]:
            return {f"eval/{self.name}/value": self.value}

    register_evaluator("test_constant")(Constant)
    try:
        run = build(load_config(KUHN, _kuhn(tiny_model_dir, ["eval.declared=false",
                                                             "eval.evaluators={c: {kind: test_constant, value: 0.25}}"])))
        assert evaluate(run.evaluators, run) == {"eval/c/value": 0.25}
        with pytest.raises(ConfigError, match="already registered"):
            register_evaluator("test_constant")(type("Other", (), {}))
    finally:
        EVALUATORS.pop("test_constant", None)


def test_heldout_accuracy_generates_in_batches_of_batch_size(policy, monkeypatch) -> None:
    from cogym.envs.arithmetic import load_heldout

    records = load_heldout()[:23]
    whole = heldout_accuracy(PolicyModel(policy), records, "", batch_size=500)
    calls: list[int] = []
    generate = policy.generate
    monkeypatch.setattr(policy, "generate", lambda prompts, sampling: calls.append(len(prompts)) or generate(prompts, sampling))
    # Other batches pad prompts differently: greedy answers may differ by float rounding, at most one here.
    assert heldout_accuracy(PolicyModel(policy), records, "", batch_size=10) == pytest.approx(whole, abs=1 / len(records))
    assert calls == [10, 10, 3]
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        heldout_accuracy(PolicyModel(policy), records, "", batch_size=0)


def test_eval_batch_size_reaches_the_heldout_evaluator_and_is_checked() -> None:
    from cogym.runners.train.build import build_section

    cfg = load_config(None, ["eval.evaluators.heldout.batch_size=16"])
    (heldout,) = [e for e in evaluators_of(cfg.eval, make(cfg.game.id).spec, build_section) if isinstance(e, HeldoutArithmetic)]
    assert heldout.batch_size == 16
    with pytest.raises(ConfigError, match="eval.evaluators.heldout: batch_size=0: must be >= 1"):
        build(load_config(None, ["eval.evaluators.heldout.batch_size=0"]))
    with pytest.raises(ValueError, match="batch_size=0: must be >= 1"):
        HeldoutArithmetic(batch_size=0)


def test_kuhn_exploitability_is_the_exact_value_of_the_models_strategy(tiny_model_dir: Path) -> None:
    from cogym.envs.kuhn_poker import INFOSETS, exploitability

    run = build(load_config(KUHN, [*_kuhn(tiny_model_dir)[1:], "policies.player.model=tiny"]))  # the embedded model
    ev = next(e for e in run.evaluators if isinstance(e, KuhnExploitability))
    table = ev.strategy(RunContext(run))
    assert set(table) == set(INFOSETS) and all(sum(t) == pytest.approx(1.0, abs=1e-5) for t in table.values())
    metrics = ev.evaluate(RunContext(run))
    assert metrics["eval/exploitability/exploitability"] == pytest.approx(exploitability(table))
    assert metrics["eval/exploitability/unresolved"] < 1e-3
    assert metrics["eval/exploitability/invalid"] == pytest.approx(sum(t[2] for t in table.values()) / 12)
    greedy = dataclasses.replace(ev, greedy=True).strategy(RunContext(run))
    assert all(max(t) == pytest.approx(1.0) for t in greedy.values())  # greedy play is a pure strategy


def test_kuhn_exploitability_averages_the_last_evaluations_when_asked(monkeypatch) -> None:
    from cogym.envs.kuhn_poker import INFOSETS, STRATEGIES, average_strategy, exploitability, move_probs

    tables = [{i: move_probs(STRATEGIES[n][i]) for i in INFOSETS} for n in ("always_bet", "always_check", "random")]
    ev = KuhnExploitability(name="x", average=2)
    dist = type("Dist", (), {"unresolved": 0.0})()
    monkeypatch.setattr(ev, "_distributions", lambda run: [dist])
    monkeypatch.setattr(ev, "_table", lambda dists: tables[len(ev._history)] if len(ev._history) < 2 else tables[2])
    seen = [ev.evaluate(None) for _ in range(3)]
    assert [m["eval/x/exploitability"] for m in seen] == pytest.approx([1 / 3, 1.0, 11 / 24])
    assert seen[0]["eval/x/avg_exploitability"] == pytest.approx(1 / 3)
    assert seen[1]["eval/x/avg_exploitability"] == pytest.approx(exploitability(average_strategy(tables[:2])))
    assert seen[2]["eval/x/avg_exploitability"] == pytest.approx(exploitability(average_strategy(tables[1:])))  # window 2
    plain = KuhnExploitability(name="x")  # average 0, the default: no average is logged
    monkeypatch.setattr(plain, "_distributions", lambda run: [dist])
    monkeypatch.setattr(plain, "_table", lambda dists: tables[0])
    assert set(plain.evaluate(None)) == {f"eval/x/{m}" for m in ("exploitability", "card_spread", "invalid", "unresolved")}
    with pytest.raises(ValueError, match="average must be >= 0"):
        KuhnExploitability(average=-1)


@pytest.mark.parametrize("style", ["letters", "digits"])
def test_kuhn_exploitability_prompts_each_seat_with_the_games_own_text(tiny_model_dir: Path, monkeypatch,
                                                                        style: str) -> None:
    import cogym.runners.evaluation.context as kuhn_evaluator  # the runner's Model asks reply_probs

    seen = []
    real = kuhn_evaluator.reply_distributions
    monkeypatch.setattr(kuhn_evaluator, "reply_distributions", lambda policy, prompts, *a, **k: seen.append(
        [policy.tokenizer.decode(p) for p in prompts]) or real(policy, prompts, *a, **k))
    run = build(load_config(KUHN, _kuhn(tiny_model_dir, [f"game.kwargs.card_style={style}"])))
    next(e for e in run.evaluators if isinstance(e, KuhnExploitability)).evaluate(RunContext(run))
    game = make("kuhn_poker-v0", card_style=style)  # what the game shows player_1 holding K after a bet
    game.reset(seed=0, options={"cards": ("J", "K")})
    game.step("bet")
    text = game.observe("player_1")["text"]
    (prompts,) = seen
    assert len(prompts) == 12 and sum(text in t for t in prompts) == 1


@pytest.mark.parametrize(("extra", "message"), [
    (["eval.evaluators.x.kind=kuhn_exploitability"], "kuhn_exploitability is for kuhn_poker-v0"),
    (["eval.evaluators.x.kind=kuhn_exploitability", "eval.evaluators.x.min_prob=0.5"], "min_prob"),
])
def test_kuhn_exploitability_is_checked_when_the_config_loads(tiny_model_dir: Path, extra: list[str], message: str) -> None:
    config = KUHN if "min_prob" in message else str(Path(KUHN).with_name("proposer_solver.yaml"))
    base = _kuhn(tiny_model_dir) if "min_prob" in message else [f"policies.solver.model={tiny_model_dir}",
                                                               f"policies.proposer.model={tiny_model_dir}"]
    with pytest.raises(CogymError, match=message):
        build(load_config(config, [*base, *extra]))


def test_kuhn_exploitability_refuses_filtered_sampling(tiny_model_dir: Path) -> None:
    with pytest.raises(CogymError, match="plain temperature sampling"):
        build(load_config(KUHN, _kuhn(tiny_model_dir, ["policies.player.sampling.top_p=0.9"])))


# ------------------------------------------------------------------------------ proposal_difficulty
PS = str(Path(KUHN).with_name("proposer_solver.yaml"))
TTRL = str(Path(KUHN).with_name("ttrl.yaml"))


def _difficulty_run(config: str, model: Path, extra: list[str] = ()):
    models = [f"policies.solver.model={model}"] + ([f"policies.proposer.model={model}"] if config == PS else [])
    cfg = load_config(config, [*models, "eval.declared=false", "eval.evaluators.d.kind=proposal_difficulty",
                               "eval.evaluators.d.games=6", "eval.evaluators.d.samples=3", *extra])
    run = build(cfg)
    (ev,) = run.evaluators
    return run, ev


class _Answers:
    """Stands in for the initial model: answers every prompt with ``answer(problem)``."""

    def __init__(self, answer) -> None:
        self.answer, self.prompts = answer, []

    def render(self, messages: list[dict]) -> str:
        return messages[-1]["content"]

    def generate(self, prompts: list[str], sampling) -> list:
        self.prompts += prompts
        return [type("Gen", (), {"text": self.answer(p)})() for p in prompts]


def test_proposal_difficulty_judges_the_initial_models_answers_by_the_truth(tiny_model_dir: Path) -> None:
    from cogym.envs.arithmetic import ANY_PROBLEM

    run, ev = _difficulty_run(TTRL, tiny_model_dir)  # label-free: the game's reward is the majority vote
    right = _Answers(lambda p: str(ANY_PROBLEM.parse(p).answer))
    ev._initial = PolicyModel(right)
    out = ev.evaluate(RunContext(run))
    assert out["eval/d/valid"] == 1.0 and out["eval/d/initial_fail"] == 0.0
    assert len(right.prompts) == 6 * 3  # samples answers to each posed problem
    ev._initial = PolicyModel(_Answers(lambda p: "100000"))  # unanimous and wrong: the majority would accept it, the truth fails it
    assert ev.evaluate(RunContext(run))["eval/d/initial_fail"] == 1.0
    assert 0.0 <= out["eval/d/solver_fail"] <= 1.0


def test_proposal_difficulty_measures_with_the_initial_model_however_the_solver_trains(tiny_model_dir: Path) -> None:
    import torch

    run, ev = _difficulty_run(PS, tiny_model_dir, ["seats.proposer=scripted:random"])
    first = ev.evaluate(RunContext(run))
    assert set(first) == {"eval/d/valid", "eval/d/initial_fail", "eval/d/solver_fail"}
    with torch.no_grad():  # the solver "trains": its weights move far
        for p in run.policies["solver"].model.parameters():
            p.add_(torch.randn_like(p))
    again = ev.evaluate(RunContext(run))
    assert again["eval/d/initial_fail"] == first["eval/d/initial_fail"]  # same problems, same yardstick
    assert ev._initial.policy.model is not run.policies["solver"].model


@pytest.mark.parametrize("extra, message", [
    (["eval.evaluators.d.games=0"], "games=0"),
    (["seats.solver=scripted:oracle"], "must be played by a model policy"),
])
def test_proposal_difficulty_is_checked_when_the_config_loads(tiny_model_dir: Path, extra: list[str], message: str) -> None:
    with pytest.raises(CogymError, match=message):
        _difficulty_run(PS, tiny_model_dir, extra)
    with pytest.raises(CogymError, match="is for proposer_solver-v0"):
        build(load_config(KUHN, _kuhn(tiny_model_dir, ["eval.evaluators={d: {kind: proposal_difficulty}}"])))


def test_heldout_accuracy_sampled_is_the_mean_over_samples_at_the_temperature(policy, monkeypatch) -> None:
    from cogym.envs.arithmetic import load_heldout

    records = load_heldout()[:5]
    seen: list = []
    # A policy that answers right exactly on the first of each problem's samples: accuracy 1/samples.
    def generate(prompts, sampling):
        seen.append((len(prompts), sampling.temperature))
        return [type("G", (), {"text": str(int(records[i // 3]["answer"]) + (i % 3))})() for i in range(len(prompts))]

    monkeypatch.setattr(policy, "generate", generate)
    assert heldout_accuracy(PolicyModel(policy), records, "", temperature=0.7, samples=3) == pytest.approx(1 / 3)
    assert seen == [(15, 0.7)]
    for kwargs, message in [({"temperature": 0.7, "samples": 0}, "samples must be >= 1"),
                            ({"temperature": -1.0}, "temperature must be >= 0"),
                            ({"samples": 2}, "greedy decoding")]:
        with pytest.raises(ValueError, match=message):
            heldout_accuracy(PolicyModel(policy), records, "", **kwargs)


def test_eval_temperature_adds_the_sampled_heldout_accuracy(policy, monkeypatch) -> None:
    from cogym.runners.train.build import build_section

    (greedy,) = [e for e in evaluators_of(load_config(None, []).eval, make("proposer_solver-v0").spec, build_section) if isinstance(e, HeldoutArithmetic)]
    (sampled,) = [e for e in evaluators_of(load_config(None, ["eval.evaluators.heldout.temperature=0.7", "eval.evaluators.heldout.samples=2",
                                                            "eval.evaluators.heldout.size=6"]).eval, make("proposer_solver-v0").spec,
                                           build_section) if isinstance(e, HeldoutArithmetic)]
    assert (greedy.temperature, sampled.temperature, sampled.samples) == (0.0, 0.7, 2)
    class Context:  # the part of cogym.envs.evaluation.EvalContext the held-out evaluator asks, without a run
        def policy_of(self, role):
            return "solver" if role == "solver" else None

        def system(self, role):
            return load_config(None, []).prompts[role].system

        def model(self, pid):
            return PolicyModel(policy)

        def rng(self, seed):
            return forked_rng(seed)

    run = Context()
    assert set(greedy.evaluate(run)) == {"heldout_acc"}
    import torch

    torch.manual_seed(3)
    expected_next = torch.rand(2)
    torch.manual_seed(3)
    out = sampled.evaluate(run)
    assert torch.equal(torch.rand(2), expected_next)  # the caller's stream continues as if nothing ran
    assert set(out) == {"heldout_acc", "heldout_sampled_acc"} and 0.0 <= out["heldout_sampled_acc"] <= 1.0
    assert sampled.evaluate(run) == out  # a fixed sampling stream: before and after compare like with like
    for bad, message in [("eval.evaluators.heldout.temperature=-0.5", r"eval.evaluators.heldout: temperature=-0.5: must be >= 0"),
                         ("eval.evaluators.heldout.samples=0", "eval.evaluators.heldout: samples=0: must be >= 1")]:
        with pytest.raises(ConfigError, match=message):
            evaluators_of(load_config(None, [bad]).eval, make("proposer_solver-v0").spec, build_section)
    with pytest.raises(ValueError, match="temperature=nan"):
        HeldoutArithmetic(temperature=float("nan"))
