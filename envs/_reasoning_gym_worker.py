"""Child process behind ``cogym.envs.reasoning_gym``: generates reasoning-gym items and scores answers.

Run as a script (``python _reasoning_gym_worker.py``); it imports nothing from cogym so it starts the
same way however cogym is installed. ``cogym.envs.reasoning_gym`` also imports its functions
(``generate_item``, ``score_item``) to generate in-process, so both make the same items. Protocol, one
JSON object per line:

* on start, after importing ``reasoning_gym``, it writes ``{"ready": true}``;
* ``{"op": "catalog", "timeout_s": float}`` -> ``{"datasets": {name: [has_curriculum, level_count]}}``;
* ``{"op": "generate", "name": str, "level": int, "seed": int, "timeout_s": float}`` ->
  ``{"question": str, "answer": str | null}``; the item stays cached under ``(name, level, seed)``;
* ``{"op": "score", "name", "level", "seed", "answer": str, "timeout_s": float}`` ->
  ``{"score": float}`` (in [0, 1]), ``{"missing": true}`` when that item is not cached (generate it
  again, then ask again), or ``{"score": 0.0, "error": str}``; ``"timeout": true`` is added when the
  time budget ran out.

Items never leave this process (their ``metadata`` holds tuples, fractions and other objects that JSON
does not carry); the parent names them by ``(name, level, seed)``. Why a process: scorers evaluate
model output with ``eval``/sympy (``9**9**9**9`` never returns), recurse (10 000 nested parentheses),
or raise. A sub-second interval timer in this main thread interrupts Python-level work; the parent kills
this process if even that fails (a long call inside C, such as a huge integer power, cannot be
interrupted). Global ``random`` and ``numpy.random`` state is seeded from the item seed around every
generation and restored after, so an item depends on ``(name, level, seed)`` only.
"""

from __future__ import annotations

import os
import sys

# A script's own folder comes first on sys.path; ours holds modules named datasets.py, base.py,
# reasoning_gym.py... that must not shadow the libraries reasoning_gym imports (or reasoning_gym itself).
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import json  # noqa: E402 - after the sys.path fix on purpose
import math  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
from collections import OrderedDict  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from typing import Any, Iterator  # noqa: E402

import numpy as np  # noqa: E402

CACHE_ITEMS = 1024  # items kept for scoring (a few games' worth of batches; a miss regenerates)


@contextmanager
def seeded_globals(seed: int) -> Iterator[None]:
    """Run with the global ``random`` and ``numpy.random`` state seeded from ``seed``, restored after:
    a generator or scorer that draws from them (``pool_matrix`` seeds numpy's) repeats by seed and
    nothing outside sees its draws."""
    saved_py, saved_np = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        random.setstate(saved_py)
        np.random.set_state(saved_np)


def level_count(name: str) -> int:
    """How many curriculum levels dataset ``name`` has (its longest attribute's), 1 without a curriculum."""
    from reasoning_gym.factory import create_curriculum, has_curriculum

    if not has_curriculum(name):
        return 1
    attributes = create_curriculum(name).attributes.values()
    return max((len(a.levels) for a in attributes), default=1)


def make_dataset(name: str, level: int, seed: int) -> Any:
    """Dataset ``name`` of one item at curriculum ``level`` (all attributes at that level, capped at each
    attribute's highest; reasoning-gym's inclusive ranges) with ``seed``. Level 0 of a dataset without a
    curriculum is its default configuration."""
    from reasoning_gym.factory import DATASETS, create_curriculum, has_curriculum

    if name not in DATASETS:
        raise ValueError(f"reasoning-gym has no dataset {name!r}")
    dataset_cls, config_cls = DATASETS[name]
    if not 0 <= level < level_count(name):
        raise ValueError(f"{name} has levels 0..{level_count(name) - 1}, not {level}")
    if has_curriculum(name):
        curriculum = create_curriculum(name)
        curriculum.set_global_level(level)
        config = curriculum.generate_configuration({"seed": seed, "size": 1})
    else:
        config = config_cls(seed=seed, size=1)
    return dataset_cls(config=config)


def generate_item(name: str, level: int, seed: int) -> tuple[Any, dict[str, Any]]:
    """``(dataset, entry)``: the item of ``(name, level, seed)``, the same every time."""
    with seeded_globals(seed):
        dataset = make_dataset(name, level, seed)
        entry = dataset[0]
    return dataset, entry


def score_item(dataset: Any, entry: dict[str, Any], answer: str, seed: int) -> tuple[float, str | None]:
    """The dataset's score of ``answer`` for ``entry`` as a float in [0, 1], and why it is 0 when the scorer
    failed (an exception, or a value that is not a finite number)."""
    with seeded_globals(seed):
        value = dataset.score_answer(answer, entry)
    try:
        score = float(value)
    except (TypeError, ValueError):
        return 0.0, f"the scorer returned {type(value).__name__}, not a number"
    if not math.isfinite(score):
        return 0.0, f"the scorer returned {score}"
    return min(1.0, max(0.0, score)), None


class _Deadline(BaseException):
    """Raised by the timer. A BaseException on purpose: scorers catch ``Exception`` and would carry on."""


_FIRED = [False]  # the timer went off during this request (a scorer's bare ``except:`` may swallow _Deadline)


def _on_alarm(signum: int, frame: object) -> None:
    _FIRED[0] = True
    raise _Deadline()


def catalog() -> dict[str, tuple[bool, int]]:
    """Every registered dataset: whether it has a curriculum, and its level count."""
    from reasoning_gym.factory import DATASETS, has_curriculum

    return {name: (has_curriculum(name), level_count(name)) for name in sorted(DATASETS)}


def _serve(request: dict[str, Any], cache: OrderedDict) -> dict[str, Any]:
    if request["op"] == "catalog":
        return {"datasets": catalog()}
    key = (request["name"], int(request["level"]), int(request["seed"]))
    if request["op"] == "generate":
        dataset, entry = generate_item(*key)
        cache[key] = (dataset, entry)
        if len(cache) > CACHE_ITEMS:
            cache.popitem(last=False)
        answer = entry.get("answer")
        return {"question": str(entry["question"]), "answer": None if answer is None else str(answer)}
    if key not in cache:
        return {"missing": True}
    cache.move_to_end(key)
    dataset, entry = cache[key]
    score, error = score_item(dataset, entry, str(request["answer"]), key[2])
    return {"score": score} if error is None else {"score": 0.0, "error": error}


def main() -> None:
    import reasoning_gym  # noqa: F401 - the slow import, before "ready"

    signal.signal(signal.SIGALRM, _on_alarm)
    # Replies go to a private copy of stdout; anything a library prints (bf prints dots) goes to stderr,
    # so it can never be mistaken for a reply.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    cache: OrderedDict = OrderedDict()
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any]
        # Nested so that an alarm firing inside the inner ``finally`` (before the timer is cleared) is
        # still caught here rather than killing the process.
        _FIRED[0] = False
        try:
            signal.setitimer(signal.ITIMER_REAL, float(request["timeout_s"]))
            try:
                reply = _serve(request, cache)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0.0)
            if _FIRED[0]:  # the scorer caught the deadline (``except:``) and returned a score it never finished
                raise _Deadline()
        except _Deadline:
            reply = {"score": 0.0, "timeout": True, "error": f"no result within {float(request['timeout_s']):g} s"}
        except BaseException as exc:  # noqa: BLE001 - model output is adversarial: a crashing scorer scores 0
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {"score": 0.0, "error": f"{type(exc).__name__}: {exc}"[:200]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
