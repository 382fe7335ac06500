"""The game contract as it is checked while a game is played, cheaply, at every step.

:func:`check_game` plays a game with scripted twins before training; the rollout plays it with
models, which reach states no twin did. So the play loop (``cogym.runners.core``) and
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
from typing import Any

from cogym.core.errors import GameError
from cogym.core.outcome import SeatOutcome

__all__ = ["ContractViolation", "check_rewards", "check_infos", "check_observation", "observed_text"]

REWARD_SLACK = 1e-9  # float slack at the ends of spec.reward_range
MAX_VALUE_SHOWN = 120  # characters of an offending value shown in a report


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
    text = repr(value)
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
    for seat, r in env.rewards.items():
        if isinstance(r, bool) or not isinstance(r, numbers.Real):
            raise ContractViolation(seat, "got reward", r, reward_rule(env.spec.reward_range) + " (this is not a number)")
        value = float(r)
        if not math.isfinite(value):
            raise ContractViolation(seat, "got reward", r, reward_rule(env.spec.reward_range) + " (NaN and inf are not)")
        if not lo - REWARD_SLACK <= value <= hi + REWARD_SLACK:
            raise ContractViolation(seat, "got reward", r, reward_rule(env.spec.reward_range))


def check_infos(env: Any) -> None:
    """Every seat's info of this step has the types of the game -> learner contract."""
    for seat, info in env.infos.items():
        if not isinstance(info, dict):
            raise ContractViolation(seat, "has info", info, "infos[seat] must be a dict")
        try:
            SeatOutcome.from_info(info, where=f"infos[{seat!r}]")
        except GameError as exc:
            raise ContractViolation(seat, "has info", info, f"{exc} (the game -> learner contract, cogym.core.outcome)") from None


def _space_of(game: Any, seat: str) -> Any:
    spaces = getattr(game, "observation_spaces", None)
    return spaces[seat] if isinstance(spaces, dict) and seat in spaces else game.observation_space(seat)


def check_observation(game: Any, seat: str, obs: Any) -> None:
    """``obs``, what turn-level ``game`` shows ``seat``, is a dict with a str ``"text"`` inside the
    seat's observation space."""
    if not isinstance(obs, dict) or not isinstance(obs.get("text"), str):
        raise ContractViolation(seat, f"was shown a {type(obs).__name__}", obs, f"observe({seat!r}) must return a dict with a str 'text' entry "
                                "(and the numeric 'observation' of its observation space)")
    if not _space_of(game, seat).contains(obs):
        raise ContractViolation(seat, "was shown", obs, f"the observation is outside observation_space({seat!r}) "
                                "(a text longer than its max_length or with characters outside its charset, or an "
                                "'observation' of another shape or dtype)")


def observed_text(env: Any, seat: str) -> str:
    """The text the turn-level game under ``env`` asks ``seat`` about now, checked (:func:`check_observation`)."""
    game = env.unwrapped
    obs = game.observe(seat)
    check_observation(game, seat, obs)
    return obs["text"]
