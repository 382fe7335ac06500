"""Naming the closest of some known names when a user gives one that is not among them.

:func:`did_you_mean` is the one place cogym offers a close match ("did you mean 'hinter'?"); every
layer uses it (envs for game ids and arguments, learners for keys and algorithms, runners for config
keys and choices), so the suggestions read alike.
"""

from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(word: object, options: Iterable[str], *, n: int = 1, form: str = " (did you mean {}?)",
                 show=repr) -> str:
    """``form`` with the names in ``options`` closest to ``word`` (at most ``n``, each written by
    ``show``, joined by commas) in place of ``{}``; ``""`` when none is close."""
    close = difflib.get_close_matches(str(word), list(options), n=n)
    return form.format(", ".join(map(show, close))) if close else ""
