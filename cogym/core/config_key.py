"""A config key declared once: a dataclass field that carries its meaning.

``lr: float = key(1e-4, "the optimizer's learning rate")`` is a field with that default whose help
text (and, for a string key with a fixed set of values, its ``choices``) travels with it in
``dataclasses.fields(cls)`` metadata, so ``cogym config`` and docs/config.md read it from the
class itself. ``same_key(OtherSection, "name")`` declares a key that means what another
section's key of that name means (its default and help), instead of writing them a second time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional

HELP = "help"
CHOICES = "choices"
SAME_AS = "same_as"  # set by same_key: the section and key that declare it


def key(default: Any = dataclasses.MISSING, help: str = "", *, factory: Callable[[], Any] | Any = dataclasses.MISSING,
        choices: Optional[Iterable[str]] = None, **options: Any) -> Any:
    """A dataclass field with ``default`` (or ``factory()`` for a list or dict) and its help text;
    ``choices``: the values a string key may take; ``options`` go to :func:`dataclasses.field` (``repr``)."""
    metadata: dict[str, Any] = {HELP: help}
    if choices is not None:
        metadata[CHOICES] = tuple(choices)
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata, **options)


def same_key(cls: type, name: str) -> Any:
    """A field meaning what ``cls``'s key ``name`` means: its default and metadata, declared there."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return dataclasses.field(default=f.default, default_factory=f.default_factory,
                             metadata={**f.metadata, SAME_AS: f"{cls.__name__}.{name}"})


def help_of(f: dataclasses.Field) -> str:
    """The help text of a field made by :func:`key` ("" for any other field)."""
    return f.metadata.get(HELP, "")


def choices_of(f: dataclasses.Field) -> tuple[str, ...]:
    """The values a string key may take, where its field declares them (else ``()``)."""
    return f.metadata.get(CHOICES, ())
