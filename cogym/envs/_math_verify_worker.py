"""The handler behind ``cogym.envs.verifiers.MathVerify``: judges one answer per request.

It runs inside a ``cogym.core.sandbox.Sandbox`` (which loads this file; it imports nothing from cogym so it
loads the same way however cogym is installed). Each request runs in a fresh fork of the warm process under
the sandbox's interval timer:

* on start, ``setup()`` imports math_verify and makes a warm-up parse;
* request ``{"gold": str, "response": str, "timeout_s": float}`` -> reply ``{"ok": bool}``
  (``"timeout": true`` is added when the time budget ran out, which counts as not correct).

Why a sandbox: ``math_verify``'s own timeout uses ``signal.alarm``, which only works in the main thread and
has one-second resolution; short inputs such as ``9**9**9**9`` or 500 opening braces keep sympy busy for
seconds to forever, and sympy's parser evaluates what it reads.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from math_verify import parse, verify

FAILED = {"ok": False}


@functools.lru_cache(maxsize=1024)
def parse_gold(text: str) -> list:
    return parse(text, parsing_timeout=None)


def setup() -> None:
    # math_verify warns once that its own timeout is disabled; the sandbox bounds time instead.
    logging.disable(logging.WARNING)
    verify(parse_gold("$\\frac{1}{2}$"), parse("0.5", parsing_timeout=None), timeout_seconds=None)


def handle(request: dict[str, Any]) -> dict[str, Any]:
    gold = parse_gold(request["gold"])
    answer = parse(request["response"], parsing_timeout=None)
    return {"ok": bool(gold) and bool(answer) and bool(verify(gold, answer, timeout_seconds=None))}
