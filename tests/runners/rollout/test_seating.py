"""The one seating plan: keys naming seats or roles, a seat's own key beating its role's."""

import pytest

from cogym.envs import make
from cogym.runners.rollout.seating import Seating, SeatingError, assign, seats_of


@pytest.fixture
def game():
    return make("proposer_solver-v0", num_solvers=3)


def test_a_role_stands_for_its_seats_in_the_games_order(game):
    solvers = [s for s in game.possible_agents if game.role_of(s) == "solver"]
    assert seats_of(game, ["solver"], "x") == solvers
    assert seats_of(game, [solvers[2], "proposer"], "x") == [game.possible_agents[0], solvers[2]]


def test_a_seats_own_key_wins_and_every_key_must_exist(game):
    solvers = [s for s in game.possible_agents if game.role_of(s) == "solver"]
    plan = assign(game, {"solver": "a", solvers[1]: "b", "proposer": "c"}, "seats")
    assert [plan[s] for s in solvers] == ["a", "b", "a"] and plan[game.possible_agents[0]] == "c"
    with pytest.raises(SeatingError, match=r"seats.solvr: proposer_solver-v0 has no role or seat 'solvr' \(roles: "
                                          r"proposer, solver; .*\); did you mean 'solver'\?"):
        assign(game, {"solvr": "a"}, "seats")


def test_a_seat_nobody_plays_is_refused_only_when_asked(game):
    assert set(assign(game, {"solver": "a"}, "seats")) == {s for s in game.possible_agents if game.role_of(s) == "solver"}
    with pytest.raises(SeatingError, match="seat 'proposer' .role 'proposer'. has no policy"):
        assign(game, {"solver": "a"}, "seats", missing="seat {seat!r} (role {role!r}) has no policy")
    seating = Seating({seat: ("p", None) for seat in game.possible_agents})
    assert seating(game.possible_agents[0], "proposer") == ("p", None)
