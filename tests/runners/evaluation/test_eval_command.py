"""`cogym eval`: any game, through the evaluators it declares, on a model and without training."""

import re
from pathlib import Path

import pytest

from cogym.runners.cli import main

CONFIGS = Path(__file__).resolve().parents[3] / "cogym" / "configs"


def _rows(out: str) -> dict[tuple[str, str], float]:
    """(evaluator, metric) -> value of the table cogym eval prints."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        if len(cells) == 3:
            try:
                rows[(cells[0], cells[1])] = float(cells[2])
            except ValueError:
                continue
    return rows


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")


def test_kuhn_poker_is_evaluated_by_the_evaluators_the_game_declares(capsys):
    from cogym.envs import make

    assert main(["eval", "--game", "kuhn_poker-v0", "eval.evaluators.vs_random.games=20",
                 "eval.evaluators.vs_nash.games=20"]) == 0
    rows = _rows(capsys.readouterr().out)
    declared = make("kuhn_poker-v0").spec.evaluators
    assert {name for name, _ in rows} == set(declared) == {"vs_random", "vs_nash", "exploitability"}
    assert 0.0 <= rows[("vs_nash", "win_rate")] <= 1.0 and 0.0 <= rows[("exploitability", "exploitability")] <= 1.0


def test_proposer_solver_is_evaluated_on_the_held_out_set_in_batches(capsys, tiny_model_dir, monkeypatch):
    from cogym.agents.policy import Policy

    calls: list[int] = []
    generate = Policy.generate
    monkeypatch.setattr(Policy, "generate", lambda self, prompts, sampling: calls.append(len(prompts))
                        or generate(self, prompts, sampling))
    assert main(["eval", "--game", "proposer_solver-v0", "--model", str(tiny_model_dir),
                 "eval.evaluators.heldout.size=7", "eval.evaluators.heldout.batch_size=3"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert list(rows) == [("heldout", "heldout_acc")] and 0.0 <= rows[("heldout", "heldout_acc")] <= 1.0
    assert calls == [3, 3, 1]


def test_a_config_gives_the_evaluators_settings_and_eval_reproduces_the_runs_pass_at_1(capsys):
    """ttrl_reasoner.yaml reads 32 tokens and adds pass@1 at temperature 1: cogym eval --config prints the
    heldout_sampled_acc the run's evaluator logs (the same fixed sampling stream)."""
    from cogym.agents.policy import Policy
    from cogym.runners.config.load import load_config
    from cogym.envs.arithmetic_eval import HeldoutArithmetic
    from cogym.runners.evaluation.context import RunContext

    reasoner = str(CONFIGS / "ttrl_reasoner.yaml")
    assert main(["eval", "--config", reasoner, "--model", "tiny-reasoner", "eval.evaluators.heldout.size=12"]) == 0
    rows = _rows(capsys.readouterr().out)
    policy = Policy.from_pretrained("tiny-reasoner", device="cpu")
    cfg = load_config(reasoner)
    run = type("Run", (), {"roles": ("solver",), "policies": {cfg.seats["solver"]: policy}, "cfg": cfg})()
    logged = HeldoutArithmetic(size=12, max_new_tokens=32, temperature=1.0, samples=4).evaluate(RunContext(run))
    assert rows[("heldout", "heldout_sampled_acc")] == round(logged["heldout_sampled_acc"], 4)
    assert rows[("heldout", "heldout_acc")] == round(logged["heldout_acc"], 4)


def test_eval_takes_a_dtype_and_an_attention_kernel(capsys, tiny_model_dir, monkeypatch):
    import torch

    from cogym.agents.policy import Policy

    seen: list = []
    generate = Policy.generate
    monkeypatch.setattr(Policy, "generate", lambda self, prompts, sampling: seen.append(
        (self.model.dtype, self.model.config._attn_implementation)) or generate(self, prompts, sampling))
    assert main(["eval", "--game", "proposer_solver-v0", "--model", str(tiny_model_dir), "--dtype", "bf16",
                 "--attn-implementation", "eager", "eval.evaluators.heldout.size=3"]) == 0
    assert set(seen) == {(torch.bfloat16, "eager")}
    assert main(["eval", "--model", str(tiny_model_dir), "--attn-implementation", "spda"]) == 2
    assert "spda" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "words"), [
    (["--model", "/no/such/model"], "/no/such/model"),
    (["--game", "debate-v0"], "debate-v0 declares no evaluator"),
    (["--game", "no_such_game-v0"], "no shipped config plays no_such_game-v0"),
    (["eval.evaluators.heldout.size=0"], "eval.evaluators.heldout: size=0: must be >= 1"),
])
def test_a_bad_request_is_one_line_and_exit_2(capsys, argv, words):
    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("cogym eval: error:") and words in err


def test_the_generic_evaluation_layer_names_no_game():
    """Evaluation belongs to games: runners/evaluation holds the registry, the context and the loop, and no
    game's name or code; the games' evaluators import no model and no runner (only cogym.core and cogym.envs)."""
    root = Path(__file__).resolve().parents[3]
    words = re.compile(r"kuhn|arithmetic|proposer|solver|heldout|held-out|exploitab", re.IGNORECASE)
    for path in sorted((root / "cogym" / "runners" / "evaluation").glob("*.py")):
        named = [f"{path.name}:{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1)
                 if words.search(line)]
        assert not named, "\n".join(named)
    for name in ("evaluation", "arithmetic_eval", "kuhn_poker_eval", "proposer_solver_eval"):
        text = (root / "cogym" / "envs" / f"{name}.py").read_text()
        assert not re.search(r"^\s*(from|import) cogym\.(agents|learners|runners)", text, re.MULTILINE), name


def test_setting_flags_set_every_evaluator_that_has_the_setting_and_model_takes_a_checkpoint(capsys, tmp_path,
                                                                                              tiny_model_dir, monkeypatch):
    """--games reaches both vs_scripted evaluators of kuhn_poker-v0 (and not exploitability, which has no games);
    --model CHECKPOINT plays each policy from the checkpoint's policies/<id>."""
    from cogym.runners.cli import eval as eval_cli
    from cogym.runners.evaluation.evaluators import VsScripted

    played: list[tuple[str, int]] = []
    evaluate = VsScripted.evaluate
    monkeypatch.setattr(VsScripted, "evaluate", lambda self, ctx: played.append((self.name, self.games)) or evaluate(self, ctx))
    checkpoint = tmp_path / "step_000002"
    (checkpoint / "policies").mkdir(parents=True)
    (checkpoint / "policies" / "player").symlink_to(tiny_model_dir)
    assert eval_cli.model_of(str(checkpoint), "player") == str(checkpoint / "policies" / "player")
    assert eval_cli.model_of("tiny", "player") == "tiny"
    assert main(["eval", "--game", "kuhn_poker-v0", "--model", str(checkpoint), "--games", "6"]) == 0
    assert played == [("vs_random", 6), ("vs_nash", 6)]
    assert ("exploitability", "exploitability") in _rows(capsys.readouterr().out)
