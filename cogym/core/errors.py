"""cogym's error hierarchy: everything a user causes and is expected to catch is a :class:`CogymError`.

Each subclass also derives from the built-in type a caller would already catch (``ValueError``),
so ``except ValueError`` keeps working. The CLI prints any :class:`CogymError` as one line and
exits 2, without a traceback.
"""

from __future__ import annotations


class CogymError(Exception):
    """Base of every error cogym raises for a user's input (config, game, model, data)."""


class ConfigError(CogymError, ValueError):
    """A configuration that cannot be run; the message names the key and the fix."""


class GameError(CogymError, ValueError):
    """An unknown game or argument, or a game that breaks the game contract."""


class ModelLoadError(CogymError, ValueError):
    """A model path that does not exist, is not an HF model directory, or fails to load."""


class DatasetError(CogymError, ValueError):
    """A problem or data file that is missing or malformed."""


class GameStepError(CogymError, RuntimeError):
    """A game raised while it was played (a bug in the game, most often on a message it did not expect).

    The message is one block: the game, the seed, the seat, its role and policy, the move (cut), the
    exception and where in the game's code it was raised, and how to reproduce it with ``check_game``.
    ``record`` holds the same facts as a dict (what ``game.on_error: skip`` logs)."""

    def __init__(self, message: str, record: dict) -> None:
        super().__init__(message)
        self.record = record

    def __reduce__(self):  # pickled whole (a Ray worker's or another rank's error reaches the driver as itself)
        return (type(self), (self.args[0], self.record))


class GameContractError(GameStepError, GameError):
    """A game broke the game contract while it was played: a reward that is not a finite number inside
    ``spec.reward_range``, an observation outside the game's observation space, or an ``infos`` outcome
    of the wrong type. One block like :class:`GameStepError`'s, naming the value and the rule; it is a
    :class:`GameError` too (what ``check_game`` says of the same fault)."""


class LearnerDied(CogymError, RuntimeError):
    """A learner actor on Ray died (its optimizer state with it): :func:`cogym.runners.train.loop.train`
    resumes the run from its last checkpoint with new actors, at most ``ray.max_restarts`` times."""
