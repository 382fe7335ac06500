"""``kuhn_poker-v0``: Kuhn poker as text, the smallest poker with bluffing.

A three-card deck, ``J < Q < K``. Each player antes 1 chip and gets one card from the game's
own RNG; the third card is never seen. One betting round with bets of 1 chip.

Roles and seats
    ``"player_0"`` (role ``first``: acts first) and ``"player_1"`` (role ``second``). The two
    positions play different strategies in equilibrium, so they are different roles: a config
    can give them one policy (``seats: {first: p, second: p}``) and still get per-role metrics.

Turn order (the standard betting tree; at most 3 acting turns)
    ``player_0``: ``check`` or ``bet``.
    After ``check``, ``player_1``: ``check`` (showdown for 1) or ``bet``; after ``check bet``,
    ``player_0``: ``call`` (showdown for 2) or ``fold``.
    After ``bet``, ``player_1``: ``call`` (showdown for 2) or ``fold``.

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[node, seat, card]``; node 0 = nothing played, 1 = after
    ``check``, 2 = after ``bet``, 3 = after ``check bet``, 4 = game over; seat 0 or 1; card
    0/1/2 = J/Q/K (0 before the first ``reset``).
    ``"text"`` (at most ``MAX_OBSERVATION_CHARS`` printable ASCII characters: the embedded
    char-level model reads every character as a token):

    * the seat to move: ``"card K; history: check bet; moves: 1=fold 2=call"``; the history is
      ``none`` before the first move; move 1 is always the passive one (check / fold), move 2
      the aggressive one (bet / call);
    * the other seat: ``"card Q; history: check; opponent to move"``;
    * game over: ``"card K; history: bet call; opponent J; result +2"`` (the opponent's card
      only after a showdown; ``"invalid move by you; "`` / ``"invalid move by opponent; "``
      before ``result`` when the game ended on an invalid move);
    * before the first ``reset``: ``""``.

    With ``card_style="digits"`` every card is written as its rank, ``1``/``2``/``3`` for
    ``J``/``Q``/``K`` (``"card 3; history: check bet; moves: 1=fold 2=call"``,
    ``"... opponent 1; result +2"``); the rules, infos and the ``observation`` array are unchanged.

    The text holds everything a strategy may use (own card, history); the scripted twins read
    nothing else. The seat follows from the history's length.

Action (``gymnasium.spaces.Text``, one whole message)
    The move is the reply's **first word**, as at a real table, where the first declared action
    binds: leading whitespace and punctuation are skipped, the first run of ASCII letters and
    digits is read case-insensitively, and anything after it is ignored. The word is a legal
    move name (``check``/``bet`` before any bet, ``fold``/``call`` facing one) or its number in
    the observation (``1`` = passive, ``2`` = aggressive; the embedded tiny model writes digits
    long before it could spell words). Only the first ``MAX_REPLY_CHARS`` characters are
    looked at, so any ``str`` (a megabyte of digits, ``9**9**9**9``) is judged in microseconds;
    a non-``str`` raises ``TypeError``.

Rewards (given when the game ends; 0 on every earlier turn) -- zero-sum
    Showdown: the higher card wins the pot, a net ``+1`` (``check check``) or ``+2`` (a called
    bet) for the winner and the opposite for the loser. Fold: the folder loses its 1 chip in the
    pot. Reward range ``[-2, 2]``. With equilibrium play the value of the game is ``-1/18`` for
    ``player_0``.

Invalid action
    A reply whose first word is not a legal move (no word at all, ``raise``, ``call`` when no bet
    was made, ``3``, ...) counts as a fold and ends the game at once: the mover, who always has
    exactly 1 chip in the pot when it acts, gets ``-1`` and the opponent ``+1`` (zero-sum kept).
    It is recorded in ``"history"`` as ``fold``; ``infos[mover]["invalid"]`` is True and
    ``["reason"]`` says what was wrong; the opponent's ``"reason"`` says the game ended on the
    opponent's invalid move. ``invalid_penalty=p`` (default 0) takes ``p`` more from the mover's
    reward, so that an invalid reply is worse than the fold it stands for (a training signal: the
    game is then not zero-sum; the chips, the history and exploitability still count a fold).

Infos at the end, every seat: ``"role"``; ``"cards"``: ``(player_0's card, player_1's card)``;
``"history"``: tuple of move words; ``"invalid"``: whether this seat's move was invalid;
``"reason"`` (both seats, only after an invalid move); ``"metrics"``, averaged per role by the
trainer (``None`` = not defined this hand, skipped):

    ``won``        1.0 if this seat's reward is positive, else 0.0.
    ``showdown``   whether the hand ended in a showdown.
    ``folded``     whether this seat made a legal fold (invalid moves are counted by ``invalid``).
    ``bluffed``    holding J with ``bet`` legal: 1.0 if it bet, 0.0 if it checked; else None.
    ``aggression`` fraction of this seat's legal moves that were aggressive (bet / call); None
                   if it made none.

Before the end only ``"role"``.

Options
    ``reset(options={"cards": ("J", "Q")})`` deals ``player_0`` the first card and
    ``player_1`` the second (two different cards of ``J``, ``Q``, ``K``), without drawing from
    the RNG; used for exact enumeration over the six deals. A malformed deal raises
    ``ValueError``; other keys are ignored (PettingZoo's ``api_test`` passes arbitrary ones).

Scripted twins (both roles; ``SCRIPTED``): ``random`` (uniform over the two legal moves),
``nash`` (``player_0``: the equilibrium family at ``alpha = 1/3``, i.e. bet J 1/3, always bet
K, check Q and call a bet with it 2/3; ``player_1``: the unique equilibrium), ``always_bet``
(bet, or call a bet), ``always_check`` (check, or fold to a bet), ``calling_station`` (check, or
call a bet) and ``invalid`` (always ``"raise"``: an invalid move). Each is a behaviour strategy
table (``STRATEGIES``): information set ``(card, history)`` -> probability of the aggressive
move, played by :func:`strategy_player` from the observation text alone.

Arguments
    render_mode=None        None or "ansi" (``render()`` returns a text summary).
    card_style="letters"    how the text writes a card: ``"letters"`` (J, Q, K) or ``"digits"``
                            (1, 2, 3 by rank). The embedded tiny model, trained on arithmetic, has
                            never read J/Q/K: with letters its replies do not depend on the card at all
                            (it plays card-blind, exploitability 1/3 at best); it reads digits.
    invalid_penalty=0.0     chips taken from the reward of a seat whose move was invalid, on top of
                            the fold it counts as (0 to 10; see Invalid action).

Version history
    v0: first version; ``card_style`` and ``invalid_penalty`` added later (their defaults are the
    original game).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from cogym.envs.base import CogymEnv, GameSpec, text_space
from gymnasium.spaces import Box, Dict

# What a run of Kuhn poker measures (GameSpec.evaluators; cogym.envs.evaluation): the player against
# scripted twins on 200 fixed hands (vs_scripted, any game's), and the exact exploitability of its
# strategy (kuhn_exploitability, cogym.envs.kuhn_poker_eval).
EVALUATORS = {"vs_random": {"kind": "vs_scripted", "opponent": "random", "games": 200},
              "vs_nash": {"kind": "vs_scripted", "opponent": "nash", "games": 200},
              "exploitability": {"kind": "kuhn_exploitability"}}
GAME_ID = "kuhn_poker-v0"
CARDS: tuple[str, ...] = ("J", "Q", "K")
RANK = {card: i for i, card in enumerate(CARDS)}
CARD_STYLES: dict[str, tuple[str, ...]] = {"letters": CARDS, "digits": ("1", "2", "3")}  # style -> J, Q, K written
SEATS: tuple[str, str] = ("player_0", "player_1")
ROLES: tuple[str, str] = ("first", "second")
MOVES: frozenset[str] = frozenset({"check", "bet", "call", "fold"})
AGGRESSIVE: frozenset[str] = frozenset({"bet", "call"})
NODE_START, NODE_CHECK, NODE_BET, NODE_CHECK_BET, NODE_OVER = 0, 1, 2, 3, 4
MAX_REPLY_CHARS = 64  # only this prefix of a reply is read
MAX_OBSERVATION_CHARS = 96  # the longest text has 68 characters; a test checks every state fits
MAX_ACTION_CHARS = 64  # bound of the action space (random sampling only)

History = tuple[str, ...]
_NODES: dict[History, int] = {(): NODE_START, ("check",): NODE_CHECK, ("bet",): NODE_BET, ("check", "bet"): NODE_CHECK_BET}
_SHOWDOWNS: frozenset[History] = frozenset({("check", "check"), ("bet", "call"), ("check", "bet", "call")})


# ------------------------------------------------------------------------------ pure rules
def legal_moves(history: Sequence[str]) -> tuple[str, str] | tuple[()]:
    """``(passive, aggressive)`` for the seat to move, or ``()`` once the hand is over."""
    history = tuple(history)
    if history not in _NODES:
        return ()
    return ("fold", "call") if history[-1:] == ("bet",) else ("check", "bet")


def is_over(history: Sequence[str]) -> bool:
    """A fold (legal or not) or a showdown ends the hand."""
    history = tuple(history)
    return history[-1:] == ("fold",) or history in _SHOWDOWNS


def to_move(history: Sequence[str]) -> int:
    """Index of the seat to move: the players alternate, ``player_0`` first."""
    return len(history) % 2


def payoff(cards: Sequence[str], history: Sequence[str]) -> float:
    """``player_0``'s net chips at the end of the hand (``player_1`` gets the opposite)."""
    history = tuple(history)
    if not is_over(history):
        raise ValueError(f"history {history} is not a finished hand")
    if history[-1] == "fold":
        folder = (len(history) - 1) % 2  # the folder always has exactly its ante in the pot
        return -1.0 if folder == 0 else 1.0
    stake = 2.0 if "bet" in history else 1.0
    return stake if RANK[cards[0]] > RANK[cards[1]] else -stake


_FIRST_WORD = re.compile(r"[^A-Za-z0-9]*([A-Za-z0-9]+)")


def parse_move(reply: str, legal: Sequence[str]) -> tuple[str | None, str | None]:
    """``(move, None)`` for a legal first word, else ``(None, reason)``; reads a bounded prefix."""
    options = f"{legal[0]} or {legal[1]} (or 1, 2)"
    match = _FIRST_WORD.match(reply[:MAX_REPLY_CHARS])
    if match is None:
        return None, f"no move in the reply's first {MAX_REPLY_CHARS} characters; reply with {options}"
    word = match.group(1).lower()
    if word in ("1", "2"):
        return legal[int(word) - 1], None
    if word in legal:
        return word, None
    if word in MOVES:
        return None, f"{word!r} is not a legal move here; reply with {options}"
    shown = word if len(word) <= 20 else word[:20] + "..."
    return None, f"{shown!r} is not a move; reply with {options}"


def classify_reply(reply: str, history: Sequence[str], finished: bool) -> str | None:
    """What a reply (perhaps still being written) plays at ``history``: ``"aggressive"``, ``"passive"``
    or ``"invalid"`` once its text decides it, else None. The move is decided when the first word has
    ended (a character after it, or the reply is ``finished``), when the word so far can no longer
    become a legal move or its number, or when the reply reaches the ``MAX_REPLY_CHARS`` read."""
    legal = legal_moves(history)
    if not legal:
        raise ValueError(f"history {tuple(history)} is over: no move to classify")
    head = reply[:MAX_REPLY_CHARS]
    match = _FIRST_WORD.match(head)
    ended = finished or len(reply) >= MAX_REPLY_CHARS
    if match is not None and not ended:
        word = match.group(1).lower()
        if match.end() < len(head):
            ended = True
        elif not any(name.startswith(word) for name in (*legal, "1", "2")):
            return "invalid"
    if not ended:
        return None
    move, _ = parse_move(reply, legal)
    if move is None:
        return "invalid"
    return "aggressive" if move == legal[1] else "passive"


def reply_classifier(history: Sequence[str]) -> Callable[[str, bool], str | None]:
    """:func:`classify_reply` at ``history``, as ``(reply, finished) -> class``: the classifier
    :func:`cogym.agents.reply_probs.reply_distributions` takes."""
    moves = tuple(history)
    return lambda reply, finished: classify_reply(reply, moves, finished)


def _history_text(history: History) -> str:
    return " ".join(history) if history else "none"


def check_card_style(style: str) -> str:
    """``style`` if it is one of ``CARD_STYLES``, else ValueError naming them."""
    if style not in CARD_STYLES:
        raise ValueError(f"card_style must be one of {', '.join(CARD_STYLES)}, got {style!r}")
    return style


def card_text(card: str, style: str = "letters") -> str:
    """How ``card`` (``J``/``Q``/``K``) is written in a text of ``card_style`` ``style``."""
    return CARD_STYLES[check_card_style(style)][RANK[card]]


def turn_text(card: str, history: Sequence[str], style: str = "letters") -> str:
    """What the seat to move sees: its card (written in ``style``), the history, the numbered legal moves."""
    passive, aggressive = legal_moves(history)
    return f"card {card_text(card, style)}; history: {_history_text(tuple(history))}; moves: 1={passive} 2={aggressive}"


_TURN_TEXT = re.compile(r"card ([JQK123]); history: ([a-z ]+); moves: ")
_CARD_OF = {text: card for written in CARD_STYLES.values() for card, text in zip(CARDS, written)}


def read_turn_text(text: str) -> tuple[str, History] | None:
    """``(card, history)`` from a :func:`turn_text` of either card style (the card as ``J``/``Q``/``K``),
    or None for any other text."""
    match = _TURN_TEXT.match(text[:MAX_OBSERVATION_CHARS])
    if match is None:
        return None
    words = match.group(2).split()
    history = () if words == ["none"] else tuple(words)
    return (_CARD_OF[match.group(1)], history) if history in _NODES else None


# ------------------------------------------------------------------------------ scripted twins
Strategy = Mapping[tuple[str, str], float]  # (card, history text) -> P(aggressive move)


def nash_first(alpha: float = 1 / 3) -> dict[tuple[str, str], float]:
    """``player_0``'s equilibrium family (Kuhn 1950): bet J with ``alpha``, K with ``3 alpha``,
    never Q; facing ``check bet`` fold J, call Q with ``alpha + 1/3``, call K."""
    if not 0.0 <= alpha <= 1 / 3:
        raise ValueError(f"alpha must be in [0, 1/3], got {alpha}")
    return {("J", ""): alpha, ("Q", ""): 0.0, ("K", ""): min(1.0, 3 * alpha),
            ("J", "check bet"): 0.0, ("Q", "check bet"): alpha + 1 / 3, ("K", "check bet"): 1.0}


# player_1's unique equilibrium. After a check: bet K, bet J 1/3 (a bluff), check Q. Facing a
# bet: call K, call Q 1/3, fold J.
NASH_SECOND: dict[tuple[str, str], float] = {
    ("J", "check"): 1 / 3, ("Q", "check"): 0.0, ("K", "check"): 1.0,
    ("J", "bet"): 0.0, ("Q", "bet"): 1 / 3, ("K", "bet"): 1.0,
}


def _constant(p: float) -> dict[tuple[str, str], float]:
    return {(card, " ".join(h)): p for card in CARDS for h in _NODES}


def _calling_station() -> dict[tuple[str, str], float]:
    return {(card, " ".join(h)): (1.0 if legal_moves(h)[1] == "call" else 0.0) for card in CARDS for h in _NODES}


# The information sets of the two positions never overlap, so one table serves both roles.
STRATEGIES: dict[str, dict[tuple[str, str], float]] = {
    "random": _constant(0.5),
    "nash": {**nash_first(1 / 3), **NASH_SECOND},
    "always_bet": _constant(1.0),
    "always_check": _constant(0.0),
    "calling_station": _calling_station(),
}


def strategy_player(table: Strategy) -> Callable[[str, np.random.Generator], str]:
    """A scripted twin playing behaviour strategy ``table`` from the observation text alone."""

    def play(observation: str, rng: np.random.Generator) -> str:
        state = read_turn_text(observation)
        if state is None:
            return "check"  # not a turn text: nothing sensible to play
        card, history = state
        passive, aggressive = legal_moves(history)
        p = table.get((card, " ".join(history)), 0.5)
        return aggressive if rng.random() < p else passive

    return play


def _invalid(observation: str, rng: np.random.Generator) -> str:
    return "raise"


_PLAYERS = {name: strategy_player(table) for name, table in STRATEGIES.items()} | {"invalid": _invalid}
SCRIPTED: dict[str, dict[str, Callable[[str, np.random.Generator], str]]] = {role: dict(_PLAYERS) for role in ROLES}


# ------------------------------------------------------------------------------ exploitability
# The 12 information sets: (card, history text). player_0 acts at "" and "check bet", player_1 at
# "check" and "bet".
INFOSETS: tuple[tuple[str, str], ...] = tuple((card, h) for h in ("", "check", "bet", "check bet") for card in CARDS)
FIRST_INFOSETS: tuple[tuple[str, str], ...] = tuple(i for i in INFOSETS if i[1] in ("", "check bet"))
SECOND_INFOSETS: tuple[tuple[str, str], ...] = tuple(i for i in INFOSETS if i[1] in ("check", "bet"))

MoveProbs = tuple[float, float, float]  # P(aggressive), P(passive), P(invalid)


def move_probs(value: float | Sequence[float]) -> MoveProbs:
    """``(aggressive, passive, invalid)`` from a probability of the aggressive move (the rest passive)
    or from the triple itself; checked to be a distribution."""
    if isinstance(value, (int, float)):
        triple = (float(value), 1.0 - float(value), 0.0)
    else:
        triple = tuple(float(v) for v in value)
        if len(triple) != 3:
            raise ValueError(f"move probabilities are (aggressive, passive, invalid), got {value!r}")
    if min(triple) < -1e-9 or abs(sum(triple) - 1.0) > 1e-6:
        raise ValueError(f"move probabilities {triple} are not a distribution")
    return triple  # type: ignore[return-value]


def _best_response_value(strategy: Mapping[tuple[str, str], MoveProbs], seat: int) -> float:
    """The expected chips of the best response of ``seat`` to ``strategy``'s play in the other seat
    (over the six deals), by backward induction over ``seat``'s information sets: at its own nodes it
    takes the move with the largest value summed over the opponent cards it cannot see, each weighted
    by its chance and the opponent's probability of reaching the node."""
    sign = 1.0 if seat == 0 else -1.0

    def value(card: str, history: History, weights: dict[str, float]) -> float:
        if is_over(history):
            return sum(w * sign * payoff((card, o) if seat == 0 else (o, card), history) for o, w in weights.items())
        passive, aggressive = legal_moves(history)
        moves = (aggressive, passive, "fold")  # an invalid move ends the hand as a fold
        if to_move(history) == seat:
            return max(value(card, history + (m,), weights) for m in moves)
        total = 0.0
        for k, m in enumerate(moves):
            reach = {o: w * strategy[(o, " ".join(history))][k] for o, w in weights.items()}
            if any(reach.values()):
                total += value(card, history + (m,), reach)
        return total

    return sum(value(card, (), {o: 0.5 for o in CARDS if o != card}) for card in CARDS) / len(CARDS)


def exploitability(strategy: Mapping[tuple[str, str], float | Sequence[float]]) -> float:
    """Exact exploitability (NashConv / 2) of a strategy for both seats of Kuhn poker.

    ``strategy`` maps each of the 12 information sets (``INFOSETS``: card, history text) to the
    probability of the aggressive move, or to ``(aggressive, passive, invalid)`` where an invalid move
    counts as a fold, as the game scores it. The value is the mean of what a best response gains
    against it in each seat: ``(BR_0 + BR_1) / 2``, as the game is zero-sum. 0 exactly for the
    equilibria (``nash_first(alpha)`` with ``NASH_SECOND``), 1/3 for always betting, 11/24 for
    uniform random play and 1 for always checking (or folding)."""
    missing = [i for i in INFOSETS if i not in strategy]
    if missing:
        raise ValueError(f"the strategy has no move probabilities for information sets {missing}")
    table = {i: move_probs(strategy[i]) for i in INFOSETS}
    return (_best_response_value(table, 0) + _best_response_value(table, 1)) / 2


def average_strategy(strategies: Sequence[Mapping[tuple[str, str], float | Sequence[float]]]
                     ) -> dict[tuple[str, str], MoveProbs]:
    """The behaviour strategy that plays like the uniform mixture of ``strategies``: before each hand,
    pick one of them at random and play it for the whole hand (fictitious play's average strategy).

    At an information set each strategy's moves are weighted by how likely that strategy is to reach
    it by its own moves (Kuhn's theorem): for the first seat, 1 at its opening move and P(passive at
    the opening) at ``"check bet"``; for the second seat, 1. A set no strategy reaches keeps their
    plain mean. ``exploitability(average_strategy(...))`` is the exploitability of the mixture."""
    if not strategies:
        raise ValueError("average_strategy needs at least one strategy")
    tables = [{i: move_probs(s[i]) for i in INFOSETS} for s in strategies]
    out: dict[tuple[str, str], MoveProbs] = {}
    for card, history in INFOSETS:
        weights = [t[(card, "")][1] if history == "check bet" else 1.0 for t in tables]
        if sum(weights) <= 0.0:
            weights = [1.0] * len(tables)
        total = sum(weights)
        out[(card, history)] = tuple(sum(w * t[(card, history)][m] for w, t in zip(weights, tables)) / total
                                     for m in range(3))  # type: ignore[assignment]
    return out


# ------------------------------------------------------------------------------ the game
def _check_options(options: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The fixed deal of ``options`` (validated), or None to deal from the RNG."""
    if options is None:
        return None
    if not isinstance(options, Mapping):
        raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
    cards = options.get("cards")  # other keys are ignored, as PettingZoo's api_test expects
    if cards is None:
        return None
    if (isinstance(cards, (str, bytes)) or not isinstance(cards, Sequence) or len(cards) != 2
            or not all(isinstance(c, str) and c in RANK for c in cards) or cards[0] == cards[1]):
        raise ValueError(f"options['cards'] must be two different cards of {CARDS} (player_0's, player_1's), got {cards!r}")
    return (cards[0], cards[1])


class KuhnPokerEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata: ClassVar[dict[str, Any]] = {"name": "kuhn_poker_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, render_mode: str | None = None, card_style: str = "letters", invalid_penalty: float = 0.0) -> None:
        super().__init__(render_mode=render_mode)
        self.card_style = check_card_style(card_style)
        if not (isinstance(invalid_penalty, (int, float)) and not isinstance(invalid_penalty, bool)
                and 0.0 <= float(invalid_penalty) <= 10.0):
            raise ValueError(f"invalid_penalty must be a number in [0, 10] (chips taken from a seat whose move "
                             f"was invalid, on top of its fold), got {invalid_penalty!r}")
        self.invalid_penalty = float(invalid_penalty)
        self.possible_agents = list(SEATS)
        self._seat_roles = dict(zip(SEATS, ROLES))
        self._seat_index = {a: i for i, a in enumerate(SEATS)}
        # One space object per seat: api_test wants a stable object per seat, and seeding one
        # seat's space must not shift another's samples.
        self.observation_spaces = {
            a: Dict({
                "observation": Box(low=np.array([NODE_START, 0, 0]), high=np.array([NODE_OVER, 1, len(CARDS) - 1]), dtype=np.int64),
                "text": text_space(MAX_OBSERVATION_CHARS),
            })
            for a in SEATS
        }
        self.action_spaces = {a: text_space(MAX_ACTION_CHARS) for a in SEATS}
        self.spec = GameSpec(
            id=GAME_ID,
            roles=ROLES,
            reward_range=(-max(2.0, 1.0 + self.invalid_penalty), 2.0),
            zero_sum=self.invalid_penalty == 0.0,
            max_turns=3,
            description="Kuhn poker: J/Q/K, ante 1, one bet of 1; player_0 acts first.",
            outcomes={"first": ("invalid", "metrics"), "second": ("invalid", "metrics")},
            evaluators=EVALUATORS,
        )
        self._cards: tuple[str, str] | None = None
        self._history: History = ()
        self._invalid_seat: str | None = None
        self._result = 0.0  # player_0's payoff once the hand is over

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Deal a new hand; ``options={"cards": ("J", "Q")}`` fixes the deal (see the docstring)."""
        fixed = _check_options(options)
        self._seed(seed)
        if fixed is None:
            first, second = self.np_random.choice(len(CARDS), size=2, replace=False)
            fixed = (CARDS[int(first)], CARDS[int(second)])
        self._cards = fixed
        self._history = ()
        self._invalid_seat = None
        self._result = 0.0
        self._start_episode({a: {"role": self._seat_roles[a]} for a in SEATS})

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        seat = self._seat_index[agent]
        if self._cards is None:
            return {"observation": np.array([NODE_OVER, seat, 0], dtype=np.int64), "text": ""}
        card = self._cards[seat]
        over = is_over(self._history)
        node = NODE_OVER if over else _NODES[self._history]
        if over:
            text = self._end_text(seat)
        elif to_move(self._history) == seat:
            text = turn_text(card, self._history, self.card_style)
        else:
            text = f"card {card_text(card, self.card_style)}; history: {_history_text(self._history)}; opponent to move"
        return {"observation": np.array([node, seat, RANK[card]], dtype=np.int64), "text": text}

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        move, reason = parse_move(action, legal_moves(self._history))
        if move is None:
            self._invalid_seat = agent
            move = "fold"
        self._history = self._history + (move,)
        if is_over(self._history):
            self._finish(reason)
        else:
            self.agent_selection = SEATS[to_move(self._history)]
            self._accumulate_rewards()

    # ------------------------------------------------------------------ rules
    def _finish(self, reason: str | None) -> None:
        assert self._cards is not None
        self._result = payoff(self._cards, self._history)
        rewards = {SEATS[0]: self._result, SEATS[1]: -self._result}
        if self._invalid_seat is not None:  # a training signal only: the chips (and exploitability) are a fold's
            rewards[self._invalid_seat] -= self.invalid_penalty
        showdown = self._history in _SHOWDOWNS
        for i, agent in enumerate(SEATS):
            info: dict[str, Any] = {"role": self._seat_roles[agent], "cards": self._cards, "history": self._history,
                                    "invalid": agent == self._invalid_seat}
            if self._invalid_seat is not None:
                info["reason"] = reason if agent == self._invalid_seat else f"game over: the opponent's move was invalid ({reason})"
            info["metrics"] = self._metrics(i, rewards[agent], showdown)
            self.infos[agent] = info
        self._end_game(rewards)

    def _metrics(self, seat: int, reward: float, showdown: bool) -> dict[str, float | bool | None]:
        assert self._cards is not None
        mine = [(self._history[:k], m) for k, m in enumerate(self._history) if k % 2 == seat]
        if self._invalid_seat == SEATS[seat]:
            mine = mine[:-1]  # the recorded "fold" was an invalid move, not a decision
        bluffed = None
        if self._cards[seat] == "J":
            chances = [m for h, m in mine if legal_moves(h)[1] == "bet"]
            bluffed = float(chances[0] == "bet") if chances else None
        return {
            "won": 1.0 if reward > 0 else 0.0,
            "showdown": showdown,
            "folded": any(m == "fold" for _, m in mine),
            "bluffed": bluffed,
            "aggression": float(np.mean([m in AGGRESSIVE for _, m in mine])) if mine else None,
        }

    def _end_text(self, seat: int) -> str:
        assert self._cards is not None
        parts = [f"card {card_text(self._cards[seat], self.card_style)}", f"history: {_history_text(self._history)}"]
        if self._history in _SHOWDOWNS:
            parts.append(f"opponent {card_text(self._cards[1 - seat], self.card_style)}")
        if self._invalid_seat is not None:
            parts.append("invalid move by " + ("you" if self._invalid_seat == SEATS[seat] else "opponent"))
        result = self._result if seat == 0 else -self._result
        parts.append(f"result {int(result):+d}")
        return "; ".join(parts)

    def _render_text(self) -> str:
        if self._cards is None:
            return f"[{GAME_ID}] not dealt; call reset()"
        state = f"result player_0 {int(self._result):+d}" if is_over(self._history) else f"to move: {SEATS[to_move(self._history)]}"
        return f"[{GAME_ID}] cards player_0={self._cards[0]} player_1={self._cards[1]} history: {_history_text(self._history)}; {state}"
