"""The ``cogym`` command: every subcommand has --help, and user errors are one line with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cogym.runners.cli import main

COGYM = Path(sys.executable).with_name("cogym")


def _fast_overrides(model_dir) -> list[str]:
    """Both seats on the test model and the torch engine, so nothing depends on agents/tiny or DeepSpeed."""
    return [f"policies.proposer.model={model_dir}", f"policies.solver.model={model_dir}",
            "learners.proposer.engine=torch", "learners.solver.engine=torch"]


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected a one-line error, got:\n{err}"
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["eval", "--help"], ["games", "--help"]])
def test_help_exits_zero(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: cogym" in out


def test_top_level_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("train", "eval", "games"):
        assert cmd in out


def test_top_level_help_names_both_builds_of_build_tiny_model(capsys):
    """`cogym --help` lists build-tiny-model with each model it builds: a reader learns of tiny-reasoner there."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    entry = out[out.index("build-tiny-model rebuild"):]
    assert "--verifier, tiny-verifier" in entry and "--reasoner, tiny-reasoner" in entry


def test_train_help_mentions_overrides_and_resume(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "overrides" in out and "--resume" in out and "--run-dir" in out


def test_no_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_console_script_help():
    assert COGYM.is_file(), f"console script not installed at {COGYM}"
    proc = subprocess.run([str(COGYM), "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DS_ACCELERATOR": "cpu"})
    assert proc.returncode == 0, proc.stderr
    assert "usage: cogym" in proc.stdout


def _game_block(out: str, gid: str) -> list[str]:
    """The lines of ``cogym games`` about one game: from its id line to the next blank line."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith(f"{gid}  "))
    end = next((k for k in range(start, len(lines)) if not lines[k].strip()), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("columns", ["80", "300"])
def test_games_lists_the_registry(capsys, monkeypatch, columns):
    from cogym.envs import make, registered, scripted_strategies

    monkeypatch.setenv("COLUMNS", columns)
    assert main(["games"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= int(columns) for line in out.splitlines())
    for gid in registered():
        block = _game_block(out, gid)
        spec = make(gid).spec
        assert "(versions: v0)" in block[0]
        assert f"zero-sum: {'yes' if spec.zero_sum else 'no'}" in block[1]
        assert f"[{spec.reward_range[0]:g}, {spec.reward_range[1]:g}]" in block[1]
        for role, twins in scripted_strategies(gid).items():
            row = next(line for line in block if line.split()[0] == role)
            assert set(twins) <= set(row.split(None, 1)[1].replace(",", " ").split())


def test_games_imports_a_users_game_file(capsys, monkeypatch, tmp_path):
    from cogym.envs import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    game = tmp_path / "my_games.py"
    game.write_text("from cogym.envs import register\nfrom cogym.envs.interruptible_verifier import InterruptibleVerifierEnv, SCRIPTED\n"
                    "register('my_copy-v3', InterruptibleVerifierEnv, scripted=SCRIPTED, num_solvers=2)\n")
    assert main(["games", "--module", str(game)]) == 0
    block = _game_block(capsys.readouterr().out, "my_copy-v3")
    assert "v3" in block[0] and any(line.split()[0] == "solver" for line in block[3:])
    assert main(["games", "--module", str(tmp_path / "missing.py")]) == 2


def test_train_typo_key_exits_2_with_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "learners.solver.lrr=1"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith("cogym train: error:")
    assert "learners.solver.lrr" in line and "did you mean 'lr'" in line
    assert not (tmp_path / "runs").exists()


def test_train_config_file_then_typo_override(capsys, tmp_path, monkeypatch):
    from cogym.runners.config.schema import default_config_path

    monkeypatch.chdir(tmp_path)
    assert main(["train", str(default_config_path()), "run.iteratons=3"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "run.iteratons" in line and "did you mean 'iterations'" in line


def test_train_missing_config_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "no_such.yaml"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "no_such.yaml" in line


def test_train_missing_model_dir_exits_2_naming_the_path(capsys, tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--no-progress", "--run-dir", str(tmp_path / "run"), *_fast_overrides(tiny_model_dir),
            "policies.solver.model=/no/such/dir"]
    assert main(argv) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "/no/such/dir" in line
    assert not (tmp_path / "run").exists(), "a run that cannot start leaves no run directory"


def test_train_missing_model_dir_alone_exits_2(capsys, tmp_path, monkeypatch):
    # Exactly the brief's command: whatever the proposer's default model is, the exit is a clean 2.
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--no-progress", "policies.proposer.model=/no/such/dir",
                 "policies.solver.model=/no/such/dir"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "/no/such/dir" in line


def test_train_resume_without_run_dir(capsys, tmp_path):
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "config.yaml" in line and str(tmp_path / "nothing") in line


def test_summary_shows_the_reward_of_every_role(capsys, monkeypatch):
    from cogym.runners.cli.train import print_summary

    monkeypatch.setenv("COLUMNS", "200")
    print_summary({"chooser_reward_first5": -0.5, "chooser_reward_last5": 0.25, "judge_reward_first5": None,
                   "judge_reward_last5": 0.75, "engines": ["torch"], "iterations": 12, "wall_s": 1.0, "run_dir": "runs/x"})
    out = capsys.readouterr().out
    assert "chooser reward (iterations 1-5 -> 8-12)" in out and "-0.500 -> 0.250" in out
    assert "judge reward (mean of iterations 8-12)" in out and "0.750" in out
    # A short run compares windows of at most half its iterations: iteration 1 with 3, never a window with itself.
    print_summary({"chooser_reward_first5": 0.5, "chooser_reward_last5": 0.25, "engines": ["torch"], "iterations": 3,
                   "wall_s": 1.0, "run_dir": "runs/x"})
    out = capsys.readouterr().out
    assert "chooser reward (iterations 1 -> 3)" in out and "0.500 -> 0.250" in out


def _reward_row(summary: dict, capsys) -> str:
    """The summary table's line of the chooser's reward, its spaces collapsed."""
    from cogym.runners.cli.train import print_summary

    print_summary({"engines": ["torch"], "wall_s": 1.0, "run_dir": "runs/x", **summary})
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "chooser reward" in line]
    return " ".join(line.replace("│", " ").split())


@pytest.mark.parametrize("iterations, first_iteration, window, label", [
    (6, 1, 3, "chooser reward (iterations 1-3 -> 4-6)"),
    (2, 1, 1, "chooser reward (iterations 1 -> 2)"),
    (12, 1, 5, "chooser reward (iterations 1-5 -> 8-12)"),
    (10, 5, 3, "chooser reward (iterations 5-7 -> 8-10)"),  # resumed at 5: this process's 6 iterations
    (11, 1, 5, "chooser reward (iterations 1-5 -> 7-11)"),
])
def test_the_summary_s_first_and_last_reward_windows_never_overlap(iterations, first_iteration, window, label, capsys,
                                                                   monkeypatch):
    from cogym.runners.train.metrics import reward_summary

    monkeypatch.setenv("COLUMNS", "200")
    history = [{"iteration": it, "chooser/reward": float(it)} for it in range(first_iteration, iterations + 1)]
    summary = reward_summary(history, ["chooser"])
    first, last = history[:window], history[-window:]
    assert not {r["iteration"] for r in first} & {r["iteration"] for r in last}
    assert summary["chooser_reward_first5"] == pytest.approx(sum(r["chooser/reward"] for r in first) / window)
    assert summary["chooser_reward_last5"] == pytest.approx(sum(r["chooser/reward"] for r in last) / window)
    row = _reward_row({**summary, "iterations": iterations, "first_iteration": first_iteration}, capsys)
    assert row == f"{label} {summary['chooser_reward_first5']:.3f} -> {summary['chooser_reward_last5']:.3f}"


def test_a_one_iteration_run_s_summary_shows_its_one_reward(capsys, monkeypatch):
    from cogym.runners.train.metrics import reward_summary

    monkeypatch.setenv("COLUMNS", "200")
    summary = reward_summary([{"iteration": 1, "chooser/reward": 0.25}], ["chooser"])
    assert summary["chooser_reward_first5"] == summary["chooser_reward_last5"] == 0.25
    assert _reward_row({**summary, "iterations": 1}, capsys) == "chooser reward (iteration 1) 0.250"


def test_overrides_may_follow_options(monkeypatch, tmp_path):
    from cogym.runners.cli import train as train_command

    seen = {}
    monkeypatch.setattr(train_command, "run", lambda args: seen.update(config=args.config, overrides=args.overrides, run_dir=args.run_dir) or 0)
    assert main(["train", "cfg.yaml", "a.b=1", "--run-dir", str(tmp_path), "c.d=2"]) == 0
    assert seen == {"config": "cfg.yaml", "overrides": ["a.b=1", "c.d=2"], "run_dir": str(tmp_path)}
    with pytest.raises(SystemExit):
        main(["train", "cfg.yaml", "--run-dir", str(tmp_path), "--bogus"])


def test_output_cut_by_a_closed_pipe_is_not_an_error() -> None:
    """`cogym games | true`: the reader is gone before cogym writes (as with `| head` on long output);
    cogym exits 0 with no traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    cogym = Path(sys.executable).with_name("cogym")
    proc = subprocess.run(f"'{cogym}' games | true; echo rc=${{PIPESTATUS[0]}}", shell=True, capture_output=True,
                          text=True, executable="/bin/bash", env={**os.environ, "COLUMNS": "80"})
    assert proc.stdout.strip() == "rc=0"
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(monkeypatch) -> None:
    """Only a reader of stdout going away is quiet: a pipe of cogym's own that breaks (a worker's) fails."""
    from cogym.runners import cli

    def broken(args):
        raise BrokenPipeError("a worker's pipe")

    from cogym.runners.cli import games as games_command

    monkeypatch.setattr(games_command, "run", broken)
    with pytest.raises(BrokenPipeError, match="worker"):
        cli.main(["games"])


def test_summary_and_learning_curve_show_the_sampled_heldout_accuracy(capsys, monkeypatch, tmp_path):
    import json

    from cogym.runners.cli.train import print_summary
    from cogym.runners.train.sinks import plot_learning_curve

    monkeypatch.setenv("COLUMNS", "200")
    print_summary({"heldout_acc_before": 0.774, "heldout_acc_after": 0.862, "heldout_sampled_acc_before": 0.4855,
                   "heldout_sampled_acc_after": 0.7705, "engines": ["torch"], "iterations": 2, "wall_s": 1.0,
                   "run_dir": "runs/x"})
    out = capsys.readouterr().out
    assert "held-out accuracy (greedy)" in out and "77.4% -> 86.2% (+8.8 pts)" in out
    assert "held-out accuracy (sampled)" in out and "48.5% -> 77.0% (+28.5 pts)" in out
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"iteration": 0, "heldout_acc": 0.77, "heldout_sampled_acc": 0.49},
            {"iteration": 1, "rollout_s": 1.0, "solver/reward": 0.3},
            {"iteration": 2, "rollout_s": 1.0, "solver/reward": 0.5, "heldout_acc": 0.86, "heldout_sampled_acc": 0.77}]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    import matplotlib.axes

    labels: list[str] = []
    plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, *a, **k: labels.append(k.get("label")) or plot(self, *a, **k))
    plot_learning_curve(metrics, tmp_path / "curve.png", ("solver",))
    assert (tmp_path / "curve.png").stat().st_size > 0
    assert {"held-out accuracy (greedy)", "held-out accuracy (sampled)"} <= set(labels)
