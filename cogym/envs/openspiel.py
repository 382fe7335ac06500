"""``openspiel:<game>``: any OpenSpiel game with text observations as a cogym game (the ``openspiel`` extra).

``make("openspiel:tic_tac_toe")``, ``make("openspiel:leduc_poker", params={"players": 3})`` or, in
OpenSpiel's own syntax, ``make("openspiel:leduc_poker(players=3)")``. ``catalog()`` lists the games
cogym offers (sequential, loadable with their defaults, text observations, and passing
``check_game``); a game outside it is refused at ``make`` with the reason.

Seats and roles
    Seat ``player_i`` is OpenSpiel's player ``i``; its role is ``first``, ``second``, ``third``, ...
    (positions play different strategies, so each is its own role; one policy can still play all).

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[moves_made, seat, to_move]`` (``to_move`` is -4 when the game is over).
    ``"text"`` (at most ``MAX_OBSERVATION_CHARS`` printable ASCII characters): the game and the seat,
    then the seat's view of the state (OpenSpiel's ``information_state_string``, else its
    ``observation_string``, or cogym's renderer for the games whose strings are cryptic: Kuhn and
    Leduc poker, Liar's Dice), then, for the seat to move, the legal moves numbered from 1:
    ``moves: 1=Pass 2=Bet``. Non-ASCII characters are written as ``\\u`` escapes.

Action (``gymnasium.spaces.Text``, one whole message)
    The first line of the reply, at most ``MAX_REPLY_CHARS`` characters of it: a move's number in the
    list (``2``), or a move's name as listed (``Bet``, case-insensitive), or a reply that starts with
    one of them followed by a non-word character. Anything else is an invalid move.

Chance
    Chance nodes are resolved from the game's own ``np_random`` (OpenSpiel leaves them to the caller),
    so ``reset(seed)`` fixes every deal. Games that sample chance inside OpenSpiel take an ``rng_seed``
    parameter: each reset loads the game anew with a seed drawn from ``np_random``.

Rewards
    OpenSpiel's returns when the game ends (0 before): the range is the game's declared
    ``[min_utility, max_utility]``, and the game is zero-sum when OpenSpiel says so.

Invalid move
    Ends the game at once. The seat that made it gets ``min_utility`` (the worst the game can give);
    the others share what keeps the game's utility sum (zero-sum: ``-min_utility / (n - 1)`` each;
    constant-sum: the constant's rest), or get 0 (general-sum), each clipped into the range.
    ``infos[seat]["invalid"]`` and ``["reason"]`` say what happened.

Scripted twins (every role): ``random`` (uniform over the listed moves) and ``first`` (always move 1),
both read from the observation text alone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.core.names import did_you_mean
from cogym.envs.base import CogymEnv, GameSpec, text_space
from cogym.envs.errors import GameError
from cogym.envs.registry import Registration

EXTRA = "OpenSpiel games need the openspiel extra: pip install 'cogym[openspiel]'"
PREFIX = "openspiel"
MAX_OBSERVATION_CHARS = 6000
MAX_ACTION_CHARS = 200
MAX_REPLY_CHARS = 200
MAX_PLAYERS = 10
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
MOVES_RE = re.compile(r"^moves: (.*)$", re.MULTILINE)
_OVER = -4  # OpenSpiel's kTerminalPlayerId


def _pyspiel():
    try:
        import pyspiel
    except ImportError as exc:
        raise GameError(EXTRA) from exc
    return pyspiel


def ascii_text(text: str) -> str:
    """``text`` as printable ASCII: non-ASCII characters and control characters other than newline
    as Python escapes, tabs as spaces."""
    text = text.replace("\t", " ").replace("\r\n", "\n")
    out = text.encode("ascii", "backslashreplace").decode("ascii")
    return "".join(c if c == "\n" or 32 <= ord(c) < 127 else f"\\x{ord(c):02x}" for c in out)


# ------------------------------------------------------------------------------ renderers
# Seat -> text for the games whose own strings are cryptic (Kuhn's information state is "0pb").
KUHN_CARDS = "JQKA"


def _kuhn_text(state: Any, seat: int) -> str:
    s = state.information_state_string(seat)  # "<card><history of p/b>"
    card, history = s[:1], s[1:]
    n = state.get_game().num_players()
    cards = KUHN_CARDS if n <= 3 else "".join(str(i) for i in range(n + 1))
    card = cards[int(card)] if card.isdigit() and int(card) < len(cards) else card
    words = {"p": "pass", "b": "bet"}
    return f"card {card}; history: {' '.join(words.get(c, c) for c in history) or 'none'}"


LEDUC_MOVES = {"0": "fold", "1": "call", "2": "raise"}


def _leduc_text(state: Any, seat: int) -> str:
    s = state.information_state_string(seat)  # "[Observer: 0][Private: 3][Round 1]...[Round1: 1 2][Round2: ]"
    fields = dict(re.findall(r"\[([A-Za-z0-9]+): ?([^\]]*)\]", s))
    round_ = re.search(r"\[Round (\d+)\]", s)

    def card(c: str | None) -> str:
        if c is None or not c.strip().isdigit():
            return "none"
        rank = int(c) // 2  # two suits of each rank
        return "JQKA"[rank] if rank < 4 else str(rank)

    bets = lambda key: " ".join(LEDUC_MOVES.get(b, b) for b in fields.get(key, "").split()) or "none"  # noqa: E731
    return "; ".join([f"card {card(fields.get('Private'))}", f"public card {card(fields.get('Public'))}",
                      f"round {round_.group(1) if round_ else '?'}", f"pot {fields.get('Pot', '?')}",
                      f"money {fields.get('Money', '?')}", f"round 1: {bets('Round1')}", f"round 2: {bets('Round2')}"])


def _liars_dice_text(state: Any, seat: int) -> str:
    s = state.information_state_string(seat)  # "<my dice> <bids ...>"
    dice, _, bids = s.partition(" ")
    return f"your dice: {' '.join(dice) or 'none'}; bids so far: {bids.strip() or 'none'}"


RENDERERS = {"kuhn_poker": _kuhn_text, "leduc_poker": _leduc_text, "liars_dice": _liars_dice_text}


# ------------------------------------------------------------------------------ moves
def parse_move(reply: str, names: list[str]) -> tuple[int | None, str | None]:
    """The index in ``names`` of the move ``reply`` names (see the module docstring), or ``(None, reason)``."""
    head = reply[:MAX_REPLY_CHARS]
    line = head.strip().split("\n", 1)[0].strip() if head.strip() else ""
    if not line:
        return None, "empty reply: no move"
    m = re.match(r"(\d{1,6})(?!\w)", line)
    if m:
        k = int(m.group(1))
        if 1 <= k <= len(names):
            return k - 1, None
    low = line.lower()
    for i, name in enumerate(names):
        if low == name.lower():
            return i, None
    best = None
    for i, name in enumerate(names):  # the longest listed name the reply starts with, then a non-word character
        n = name.lower()
        if n and low.startswith(n) and (len(low) == len(n) or not (low[len(n)].isalnum() or low[len(n)] == "_")):
            if best is None or len(n) > len(names[best]):
                best = i
    if best is not None:
        return best, None
    return None, f"not a legal move: {ascii_text(line[:40])!r}; legal: {len(names)} moves numbered 1..{len(names)}"


def listed_moves(text: str) -> list[str]:
    """The moves the observation ``text`` lists (``moves: 1=a 2=b``): ``["1", "2"]``, or ``[]``."""
    m = MOVES_RE.search(text)
    return re.findall(r"(?:^| )(\d+)=", m.group(1)) if m else []


def _random_twin(text: str, rng: np.random.Generator) -> str:
    moves = listed_moves(text)
    return moves[int(rng.integers(len(moves)))] if moves else "1"


def _first_twin(text: str, rng: np.random.Generator) -> str:
    return "1"


SCRIPTED_TWINS = {"random": _random_twin, "first": _first_twin}


# ------------------------------------------------------------------------------ the catalog
def _name_of(game: str) -> str:
    return game.split("(", 1)[0].strip()


def refusal(game: Any) -> str | None:
    """Why a loaded OpenSpiel ``game`` cannot be a cogym game, or None."""
    pyspiel = _pyspiel()
    t = game.get_type()
    if t.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        return "simultaneous-move games are not supported yet (sequential games only)"
    if not (t.provides_information_state_string or t.provides_observation_string):
        return "it has no text observation (no information_state_string or observation_string)"
    if not 1 <= game.num_players() <= MAX_PLAYERS:
        return f"it has {game.num_players()} players; cogym plays 1 to {MAX_PLAYERS}"
    if t.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC and "rng_seed" not in t.parameter_specification:
        return "it samples chance inside OpenSpiel without an rng_seed parameter, so a seed cannot fix its games"
    lo, hi = game.min_utility(), game.max_utility()
    if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
        return f"its declared utility range [{lo}, {hi}] is not a finite range"
    return None


# Games that load and qualify by refusal() but break cogym's contract, with what breaks.
EXCLUDED: dict[str, str] = {
    "crossword": "OpenSpiel's crossword has no legal_actions() (it uses action structs only)",
    "bridge_uncontested_bidding": "a move can take seconds (OpenSpiel solves the deal double-dummy); cogym bounds a step to 1 s",
}


@functools.lru_cache(maxsize=None)
def catalog() -> tuple[str, ...]:
    """Every OpenSpiel game cogym offers, by OpenSpiel short name (sorted)."""
    pyspiel = _pyspiel()
    names = []
    for gt in sorted(pyspiel.registered_games(), key=lambda g: g.short_name):
        name = gt.short_name
        if name in EXCLUDED or any(isinstance(v, dict) for v in gt.parameter_specification.values()):
            continue  # excluded, or a wrapper of another game (its "game" parameter has no default)
        try:
            with _quiet_stderr():
                game = pyspiel.load_game(name)
        except Exception:  # noqa: BLE001 - a game that needs parameters or files to load is not in the catalog
            continue
        if refusal(game) is None:
            names.append(name)
    return tuple(names)


@contextlib.contextmanager
def _quiet_stderr():
    """OpenSpiel's C++ writes its exceptions and warnings to file descriptor 2 as well as raising them."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def describe(name: str) -> dict[str, Any]:
    """What ``cogym games --source openspiel`` prints of catalog game ``name``: players, chance, information."""
    pyspiel = _pyspiel()
    with _quiet_stderr():
        game = pyspiel.load_game(name)
    t = game.get_type()
    chance = {pyspiel.GameType.ChanceMode.DETERMINISTIC: "none", pyspiel.GameType.ChanceMode.EXPLICIT_STOCHASTIC: "dealt",
              pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC: "sampled"}.get(t.chance_mode, str(t.chance_mode))
    info = "perfect" if t.information == pyspiel.GameType.Information.PERFECT_INFORMATION else "imperfect"
    return {"id": f"{PREFIX}:{name}", "players": game.num_players(), "chance": chance, "information": info,
            "zero_sum": t.utility == pyspiel.GameType.Utility.ZERO_SUM,
            "reward_range": f"[{game.min_utility():g}, {game.max_utility():g}]", "max_turns": game.max_game_length()}


def load(game: str, params: Mapping[str, Any] | None = None) -> Any:
    """OpenSpiel's game ``game`` (a short name, or OpenSpiel's ``name(k=v,...)``) with ``params``, checked."""
    pyspiel = _pyspiel()
    if not isinstance(game, str) or not game:
        raise GameError(f"openspiel: the game must be an OpenSpiel game name, got {game!r}")
    name = _name_of(game)
    if name not in pyspiel.registered_names():
        hint = did_you_mean(name, pyspiel.registered_names(), form="; did you mean {}?", show=lambda c: f"'openspiel:{c}'")
        raise GameError(f"unknown OpenSpiel game {name!r}{hint} (cogym games --source openspiel lists them)")
    if name in EXCLUDED:
        raise GameError(f"openspiel:{name} is not offered: {EXCLUDED[name]}")
    try:
        with _quiet_stderr():
            loaded = pyspiel.load_game(game, dict(params or {})) if params else pyspiel.load_game(game)
    except Exception as exc:  # noqa: BLE001 - OpenSpiel's SpielError on bad parameters, in one line
        raise GameError(f"openspiel:{game}: OpenSpiel cannot load it with params {dict(params or {})}: "
                        f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}") from None
    why = refusal(loaded)
    if why:
        raise GameError(f"openspiel:{game} is not offered: {why}")
    return loaded


class OpenSpielEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata: ClassVar[dict[str, Any]] = {"name": "openspiel", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, game: str, params: Mapping[str, Any] | None = None, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self._params = dict(params or {})
        self._game_string = game
        self._game = load(game, self._params)
        self._name = _name_of(game)
        pyspiel = _pyspiel()
        t = self._game.get_type()
        self._reseed = t.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC
        # Perfect information: the observation (a board) says it all; otherwise the information state,
        # which holds what the seat saw before (perfect recall), where the game provides one.
        self._info_state = bool(t.provides_information_state_string) and not (
            t.information == pyspiel.GameType.Information.PERFECT_INFORMATION and t.provides_observation_string)
        n = self._game.num_players()
        self.possible_agents = [f"player_{i}" for i in range(n)]
        roles = ORDINALS[:n]
        self._seat_roles = dict(zip(self.possible_agents, roles))
        self._seat_index = {a: i for i, a in enumerate(self.possible_agents)}
        lo, hi = float(self._game.min_utility()), float(self._game.max_utility())
        self._range = (lo, hi)  # what the game's returns are clipped to
        reward_range = (min(lo, 0.0), max(hi, 0.0))  # every turn before the last gives 0
        self._utility = t.utility
        self._sum = float(self._game.utility_sum()) if t.utility in (pyspiel.GameType.Utility.ZERO_SUM,
                                                                      pyspiel.GameType.Utility.CONSTANT_SUM) else None
        self._max_turns = max(1, int(self._game.max_game_length()))
        self.observation_spaces = {
            a: Dict({"observation": Box(low=np.array([0, 0, _OVER]), high=np.array([self._max_turns, n - 1, n - 1]),
                                        dtype=np.int64),
                     "text": text_space(MAX_OBSERVATION_CHARS)})
            for a in self.possible_agents
        }
        self.action_spaces = {a: text_space(MAX_ACTION_CHARS) for a in self.possible_agents}
        self.spec = GameSpec(
            id=f"{PREFIX}:{game}",
            roles=roles,
            reward_range=reward_range,
            zero_sum=t.utility == pyspiel.GameType.Utility.ZERO_SUM,
            max_turns=self._max_turns,
            description=ascii_text(f"OpenSpiel's {t.long_name}, {n} players")[:200],
            outcomes={r: ("invalid",) for r in roles},
        )
        self._state: Any = None
        self._moves = 0
        self._invalid: str | None = None

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._seed(seed)
        if self._reseed:
            rng_seed = int(self.np_random.integers(0, 2**31 - 1))
            self._game = load(self._game_string, {**self._params, "rng_seed": rng_seed})
        self._state = self._game.new_initial_state()
        self._moves = 0
        self._invalid = None
        self._resolve_chance()
        self._start_episode({a: {"role": self._seat_roles[a]} for a in self.possible_agents})
        if self._state.is_terminal():  # a game decided by chance alone
            self._finish(None)
        else:
            self.agent_selection = self.possible_agents[self._state.current_player()]

    def _resolve_chance(self) -> None:
        while self._state.is_chance_node():
            outcomes = self._state.chance_outcomes()
            actions = [a for a, _ in outcomes]
            probs = np.asarray([p for _, p in outcomes], dtype=np.float64)
            self._state.apply_action(int(actions[int(self.np_random.choice(len(actions), p=probs / probs.sum()))]))

    def _view(self, seat: int) -> str:
        render = RENDERERS.get(self._name)
        if render is not None:
            return render(self._state, seat)
        if self._info_state:
            return self._state.information_state_string(seat)
        return self._state.observation_string(seat)

    def _legal_names(self) -> list[str]:
        player = self._state.current_player()
        return [ascii_text(self._state.action_to_string(player, a)) for a in self._state.legal_actions(player)]

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        seat = self._seat_index[agent]
        if self._state is None:
            return {"observation": np.array([0, seat, _OVER], dtype=np.int64), "text": ""}
        over = self._state.is_terminal()
        to_move = _OVER if over else int(self._state.current_player())
        head = f"openspiel {self._name}; you are player {seat} ({self._seat_roles[agent]})"
        lines = [head, ascii_text(self._view(seat)).strip()]
        if over:
            returns = self._returns()
            if self._invalid is not None:
                lines.append("invalid move by " + ("you" if self._invalid == agent else self._invalid))
            lines.append(f"game over; result {returns[seat]:+g}")
        elif to_move == seat:
            lines.append("moves: " + " ".join(f"{k}={name}" for k, name in enumerate(self._legal_names(), 1)))
        else:
            lines.append(f"player {to_move} to move")
        text = "\n".join(lines)
        if len(text) > MAX_OBSERVATION_CHARS:  # keep the head and the moves; cut the state's middle
            tail = lines[-1][: MAX_OBSERVATION_CHARS // 2]
            room = MAX_OBSERVATION_CHARS - len(head) - len(tail) - 20
            text = "\n".join([head, lines[1][:max(room, 0)] + " [...]", tail])[:MAX_OBSERVATION_CHARS]
        return {"observation": np.array([min(self._moves, self._max_turns), seat, to_move], dtype=np.int64), "text": text}

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        player = self._state.current_player()
        legal = self._state.legal_actions(player)
        index, reason = parse_move(action, self._legal_names())
        self._moves += 1
        if index is None:
            self._invalid = agent
            self._finish(reason)
            return
        self._state.apply_action(int(legal[index]))
        self._resolve_chance()
        if self._state.is_terminal() or self._moves >= self._max_turns:
            self._finish(None)
        else:
            self.agent_selection = self.possible_agents[self._state.current_player()]
            self._accumulate_rewards()

    # ------------------------------------------------------------------ rules
    def _returns(self) -> list[float]:
        n = len(self.possible_agents)
        lo, hi = self._range
        if self._invalid is None:
            if self._state.is_terminal():
                return [float(min(max(r, lo), hi)) for r in self._state.returns()]
            return [0.0] * n  # cut at max_turns without an end (not reached by OpenSpiel's own bound)
        bad = self._seat_index[self._invalid]
        if n == 1:
            return [lo]
        rest = (self._sum - lo) / (n - 1) if self._sum is not None else 0.0
        return [lo if i == bad else float(min(max(rest, lo), hi)) for i in range(n)]

    def _finish(self, reason: str | None) -> None:
        returns = self._returns()
        for agent in self.possible_agents:
            info: dict[str, Any] = {"role": self._seat_roles[agent], "invalid": agent == self._invalid}
            if self._invalid is not None:
                info["reason"] = reason if agent == self._invalid else f"game over: {self._invalid}'s move was invalid ({reason})"
            self.infos[agent] = info
        self._end_game(dict(zip(self.possible_agents, returns)))

    def _render_text(self) -> str:
        if self._state is None:
            return f"[{self.spec.id}] not started; call reset()"
        return f"[{self.spec.id}] moves {self._moves}\n{ascii_text(str(self._state))}"


def resolve(name: str) -> Registration:
    """The registration of ``openspiel:<name>`` (the registry's source hook). The twins are listed for
    every role a player count can give (``make(..., params={"players": 4})`` adds seats)."""
    load(name)  # refuse an unknown, excluded or unsupported game at make, with the reason
    entry = functools.partial(OpenSpielEnv, name)
    entry.__module__ = __name__  # type: ignore[attr-defined]
    return Registration(id=f"{PREFIX}:{name}", entry_point=entry, scripted={r: dict(SCRIPTED_TWINS) for r in ORDINALS})
