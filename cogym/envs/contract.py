"""The game contract as it is checked while a game is played, cheaply, at every step.

:func:`check_game` plays a game with scripted twins before training; the rollout plays it with
models, which reach states no twin did. So the play loop (``cogym.runners.rollout.loop``) and
``check_game`` hold every step to the same three rules, with the same words:

* every reward is a finite number inside ``spec.reward_range`` (a NaN or an out-of-range reward
  would otherwise train silently, or break generation an iteration later);
* every observation a seat is asked about is what the game's observation space says (a dict whose
  ``"text"`` is a str, inside the space), before any model or twin reads it;
* every ``infos`` entry has the types of the game -> learner contract (:mod:`cogym.core.outcome`).

A broken rule is a :class:`ContractViolation` naming the seat, the value and the rule; the play
loop turns it into a report that names the game, the seed, the role and how to reproduce it.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

import numpy as np
from gymnasium.spaces import Box, Dict, Space, Text

from cogym.core.errors import GameError
from cogym.core.outcome import SeatOutcome

__all__ = ["ContractViolation", "check_rewards", "check_infos", "check_observation", "contains", "observed_text"]

REWARD_SLACK = 1e-9  # float slack at the ends of spec.reward_range
MAX_VALUE_SHOWN = 120  # characters of an offending value shown in a report
SMALL_BOX = 16  # a Box observation of at most this many numbers is checked in Python


class ContractViolation(GameError):
    """A game broke the game contract while it was played. ``seat``: the seat whose reward,
    observation or info broke it; ``value``: the offending value (shown cut); ``rule``: what the
    contract says, in words."""

    def __init__(self, seat: str, what: str, value: Any, rule: str) -> None:
        self.seat, self.what, self.value, self.rule = seat, what, value, rule
        super().__init__(f"seat {seat!r}: {what} {shown(value)}: {rule}")

    def __reduce__(self):  # pickled whole (a Ray worker's violation reaches the driver as itself)
        return (type(self), (self.seat, self.what, self.value, self.rule))


def shown(value: Any) -> str:
    """``repr(value)`` cut to MAX_VALUE_SHOWN characters, with its type when that is not plain."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a report must not fail on a game's broken __repr__
        text = f"<{type(value).__name__} whose repr raised>"
    if len(text) > MAX_VALUE_SHOWN:
        text = text[:MAX_VALUE_SHOWN] + f"... ({len(text)} characters)"
    plain = isinstance(value, (str, int, float, bool, dict, list, tuple, type(None)))
    return text if plain else f"{text} (a {type(value).__name__})"


def reward_rule(reward_range: tuple[float, float]) -> str:
    lo, hi = reward_range
    return f"a reward must be a finite number inside spec.reward_range [{lo:g}, {hi:g}]"


def check_rewards(env: Any) -> None:
    """Every reward of this step (``env.rewards``) is a finite real number inside ``spec.reward_range``."""
    lo, hi = env.spec.reward_range
    lo, hi = lo - REWARD_SLACK, hi + REWARD_SLACK
    for seat, r in env.rewards.items():
        # The common case first, in one comparison: NaN and inf fail it too, and are told apart below.
        if (type(r) is float or type(r) is int) and lo <= r <= hi:
            continue
        if isinstance(r, bool) or not isinstance(r, numbers.Real):
            raise ContractViolation(seat, "got reward", r, reward_rule(env.spec.reward_range) + " (this is not a number)")
        value = float(r)
        if not math.isfinite(value):
            raise ContractViolation(seat, "got reward", r, reward_rule(env.spec.reward_range) + " (NaN and inf are not)")
        if not lo <= value <= hi:
            raise ContractViolation(seat, "got reward", r, reward_rule(env.spec.reward_range))


def check_infos(infos: Mapping[str, Any]) -> None:
    """Every seat's info (``env.infos``, or the last infos kept of a finished game) has the types of the
    game -> learner contract."""
    for seat, info in infos.items():
        if not isinstance(info, dict):
            raise ContractViolation(seat, "has info", info, "infos[seat] must be a dict")
        try:
            SeatOutcome.from_info(info, where=f"infos[{seat!r}]")
        except GameError as exc:
            raise ContractViolation(seat, "has info", info, f"{exc} (the game -> learner contract, cogym.core.outcome)") from None


def _space_of(game: Any, seat: str) -> Any:
    spaces = getattr(game, "observation_spaces", None)
    return spaces[seat] if isinstance(spaces, dict) and seat in spaces else game.observation_space(seat)


def contains(space: Space, x: Any) -> bool:
    """``space.contains(x)``, with the same answer, in a few microseconds for the spaces cogym's games use
    (a Dict of a numeric Box and a Text; gymnasium's Box check costs ~18 us, and the play loop asks at
    every seat of every step). Other spaces, and a Box given something that is not an array, ask
    gymnasium."""
    if isinstance(space, Dict):
        return isinstance(x, dict) and x.keys() == space.spaces.keys() and all(
            contains(sub, x[key]) for key, sub in space.spaces.items())
    if isinstance(space, Text):
        return isinstance(x, str) and space.min_length <= len(x) <= space.max_length and frozenset(x) <= space.character_set
    if isinstance(space, Box) and isinstance(x, np.ndarray):
        if x.shape != space.shape or not (x.dtype == space.dtype or np.can_cast(x.dtype, space.dtype)):
            return False
        if x.size <= SMALL_BOX:  # Python's comparisons beat numpy's on a few numbers (NaN fails both alike)
            return all(lo <= v <= hi for v, lo, hi in zip(x.ravel().tolist(), space.low.ravel().tolist(),
                                                           space.high.ravel().tolist()))
        return bool((x >= space.low).all()) and bool((x <= space.high).all())
    return bool(space.contains(x))


def check_observation(game: Any, seat: str, obs: Any) -> None:
    """``obs``, what turn-level ``game`` shows ``seat``, is a dict with a str ``"text"`` inside the
    seat's observation space."""
    if not isinstance(obs, dict) or not isinstance(obs.get("text"), str):
        raise ContractViolation(seat, f"was shown a {type(obs).__name__}", obs, f"observe({seat!r}) must return a dict with a str 'text' entry "
                                "(and the numeric 'observation' of its observation space)")
    if not contains(_space_of(game, seat), obs):
        raise ContractViolation(seat, "was shown", obs, f"the observation is outside observation_space({seat!r}) "
                                "(a text longer than its max_length or with characters outside its charset, or an "
                                "'observation' of another shape or dtype)")


def observed_text(env: Any, seat: str) -> str:
    """The text the turn-level game under ``env`` asks ``seat`` about now, checked (:func:`check_observation`)."""
    game = env.unwrapped
    obs = game.observe(seat)
    check_observation(game, seat, obs)
    return obs["text"]
