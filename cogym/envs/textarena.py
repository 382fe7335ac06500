"""``textarena:<id>``: TextArena's games (SPIRAL's among them) as cogym games (the ``textarena`` extra).

``make("textarena:TicTacToe-v0")``. ``ALLOWED`` lists the ids cogym offers (two seats; they play
offline and pass ``check_game`` with ``textarena==0.7.4``); any other id is refused at ``make`` with the
reason (``REFUSED``, or "not checked").

Seats and roles
    ``player_0`` and ``player_1`` are TextArena's players 0 and 1, roles ``first`` and ``second``.

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[moves_made, seat, to_move]`` (``to_move`` -1 once the game is over).
    ``"text"``: every message TextArena sent the seat so far, one per line as ``[GAME] ...`` or
    ``[Player k] ...``: the rules first, then the boards and moves. At most ``MAX_OBSERVATION_CHARS``
    printable ASCII characters (non-ASCII written as escapes): past that, the rules and the newest
    messages are kept and the middle is cut. Reading it has no side effect (TextArena's own
    ``get_observation()`` empties a queue; cogym keeps each seat's messages itself).

    With ``recent_lines=N`` (a short view, for small models) the text is only the newest ``N`` non-blank
    lines, without the rules: ``recent_lines=1`` shows TicTacToe's ``Available Moves: '[0]', '[4]'``.

Action
    The whole reply, cut to ``MAX_ACTION_CHARS`` characters, is the move TextArena parses (most games
    want a bracketed move, ``[4]``). With ``wrap_moves=True`` a reply that holds no ``[`` is sent in
    brackets, stripped (``4`` is played as ``[4]``), for models that write bare moves.

Invalid move
    TextArena gives a seat one retry after an invalid move by default; cogym turns that off
    (``retries=0``), so the first invalid move ends the game as in cogym's own games: the mover gets
    -1 and the other seat +1, ``infos[seat]["invalid"]`` and ``["reason"]`` say so. A game that raises
    while it plays a move counts that move as invalid, with the exception as the reason.

Rewards
    TextArena's, when the game ends (0 before), read as numbers (a numeric string too; anything else
    is 0) and clipped to ``[-1, 1]``. A game still going after ``max_turns`` moves ends as a draw (0).

Randomness
    TextArena games draw from Python's global ``random`` (which ``reset`` reseeds) and some from the
    global ``numpy.random``. Every call into TextArena runs with private copies of both states, seeded
    from the game's ``np_random``, and the caller's global states are put back after it: games never
    share draws, and nothing outside sees them.

Scripted twins: ``random`` (one of the bracketed moves the newest messages list, uniformly) and
``first`` (the first of them).
"""

from __future__ import annotations

import contextlib
import math
import random
import re
from typing import Any, ClassVar, Iterator

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.core import seeding
from cogym.core.names import did_you_mean
from cogym.core.processes import load_object
from cogym.envs.base import CogymEnv, GameSpec, int_arg, text_space
from cogym.envs.errors import GameError
from cogym.envs.openspiel import ascii_text
from cogym.envs.registry import Registration

EXTRA = "TextArena games need the textarena extra: pip install 'cogym[textarena]'"
PREFIX = "textarena"
MAX_OBSERVATION_CHARS = 8000
MAX_RULES_CHARS = 3000
MAX_ACTION_CHARS = 500
MAX_TURNS = 200
ROLES = ("first", "second")
SEATS = ("player_0", "player_1")
# Two-seat ids that play offline with textarena 0.7.4 and pass check_game (tests/envs/test_textarena.py),
# found by playing every registered id with the network refused.
ALLOWED: tuple[str, ...] = (
    "Alquerque-v0", "Battleship-v0", "Battleship-v0-extreme", "Battleship-v0-large", "Battleship-v0-standard",
    "Breakthrough-v0", "Breakthrough-v0-blind", "Breakthrough-v0-large", "Breakthrough-v0-long",
    "Breakthrough-v0-small", "Breakthrough-v0-tiny", "Briscola-v0", "Chopsticks-v0", "Chopsticks-v0-long",
    "Chopsticks-v0-medium", "ColonelBlotto-v0", "ColonelBlotto-v0-extreme", "ColonelBlotto-v0-large",
    "ColonelBlotto-v0-small", "ConnectFour-v0", "ConnectFour-v0-blind", "ConnectFour-v0-large", "Crusade-v0",
    "GameOfPureStrategy-v0", "GermanWhist-v0", "Golf-v0", "Golf-v0-medium", "HighSociety-v0", "IndianPoker-v0",
    "IndianPoker-v0-extreme", "IndianPoker-v0-long", "IndianPoker-v0-medium", "IndianPoker-v0-short",
    "IteratedMatchingPennies-v0", "IteratedPrisonersDilemma-v0", "IteratedRockPaperScissors-v0",
    "IteratedTwoThirdsAverage-v0", "IteratedUltimatumGame-v0", "IteratedUltimatumGame-v0-alternate",
    "KuhnPoker-v0", "KuhnPoker-v0-extreme", "KuhnPoker-v0-long", "KuhnPoker-v0-medium", "KuhnPoker-v0-short",
    "LiarsDice-v0", "LiarsDice-v0-large", "LiarsDice-v0-small", "LinesOfAction-v0", "MemoryGame-v0",
    "MemoryGame-v0-hard", "MemoryGame-v0-medium", "NewRecruit-v0", "Nim-v0", "Nim-v0-large", "Nim-v0-medium",
    "Othello-v0", "Othello-v0-big", "Othello-v0-hard", "Othello-v0-huge", "Othello-v0-small", "Othello-v0-tiny",
    "PigDice-v0", "PigDice-v0-100", "PigDice-v0-150", "PigDice-v0-200", "PigDice-v0-250", "PigDice-v0-300",
    "PigDice-v0-350", "PigDice-v0-400", "PigDice-v0-450", "PigDice-v0-50", "PigDice-v0-500", "PigDice-v0-long",
    "PigDice-v0-short", "Poker-v0", "Poker-v0-extreme", "Poker-v0-long", "Poker-v0-small",
    "QuantumTicTacToe-v0", "SantoriniBaseFixed-v0", "SimpleBlindAuction-v0", "SimpleBlindAuction-v0-quick",
    "SimpleBlindAuction-v0-rich", "SimpleNegotiation-v0", "SimpleNegotiation-v0-long",
    "SimpleNegotiation-v0-short", "SimpleTak-v0", "SimpleTak-v0-extreme", "SimpleTak-v0-large",
    "SimpleTak-v0-medium", "Snake-v0", "Snake-v0-large", "Snake-v0-standard", "SpiteAndMalice-v0",
    "Stratego-v0", "Surround-v0", "Surround-v0-large", "Surround-v0-standard", "Tak-v0", "Tak-v0-hard",
    "Tak-v0-medium", "TicTacToe-v0", "TruthAndDeception-v0", "TruthAndDeception-v0-extreme",
    "TruthAndDeception-v0-long", "TwoDollar-v0", "UltimateTicTacToe-v0", "WildTicTacToe-v0",
)
# Ids that do not play here, by reason (any other id of TextArena's is "not checked").
_REFUSED_BY_REASON: dict[str, tuple[str, ...]] = {
    "a one-player game (cogym offers TextArena's two-seat games)": (
        "2048-v0", "2048-v0-10x10", "2048-v0-3x3", "2048-v0-5x5", "2048-v0-6x6", "2048-v0-8x8", "2048-v0-easy",
        "2048-v0-extreme", "2048-v0-hard", "2048-v0-mega-easy", "2048-v0-super-easy", "2048-v0-ultra-easy",
        "2048-v0-very-easy", "2048-v0-very-hard", "Bandit-v0", "Bandit-v0-hard", "Blackjack-v0",
        "Blackjack-v0-long", "Countdown-v0", "Crosswords-v0", "Crosswords-v0-hardcore", "Cryptarithm-v0",
        "FifteenPuzzle-v0", "FrozenLake-v0", "FrozenLake-v0-hardcore", "FrozenLake-v0-random", "GuessTheNumber-v0",
        "GuessTheNumber-v0-hardcore", "LightsOut-v0", "LogicPuzzle-v0", "LogicPuzzle-v0-hard", "Mastermind-v0",
        "Mastermind-v0-extreme", "Mastermind-v0-hard", "Minesweeper-v0", "Minesweeper-v0-hard",
        "Minesweeper-v0-medium", "Minesweeper-v0-small", "PegJump-v0", "RushHour-v0", "Secretary-v0",
        "Secretary-v0-long", "Set-v0", "Slitherlink-v0", "Sokoban-v0", "Sokoban-v0-medium", "Sudoku-v0",
        "Sudoku-v0-easy", "Sudoku-v0-hard", "Sudoku-v0-medium", "Sudoku-v0-very-easy", "ThreeCardMonte-v0",
        "TowerOfHanoi-v0", "TowerOfHanoi-v0-extreme", "TowerOfHanoi-v0-hard", "TowerOfHanoi-v0-hardcore",
        "TowerOfHanoi-v0-medium",
    ),
    "needs the old gym package": (
        "BabyAiText-v0",
    ),
    "needs more than two players": (
        "CharacterConclave-v0", "CharacterConclave-v0-extreme", "CharacterConclave-v0-long", "SecretMafia-v0",
        "SettlersOfCatan-v0", "Taboo-v0", "Taboo-v0-animals", "Taboo-v0-cars", "Taboo-v0-city/country",
        "Taboo-v0-food", "Taboo-v0-full", "Taboo-v0-literature", "Taboo-v0-long", "Taboo-v0-people", "Taboo-v0-tv",
        "ThreePlayerGOPS-v0", "ThreePlayerIPD-v0", "ThreePlayerTicTacToe-v0",
    ),
    "its code needs Python 3.12 (f-string syntax)": (
        "Checkers-v0", "Checkers-v0-long", "Chess-v0", "Chess-v0-blind", "Chess-v0-long", "IteratedStagHunt-v0",
        "IteratedStagHunt-v0-randomized", "Klondike-v0", "ReverseTicTacToe-v0", "UltimateTexasHoldem-v0",
    ),
    "needs nltk data that TextArena downloads at run time (cogym plays offline)": (
        "Codenames-v0", "Codenames-v0-hardcore", "DontSayIt-v0", "DontSayIt-v0-hardcore", "DontSayIt-v0-unlimited",
        "Hangman-v0", "Hangman-v0-hardcore", "LetterAuction-v0", "LetterAuction-v0-hard", "LetterAuction-v0-medium",
        "SpellingBee-v0", "SpellingBee-v0-large", "SpellingBee-v0-small", "WordChains-v0", "WordLadder-v0",
        "WordLadder-v0-hard", "WordLadder-v0-medium", "WordSearch-v0", "WordSearch-v0-hardcore", "Wordle-v0",
        "Wordle-v0-hardcore", "Wordle-v0-long", "Wordle-v0-long-hardcore",
    ),
    "needs an OpenRouter API key for its LLM judge": (
        "Debate-v0", "Debate-v0-long", "Debate-v0-medium", "GuessWho-v0", "ScenarioPlanning-v0",
        "TwentyQuestions-v0", "TwentyQuestions-v0-hardcore",
    ),
    "its checks take a minute, too slow to hold it to the contract in CI": (
        "MarketEntryGame-v0",
    ),
    "an episode of random play did not end within 30 s": (
        "PublicGoodsGame-v0",
    ),
    "files it needs are missing from the textarena 0.7.4 wheel": (
        "ScorableGames-v0", "ScorableGames-v0-7players", "ScorableGames-v0-conservative", "ScorableGames-v0-game1",
        "ScorableGames-v0-game2", "ScorableGames-v0-game3", "ScorableGames-v0-medicalethics",
        "ScorableGames-v0-vendorretailer", "UsedCar-v0-balanced", "UsedCarNegotiation-v0",
        "UsedCarNegotiation-v0-strong-buyer", "UsedCarNegotiation-v0-strong-seller",
    ),
}
REFUSED: dict[str, str] = {i: why for why, ids in _REFUSED_BY_REASON.items() for i in ids}
_BRACKETED = re.compile(r"\[[^\[\]\n]{1,40}\]")


def _textarena():
    try:
        import textarena
    except ImportError as exc:
        raise GameError(EXTRA) from exc
    return textarena


@contextlib.contextmanager
def private_rng(states: dict[str, Any]) -> Iterator[None]:
    """Run a block with Python's ``random`` and numpy's global state set from ``states`` (``"py"``,
    ``"np"``), save what the block left in them back to ``states``, and restore the caller's."""
    saved_py, saved_np = random.getstate(), np.random.get_state()
    random.setstate(states["py"])
    np.random.set_state(states["np"])
    try:
        yield
    finally:
        states["py"], states["np"] = random.getstate(), np.random.get_state()
        random.setstate(saved_py)
        np.random.set_state(saved_np)


def reward_value(value: Any) -> float:
    """A TextArena reward as a number in ``[-1, 1]``: numbers and numeric strings; anything else 0."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return 0.0 if not math.isfinite(x) else min(1.0, max(-1.0, x))


def bracketed_moves(text: str) -> list[str]:
    """The bracketed moves (``[4]``, ``[e2e4]``) in the newest message of ``text`` that lists some."""
    for line in reversed(text.splitlines()[-40:]):
        found = _BRACKETED.findall(line)
        if found:
            return list(dict.fromkeys(found))
    return []


def _random_twin(text: str, rng: np.random.Generator) -> str:
    moves = bracketed_moves(text)
    return moves[int(rng.integers(len(moves)))] if moves else "[0]"


def _first_twin(text: str, rng: np.random.Generator) -> str:
    moves = bracketed_moves(text)
    return moves[0] if moves else "[0]"


SCRIPTED_TWINS = {"random": _random_twin, "first": _first_twin}


def _new_env(env_id: str) -> Any:
    """TextArena's environment ``env_id`` without its default wrappers (cogym keeps the messages itself)."""
    _textarena()
    from textarena.envs.registration import ENV_REGISTRY

    spec = ENV_REGISTRY[env_id]
    entry = spec.entry_point
    if isinstance(entry, str):
        entry = load_object(entry)
    return entry(**dict(spec.kwargs))


def check_id(env_id: str) -> None:
    """Refuse an id cogym does not offer, naming why."""
    _textarena()
    from textarena.envs.registration import ENV_REGISTRY

    if env_id in ALLOWED:
        return
    if env_id in REFUSED:
        raise GameError(f"textarena:{env_id} is not offered: {REFUSED[env_id]}")
    if env_id not in ENV_REGISTRY:
        hint = did_you_mean(env_id, ALLOWED, form="; did you mean {}?", show=lambda c: f"'textarena:{c}'")
        raise GameError(f"unknown TextArena id {env_id!r}{hint} (cogym games --source textarena lists the offered ones)")
    raise GameError(f"textarena:{env_id} is not offered: it is not among the two-seat ids checked to play offline "
                    f"(cogym games --source textarena lists them)")


class TextArenaEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata: ClassVar[dict[str, Any]] = {"name": "textarena", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, env_id: str, retries: int = 0, max_turns: int = MAX_TURNS, recent_lines: int | None = None,
                 wrap_moves: bool = False, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        check_id(env_id)
        self._id = env_id
        self._recent = None if recent_lines is None else int_arg("recent_lines", recent_lines, 1, 1000)
        if not isinstance(wrap_moves, bool):
            raise ValueError(f"wrap_moves must be true or false, got {wrap_moves!r}")
        self._wrap = wrap_moves
        self._retries = int_arg("retries", retries, 0, 5)
        self._max_turns = int_arg("max_turns", max_turns, 1, 10_000)
        self.possible_agents = list(SEATS)
        self._seat_roles = dict(zip(SEATS, ROLES))
        self._seat_index = {a: i for i, a in enumerate(SEATS)}
        self.observation_spaces = {
            a: Dict({"observation": Box(low=np.array([0, 0, -1]), high=np.array([self._max_turns, 1, 1]), dtype=np.int64),
                     "text": text_space(MAX_OBSERVATION_CHARS)})
            for a in SEATS
        }
        self.action_spaces = {a: text_space(MAX_ACTION_CHARS) for a in SEATS}
        self.spec = GameSpec(id=f"{PREFIX}:{env_id}", roles=ROLES, reward_range=(-1.0, 1.0), zero_sum=False,
                             max_turns=self._max_turns, description=f"TextArena's {env_id}, 2 players",
                             outcomes={r: ("invalid",) for r in ROLES})
        self._env: Any = None
        self._rng: dict[str, Any] = {}
        self._messages: list[list[str]] = [[], []]
        self._moves = 0
        self._invalid: str | None = None
        self._over = False

    # ------------------------------------------------------------------ TextArena, isolated
    def _call(self, fn, *args):
        with private_rng(self._rng):
            return fn(*args)

    def _collect(self) -> None:
        """Move every message TextArena queued for a player into that seat's own list."""
        queues = self._env.state.observations
        for pid in (0, 1):
            for sender, message, *_ in queues.get(pid, []):
                who = "GAME" if sender == -1 else f"Player {sender}"
                self._messages[pid].append(f"[{who}] {ascii_text(str(message)).strip()}")
            queues[pid] = []

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._seed(seed)
        py_seed, np_seed, ta_seed = (int(x) for x in self.np_random.integers(0, 2**31 - 1, size=3))
        self._rng = seeding.global_states("textarena.globals", py_seed, np_seed)
        self._messages = [[], []]
        self._moves, self._invalid, self._over = 0, None, False
        self._env = self._call(_new_env, self._id)
        self._call(self._env.reset, 2, ta_seed)
        self._env.state.error_allowance = self._retries
        self._collect()
        self._start_episode({a: {"role": self._seat_roles[a]} for a in SEATS})
        self.agent_selection = SEATS[int(self._env.state.current_player_id)]

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        seat = self._seat_index[agent]
        if self._env is None:
            return {"observation": np.array([0, seat, -1], dtype=np.int64), "text": ""}
        to_move = -1 if self._over else int(self._env.state.current_player_id)
        return {"observation": np.array([min(self._moves, self._max_turns), seat, to_move], dtype=np.int64),
                "text": self._text(seat)}

    def _text(self, seat: int) -> str:
        lines = self._messages[seat]
        if self._recent is not None:
            return _newest(lines, self._recent)[-MAX_OBSERVATION_CHARS:]
        text = "\n".join(lines)
        if len(text) <= MAX_OBSERVATION_CHARS:
            return text
        head = lines[0][:MAX_RULES_CHARS] if lines else ""
        tail: list[str] = []
        room = MAX_OBSERVATION_CHARS - len(head) - len("\n[...]\n")
        for line in reversed(lines[1:]):
            if len(line) + 1 > room:
                break
            tail.insert(0, line)
            room -= len(line) + 1
        return f"{head}\n[...]\n" + "\n".join(tail)

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        self._moves += 1
        move = action[:MAX_ACTION_CHARS]
        if self._wrap and "[" not in move:
            move = f"[{move.strip()}]"
        try:
            done, _ = self._call(self._env.step, move)
            self._collect()
        except Exception as exc:  # noqa: BLE001 - the game's own bug on this move: a forfeit naming it
            reason = f"the game raised {type(exc).__name__} on this move: {ascii_text(str(exc))[:200]}"
            self._finish({agent: -1.0, self._other(agent): 1.0}, invalid=agent, reason=reason)
            return
        if done:
            result = self._call(self._env.close)
            rewards, info = (result if isinstance(result, tuple) and len(result) == 2 else (result, {}))
            rewards = rewards if isinstance(rewards, dict) else {}
            values = {a: reward_value(rewards.get(i, 0)) for i, a in enumerate(SEATS)}
            invalid = next((a for i, a in enumerate(SEATS) if isinstance(info, dict)
                            and isinstance(info.get(i), dict) and info[i].get("invalid_move")), None)
            reason = None
            if invalid is not None:
                reason = ascii_text(str(info[self._seat_index[invalid]].get("reason", "invalid move")))[:300]
            self._finish(values, invalid=invalid, reason=reason)
        elif self._moves >= self._max_turns:
            self._finish({a: 0.0 for a in SEATS}, invalid=None, reason=None)
        else:
            self.agent_selection = SEATS[int(self._env.state.current_player_id)]
            self._accumulate_rewards()

    @staticmethod
    def _other(agent: str) -> str:
        return SEATS[1 - SEATS.index(agent)]

    def _finish(self, rewards: dict[str, float], invalid: str | None, reason: str | None) -> None:
        self._over, self._invalid = True, invalid
        for agent in SEATS:
            info: dict[str, Any] = {"role": self._seat_roles[agent], "invalid": agent == invalid}
            if invalid is not None:
                info["reason"] = reason if agent == invalid else f"game over: the opponent's move was invalid ({reason})"
            self.infos[agent] = info
        self._end_game(rewards)

    def _render_text(self) -> str:
        if self._env is None:
            return f"[{self.spec.id}] not started; call reset()"
        return f"[{self.spec.id}] moves {self._moves}" + ("; over" if self._over else f"; player {self._env.state.current_player_id} to move")


def _newest(messages: list[str], n: int) -> str:
    """The newest ``n`` non-blank lines of ``messages``, joined by newlines."""
    kept: list[str] = []
    for message in reversed(messages):
        for line in reversed(message.splitlines()):
            if line.strip():
                kept.append(line)
                if len(kept) == n:
                    return "\n".join(reversed(kept))
    return "\n".join(reversed(kept))


def resolve(name: str) -> Registration:
    """The registration of ``textarena:<name>`` (the registry's source hook)."""
    check_id(name)
    return Registration(id=f"{PREFIX}:{name}", entry_point=_entry(name), scripted={r: dict(SCRIPTED_TWINS) for r in ROLES})


def _entry(name: str):
    def make_game(retries: int = 0, max_turns: int = MAX_TURNS, recent_lines: int | None = None, wrap_moves: bool = False,
                  render_mode: str | None = None) -> TextArenaEnv:
        return TextArenaEnv(name, retries=retries, max_turns=max_turns, recent_lines=recent_lines, wrap_moves=wrap_moves,
                            render_mode=render_mode)

    make_game.__module__ = __name__
    return make_game
