"""Text that came from outside (a config value, a transcript field, a player's name, model output) made
safe to quote in an error message or print to a terminal.

``brief(value)`` is the repr an error message quotes: at most ~200 characters whatever the value (a
YAML alias bomb expands to millions of items; its full repr would take minutes and gigabytes).
``printable(text)`` shows control characters (ESC, BEL, a carriage return, C1 codes, bidi overrides)
as escapes such as ``\\x1b`` so that a string cannot move the cursor, rewrite the line, or set the
terminal's title; newlines and tabs are kept unless ``keep`` says otherwise.
``twin_failure(...)`` is the one line that names a game's scripted twin that raised (the play loop's
agent and ``check_game`` say it alike).
"""

from __future__ import annotations

import reprlib
import traceback
from typing import Any

QUOTED_CHARS = 200  # the most of a value an error message quotes

_REPR = reprlib.Repr()
_REPR.maxstring = QUOTED_CHARS
_REPR.maxother = QUOTED_CHARS
_REPR.maxlong = 60  # an integer of thousands of digits is shown by its ends (and never needs str())
_REPR.maxlevel = 3
for _name in ("maxlist", "maxtuple", "maxdict", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_REPR, _name, 8)


def brief(value: Any, limit: int = QUOTED_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters (nested containers and long strings shortened
    with ``...``), safe to quote in a one-line message."""
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):  # an object whose repr itself fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(text: str, keep: str = "\n\t") -> str:
    """``text`` with every character that a terminal would act on, other than those in ``keep``, shown
    as its Python escape (``\\x1b``, ``\\r``, ``\\u202e``)."""
    if all(ch.isprintable() or ch in keep for ch in text):
        return text
    return "".join(ch if ch.isprintable() or ch in keep else repr(ch)[1:-1] for ch in text)


def twin_failure(twin: str, seat: str, role: str, exc: BaseException) -> str:
    """One line: the scripted twin, its seat and role, the exception (cut to QUOTED_CHARS characters,
    every unprintable character escaped, newlines too) and the innermost line of code that raised it."""
    error = f"{type(exc).__name__}: {exc}"
    if len(error) > QUOTED_CHARS:
        error = error[:QUOTED_CHARS] + f"... ({len(error)} characters)"
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {printable(frames[-1].filename, keep='')}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"scripted twin {twin!r} of seat {seat!r} (role {role!r}) raised {printable(error, keep='')}{at}"
