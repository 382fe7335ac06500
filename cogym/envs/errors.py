"""Errors the games raise at their boundaries, for users to catch (:mod:`cogym.core.errors`).

:class:`DatasetError`: a problem file cannot be used (missing, unreadable, or a line that is not a
valid record); the message is one line naming the file, the line number (when there is one), what
is wrong and how to fix it, raised when the game is constructed, never in the middle of an episode.
:class:`GameError`: an unknown game or argument, or a game that breaks the game contract.
"""

from __future__ import annotations

from cogym.core.errors import DatasetError, GameError

__all__ = ["DatasetError", "GameError"]
