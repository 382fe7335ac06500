"""Child process behind ``cogym.envs.verifiers.MathVerify``: judges one answer per request.

Run as a script (``python _math_verify_worker.py``); it imports nothing from cogym so it starts
the same way however cogym is installed. Protocol, one JSON object per line:

* on start, after a warm-up parse, it writes ``{"ready": true}``;
* request ``{"gold": str, "response": str, "timeout_s": float}`` -> reply ``{"ok": bool}``
  (``"timeout": true`` is added when the time budget ran out, which counts as not correct).

Why a process: ``math_verify``'s own timeout uses ``signal.alarm``, which only works in the main
thread and has one-second resolution, and short inputs such as ``9**9**9**9`` or 500 opening
braces keep sympy busy for seconds to forever. Here, in the child's main thread, a sub-second
interval timer interrupts the work; the parent kills the child if even that fails (a long call
inside C code is not interruptible by a signal).
"""

from __future__ import annotations

import os
import sys

# A script's own folder comes first on sys.path; ours holds modules named datasets.py,
# errors.py, base.py... that must not shadow libraries math_verify or sympy import.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import functools  # noqa: E402 - after the sys.path fix on purpose
import json  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402

from math_verify import parse, verify  # noqa: E402


class _Deadline(BaseException):
    """Raised by the timer. A BaseException on purpose: math_verify swallows ``Exception``
    per comparison and would go on to the next (possibly also slow) one."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Deadline()


def main() -> None:
    # math_verify warns once that its own timeout is disabled; we bound time here instead.
    logging.disable(logging.WARNING)
    @functools.lru_cache(maxsize=1024)
    def parse_gold(text: str) -> list:
        return parse(text, parsing_timeout=None)

    signal.signal(signal.SIGALRM, _on_alarm)
    verify(parse_gold("$\\frac{1}{2}$"), parse("0.5", parsing_timeout=None), timeout_seconds=None)
    # Replies go to a private copy of stdout; anything a library prints goes to stderr, so it
    # can never be mistaken for a reply.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, object] = {"ok": False}
        # Nested so that an alarm firing inside the inner ``finally`` (before the timer is
        # cleared) is still caught here rather than killing the process.
        try:
            signal.setitimer(signal.ITIMER_REAL, float(request["timeout_s"]))
            try:
                gold = parse_gold(request["gold"])
                answer = parse(request["response"], parsing_timeout=None)
                reply["ok"] = bool(gold) and bool(answer) and bool(verify(gold, answer, timeout_seconds=None))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0.0)
        except _Deadline:
            reply["timeout"] = True
        except Exception as exc:  # noqa: BLE001 - model output is adversarial: an answer that crashes sympy is not a correct answer
            reply["error"] = f"{type(exc).__name__}: {exc}"[:200]
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
