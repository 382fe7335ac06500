"""kuhn_poker-v0: every betting line by hand, invalid moves, and the game theory.

Theory: exact enumeration over the six deals (stepping the real game) gives player_0 the value
-1/18 under the equilibrium for every alpha, and no pure strategy does better against either
equilibrium strategy (exploitability 0); random play is worth +1/8 to player_0 (derived below);
Monte Carlo with the scripted twins, which only read the observation text, agrees within 4 sigma.
"""

from __future__ import annotations

import itertools
import time
from fractions import Fraction

import numpy as np
import pytest
from cogym.envs import make, scripted_strategies
from cogym.envs.checks import PATHOLOGICAL, check_game
from cogym.envs.kuhn_poker import (
    CARDS,
    MAX_OBSERVATION_CHARS,
    NASH_SECOND,
    NODE_BET,
    NODE_CHECK,
    NODE_CHECK_BET,
    NODE_OVER,
    NODE_START,
    SCRIPTED,
    STRATEGIES,
    KuhnPokerEnv,
    card_text,
    is_over,
    legal_moves,
    nash_first,
    parse_move,
    payoff,
    read_turn_text,
    turn_text,
)
from cogym.envs.testing import drain
from cogym.envs.testing import step_as as act
from pettingzoo.test import api_test

# api_test recommends Box/Discrete spaces and numpy observations; text games use Dict/Text on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

P0, P1 = "player_0", "player_1"
DEALS = list(itertools.permutations(CARDS, 2))  # the six deals, (player_0's card, player_1's card)
LINES = [("check", "check"), ("check", "bet", "fold"), ("check", "bet", "call"), ("bet", "fold"), ("bet", "call")]
GAME_VALUE = -1 / 18


def new_game(cards: tuple[str, str] | None = None, seed: int | None = 0) -> KuhnPokerEnv:
    env = make("kuhn_poker-v0")
    env.reset(seed=seed, options={"cards": cards} if cards else None)
    return env


ZERO = {P0: 0.0, P1: 0.0}


# ----------------------------------------------------------------------------- playthroughs
@pytest.mark.parametrize(
    "cards, line, final",
    [
        (("K", "Q"), ("check", "check"), 1.0),
        (("J", "Q"), ("check", "check"), -1.0),
        (("K", "J"), ("check", "bet", "fold"), -1.0),  # player_0 folds the best hand: loses the ante
        (("Q", "K"), ("check", "bet", "call"), -2.0),
        (("K", "J"), ("check", "bet", "call"), 2.0),
        (("J", "K"), ("bet", "fold"), 1.0),  # a bluff that works
        (("J", "K"), ("bet", "call"), -2.0),
        (("Q", "J"), ("bet", "call"), 2.0),
    ],
)
def test_every_betting_line_scores_after_every_turn(cards: tuple[str, str], line: tuple[str, ...], final: float) -> None:
    env = new_game(cards)
    for k, move in enumerate(line):
        rewards = act(env, (P0, P1)[k % 2], move)
        if k < len(line) - 1:
            assert rewards == ZERO and not any(env.terminations.values())
    assert rewards == {P0: final, P1: -final}
    assert all(env.terminations.values()) and env.ready_agents() == []
    assert env.infos[P0]["history"] == line and env.infos[P1]["cards"] == cards
    assert env.infos[P0]["invalid"] is False and "reason" not in env.infos[P0]
    assert drain(env) == {P0: final, P1: -final}
    assert env.agents == []


def test_observations_along_check_bet_call() -> None:
    env = new_game(("Q", "K"))
    obs0, obs1 = env.observe(P0), env.observe(P1)
    assert obs0["text"] == "card Q; history: none; moves: 1=check 2=bet"
    assert obs1["text"] == "card K; history: none; opponent to move"
    assert obs0["observation"].tolist() == [NODE_START, 0, 1] and obs1["observation"].tolist() == [NODE_START, 1, 2]
    act(env, P0, "check")
    assert env.observe(P1)["text"] == "card K; history: check; moves: 1=check 2=bet"
    assert env.observe(P1)["observation"].tolist() == [NODE_CHECK, 1, 2]
    assert env.observe(P0)["text"] == "card Q; history: check; opponent to move"
    act(env, P1, "bet")
    assert env.observe(P0)["text"] == "card Q; history: check bet; moves: 1=fold 2=call"
    assert env.observe(P0)["observation"].tolist() == [NODE_CHECK_BET, 0, 1]
    act(env, P0, "call")
    assert env.observe(P0)["text"] == "card Q; history: check bet call; opponent K; result -2"
    assert env.observe(P1)["text"] == "card K; history: check bet call; opponent Q; result +2"
    assert env.observe(P1)["observation"].tolist() == [NODE_OVER, 1, 2]


def test_facing_a_bet_shows_fold_and_call_and_a_fold_hides_the_cards() -> None:
    env = new_game(("J", "Q"))
    act(env, P0, "bet")
    assert env.observe(P1)["text"] == "card Q; history: bet; moves: 1=fold 2=call"
    assert env.observe(P1)["observation"].tolist() == [NODE_BET, 1, 1]
    act(env, P1, "fold")
    assert env.observe(P1)["text"] == "card Q; history: bet fold; result -1"  # no showdown, J stays hidden
    assert env.observe(P0)["text"] == "card J; history: bet fold; result +1"


def test_infos_and_metrics_at_the_end() -> None:
    env = new_game(("J", "K"))
    assert env.infos == {P0: {"role": "first"}, P1: {"role": "second"}}
    act(env, P0, "check")
    assert env.infos == {P0: {"role": "first"}, P1: {"role": "second"}}
    act(env, P1, "bet")
    act(env, P0, "fold")
    assert env.infos[P0] == {
        "role": "first", "cards": ("J", "K"), "history": ("check", "bet", "fold"), "invalid": False,
        "metrics": {"won": 0.0, "showdown": False, "folded": True, "bluffed": 0.0, "aggression": 0.0},
    }
    assert env.infos[P1] == {
        "role": "second", "cards": ("J", "K"), "history": ("check", "bet", "fold"), "invalid": False,
        "metrics": {"won": 1.0, "showdown": False, "folded": False, "bluffed": None, "aggression": 1.0},
    }


def test_bluff_metric_for_the_second_seat_and_aggression_over_two_moves() -> None:
    env = new_game(("Q", "J"))
    act(env, P0, "check")
    act(env, P1, "bet")  # a bluff with J
    act(env, P0, "call")
    assert env.rewards == {P0: 2.0, P1: -2.0}
    assert env.infos[P1]["metrics"] == {"won": 0.0, "showdown": True, "folded": False, "bluffed": 1.0, "aggression": 1.0}
    assert env.infos[P0]["metrics"] == {"won": 1.0, "showdown": True, "folded": False, "bluffed": None, "aggression": 0.5}


# ----------------------------------------------------------------------------- the reply format
@pytest.mark.parametrize(
    "reply, move",
    [("bet", "bet"), ("  BET!", "bet"), ("Bet. I hold a king.", "bet"), ("check", "check"), ("\n*Check*\n", "check"),
     ("2", "bet"), ("1", "check"), ("1*6", "check"), (" 2.", "bet"), ("-1", "check")],
)
def test_first_word_or_move_number_is_the_move(reply: str, move: str) -> None:
    assert parse_move(reply, ("check", "bet")) == (move, None)
    env = new_game(("K", "J"))
    env.step(reply)
    assert env.agent_selection == P1 and env.observe(P1)["text"].startswith(f"card J; history: {move};")


def test_move_numbers_follow_the_node() -> None:
    assert parse_move("1", ("fold", "call")) == ("fold", None)
    assert parse_move("2", ("fold", "call")) == ("call", None)
    assert parse_move("CALL", ("fold", "call")) == ("call", None)
    env = new_game(("K", "Q"))
    act(env, P0, "1")
    act(env, P1, "2")
    assert act(env, P0, "2") == {P0: 2.0, P1: -2.0}
    assert env.infos[P0]["history"] == ("check", "bet", "call")


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("", "no move in the reply's first 64 characters"),
        ("?!  ...", "no move in the reply's first 64 characters"),
        ("raise", "'raise' is not a move"),
        ("call", "'call' is not a legal move here; reply with check or bet (or 1, 2)"),
        ("fold", "'fold' is not a legal move here"),
        ("3", "'3' is not a move"),
        ("12", "'12' is not a move"),
        ("0", "'0' is not a move"),
        ("I bet", "'i' is not a move"),
        ("bet2", "'bet2' is not a move"),
        ("9**9**9**9", "'9' is not a move"),
        ("(" * 10_000 + "1" + ")" * 10_000, "no move in the reply's first 64 characters"),
        ("7" * 1_000_000, "'77777777777777777777...' is not a move"),
        ("\x00\u202e\U0001f600", "no move in the reply's first 64 characters"),
        (" " * 100 + "bet", "no move in the reply's first 64 characters"),
        ("bét", "'b' is not a move"),
    ],
)
def test_invalid_first_move_counts_as_a_fold(reply: str, reason: str) -> None:
    env = new_game(("K", "J"))
    start = time.perf_counter()
    rewards = act(env, P0, reply)
    assert time.perf_counter() - start < 1.0
    assert rewards == {P0: -1.0, P1: 1.0}
    assert all(env.terminations.values()) and env.ready_agents() == []
    assert env.infos[P0]["invalid"] is True and reason in env.infos[P0]["reason"]
    assert env.infos[P1]["invalid"] is False and env.infos[P1]["reason"].startswith("game over: the opponent's move was invalid")
    assert env.infos[P0]["history"] == ("fold",)
    assert env.infos[P0]["metrics"] == {"won": 0.0, "showdown": False, "folded": False, "bluffed": None, "aggression": None}
    assert env.infos[P1]["metrics"] == {"won": 1.0, "showdown": False, "folded": False, "bluffed": None, "aggression": None}
    assert env.observe(P0)["text"] == "card K; history: fold; invalid move by you; result -1"
    assert env.observe(P1)["text"] == "card J; history: fold; invalid move by opponent; result +1"
    assert drain(env) == {P0: -1.0, P1: 1.0}


@pytest.mark.parametrize(
    "before, mover, reply, p0_reward",
    [
        (("check",), P1, "call", 1.0),  # nothing to call after a check
        (("bet",), P1, "check", 1.0),  # cannot check facing a bet: forfeits, even holding K
        (("bet",), P1, "raise", 1.0),
        (("check", "bet"), P0, "bet", -1.0),  # no re-raise in Kuhn poker
        (("check", "bet"), P0, "", -1.0),
    ],
)
def test_invalid_moves_later_in_the_hand_cost_the_mover_one_chip(before: tuple[str, ...], mover: str, reply: str, p0_reward: float) -> None:
    env = new_game(("Q", "K"))
    for move in before:
        env.step(move)
    assert act(env, mover, reply) == {P0: p0_reward, P1: -p0_reward}
    assert env.infos[mover]["invalid"] is True and isinstance(env.infos[mover]["reason"], str)
    other = P1 if mover == P0 else P0
    assert env.infos[other]["invalid"] is False
    assert env.infos[mover]["history"] == (*before, "fold")
    assert env.infos[mover]["metrics"]["folded"] is False  # an invalid move is not counted as a decision
    assert "invalid move by you" in env.observe(mover)["text"]


@pytest.mark.parametrize("before, mover", [((), P0), (("bet",), P1), (("check", "bet"), P0)])
def test_an_invalid_penalty_costs_the_mover_more_than_the_fold_and_nothing_else(before: tuple[str, ...], mover: str) -> None:
    env = make("kuhn_poker-v0", invalid_penalty=0.5)
    env.reset(seed=0, options={"cards": ("Q", "K")})
    for move in before:
        env.step(move)
    other = P1 if mover == P0 else P0
    chips = -1.0  # the invalid move is a fold: the mover loses its one chip in the pot
    assert act(env, mover, "raise") == {mover: chips - 0.5, other: -chips}
    assert env.infos[mover]["history"] == (*before, "fold") and env.infos[mover]["invalid"] is True
    assert env.observe(mover)["text"].endswith("result -1")  # the chips are a fold's
    assert env.spec.zero_sum is False and env.spec.reward_range == (-2.0, 2.0)
    legal = make("kuhn_poker-v0", invalid_penalty=0.5)
    legal.reset(seed=0, options={"cards": ("Q", "K")})
    assert act(legal, P0, "bet") == {P0: 0.0, P1: 0.0} and act(legal, P1, "fold") == {P0: 1.0, P1: -1.0}  # legal folds: no penalty
    assert make("kuhn_poker-v0").spec.zero_sum is True
    assert make("kuhn_poker-v0", invalid_penalty=3).spec.reward_range == (-4.0, 2.0)


@pytest.mark.parametrize("bad", [-0.1, 11, "1", True, float("nan")])
def test_a_bad_invalid_penalty_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="invalid_penalty must be a number in"):
        make("kuhn_poker-v0", invalid_penalty=bad)


def test_every_pathological_message_is_judged_fast_at_every_node() -> None:
    for before in [(), ("check",), ("bet",), ("check", "bet")]:
        for reply in PATHOLOGICAL:
            env = new_game(("J", "Q"))
            for move in before:
                env.step(move)
            start = time.perf_counter()
            env.step(reply)
            assert time.perf_counter() - start < 1.0
            assert all(env.terminations.values())
            assert env.rewards[P0] + env.rewards[P1] == 0.0 and abs(env.rewards[P0]) == 1.0


# ----------------------------------------------------------------------------- pure rules
def test_payoff_of_every_line_and_deal_by_hand() -> None:
    for cards in DEALS:
        w = 1.0 if CARDS.index(cards[0]) > CARDS.index(cards[1]) else -1.0
        expected = {("check", "check"): w, ("check", "bet", "fold"): -1.0, ("check", "bet", "call"): 2 * w,
                    ("bet", "fold"): 1.0, ("bet", "call"): 2 * w}
        for line in LINES:
            assert is_over(line) and payoff(cards, line) == expected[line]
    assert payoff(("K", "Q"), ("fold",)) == -1.0 and payoff(("K", "Q"), ("check", "fold")) == 1.0
    with pytest.raises(ValueError, match="not a finished hand"):
        payoff(("K", "Q"), ("check",))


def test_legal_moves_and_turn_text_round_trip() -> None:
    assert legal_moves(()) == legal_moves(("check",)) == ("check", "bet")
    assert legal_moves(("bet",)) == legal_moves(("check", "bet")) == ("fold", "call")
    assert all(legal_moves(line) == () for line in LINES)
    for card in CARDS:
        for history in [(), ("check",), ("bet",), ("check", "bet")]:
            assert read_turn_text(turn_text(card, history)) == (card, history)
    assert read_turn_text("card K; history: bet call; opponent J; result +2") is None
    assert read_turn_text("card Q; history: check; opponent to move") is None
    assert read_turn_text("") is None and read_turn_text("x" * 1_000_000) is None


def test_digit_cards_write_every_card_as_its_rank_and_change_nothing_else() -> None:
    assert [card_text(c, "digits") for c in CARDS] == ["1", "2", "3"] and card_text("Q") == "Q"
    for card in CARDS:
        for history in [(), ("check",), ("bet",), ("check", "bet")]:
            assert read_turn_text(turn_text(card, history, "digits")) == (card, history)
    assert turn_text("K", ("check", "bet"), "digits") == "card 3; history: check bet; moves: 1=fold 2=call"
    with pytest.raises(ValueError, match="card_style must be one of letters, digits"):
        turn_text("K", (), "emoji")
    with pytest.raises(ValueError, match="card_style must be one of"):
        make("kuhn_poker-v0", card_style="Letters")
    for cards in DEALS:
        for line in LINES:
            texts, rewards = {}, {}
            for style in ("letters", "digits"):
                env = make("kuhn_poker-v0", card_style=style)
                env.reset(seed=0, options={"cards": cards})
                seen = []
                for move in line:
                    seen += [env.observe(P0), env.observe(P1)]
                    last = act(env, env.agent_selection, move)
                seen += [env.observe(P0), env.observe(P1)]
                texts[style] = [o["text"] for o in seen]
                rewards[style] = (last, [o["observation"].tolist() for o in seen])
            assert rewards["letters"] == rewards["digits"]
            to_digits = str.maketrans({"J": "1", "Q": "2", "K": "3"})
            assert [t.translate(to_digits) for t in texts["letters"]] == texts["digits"]
            assert all(not set("JQK") & set(t) for t in texts["digits"])


def test_every_reachable_observation_fits_the_space() -> None:
    env, longest = make("kuhn_poker-v0"), 0
    for cards in DEALS:
        for line in LINES:
            for invalid_last in (False, True):
                env.reset(options={"cards": cards})
                for k, move in enumerate(line):
                    for seat in (P0, P1):
                        obs = env.observe(seat)
                        assert env.observation_space(seat).contains(obs)
                        longest = max(longest, len(obs["text"]))
                    env.step("nonsense" if invalid_last and k == len(line) - 1 else move)
                for seat in (P0, P1):
                    obs = env.observe(seat)
                    assert env.observation_space(seat).contains(obs) and obs["observation"][0] == NODE_OVER
                    longest = max(longest, len(obs["text"]))
    assert longest <= MAX_OBSERVATION_CHARS
    fresh = make("kuhn_poker-v0")
    assert fresh.observe(P1)["text"] == "" and fresh.observation_space(P1).contains(fresh.observe(P1))


# ----------------------------------------------------------------------------- deal, options, rng
def test_fixed_deal_option_is_validated() -> None:
    env = make("kuhn_poker-v0")
    env.reset(seed=3, options={"cards": ["Q", "J"]})
    assert (env.observe(P0)["text"][:6], env.observe(P1)["text"][:6]) == ("card Q", "card J")
    env.reset(options={"other": 1})  # unknown keys are ignored (PettingZoo's api_test passes some)
    for bad in [("J", "J"), ("J",), ("J", "Q", "K"), "JQ", ("j", "q"), ("A", "K"), (1, 2), 5]:
        with pytest.raises(ValueError, match="options\\['cards'\\] must be two different cards"):
            env.reset(options={"cards": bad})
    with pytest.raises(TypeError, match="options must be a dict"):
        env.reset(options=[("cards", ("J", "Q"))])  # type: ignore[arg-type]


def test_random_deals_cover_the_six_deals_evenly_and_follow_the_seed() -> None:
    env = make("kuhn_poker-v0")
    env.reset(seed=11)
    counts: dict[tuple[str, str], int] = {}
    first = []
    for i in range(6000):
        if i:
            env.reset()
        deal = (CARDS[env.observe(P0)["observation"][2]], CARDS[env.observe(P1)["observation"][2]])
        counts[deal] = counts.get(deal, 0) + 1
        if i < 20:
            first.append(deal)
    assert set(counts) == set(DEALS)
    assert all(abs(n - 1000) < 4 * np.sqrt(6000 * (1 / 6) * (5 / 6)) for n in counts.values())
    other = make("kuhn_poker-v0")
    other.reset(seed=11)
    again = [(CARDS[other.observe(P0)["observation"][2]], CARDS[other.observe(P1)["observation"][2]])]
    for _ in range(19):
        other.reset()
        again.append((CARDS[other.observe(P0)["observation"][2]], CARDS[other.observe(P1)["observation"][2]]))
    assert again == first


# ----------------------------------------------------------------------------- scripted twins
def test_every_role_has_the_scripted_twins() -> None:
    twins = scripted_strategies("kuhn_poker-v0")
    assert set(twins) == {"first", "second"}
    for role in twins:
        assert set(twins[role]) == {"random", "nash", "always_bet", "always_check", "calling_station", "invalid"}


def test_fixed_twins_play_their_moves_from_the_text() -> None:
    rng = np.random.default_rng(0)
    root, facing = turn_text("Q", ()), turn_text("Q", ("check", "bet"))
    assert SCRIPTED["first"]["always_bet"](root, rng) == "bet" and SCRIPTED["first"]["always_bet"](facing, rng) == "call"
    assert SCRIPTED["first"]["always_check"](root, rng) == "check" and SCRIPTED["first"]["always_check"](facing, rng) == "fold"
    assert SCRIPTED["first"]["calling_station"](root, rng) == "check" and SCRIPTED["first"]["calling_station"](facing, rng) == "call"
    assert SCRIPTED["second"]["invalid"](turn_text("K", ("bet",)), rng) == "raise"
    # Pure equilibrium actions: K always bets first; player_1 calls with K and folds J to a bet.
    assert all(SCRIPTED["first"]["nash"](turn_text("K", ()), rng) == "bet" for _ in range(50))
    assert all(SCRIPTED["second"]["nash"](turn_text("K", ("bet",)), rng) == "call" for _ in range(50))
    assert all(SCRIPTED["second"]["nash"](turn_text("J", ("bet",)), rng) == "fold" for _ in range(50))
    assert SCRIPTED["second"]["nash"]("not an observation", rng) == "check"


def test_strategy_tables_cover_exactly_the_information_sets() -> None:
    first_sets = {(c, h) for c in CARDS for h in ("", "check bet")}
    second_sets = {(c, h) for c in CARDS for h in ("check", "bet")}
    assert set(nash_first(0.1)) == first_sets and set(NASH_SECOND) == second_sets
    for table in STRATEGIES.values():
        assert set(table) == first_sets | second_sets and all(0.0 <= p <= 1.0 for p in table.values())
    assert nash_first(1 / 3)[("K", "")] == 1.0 and nash_first(0.0)[("Q", "check bet")] == pytest.approx(1 / 3)
    for bad in (-0.01, 0.34):
        with pytest.raises(ValueError, match="alpha must be in"):
            nash_first(bad)


# ----------------------------------------------------------------------------- theory: exact
@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[tuple[str, str], tuple[str, ...]], float]:
    """player_0's reward for every deal and betting line, read off the real game."""
    env, out = make("kuhn_poker-v0"), {}
    for cards in DEALS:
        for line in LINES:
            env.reset(options={"cards": cards})
            for move in line:
                env.step(move)
            assert all(env.terminations.values()) and env.rewards[P0] == -env.rewards[P1]
            out[cards, line] = env.rewards[P0]
    return out


def exact_value(outcomes: dict, first: dict, second: dict) -> float:
    """player_0's expected payoff: every deal (1/6) and line weighted by the behaviour strategies."""
    total = 0.0
    for (cards, line), reward in outcomes.items():
        p = 1.0 / len(DEALS)
        for k, move in enumerate(line):
            seat = k % 2
            aggressive = (first, second)[seat][cards[seat], " ".join(line[:k])]
            p *= aggressive if move in ("bet", "call") else 1.0 - aggressive
        total += p * reward
    return total


def pure_strategies(histories: tuple[str, str]) -> list[dict[tuple[str, str], float]]:
    sets = [(c, h) for c in CARDS for h in histories]
    return [dict(zip(sets, map(float, bits))) for bits in itertools.product((0, 1), repeat=len(sets))]


@pytest.mark.parametrize("alpha", [0.0, 1 / 9, 1 / 6, 1 / 3])
def test_exact_equilibrium_value_is_minus_one_eighteenth(outcomes: dict, alpha: float) -> None:
    assert abs(exact_value(outcomes, nash_first(alpha), NASH_SECOND) - GAME_VALUE) < 1e-9


def test_equilibrium_is_unexploitable(outcomes: dict) -> None:
    # No pure strategy of player_1 wins more than 1/18 against player_0's equilibrium, and no pure
    # strategy of player_0 gets more than -1/18 against player_1's: together, a Nash equilibrium.
    best_second = min(exact_value(outcomes, STRATEGIES["nash"], s) for s in pure_strategies(("check", "bet")))
    best_first = max(exact_value(outcomes, f, STRATEGIES["nash"]) for f in pure_strategies(("", "check bet")))
    assert abs(best_second - GAME_VALUE) < 1e-9 and abs(best_first - GAME_VALUE) < 1e-9
    # ... while a non-equilibrium strategy is exploitable: always betting loses to a calling K/Q.
    assert min(exact_value(outcomes, STRATEGIES["always_bet"], s) for s in pure_strategies(("check", "bet"))) < GAME_VALUE - 0.1


def test_exact_random_vs_random_matches_the_hand_derived_value(outcomes: dict) -> None:
    # Each move is a coin flip. For a deal where player_0's showdown result is w = +-1:
    # check check (1/4): w; check bet fold (1/8): -1; check bet call (1/8): 2w; bet fold (1/4): +1;
    # bet call (1/4): 2w. Sum: w/4 - 1/8 + w/4 + 1/4 + w/2 = w + 1/8, and w averages 0 over deals.
    derived = Fraction(1, 8)
    assert abs(exact_value(outcomes, STRATEGIES["random"], STRATEGIES["random"]) - float(derived)) < 1e-12


# ----------------------------------------------------------------------------- theory: Monte Carlo
def play_hands(first: str, second: str, hands: int, seed: int, swap_every_other: bool = False) -> tuple[np.ndarray, dict]:
    """Play ``hands`` hands with scripted twins on the real game; returns player A's payoffs (A plays
    strategy ``first`` at player_0, or at player_1 on odd hands when swapping; B plays ``second``)
    and the aggressive-move tallies per (seat index, card, history)."""
    env = make("kuhn_poker-v0")
    result = 0.0
    rngs = {"A": np.random.default_rng([seed, 1]), "B": np.random.default_rng([seed, 2])}
    payoffs = np.empty(hands)
    tallies: dict[tuple[int, str, str], list[int]] = {}
    env.reset(seed=seed)
    for i in range(hands):
        if i:
            env.reset()
        swapped = swap_every_other and i % 2 == 1
        players = {P0: ("B", second) if swapped else ("A", first), P1: ("A", first) if swapped else ("B", second)}
        role = {P0: "first", P1: "second"}
        while env.agents:
            agent = env.agent_selection
            if env.terminations[agent]:
                env.step(None)
                continue
            text = env.observe(agent)["text"]
            who, strategy = players[agent]
            move = SCRIPTED[role[agent]][strategy](text, rngs[who])
            card, history = read_turn_text(text)
            tally = tallies.setdefault((int(agent[-1]), card, " ".join(history)), [0, 0])
            tally[0] += move in ("bet", "call")
            tally[1] += 1
            env.step(move)
            if all(env.terminations.values()):
                result = env.rewards[P0]  # read before the finished seats are removed
        payoffs[i] = -result if swapped else result
    return payoffs, tallies


def within_4_sigma(samples: np.ndarray, expected: float) -> bool:
    return abs(samples.mean() - expected) <= 4 * samples.std(ddof=1) / np.sqrt(len(samples))


def test_monte_carlo_nash_vs_nash_with_the_text_twins() -> None:
    payoffs, tallies = play_hands("nash", "nash", 20_000, seed=1)
    assert within_4_sigma(payoffs, GAME_VALUE)
    assert set(np.unique(payoffs)) == {-2.0, -1.0, 1.0, 2.0}  # every kind of result happened
    # The twins read their card and history from the text and play the equilibrium frequencies.
    for (seat, card, history), (aggressive, n) in tallies.items():
        p = (nash_first(1 / 3) if seat == 0 else NASH_SECOND)[card, history]
        assert abs(aggressive / n - p) <= 4 * np.sqrt(p * (1 - p) / n) + 1e-12, (seat, card, history, aggressive, n)
    # Every information set was reached but one: at alpha = 1/3 player_0 never checks a K.
    assert len(tallies) == 11 and (0, "K", "check bet") not in tallies


def test_monte_carlo_random_vs_random_symmetric_match_is_fair() -> None:
    payoffs, _ = play_hands("random", "random", 20_000, seed=2, swap_every_other=True)
    assert within_4_sigma(payoffs, 0.0)
    seat0 = np.where(np.arange(len(payoffs)) % 2 == 0, payoffs, -payoffs)  # player_0's payoff every hand
    assert within_4_sigma(seat0, 1 / 8)  # the exact value above, reached by the text twins


def test_always_betting_first_loses_more_than_the_game_value(outcomes: dict) -> None:
    # player_1's equilibrium facing a bet: call K, call Q 1/3, fold J. Per deal (player_0, player_1):
    # JQ: 1/3 * -2 + 2/3 * 1 = 0; JK: -2; QJ: +1; QK: -2; KJ: +1; KQ: 1/3 * 2 + 2/3 * 1 = 4/3.
    # Sum -2/3 over six deals: -1/9 for player_0.
    derived = -1 / 9
    assert abs(exact_value(outcomes, STRATEGIES["always_bet"], NASH_SECOND) - derived) < 1e-12
    payoffs, _ = play_hands("always_bet", "nash", 20_000, seed=3)
    assert within_4_sigma(payoffs, derived)


# ----------------------------------------------------------------------------- contract
def test_check_game() -> None:
    check_game("kuhn_poker-v0", episodes=40)


def test_pettingzoo_api_test() -> None:
    api_test(make("kuhn_poker-v0"), num_cycles=200)


def test_spec_seats_and_roles() -> None:
    env = make("kuhn_poker-v0")
    assert env.spec.id == "kuhn_poker-v0" and env.spec.roles == ("first", "second")
    assert env.spec.reward_range == (-2.0, 2.0) and env.spec.zero_sum is True and env.spec.max_turns == 3
    assert env.possible_agents == [P0, P1] and env.role_of(P0) == "first" and env.role_of(P1) == "second"
    with pytest.raises(ValueError, match="unknown seat 'player_2'"):
        env.role_of("player_2")
    with pytest.raises(ValueError, match="has no argument 'cards'"):
        make("kuhn_poker-v0", cards=("J", "Q"))


def test_step_errors_and_finished_seats() -> None:
    env = make("kuhn_poker-v0")
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("bet")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(1)  # type: ignore[arg-type]
    env.step("bet")
    env.step("fold")
    with pytest.raises(ValueError, match="only valid action is None"):
        env.step("call")
    drain(env)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("bet")


def test_render_ansi() -> None:
    env = make("kuhn_poker-v0", render_mode="ansi")
    assert "not dealt" in env.render()
    env.reset(options={"cards": ("K", "J")})
    env.step("check")
    assert env.render() == "[kuhn_poker-v0] cards player_0=K player_1=J history: check; to move: player_1"
    env.step("check")
    assert env.render().endswith("history: check check; result player_0 +1")
