"""``hint_guess-v0``: a cooperative game of two roles. A hinter sees a secret number and writes a hint;
a guesser sees only the hint and guesses the number.

Seats (one role each): ``hinter``, ``guesser``. Cooperative, not zero-sum: both seats always get the same
reward. Rewards in ``[0, 1]``, at most 2 turns.
Turns: the hinter writes one hint, then the guesser guesses once; the game ends.
Observation: ``"observation"`` int64 ``[turn]``; ``"text"``: ``"0-9 secret 7"`` for the hinter, and for the
guesser the range and the hint: ``"0-9 hint 7"`` (characters outside printable ASCII, and line breaks,
shown as ``?``).
Action: the hinter any text of at most 12 characters; the guesser a whole number in ``0..high``, whitespace
around it allowed (a reply over 16 characters is not read).
Rewards (at the end, 0 before): 1 to both seats when the guess is the secret, else 0 to both.
Invalid action: a hint over 12 characters, or a guess that is not a number in range, ends the game with 0
for both (``infos[seat]["invalid"]`` says who, ``["reason"]`` why). End infos: role, secret, hint, guess,
invalid, metrics (``right``: the guess was the secret).
Tournaments: paired scoring (``tournament_scoring``): rate one role at a time with the other fixed.
Arguments: ``high=9`` (1..999), ``render_mode`` (None or ``"ansi"``). Versions: v0, the first.
"""

import re

import numpy as np
from cogym.envs import CogymEnv, GameSpec, register
from cogym.envs.base import PRINTABLE_CHARSET, text_space
from gymnasium.spaces import Box, Dict

GAME_ID = "hint_guess-v0"
MAX_HINT, MAX_REPLY = 12, 16


def parse_guess(reply: str, high: int) -> int | None:
    """The number in ``0..high`` that ``reply`` is, else None. Bounded: long replies are not read."""
    m = re.fullmatch(r"\s*(\d{1,3})\s*", reply) if len(reply) <= MAX_REPLY else None
    return int(m.group(1)) if m and int(m.group(1)) <= high else None


def shown(hint: str) -> str:
    """The hint as the guesser reads it: printable ASCII, anything else (line breaks too) as ``?``."""
    return "".join(c if c in PRINTABLE_CHARSET and c not in "\n\r\t\x0b\x0c" else "?" for c in hint)


def _read(text: str, rng: np.random.Generator) -> str:
    """The guesser twin that reads the hint: a number in range is the guess; "even" or "odd" narrows
    the draw to that parity; anything else is a uniform draw."""
    high, hint = int(text.split()[0][2:]), text.split(" hint ", 1)[1]
    number = parse_guess(hint, high)
    if number is not None:
        return str(number)
    start = {"even": 0, "odd": 1}.get(hint.strip(), None)
    return str(rng.choice(np.arange(start, high + 1, 2)) if start is not None else rng.integers(0, high + 1))


SCRIPTED = {  # every role's twins: name -> fn(observation text, rng) -> reply
    "hinter": {"exact": lambda text, rng: text.split()[-1],  # writes the secret: with `read`, always right
               "parity": lambda text, rng: "odd" if int(text.split()[-1]) % 2 else "even",
               "useless": lambda text, rng: "hi"},
    "guesser": {"read": _read, "random": lambda text, rng: str(rng.integers(0, int(text.split()[0][2:]) + 1))},
}


class HintGuessEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""
    tournament_scoring = "paired"  # cooperative: a tournament rates one role at a time, partners fixed

    def __init__(self, high: int = 9, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if isinstance(high, bool) or not isinstance(high, int) or not 1 <= high <= 999:
            raise ValueError(f"high must be an int in [1, 999], got {high!r}")
        self.high, self._secret, self._hint, self._guess = high, 0, "", None
        self.possible_agents = ["hinter", "guesser"]
        self._seat_roles = {a: a for a in self.possible_agents}
        self.observation_spaces = {a: Dict({"observation": Box(0, 1, shape=(1,), dtype=np.int64),
                                            "text": text_space(16 + MAX_HINT)}) for a in self.possible_agents}
        self.action_spaces = {"hinter": text_space(MAX_HINT), "guesser": text_space(MAX_REPLY)}
        self.spec = GameSpec(GAME_ID, ("hinter", "guesser"), (0.0, 1.0), zero_sum=False, max_turns=2,
                             description="Cooperative: a hinter hints at a secret number; a guesser guesses it.")

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)
        self._secret, self._hint, self._guess = int(self.np_random.integers(0, self.high + 1)), "", None
        self._start_episode({a: {"role": a} for a in self.possible_agents})

    def observe(self, agent: str) -> dict:
        self._check_seat(agent)
        turn = 0 if agent == "hinter" else 1
        text = f"0-{self.high} secret {self._secret}" if turn == 0 else f"0-{self.high} hint {shown(self._hint)}"
        return {"observation": np.array([turn], dtype=np.int64), "text": text}

    def step(self, action: str) -> None:
        if (agent := self._begin_turn(action)) is None:
            return
        if agent == "hinter":
            if len(action) > MAX_HINT:
                return self._finish(0.0, "hinter", f"a hint of {len(action)} characters (at most {MAX_HINT})")
            self._hint, self.agent_selection = action, "guesser"
            return self._accumulate_rewards()
        self._guess = parse_guess(action, self.high)
        if self._guess is None:
            return self._finish(0.0, "guesser", f"{action[:20]!r} is not a number in 0-{self.high}")
        self._finish(1.0 if self._guess == self._secret else 0.0)

    def _finish(self, reward: float, invalid: str | None = None, reason: str = "") -> None:
        for a in self.possible_agents:
            self.infos[a] = {"role": a, "secret": self._secret, "hint": self._hint[:MAX_HINT], "guess": self._guess,
                             "invalid": a == invalid, "metrics": {"right": reward > 0}
                             } | ({"reason": f"{invalid}: {reason}"} if invalid else {})
        self._end_game({a: reward for a in self.possible_agents})

    def _render_text(self) -> str:
        return f"[{GAME_ID}] secret={self._secret} hint={self._hint[:MAX_HINT]!r} guess={self._guess}"


register(GAME_ID, HintGuessEnv, scripted=SCRIPTED)
