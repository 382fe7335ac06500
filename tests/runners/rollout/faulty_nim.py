"""``faulty_nim-v0``: a user's game module (loaded through ``game.modules``) that breaks the game contract
on purpose, for the play-time contract tests.

Two seats, ``p0`` and ``p1`` (role ``player``), each write one number; the larger valid number wins
(+1, the other -1, a draw 0; a reply that is not a number loses). Rewards in [-1, 1], zero-sum.
``fault`` breaks one rule at the end of every episode (or at every observation):
``"none"`` (a correct game), ``"nan"`` (the winner's reward is NaN), ``"range"`` (the winner gets 2),
``"observation"`` (``observe`` returns the text itself, not the dict), ``"outcome"`` (``infos``
``correct`` is the string ``"yes"``).
"""

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.envs import CogymEnv, GameSpec, register
from cogym.envs.base import text_space

GAME_ID = "faulty_nim-v0"
FAULTS = ("none", "nan", "range", "observation", "outcome")


class FaultyNim(CogymEnv):
    metadata = {"name": "faulty_nim", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, fault: str = "none", render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        self.fault = fault
        self.possible_agents = ["p0", "p1"]
        self._seat_roles = {"p0": "player", "p1": "player"}
        self.observation_spaces = {a: Dict({"observation": Box(0, 2, shape=(1,), dtype=np.int64), "text": text_space(16)})
                                   for a in self.possible_agents}
        self.action_spaces = {a: text_space(16) for a in self.possible_agents}
        self.spec = GameSpec(GAME_ID, ("player",), (-1.0, 1.0), zero_sum=True, max_turns=2,
                             description="Each seat writes a number; the larger wins.")
        self.said: dict[str, str] = {}

    def reset(self, seed=None, options=None) -> None:
        self._seed(seed)
        self.said = {}
        self._start_episode({a: {"role": "player"} for a in self.possible_agents})

    def observe(self, agent):
        text = f"say a number {len(self.said)}"
        if self.fault == "observation":
            return text
        return {"observation": np.array([len(self.said)], dtype=np.int64), "text": text}

    def step(self, action) -> None:
        if self._begin_turn(action) is None:
            return
        self.said[self.agent_selection] = action
        if len(self.said) < 2:
            self.agent_selection = "p1"
            return
        a, b = (int(self.said[s]) if self.said[s].strip().isdigit() and len(self.said[s]) < 8 else -1 for s in ("p0", "p1"))
        win = 1.0 if a > b else -1.0 if a < b else 0.0
        rewards = {"p0": win, "p1": -win}
        winner = "p0" if win >= 0 else "p1"
        if self.fault == "nan":
            rewards[winner] = float("nan")
        elif self.fault == "range":
            rewards[winner] = 2.0
        for seat in self.possible_agents:
            self.infos[seat] = {"role": "player", "correct": "yes" if self.fault == "outcome" else rewards[seat] > 0}
        self._end_game(rewards)

    def _render_text(self) -> str:
        return repr(self.said)


register(GAME_ID, FaultyNim, scripted={"player": {"one": lambda text, rng: "1", "two": lambda text, rng: "2"}})
