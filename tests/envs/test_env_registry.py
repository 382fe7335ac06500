"""Registry: make, register, registered, scripted_strategies."""

from __future__ import annotations

import pytest

from cogym.envs import CogymEnv, make, register, registered, scripted_strategies
from cogym.envs.proposer_solver import SCRIPTED, ProposerSolverEnv


def test_proposer_solver_is_registered_with_its_scripted_twins() -> None:
    games = registered()
    assert "proposer_solver-v0" in games
    assert games["proposer_solver-v0"].entry_point is ProposerSolverEnv
    twins = scripted_strategies("proposer_solver-v0")
    assert set(twins) == {"proposer", "solver"}
    assert set(twins["proposer"]) == {"random", "garbage"}
    assert set(twins["solver"]) == {"oracle", "always_wrong", "random"}
    assert twins["solver"]["oracle"] is SCRIPTED["solver"]["oracle"]


def test_make_passes_arguments() -> None:
    env = make("proposer_solver-v0", num_solvers=3)
    assert isinstance(env, CogymEnv) and len(env.possible_agents) == 4


def test_unknown_id_lists_games_and_suggests_the_closest() -> None:
    with pytest.raises(ValueError) as err:
        make("proposer_solvr-v0")
    message = str(err.value)
    assert "unknown game 'proposer_solvr-v0'" in message
    assert "did you mean 'proposer_solver-v0'?" in message
    assert "Registered games: " in message and "proposer_solver-v0" in message.split("Registered games: ")[1]
    with pytest.raises(ValueError, match="unknown game"):
        scripted_strategies("chess-v0")


def test_unknown_argument_is_named_with_a_suggestion() -> None:
    with pytest.raises(ValueError) as err:
        make("proposer_solver-v0", num_solver=4)
    message = str(err.value)
    assert "has no argument 'num_solver'" in message and "did you mean 'num_solvers'?" in message
    assert "num_solvers, source, dataset" in message


def test_registered_is_a_copy() -> None:
    games = registered()
    games.clear()
    assert "proposer_solver-v0" in registered()


def test_register_defaults_and_errors(scratch_registry) -> None:
    register("tiny_ps-v0", ProposerSolverEnv, scripted=SCRIPTED, num_solvers=2, format_bonus=0.5)
    env = make("tiny_ps-v0")
    assert env.possible_agents == ["proposer", "solver_0", "solver_1"] and env.spec.reward_range == (-1.0, 1.5)
    assert len(make("tiny_ps-v0", num_solvers=5).possible_agents) == 6  # call kwargs win
    assert registered()["tiny_ps-v0"].default_kwargs == {"num_solvers": 2, "format_bonus": 0.5}
    with pytest.raises(ValueError, match="already registered; bump the version .*'tiny_ps-v1'"):
        register("tiny_ps-v0", ProposerSolverEnv)
    with pytest.raises(ValueError, match="must look like 'name-v0'"):
        register("TinyPS", ProposerSolverEnv)
    with pytest.raises(ValueError, match="has no argument 'solvers'"):
        register("tiny_ps-v1", ProposerSolverEnv, solvers=3)
    with pytest.raises(TypeError, match="must be callable"):
        register("tiny_ps-v2", "ProposerSolverEnv")  # type: ignore[arg-type]
    register("not_a_game-v0", lambda: object())
    with pytest.raises(TypeError, match="not a CogymEnv"):
        make("not_a_game-v0")


def test_scratch_registry_left_no_trace() -> None:
    assert "tiny_ps-v0" not in registered()


def test_an_unknown_game_says_how_a_users_game_is_registered() -> None:
    """A user who forgot game.modules learns that their module must be imported, and how."""
    with pytest.raises(ValueError) as err:
        make("nim-v0")
    message = str(err.value)
    assert "game.modules" in message and "--module" in message
