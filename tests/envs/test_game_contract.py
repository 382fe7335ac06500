"""Every registered game passes PettingZoo's api_test (unmodified) and cogym's check_game, at turn and token level."""

from __future__ import annotations

import pytest
from pettingzoo.test import api_test

from cogym.envs import make, registered
from cogym.envs.checks import check_game

# api_test recommends Box/Discrete spaces and numpy observations; text games use Dict/Text on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("num_solvers", [1, 4])
def test_api_test_proposer_source(num_solvers: int) -> None:
    api_test(make("proposer_solver-v0", num_solvers=num_solvers), num_cycles=200)


@pytest.mark.parametrize("verifier", ["exact", "majority"])
def test_api_test_dataset_source(heldout_path: str, verifier: str) -> None:
    api_test(make("proposer_solver-v0", num_solvers=3, source="dataset", dataset=heldout_path, verifier=verifier), num_cycles=200)


GRANULARITIES = ["turn", "token"]


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("env_id", sorted(registered()))
def test_api_test_every_registered_game(env_id: str, granularity: str) -> None:
    api_test(make(env_id, granularity=granularity), num_cycles=200)


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("env_id", sorted(registered()))
def test_check_game_every_registered_game(env_id: str, granularity: str) -> None:
    check_game(env_id, granularity=granularity)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_solvers": 1},
        {"num_solvers": 5, "verifier": "majority", "proposer_reward": "band", "band": (0.4, 0.6)},
        {"num_solvers": 3, "format_bonus": 0.5, "invalid_penalty": -2.0, "max_operand": 9, "ops": "+"},
        {"num_solvers": 2, "verifier": "math_verify"},
    ],
)
def test_check_game_proposer_solver_variants(kwargs: dict) -> None:
    check_game("proposer_solver-v0", kwargs, episodes=10)


def test_check_game_dataset_source(heldout_path: str) -> None:
    check_game("proposer_solver-v0", {"source": "dataset", "dataset": heldout_path, "num_solvers": 4, "format_bonus": 0.1}, episodes=10)
