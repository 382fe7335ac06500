"""Tools a seat can call from its messages: the protocol, the call syntax and its bounded parser.

A model calls a tool by writing, anywhere in its message::

    <tool name="search">capital of Zorvania</tool>

The name is a registered tool's, the text between the tags is its argument (one string; a tool
parses it further if it needs to). :func:`parse_calls` reads the calls out of a message and
:class:`Toolbox` runs them for a game: which tools each role may use, a per-episode call budget,
and every result or failure returned as the text of a tool message.

Model output is adversarial input, so everything here is bounded: the parser reads at most
``max_message_chars`` of a message and finds at most ``max_calls`` calls with plain substring
search (no regular expression over the message, so no backtracking); an argument longer than
``max_args_chars``, an empty one, a nested call, an unknown or forbidden tool and a call over the
budget each become an error message, never an exception. :func:`run_tool` runs a call with the
tool's own time limit and cuts its output to the tool's size limit; a tool that raises or hangs
gives an error message too (a call that overruns keeps running in its daemon thread until it
returns, but neither the game nor the interpreter's exit waits for it).
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable

OPEN = "<tool"
CLOSE = "</tool>"
MAX_MESSAGE_CHARS = 20_000  # of a message the parser reads
MAX_ARGS_CHARS = 1_000  # of one call's argument
MAX_CALLS = 8  # calls read from one message


@runtime_checkable
class Tool(Protocol):
    """A tool: a ``name`` (the call syntax's), a ``description`` (for prompts), bounds on one call's
    time and output, and ``call(args) -> text``, which may raise (the error becomes a message)."""

    name: str
    description: str
    timeout_s: float
    max_output_chars: int

    def call(self, args: str) -> str: ...


@dataclass(frozen=True)
class ToolCall:
    """A call read from a message: the tool's name and its argument, or ``error`` when the call is
    malformed (then ``name`` is what could be read of it)."""

    name: str
    args: str = ""
    error: str = ""


def call_syntax(name: str, args: str) -> str:
    """The text of a call, as a model writes it."""
    return f'<tool name="{name}">{args}</tool>'


def _name_of(tag: str) -> str | None:
    """The name in an opening tag's attributes (``name="x"`` or ``name='x'``), or None."""
    at = tag.find("name=")
    if at < 0 or at + 5 >= len(tag) or tag[at + 5] not in "\"'":
        return None
    quote = tag[at + 5]
    end = tag.find(quote, at + 6)
    return tag[at + 6:end].strip() if end > 0 else None


def parse_calls(message: str, max_calls: int = MAX_CALLS, max_message_chars: int = MAX_MESSAGE_CHARS,
                max_args_chars: int = MAX_ARGS_CHARS) -> list[ToolCall]:
    """Every tool call in ``message`` (at most ``max_calls``, from its first ``max_message_chars``
    characters), in order; malformed ones carry an ``error``. Linear in the text read."""
    text = message[:max_message_chars]
    calls: list[ToolCall] = []
    pos = 0
    while len(calls) < max_calls:
        start = text.find(OPEN, pos)
        if start < 0:
            break
        if start + len(OPEN) < len(text) and text[start + len(OPEN)] not in " \t\n>":
            pos = start + len(OPEN)  # another tag that starts the same way, e.g. <tools>
            continue
        close_tag = text.find(">", start)
        if close_tag < 0:
            calls.append(ToolCall("", error="a call's opening tag is not closed with '>'"))
            break
        name = _name_of(text[start + len(OPEN):close_tag])
        end = text.find(CLOSE, close_tag + 1)
        if end < 0:
            calls.append(ToolCall(name or "", error=f"a call has no closing {CLOSE}"))
            break
        pos = end + len(CLOSE)
        args = text[close_tag + 1:end].strip()
        if not name:
            calls.append(ToolCall("", error='a call names no tool: write <tool name="NAME">ARGUMENT</tool>'))
        elif OPEN in args:
            calls.append(ToolCall(name, error="a call inside a call's argument; write one call at a time"))
        elif not args:
            calls.append(ToolCall(name, error=f"the call of {name!r} has an empty argument"))
        elif len(args) > max_args_chars:
            calls.append(ToolCall(name, error=f"the argument of {name!r} is {len(args)} characters long, more than "
                                              f"{max_args_chars}"))
        else:
            calls.append(ToolCall(name, args))
    return calls


def run_tool(tool: Tool, args: str) -> tuple[str, bool]:
    """``(text, ok)``: the tool's output cut to its ``max_output_chars``, or an error message when it
    raises or overruns its ``timeout_s``. Each call runs in a daemon thread of its own, so a call that
    hangs holds no pool slot another call needs, nor the interpreter's exit."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def work() -> None:
        try:
            future.set_result(tool.call(args))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            future.set_exception(exc)

    threading.Thread(target=work, name=f"cogym-tool-{tool.name}", daemon=True).start()
    try:
        out = future.result(timeout=tool.timeout_s)
    except concurrent.futures.TimeoutError:
        return f"error: {tool.name} did not answer within {tool.timeout_s:g} s", False
    except Exception as exc:  # noqa: BLE001 - a tool's failure is the model's information, not a crash
        return f"error: {tool.name} failed: {type(exc).__name__}: {str(exc)[:200]}", False
    text = str(out)
    if len(text) > tool.max_output_chars:
        text = text[:tool.max_output_chars] + " [...]"
    return text, True


@dataclass
class ToolResult:
    """One call's outcome: the tool (or what the message named), its text for the tool message, and
    whether it ran (``ok``; False for an error of any kind)."""

    name: str
    text: str
    ok: bool


@dataclass
class Toolbox:
    """A game's tools: ``tools`` by name, ``allowed`` tool names per role (a role missing from it may
    use none), and ``budget`` calls per episode for each seat (counted by :meth:`handle`, reset by
    :meth:`reset`)."""

    tools: Mapping[str, Tool]
    allowed: Mapping[str, Sequence[str]]
    budget: int = 3
    used: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for role, names in self.allowed.items():
            unknown = [n for n in names if n not in self.tools]
            if unknown:
                raise ValueError(f"role {role!r} may use {unknown}, which are not tools here ({sorted(self.tools)})")
        if self.budget < 0:
            raise ValueError(f"budget must be >= 0, got {self.budget}")

    def reset(self) -> None:
        self.used.clear()

    def left(self, seat: str) -> int:
        return self.budget - self.used.get(seat, 0)

    def handle(self, seat: str, role: str, message: str) -> list[ToolResult]:
        """Run the calls in ``seat``'s (of ``role``) message; each gives a result (errors included).
        A call over the seat's budget is not run."""
        results = []
        for call in parse_calls(message):
            if call.error:
                results.append(ToolResult(call.name, f"error: {call.error}", False))
                continue
            if call.name not in self.allowed.get(role, ()):
                allowed = ", ".join(self.allowed.get(role, ())) or "none"
                results.append(ToolResult(call.name, f"error: no tool {call.name!r} for {role} (tools: {allowed})", False))
                continue
            if self.left(seat) <= 0:
                results.append(ToolResult(call.name, f"error: no tool calls left ({self.budget} an episode)", False))
                continue
            self.used[seat] = self.used.get(seat, 0) + 1
            text, ok = run_tool(self.tools[call.name], call.args)
            results.append(ToolResult(call.name, text, ok))
        return results
