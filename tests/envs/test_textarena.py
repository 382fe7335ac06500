"""``textarena:<id>`` (cogym.envs.textarena, the textarena extra): every allowed id holds to PettingZoo's
api_test and seed_test and cogym's check_game with the network refused, the global random states are
never touched, reading an observation changes nothing, rewards are numbers in range whatever TextArena
returns, an invalid move or a crashing game ends the game with a reason, and other ids are refused."""

from __future__ import annotations

import random
import socket

import numpy as np
import pytest

pytest.importorskip("textarena", reason="needs the textarena extra: pip install 'cogym[textarena]'")

from pettingzoo.test import api_test, seed_test  # noqa: E402

from cogym.envs import make  # noqa: E402
from cogym.envs.checks import check_game  # noqa: E402
from cogym.envs.errors import GameError  # noqa: E402
from cogym.envs.testing import drain, step_as  # noqa: E402
from cogym.envs.textarena import ALLOWED, REFUSED, bracketed_moves, reward_value  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test here runs with sockets refused: a game that reaches for the network fails loudly."""
    def refuse(*args, **kwargs):
        raise OSError("the network is refused in cogym's TextArena tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_allowlist_holds_spirals_games() -> None:
    assert len(ALLOWED) >= 40 and {"TicTacToe-v0", "KuhnPoker-v0", "SimpleNegotiation-v0"} <= set(ALLOWED)
    assert not set(ALLOWED) & set(REFUSED)


@pytest.mark.parametrize("env_id", ALLOWED)
def test_every_allowed_id_passes_the_checks(env_id: str) -> None:
    gid = f"textarena:{env_id}"
    api_test(make(gid), num_cycles=60)
    seed_test(lambda: make(gid), num_cycles=20)
    check_game(gid, episodes=3)


@pytest.mark.parametrize("env_id", ["TicTacToe-v0", "KuhnPoker-v0"])
def test_a_sample_passes_the_checks_at_token_level(env_id: str) -> None:
    check_game(f"textarena:{env_id}", {"max_turn_tokens": 16}, episodes=2, granularity="token")


def test_the_global_random_states_are_left_alone_and_games_repeat() -> None:
    random.seed(123)
    np.random.seed(456)
    before = (random.getstate(), np.random.get_state()[1].copy())
    texts = []
    for _ in range(2):
        env = make("textarena:KuhnPoker-v0")
        env.reset(seed=5)
        texts.append(env.observe("player_0")["text"])
    assert texts[0] == texts[1] and texts[0]
    assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])


def test_reading_an_observation_changes_nothing() -> None:
    env = make("textarena:TicTacToe-v0")
    env.reset(seed=0)
    seat = env.agent_selection
    first = env.observe(seat)["text"]
    assert env.observe(seat)["text"] == first and "[GAME]" in first and bracketed_moves(first)


def test_an_invalid_move_ends_the_game_with_its_reason() -> None:
    env = make("textarena:TicTacToe-v0")
    env.reset(seed=0)
    seat = env.agent_selection
    rewards = step_as(env, seat, "I resign, no brackets")
    infos = {s: dict(i) for s, i in env.infos.items()}
    assert drain(env) == rewards and rewards[seat] == -1.0 and sum(rewards.values()) == 0.0
    assert infos[seat]["invalid"] and infos[seat]["reason"]


def test_a_huge_move_is_cut_and_judged_quickly() -> None:
    import time

    env = make("textarena:TicTacToe-v0")
    env.reset(seed=0)
    start = time.perf_counter()
    env.step("[" + "9" * 100_000 + "]")
    assert time.perf_counter() - start < 1.0 and env.terminations[env.possible_agents[0]]


def test_recent_lines_shows_only_the_newest_lines_and_wrap_moves_brackets_a_bare_move() -> None:
    env = make("textarena:TicTacToe-v0", recent_lines=1, wrap_moves=True)
    env.reset(seed=0)
    first = env.agent_selection
    assert env.observe(first)["text"] == "Available Moves: " + ", ".join(f"'[{i}]'" for i in range(9))
    assert step_as(env, first, " 4 ") == {"player_0": 0.0, "player_1": 0.0}  # played as [4]
    second = env.agent_selection
    assert "'[4]'" not in env.observe(second)["text"] and env.observe(second)["text"].startswith("Available Moves: '[0]'")
    assert step_as(env, second, "[2]")[second] == 0.0  # a bracketed reply goes as it is
    rewards = step_as(env, first, "4")  # the occupied cell: invalid
    assert rewards[first] == -1.0 and env.infos[first]["invalid"]
    two = make("textarena:TicTacToe-v0", recent_lines=2)
    two.reset(seed=0)
    assert two.observe(two.agent_selection)["text"].splitlines()[0] == " 6 | 7 | 8 "  # blank lines do not count
    with pytest.raises(ValueError, match="recent_lines"):
        make("textarena:TicTacToe-v0", recent_lines=0)
    with pytest.raises(ValueError, match="wrap_moves must be true or false"):
        make("textarena:TicTacToe-v0", wrap_moves="yes")


def test_the_short_view_passes_the_checks() -> None:
    check_game("textarena:TicTacToe-v0", {"recent_lines": 1, "wrap_moves": True}, episodes=4)


@pytest.mark.parametrize(("value", "expected"), [(1, 1.0), ("-1", -1.0), (5.0, 1.0), (5 / 7, 5 / 7), ("win", 0.0),
                                                 (float("nan"), 0.0), (None, 0.0), (-3, -1.0)])
def test_rewards_are_numbers_in_range_whatever_textarena_returns(value, expected) -> None:
    assert reward_value(value) == expected


@pytest.mark.parametrize(("game_id", "match"), [
    ("textarena:TicTacToe-v9", "unknown TextArena id"),
    ("textarena:TicTacToe-v0-raw", "not among the two-seat ids checked"),
    ("textarena:Wordle-v0", "needs nltk data"),
    ("textarena:Chess-v0", "needs Python 3.12"),
    ("textarena:Debate-v0", "OpenRouter API key"),
])
def test_other_ids_are_refused_with_the_reason(game_id: str, match: str) -> None:
    with pytest.raises(GameError, match=match) as err:
        make(game_id)
    assert "\n" not in str(err.value)


def test_cogym_games_lists_the_allowed_ids_within_80_columns(monkeypatch, capsys) -> None:
    from cogym.runners.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["games", "--source", "textarena"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"textarena games ({len(ALLOWED)} ids") and all(len(line) <= 80 for line in out.splitlines())
    assert "  KuhnPoker-v0  (variants: extreme, long, medium, short)" in out and f"{len(REFUSED)} other ids" in out
