"""``number_guess-v0``: a chooser hides a number; a guesser finds it from "higher"/"lower" hints.

Seats (one role each): ``chooser``, ``guesser``. Zero-sum, rewards in ``[-1, 1]``, max turns ``1 + tries``.
Turns: the chooser writes the secret; the guesser guesses until it hits it or has used ``tries`` guesses.
Observation: ``"observation"`` int64 ``[guesses made]``; ``"text"``: ``"1-9? secret"`` for the chooser, and for
the guesser the range and a hint per wrong guess: ``"1-9? guess 5 higher 7 lower"`` (the secret is 6).
Action: a whole number in ``1..high``, whitespace around it allowed; a reply over 16 characters is not read.
Rewards (at the end, 0 before): guesser +1 if it hits the secret, -1 if its tries run out; chooser opposite.
Invalid action: a reply that is not a number in range ends the game: its writer -1, the other seat +1
(``infos[seat]["invalid"]`` says who, ``["reason"]`` why). End infos: role, secret, guesses, invalid, metrics.
Arguments: ``high=9`` (2..999), ``tries=3`` (1..999), ``render_mode`` (None or ``"ansi"``). Versions: v0, the first.
"""

import re

import numpy as np
from cogym.envs import CogymEnv, GameSpec, register
from cogym.envs.base import text_space
from gymnasium.spaces import Box, Dict

GAME_ID = "number_guess-v0"
MAX_REPLY = 16


def parse_number(reply: str, high: int) -> int | None:
    """The number in ``1..high`` that ``reply`` is, else None. Bounded: long replies are not read."""
    m = re.fullmatch(r"\s*(\d{1,3})\s*", reply) if len(reply) <= MAX_REPLY else None
    return int(m.group(1)) if m and 1 <= int(m.group(1)) <= high else None


def open_range(text: str) -> tuple[int, int]:
    """What a guesser's observation leaves open: ``"1-9? guess 5 higher 7 lower"`` -> ``(6, 6)``."""
    words = text.split()
    lo, hi = 1, int(words[0][2:-1])
    for guess, word in zip(words[2::2], words[3::2]):
        lo, hi = (max(lo, int(guess) + 1), hi) if word == "higher" else (lo, min(hi, int(guess) - 1))
    return lo, hi


SCRIPTED = {  # every role's twins: name -> fn(observation text, rng) -> reply; "bisect" halves the range
    "chooser": {"random": lambda text, rng: str(rng.integers(1, open_range(text)[1] + 1)), "one": lambda text, rng: "1"},
    "guesser": {"bisect": lambda text, rng: str(sum(open_range(text)) // 2),
                "random": lambda text, rng: str(rng.integers(open_range(text)[0], open_range(text)[1] + 1))},
}


class NumberGuessEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""
    def __init__(self, high: int = 9, tries: int = 3, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        for name, value, low in (("high", high, 2), ("tries", tries, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 999:
                raise ValueError(f"{name} must be an int in [{low}, 999], got {value!r}")
        self.high, self.tries, self._secret, self._guesses = high, tries, 0, []
        self.possible_agents = ["chooser", "guesser"]
        self._seat_roles = {a: a for a in self.possible_agents}
        self.observation_spaces = {a: Dict({"observation": Box(0, tries, shape=(1,), dtype=np.int64),
                                            "text": text_space(12 + 11 * tries)}) for a in self.possible_agents}
        self.action_spaces = {a: text_space(MAX_REPLY) for a in self.possible_agents}
        self.spec = GameSpec(GAME_ID, ("chooser", "guesser"), (-1.0, 1.0), zero_sum=True, max_turns=1 + tries,
                             description="A chooser hides a number; a guesser finds it from higher/lower hints.")

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)  # seeds the spaces' sampling; the game itself draws nothing
        self._secret, self._guesses = 0, []
        self._start_episode({a: {"role": a} for a in self.possible_agents})

    def observe(self, agent: str) -> dict:
        self._check_seat(agent)
        hints = "".join(f" {g} {'higher' if self._secret > g else 'lower'}" for g in self._guesses if g != self._secret)
        text = f"1-{self.high}? secret" if agent == "chooser" else f"1-{self.high}? guess{hints}"
        return {"observation": np.array([len(self._guesses)], dtype=np.int64), "text": text}

    def step(self, action: str) -> None:
        if (agent := self._begin_turn(action)) is None:  # a finished seat was removed: nothing else to do
            return
        number, other = parse_number(action, self.high), "guesser" if agent == "chooser" else "chooser"
        if number is None:
            return self._finish({agent: -1.0, other: 1.0}, agent, f"{action[:20]!r} is not a number in 1-{self.high}")
        if agent == "chooser":
            self._secret, self.agent_selection = number, "guesser"
        else:
            self._guesses.append(number)
            if number == self._secret or len(self._guesses) == self.tries:
                won = 1.0 if number == self._secret else -1.0
                return self._finish({"guesser": won, "chooser": -won})
        self._accumulate_rewards()

    def _finish(self, rewards: dict[str, float], invalid: str | None = None, reason: str = "") -> None:
        for a in self.possible_agents:
            self.infos[a] = {"role": a, "secret": self._secret, "guesses": tuple(self._guesses), "invalid": a == invalid,
                             "metrics": {"won": rewards[a] > 0}} | ({"reason": f"{invalid}: {reason}"} if invalid else {})
        self._end_game(rewards)

    def _render_text(self) -> str:
        return f"[{GAME_ID}] secret={self._secret} guesses={self._guesses}"


register(GAME_ID, NumberGuessEnv, scripted=SCRIPTED)
