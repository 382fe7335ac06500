"""``openspiel:<game>`` (cogym.envs.openspiel, the openspiel extra): every game of the catalog holds to
PettingZoo's api_test and seed_test and cogym's check_game, the readable renderers, move parsing, the
invalid-move rule with zero-sum kept for N players, chance drawn from the game's own RNG, refusals at
make, and cogym's Kuhn exploitability against OpenSpiel's own on random strategies."""

from __future__ import annotations

import socket

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel", reason="needs the openspiel extra: pip install 'cogym[openspiel]'")

from pettingzoo.test import api_test, seed_test  # noqa: E402

from cogym.envs import make  # noqa: E402
from cogym.envs.checks import check_game  # noqa: E402
from cogym.envs.errors import GameError  # noqa: E402
from cogym.envs.openspiel import EXCLUDED, catalog, parse_move  # noqa: E402
from cogym.envs.testing import drain, step_as  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
CATALOG = catalog()


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test here runs with sockets refused: a game that reaches for the network fails loudly."""
    def refuse(*args, **kwargs):
        raise OSError("the network is refused in cogym's OpenSpiel tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_catalog_holds_the_sequential_text_games_that_load() -> None:
    assert len(CATALOG) >= 60 and {"kuhn_poker", "leduc_poker", "liars_dice", "tic_tac_toe", "chess"} <= set(CATALOG)
    assert not set(CATALOG) & set(EXCLUDED)


@pytest.mark.parametrize("name", CATALOG)
def test_every_catalog_game_passes_the_checks_at_turn_level(name: str) -> None:
    gid = f"openspiel:{name}"
    api_test(make(gid), num_cycles=100)
    seed_test(lambda: make(gid), num_cycles=20)
    check_game(gid, episodes=3)


# A sample at token level (one byte per step): a poker, a board game, a 3-player game and dice.
@pytest.mark.parametrize("name", ["kuhn_poker", "tic_tac_toe", "leduc_poker", "liars_dice"])
def test_a_sample_of_games_passes_the_checks_at_token_level(name: str) -> None:
    assert name in CATALOG
    check_game(f"openspiel:{name}", episodes=4, granularity="token")


def test_n_player_games_take_parameters_both_ways() -> None:
    a, b = make("openspiel:kuhn_poker", params={"players": 3}), make("openspiel:kuhn_poker(players=3)")
    assert a.possible_agents == b.possible_agents == ["player_0", "player_1", "player_2"]
    assert a.spec.roles == ("first", "second", "third") and a.spec.zero_sum
    check_game("openspiel:kuhn_poker", {"params": {"players": 3}}, episodes=6)


@pytest.mark.parametrize("players", [2, 3, 4])
def test_an_invalid_move_ends_the_game_and_keeps_it_zero_sum(players: int) -> None:
    env = make("openspiel:kuhn_poker", params={"players": players})
    env.reset(seed=0)
    rewards = step_as(env, "player_0", "raise!")
    infos = {seat: dict(info) for seat, info in env.infos.items()}
    assert drain(env) == rewards and set(rewards) == {f"player_{i}" for i in range(players)}
    game = pyspiel.load_game("kuhn_poker", {"players": players})
    assert rewards["player_0"] == game.min_utility()
    assert sum(rewards.values()) == pytest.approx(0.0, abs=1e-12)
    assert all(game.min_utility() <= r <= game.max_utility() for r in rewards.values())
    assert infos["player_0"]["invalid"] and "not a legal move" in infos["player_0"]["reason"]
    assert not infos["player_1"]["invalid"] and "player_0's move was invalid" in infos["player_1"]["reason"]


def test_moves_are_read_by_number_or_name_and_anything_else_is_invalid() -> None:
    names = ["Pass", "Bet", "x(0,1)", "x(0,10)"]
    assert parse_move("2", names) == (1, None) and parse_move("  bet\nbecause", names) == (1, None)
    assert parse_move("x(0,10) please", names) == (3, None) and parse_move("x(0,1)", names) == (2, None)
    assert parse_move("4.", names) == (3, None)
    for reply in ("", "5", "0", "Betting", "9" * 100_000, "raise", "\x00\udcff"):
        index, reason = parse_move(reply, names)
        assert index is None and reason and reason.isascii(), reply[:20]


def test_chance_comes_from_the_games_own_generator() -> None:
    deals = set()
    for seed in range(12):
        env = make("openspiel:kuhn_poker")
        env.reset(seed=seed)
        text = env.observe("player_0")["text"]
        env.reset(seed=seed)
        assert env.observe("player_0")["text"] == text  # the same seed deals the same card
        deals.add(text.splitlines()[1])
    assert len(deals) == 3  # and seeds reach every card


def test_the_renderers_write_cards_and_moves_as_words() -> None:
    env = make("openspiel:leduc_poker")
    env.reset(seed=3)
    step_as(env, "player_0", "Raise")
    text = env.observe("player_1")["text"]
    assert "card " in text and "round 1: raise" in text and "moves: 1=Fold 2=Call 3=Raise" in text
    env = make("openspiel:kuhn_poker")
    env.reset(seed=0)
    step_as(env, "player_0", "Bet")
    assert env.observe("player_1")["text"].splitlines()[1].endswith("history: bet")
    env = make("openspiel:liars_dice")
    env.reset(seed=0)
    assert env.observe("player_0")["text"].splitlines()[1].startswith("your dice: ")


@pytest.mark.parametrize(("game_id", "match"), [
    ("openspiel:tic_tac_tow", "did you mean 'openspiel:tic_tac_toe'"),
    ("openspiel:goofspiel", "simultaneous-move games are not supported"),
    ("openspiel:kuhn_poker(players=99)", "OpenSpiel cannot load it"),
])
def test_games_outside_the_catalog_are_refused_with_the_reason(game_id: str, match: str) -> None:
    with pytest.raises(GameError, match=match) as err:
        make(game_id)
    assert "\n" not in str(err.value)


def test_without_open_spiel_the_error_names_the_extra(monkeypatch) -> None:
    import sys

    from cogym.envs import registry

    monkeypatch.setitem(sys.modules, "pyspiel", None)
    monkeypatch.setattr(registry, "_RESOLVED", {})
    with pytest.raises(GameError, match=r"pip install 'cogym\[openspiel\]'"):
        make("openspiel:tic_tac_toe")


def test_kuhn_exploitability_equals_open_spiels_on_random_strategies() -> None:
    """cogym.envs.kuhn_poker.exploitability against OpenSpiel's exploitability() of the same TabularPolicy,
    on 20 random behaviour strategies (cogym: P(bet or call) per information set; OpenSpiel: action 1)."""
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms.exploitability import exploitability as os_exploitability

    from cogym.envs.kuhn_poker import CARDS, INFOSETS, exploitability

    game = pyspiel.load_game("kuhn_poker")
    history_code = {"": "", "check": "p", "bet": "b", "check bet": "pb"}
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(20):
        strategy = {i: float(rng.uniform()) for i in INFOSETS}
        tabular = os_policy.TabularPolicy(game)
        for (card, history), p in strategy.items():
            key = f"{CARDS.index(card)}{history_code[history]}"
            tabular.policy_for_key(key)[:] = [1.0 - p, p]  # action 0 = pass/fold, 1 = bet/call
        worst = max(worst, abs(exploitability(strategy) - os_exploitability(game, tabular)))
    assert worst < 1e-12


def test_cogym_games_lists_the_catalog_within_80_columns(monkeypatch, capsys) -> None:
    from cogym.runners.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["games", "--source", "openspiel"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"openspiel games ({len(CATALOG)}; play one as openspiel:<game>)")
    assert all(len(line) <= 80 for line in out.splitlines())
    table = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split() and line.split()[0] in CATALOG}
    assert set(table) == set(CATALOG) and table["leduc_poker"][:3] == ["2", "dealt", "imperfect"]
