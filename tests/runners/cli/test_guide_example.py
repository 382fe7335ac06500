"""The "write your own game" guide and its worked example stay true.

``docs/write_your_own_game.md`` walks through ``examples/number_guess.py`` and trains it with
``examples/number_guess.yaml``. These tests hold the example game to cogym's contract at both
granularities, train the example config for one iteration, run the guide's Python blocks (and
compare printed output with the guide), check that its excerpts are still in the example file and
its YAML is the shipped config, and load every ``cogym train`` command it shows.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cogym.envs import make, registry, scripted_strategies
from cogym.envs.checks import PATHOLOGICAL, check_game
from cogym.runners.train.build import import_game_modules
from cogym.runners.train import build as build_module
from cogym.runners.cli import main, parser
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train
from pettingzoo.test import api_test

ROOT = Path(__file__).resolve().parents[3]
GAME_FILE = ROOT / "examples" / "number_guess.py"
CONFIG = ROOT / "examples" / "number_guess.yaml"
GUIDE = ROOT / "docs" / "write_your_own_game.md"
GAME_ID = "number_guess-v0"
EXCERPT = "# examples/number_guess.py (excerpt)\n"


@pytest.fixture(scope="module")
def game():
    """The example module, imported the way its config imports it, in a private copy of the registry.

    Other tests assert what the registry holds, so the example's registration is undone afterwards
    (and its module unloaded, so that a later import registers it again).
    """
    saved, before = registry._REGISTRY, set(sys.modules)
    registry._REGISTRY = dict(saved)
    try:
        cfg = load_config(CONFIG)  # imports the config's modules (they may register algorithms too)
        assert [Path(m).resolve() for m in cfg.game.modules] == [GAME_FILE]  # found next to the config
        import_game_modules(cfg.game.modules)
        (module,) = [m for name, m in sys.modules.items() if name not in before and getattr(m, "__file__", None) == str(GAME_FILE)]
        yield module
    finally:
        registry._REGISTRY = saved
        for name in [n for n, m in sys.modules.items() if n not in before and getattr(m, "__file__", None) == str(GAME_FILE)]:
            del sys.modules[name]  # only the example: unloading other modules (torch's) would break them


def _blocks(lang: str) -> list[str]:
    return [body for kind, body in re.findall(r"```(\w+)\n(.*?)```", GUIDE.read_text(), re.DOTALL) if kind == lang]


# ---------------------------------------------------------------------------- the example file
def test_example_is_under_100_lines_and_uses_public_api_only():
    text = GAME_FILE.read_text()
    assert len(text.splitlines()) < 100
    imported = set(re.findall(r"^from (cogym\S*) import", text, re.MULTILINE)) | set(re.findall(r"^import (cogym\S*)", text, re.MULTILINE))
    assert imported == {"cogym.envs", "cogym.envs.base"}
    assert text.startswith('"""``number_guess-v0``')  # the docstring is the game's page
    assert re.search(r"^register\(GAME_ID, NumberGuessEnv, scripted=SCRIPTED\)$", text, re.MULTILINE)


def test_registered_with_twins_for_every_role(game):
    env = make(GAME_ID)
    assert env.spec.roles == ("chooser", "guesser") and env.spec.zero_sum and env.spec.reward_range == (-1.0, 1.0)
    twins = scripted_strategies(GAME_ID)
    assert set(twins) == set(env.spec.roles) and all(twins[r] for r in env.spec.roles)


@pytest.mark.parametrize("granularity", ["turn", "token"])
def test_check_game(game, granularity):
    check_game(GAME_ID, episodes=20, granularity=granularity)
    check_game(GAME_ID, {"high": 100, "tries": 7}, episodes=8, granularity=granularity)


@pytest.mark.parametrize("granularity", ["turn", "token"])
def test_pettingzoo_api_test(game, granularity):
    api_test(make(GAME_ID, granularity=granularity), num_cycles=100)


def test_arguments_are_validated(game):
    for bad in ({"high": 1}, {"tries": 0}, {"high": True}, {"tries": 1000}):
        with pytest.raises(ValueError, match="must be an int"):
            make(GAME_ID, **bad)


def test_parse_number_is_exact_and_bounded(game):
    parse = game.parse_number
    assert [parse(s, 9) for s in ("7", " 3\n", "09", "0", "10", "7.0", "x7", "7 7", "", "-1")] == [7, 3, 9, None, None, None, None,
                                                                                                  None, None, None]
    assert parse("100", 100) == 100 and parse("1000", 999) is None
    t = time.perf_counter()
    assert all(parse(s, 999) is None for s in PATHOLOGICAL)
    assert time.perf_counter() - t < 0.05


def test_open_range_reads_the_hints(game):
    assert game.open_range("1-9? guess") == (1, 9)
    assert game.open_range("1-9? secret") == (1, 9)
    assert game.open_range("1-9? guess 5 higher 7 lower") == (6, 6)
    assert game.open_range("1-20? guess 10 lower 5 higher 7 higher") == (8, 9)


def _play(env, moves: dict[str, list[str]]) -> list[tuple]:
    """Play scripted moves; record (seat, text seen, reward after the move) for each move."""
    seen = []
    env.reset(seed=0)
    for seat in env.agent_iter():
        obs, _, terminated, truncated, _ = env.last()
        if terminated or truncated:
            env.step(None)
            continue
        env.step(moves[seat].pop(0))
        seen.append((seat, obs["text"], env.rewards["chooser"], env.rewards["guesser"]))
    return seen


def test_scripted_playthrough_rewards_after_each_turn(game):
    env = make(GAME_ID)
    seen = _play(env, {"chooser": ["3"], "guesser": ["5", "2", "3"]})
    assert seen == [("chooser", "1-9? secret", 0.0, 0.0), ("guesser", "1-9? guess", 0.0, 0.0),
                    ("guesser", "1-9? guess 5 lower", 0.0, 0.0), ("guesser", "1-9? guess 5 lower 2 higher", -1.0, 1.0)]
    assert not env.agents  # every seat has left the finished game
    env = make(GAME_ID, tries=2)
    assert _play(env, {"chooser": ["9"], "guesser": ["1", "2"]})[-1] == ("guesser", "1-9? guess 1 higher", 1.0, -1.0)


def test_invalid_moves_end_the_game_with_a_reason(game):
    env = make(GAME_ID)
    env.reset(seed=0)
    env.step("seven")
    assert env.rewards == {"chooser": -1.0, "guesser": 1.0}
    assert env.infos["chooser"]["invalid"] and not env.infos["guesser"]["invalid"]
    assert "not a number in 1-9" in env.infos["chooser"]["reason"]
    assert all(env.terminations.values())
    env.reset(seed=0)
    env.step("4")
    env.step("7" * 1_000_000)  # the guesser's megabyte of digits
    assert env.rewards == {"chooser": 1.0, "guesser": -1.0} and env.infos["guesser"]["invalid"]
    assert env.infos["guesser"]["metrics"] == {"won": False} and env.infos["chooser"]["metrics"] == {"won": True}


def test_bisect_finds_seven_secrets_of_nine(game):
    env, bisect, rng = make(GAME_ID), scripted_strategies(GAME_ID)["guesser"]["bisect"], np.random.default_rng(0)
    lost = []
    for secret in range(1, 10):
        env.reset(seed=0)
        env.step(str(secret))
        while not env.terminations["guesser"]:
            env.step(bisect(env.observe("guesser")["text"], rng))
        if env.rewards["guesser"] != 1.0:
            lost.append(secret)
    assert lost == [4, 9]  # three halvings of 1..9 try 5, then 2 or 7, then 1, 3, 6 or 8


# ---------------------------------------------------------------------------- training the config
def test_config_trains_one_iteration(game, tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)  # game.modules must be found next to the config, not in the working directory
    cfg = load_config(CONFIG, ["run.iterations=1", f"run.out_dir={tmp_path / 'runs'}", "game.num_games=4",
                               f"policies.chooser.model={tiny_model_dir}", f"policies.guesser.model={tiny_model_dir}"])
    summary = train(cfg, progress=False)
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.startswith("number_guess-")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    (row,) = [r for r in rows if "rollout_s" in r]
    assert row["iteration"] == 1 and summary["iterations"] == 1
    for role in ("chooser", "guesser"):
        assert -1.0 <= row[f"{role}/reward"] <= 1.0
        assert 0.0 <= row[f"{role}/invalid"] <= 1.0 and 0.0 <= row[f"{role}/won"] <= 1.0
    assert row["chooser/reward"] == pytest.approx(-row["guesser/reward"])  # zero-sum, game by game
    assert "chooser/loss" in row  # the chooser moves in every game, so its learner updated
    assert 4 <= row["turns"] <= 4 * 4
    assert (run_dir / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    for pid in ("chooser", "guesser"):
        assert (run_dir / "checkpoints" / "step_000001" / "policies" / pid / "config.json").is_file()


# ---------------------------------------------------------------------------- the guide
def test_guide_names_the_example_and_files_that_exist():
    text = GUIDE.read_text()
    for needed in ("examples/number_guess.py", "examples/number_guess.yaml", "cogym train examples/number_guess.yaml\n",
                   "tests/runners/cli/test_guide_example.py"):
        assert needed in text
    paths = set(re.findall(r"(?<![\w/.])((?:examples|docs|envs|runners|configs|tests)/[\w/]+\.(?:py|yaml|md))", text))
    assert paths, "no file paths found in the guide"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"the guide names files that do not exist: {missing}"
    for link in re.findall(r"\]\((\.\./[^)]+)\)", text):
        assert (GUIDE.parent / link).resolve().exists(), link


def test_guide_excerpts_are_in_the_example_file():
    source = GAME_FILE.read_text()
    excerpts = [b[len(EXCERPT):] for b in _blocks("python") if b.startswith(EXCERPT)]
    assert len(excerpts) >= 6
    for excerpt in excerpts:
        assert excerpt in source, f"this excerpt is no longer in {GAME_FILE.name}:\n{excerpt}"


def test_guide_yaml_is_the_shipped_config():
    (shown,) = [b for b in _blocks("yaml") if "id: number_guess-v0" in b]
    assert shown == CONFIG.read_text()


def test_guide_python_blocks_run_and_print_what_the_guide_says(game, monkeypatch):
    monkeypatch.chdir(ROOT)  # the guide's commands run from the repository root
    text = GUIDE.read_text()
    runnable = [b for b in _blocks("python") if not b.startswith(EXCERPT)]
    assert len(runnable) >= 3
    outputs = []
    for i, block in enumerate(runnable):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"{GUIDE.name}:python-block-{i}", "exec"), {"__name__": "__guide__"})  # noqa: S102 - the guide's own code
        outputs.append(out.getvalue())
    # A ```text block right after a Python block is that block's output, verbatim.
    body = r"((?:(?!```).)*)"  # a block's text: anything but a fence
    shown = re.findall(rf"```python\n{body}```\s*```text\n{body}```", text, re.DOTALL)
    assert shown
    for block, expected in shown:
        assert outputs[runnable.index(block)] == expected


def test_guide_cogym_commands_parse_and_load(game, monkeypatch):
    monkeypatch.chdir(ROOT)
    commands = [line.strip() for b in _blocks("bash") for line in b.splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert any(c == "cogym train examples/number_guess.yaml" for c in commands)
    trains = 0
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "cogym", command
        args = parser().parse_args(argv[1:])
        if args.command == "train":
            cfg = load_config(args.config, args.overrides)
            make(cfg.game.id, **cfg.game.kwargs)  # the game accepts the overridden arguments
            for seat, pid in cfg.seats.items():
                if pid.startswith("scripted:"):
                    assert pid.split(":", 1)[1] in scripted_strategies(cfg.game.id)[seat]
            trains += 1
        elif args.command == "games":
            assert all((ROOT / m).is_file() for m in args.module)
    assert trains >= 6


def test_guide_console_blocks_show_the_errors_cogym_prints(game, monkeypatch, capsys):
    """A ``console`` block shows a command and the one-line error it gets: both must stay true."""
    monkeypatch.chdir(ROOT)
    blocks = _blocks("console")
    assert blocks, "the guide shows the error for a group estimator on a one-seat role"
    for block in blocks:
        command, expected = block.strip().split("\n", 1)
        assert command.startswith("$ cogym ")
        monkeypatch.setattr(build_module.Policy, "from_pretrained", _no_model_load)
        assert main(shlex.split(command[2:])[1:]) == 2
        assert capsys.readouterr().err.strip() == expected.strip()


def _no_model_load(*args, **kwargs):
    raise AssertionError("the config must be refused before any model is loaded")
