"""The game contract held while playing: a game from a user's module that breaks it (a NaN reward, a
reward outside ``spec.reward_range``, an observation that is not the dict its space says, an outcome of
the wrong type) is refused by `cogym train` with exit 2 and one block naming the game, the seed, the
seat, the value and the rule, and a reproduce command that runs as printed, from any directory, and
says the same thing (``check_game``). A correct game plays on."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from cogym.core.errors import GameContractError, GameError, GameStepError
from cogym.envs import registry
from cogym.envs.checks import check_game
from cogym.envs.contract import ContractViolation, check_infos, check_observation, check_rewards
from cogym.runners.cli import main

GAME_FILE = Path(__file__).with_name("faulty_nim.py")
GAME = "faulty_nim-v0"

# fault -> (what the report says of the value, a piece of the rule)
FAULTS = {
    "nan": ("got reward nan", "a reward must be a finite number inside spec.reward_range [-1, 1] (NaN and inf are not)"),
    "range": ("got reward 2.0", "a reward must be a finite number inside spec.reward_range [-1, 1]"),
    "observation": ("was shown a str 'say a number 0'", "observe('p0') must return a dict with a str 'text' entry"),
    "outcome": ("has info {'role': 'player', 'correct': 'yes'}", "infos['p0']['correct'] must be True, False"),
}


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch) -> None:
    """Each test registers its own copy of the user's module (a file next to its config)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def _game(fault: str):
    """A FaultyNim game, its class loaded from the file (registering it in this test's registry)."""
    registry._REGISTRY.pop(GAME, None)  # this test's registry: the module registers it again
    spec = importlib.util.spec_from_file_location("faulty_nim_rules", GAME_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FaultyNim(fault=fault)


def _config(tmp_path: Path, fault: str) -> Path:
    cfg = {"run": {"name": "fz", "out_dir": str(tmp_path / "runs"), "seed": 0, "iterations": 2, "checkpoint_every": 0,
                   "tensorboard": False, "plot": False},
           "game": {"id": GAME, "modules": [GAME_FILE.name], "num_games": 4, "kwargs": {"fault": fault}},
           "seats": {"player": "pl"},
           "policies": {"pl": {"model": "tiny", "sampling": {"temperature": 1.0, "max_new_tokens": 2}}},
           "learners": {"pl": {"algorithm": "reinforce_pp", "engine": "torch", "lr": 1e-4}},
           "prompts": {"player": {"system": "Say."}}, "eval": {"declared": False}}
    path = tmp_path / "fz.yaml"
    path.write_text(yaml.safe_dump(cfg))
    (tmp_path / GAME_FILE.name).write_text(GAME_FILE.read_text())  # the user's module, next to the config
    return path


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_cogym_train_refuses_a_game_that_breaks_the_contract(fault: str, tmp_path: Path, capsys) -> None:
    what, rule = FAULTS[fault]
    code = main(["train", str(_config(tmp_path, fault)), "--no-progress", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("cogym train: error:") == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"cogym train: error: game {GAME} broke the game contract during play (game ")
    assert "seed " in lines[0]
    assert what in lines[1] and "seat 'p0' (role 'player'" in lines[1]
    assert lines[2].startswith("  rule: ") and rule in lines[2]
    command = lines[lines.index("Reproduce it against cogym's game contract:") + 1].strip()
    # The user's module is imported by its absolute path: the command runs from any directory.
    assert str((tmp_path / GAME_FILE.name).resolve()) in command
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(command, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"AssertionError: {GAME} {{'fault': '{fault}'}}"), proc.stderr[-2000:]
    assert what.split(" {")[0] in last and rule in last  # check_game says what the run said
    assert "unknown game" not in proc.stderr and "IndexError" not in proc.stderr


def test_the_run_stops_before_any_learner_or_generator_sees_the_fault(tmp_path: Path, capsys) -> None:
    """The NaN reward of the first iteration's games stops the run in that iteration: no update, no metrics row."""
    run = tmp_path / "run"
    assert main(["train", str(_config(tmp_path, "nan")), "--no-progress", "--run-dir", str(run)]) == 2
    assert "stopped in its first iteration, before any update" in capsys.readouterr().err
    rows = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").is_file() else []
    assert not [r for r in rows if '"rollout_s"' in r]


def test_the_error_is_a_game_error_and_a_game_step_error(tmp_path: Path) -> None:
    """What a caller catches: GameError (the contract) and GameStepError (a game failed in play)."""
    from cogym.runners.config.load import load_config
    from cogym.runners.train.loop import train

    cfg = load_config(_config(tmp_path, "range"))
    with pytest.raises(GameContractError) as info:
        train(cfg, tmp_path / "run", progress=False)
    assert isinstance(info.value, GameError) and isinstance(info.value, GameStepError)
    assert info.value.record["game"] == GAME and info.value.record["seat"] == "p1"
    assert "got reward 2.0" in info.value.record["error"]


def test_on_error_skip_drops_the_broken_games_and_counts_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code = main(["train", str(_config(tmp_path, "nan")), "--no-progress", "--run-dir", str(run), "game.on_error=skip"])
    assert code == 0
    errors = (run / "game_errors.jsonl").read_text().splitlines()
    assert errors and all("got reward nan" in line for line in errors)


def test_a_correct_game_passes_check_game_and_trains(tmp_path: Path) -> None:
    assert main(["train", str(_config(tmp_path, "none")), "--no-progress", "--run-dir", str(tmp_path / "run")]) == 0
    check_game(GAME, {"fault": "none"}, episodes=4)  # registered by the run's game.modules


# -- the rules themselves (cogym.envs.contract) -----------------------------------------------------------


def _ended(fault: str):
    env = _game(fault)
    env.reset(seed=0)
    env.step("3")
    env.step("1")
    return env


@pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf, 1.5, -1.0000001, "1", None, np.array(0.5)])
def test_check_rewards_refuses_what_is_not_a_finite_number_in_range(reward) -> None:
    env = _ended("none")
    env.rewards["p0"] = reward
    with pytest.raises(ContractViolation) as info:
        check_rewards(env)
    assert info.value.seat == "p0" and "spec.reward_range [-1, 1]" in info.value.rule


@pytest.mark.parametrize("reward", [-1, 1, 0.0, np.float32(0.5), np.int64(1), 1 + 1e-12])
def test_check_rewards_takes_finite_numbers_in_range(reward) -> None:
    env = _ended("none")
    env.rewards["p0"] = reward
    check_rewards(env)


def test_check_infos_and_check_observation_name_the_seat_and_rule() -> None:
    env = _ended("outcome")
    with pytest.raises(ContractViolation, match=r"infos\['p0'\]\['correct'\] must be"):
        check_infos(env.infos)
    env = _game("none")
    env.reset(seed=0)
    check_observation(env, "p0", env.observe("p0"))
    with pytest.raises(ContractViolation, match="outside observation_space"):
        check_observation(env, "p0", {"observation": np.array([0], dtype=np.int64), "text": "x" * 100})
    with pytest.raises(ContractViolation, match="was shown a NoneType"):
        check_observation(env, "p0", None)


def test_a_pickled_violation_is_itself() -> None:
    import pickle

    exc = ContractViolation("p0", "got reward", math.nan, "a rule")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is ContractViolation and str(back) == str(exc) and back.seat == "p0"


def test_the_fast_contains_answers_as_gymnasium_does() -> None:
    """``contains`` (the play loop's observation check) against gymnasium's ``Space.contains``."""
    from gymnasium.spaces import Box, Dict, Discrete

    from cogym.envs.base import text_space
    from cogym.envs.contract import contains

    space = Dict({"observation": Box(0, 3, shape=(2,), dtype=np.int64), "text": text_space(8)})
    arr = lambda *v, dtype=np.int64: np.array(v, dtype=dtype)  # noqa: E731
    cases = [{"observation": arr(0, 3), "text": "1+2"}, {"observation": arr(0, 4), "text": "1+2"},
             {"observation": arr(-1, 0), "text": ""}, {"observation": arr(0, 1, 2), "text": "x"},
             {"observation": arr(0, 1, dtype=np.float64), "text": "x"}, {"observation": arr(0, 1), "text": "x" * 9},
             {"observation": arr(0, 1), "text": "\x00"}, {"observation": arr(0, 1), "text": 5},
             {"observation": arr(0, 1)}, {"observation": arr(0, 1), "text": "a", "extra": 1}, "text", None,
             {"observation": [0, 1], "text": "ok"}]
    for x in cases:
        assert contains(space, x) == space.contains(x), x
    assert contains(Discrete(3), 2) and not contains(Discrete(3), 3)


def test_the_fast_contains_checks_small_and_large_boxes_alike() -> None:
    from gymnasium.spaces import Box

    from cogym.envs.contract import contains

    for n in (3, 40):  # Python's comparisons below SMALL_BOX numbers, numpy's above
        space = Box(-1.0, 1.0, shape=(n,), dtype=np.float32)
        for x in (np.zeros(n, np.float32), np.full(n, 1.5, np.float32), np.full(n, np.nan, np.float32),
                  np.r_[np.zeros(n - 1), -np.inf].astype(np.float32), np.zeros(n, np.float64), np.zeros(n, np.int8)):
            assert contains(space, x) == space.contains(x), (n, x)
