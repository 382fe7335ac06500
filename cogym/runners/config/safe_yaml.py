"""YAML as every config, override and ``--kwarg`` is read: safe, bounded, and every fault one line.

A config is the user's own, but it is also what gets shared, pasted and generated, so the reader
holds it to bounds that no real config comes near: a file of at most ``MAX_CONFIG_BYTES``, UTF-8,
nested at most ``MAX_DEPTH`` levels and holding at most ``MAX_NODES`` values once every alias is expanded.
An alias is fine (``sampling: *shared``); a "billion laughs" alias bomb (aliases of aliases, each
ten times the last) or a recursive alias (``a: &a [*a]``) is refused while it is read, before a
single copy is made, instead of hanging the command later while something (an error message, the
run's saved config.yaml) walks the expanded value. A document nested thousands deep is refused
before the parser's recursion runs out. Each failure is a :class:`ConfigError` of one line that
names the file (or override) and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent

from cogym.core.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: the shipped configs are under 10 KiB
MAX_DEPTH = 100  # nested mappings and lists; the shipped configs are under 10 deep
# Values (scalars, lists, mappings) in the document with every alias expanded. Above the count of any
# file under MAX_CONFIG_BYTES without aliases (at most one value per two bytes), so only aliases reach it.
MAX_NODES = 1_000_000


class _Refused(yaml.YAMLError):
    """Valid YAML that is too deep or expands too far: said without "not valid YAML"."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts every value as the document would hold it with aliases expanded (an
    anchored value's count is remembered, and an alias adds it), and the nesting depth the same way
    (an anchored value's height is remembered, and an alias reaches that far below where it stands:
    chained anchors each under MAX_DEPTH would otherwise expand to a value thousands deep), refusing
    either past its bound while composing, when nothing has been copied yet."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0
        self._deepest = 0  # the deepest level reached, aliases expanded, within the anchored value being read
        self._anchored: dict[str, tuple[int, int] | None] = {}  # anchor -> (expanded count, height); None: being read

    def compose_node(self, parent, index):  # noqa: ANN001 (PyYAML's signature)
        if self.check_event(AliasEvent):
            event = self.peek_event()
            known = self._anchored.get(event.anchor, (0, 0))  # an unknown anchor: the composer says so
            if known is None:
                raise _Refused(f"line {event.start_mark.line + 1}: alias *{event.anchor} refers to a value "
                               "that contains it (a recursive alias)")
            size, height = known
            self._deeper(self._depth + height, event)
            self._count(size, event)
            return super().compose_node(parent, index)
        event = self.peek_event()
        self._depth += 1
        self._deeper(self._depth, event)
        anchor, before, outer = event.anchor, self._nodes, self._deepest
        if anchor is not None:
            self._anchored[anchor] = None
            self._deepest = self._depth
        self._count(1, event)
        node = super().compose_node(parent, index)
        if anchor is not None:
            self._anchored[anchor] = (self._nodes - before, self._deepest - self._depth + 1)
            self._deepest = max(outer, self._deepest)
        self._depth -= 1
        return node

    def _deeper(self, depth: int, event) -> None:  # noqa: ANN001
        if depth > MAX_DEPTH:
            raise _Refused(f"line {event.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep"
                           + (" once its aliases are expanded" if isinstance(event, AliasEvent) else ""))
        self._deepest = max(self._deepest, depth)

    def _count(self, n: int, event) -> None:  # noqa: ANN001
        self._nodes += n
        if self._nodes > MAX_NODES:
            raise _Refused(f"line {event.start_mark.line + 1}: more than {MAX_NODES:,} values once its aliases are "
                           "expanded (an alias of aliases that multiplies a value); write the values out or use fewer aliases")


def _one_line(exc: yaml.YAMLError) -> str:
    """A PyYAML error (several lines: the problem, marks and a snippet) as one line."""
    if isinstance(exc, _Refused):
        return str(exc)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = " ".join(x for x in (exc.context, exc.problem) if x)
        return f"{where}{what}" or type(exc).__name__
    return " ".join(str(exc).split())


def parse_yaml(text: str, where: str) -> Any:
    """``text`` read as YAML under the bounds of this module; ``where`` names it in the ConfigError
    ("configs/x.yaml", "override 'a=b'")."""
    loader = None
    try:
        loader = _BoundedLoader(text)  # its reader refuses control characters here, before any parsing
        return loader.get_single_data()
    except _Refused as exc:
        raise ConfigError(f"{where}: {_one_line(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {_one_line(exc)}") from None
    except (ValueError, OverflowError) as exc:  # a value YAML's resolver matched but cannot build: 2026-13-45, !!int '0x'
        problem = " ".join(str(exc).split())
        if "integer string conversion" in problem:  # Python's guard against quadratic int(): its advice is not the user's
            problem = "an integer of more than 4300 digits"
        raise ConfigError(f"{where} is not valid YAML: {problem}") from None
    except RecursionError:  # a key nested past the composer's own depth check (a mapping key of mappings)
        raise ConfigError(f"{where}: nested too deeply to read") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml_file(path: Path, what: str = "config file") -> Any:
    """The YAML document in ``path``: a regular file of at most MAX_CONFIG_BYTES of UTF-8 (each other
    case a one-line ConfigError naming the path)."""
    shown = repr(str(path))
    if path.is_dir():
        raise ConfigError(f"{what} {shown} is a directory; pass a YAML file such as configs/proposer_solver.yaml")
    if not path.is_file():
        raise ConfigError(f"{what} {shown} does not exist; pass a YAML file such as configs/proposer_solver.yaml")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:  # unreadable: permissions, a broken mount
        raise ConfigError(f"{what} {shown} cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {shown} is larger than {MAX_CONFIG_BYTES >> 20} MiB; a config is a few KiB "
                          "(data belongs in files the game reads, named in game.kwargs)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{what} {shown} is not UTF-8 text (byte {exc.start} on line {line}); save it as UTF-8") from None
    return parse_yaml(text, str(path))
