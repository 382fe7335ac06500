"""Errors the games raise at their boundaries, for users to catch.

They subclass the built-in type a caller would already catch (``ValueError`` for bad
configuration or data), so ``except ValueError`` keeps working.
"""

from __future__ import annotations


class DatasetError(ValueError):
    """A problem file cannot be used: missing, unreadable, or a line that is not a valid record.

    The message is one line naming the file, the line number (when there is one), what is wrong
    and how to fix it. Raised when the game is constructed, never in the middle of an episode.
    """
