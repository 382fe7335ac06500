"""The handler behind ``cogym.envs.reasoning_gym``: generates reasoning-gym items and scores answers.

It runs inside a ``cogym.core.sandbox.Sandbox`` (which loads this file; it imports nothing from cogym so it
loads the same way however cogym is installed). ``cogym.envs.reasoning_gym`` also imports ``generate_item``
and ``level_count`` to generate in-process, so both make the same items; scoring runs only in the sandbox.
Requests (the sandbox adds the timer, a ``timeout_s`` per request, and the failure replies):

* on start, ``setup()`` imports ``reasoning_gym`` (the slow import, before the sandbox says it is ready);
* ``{"op": "catalog"}`` -> ``{"datasets": {name: [has_curriculum, level_count]}}`` (in the warm process);
* ``{"op": "generate", "name": str, "level": int, "seed": int}`` -> ``{"question": str, "answer": str | null}``;
  runs in the warm process, where the item stays cached under ``(name, level, seed)``;
* ``{"op": "score", "name", "level", "seed", "answer": str}`` -> ``{"score": float}`` (in [0, 1]),
  ``{"missing": true}`` when that item is not cached (generate it again, then ask again), or
  ``{"score": 0.0, "error": str}``; ``"timeout": true`` is added when the time budget ran out. It runs in a
  fresh fork of the warm process (its cache included), the only place the answer is interpreted.

Items never leave this process (their ``metadata`` holds tuples, fractions and other objects that JSON
does not carry); the parent names them by ``(name, level, seed)``. Why a sandbox: scorers evaluate model
output with ``eval``/sympy (``9**9**9**9`` never returns, ``__import__('os').system(...)`` runs a shell),
recurse (10 000 nested parentheses), or raise. Global ``random`` and ``numpy.random`` state is seeded from
the item seed around every generation and restored after, so an item depends on ``(name, level, seed)`` only.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

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


def catalog() -> dict[str, tuple[bool, int]]:
    """Every registered dataset: whether it has a curriculum, and its level count."""
    from reasoning_gym.factory import DATASETS, has_curriculum

    return {name: (has_curriculum(name), level_count(name)) for name in sorted(DATASETS)}


IN_PLACE = frozenset({"catalog", "generate"})  # trusted work that fills the cache: runs in the warm process
FAILED = {"score": 0.0}
_CACHE: OrderedDict = OrderedDict()


def setup() -> None:
    import reasoning_gym  # noqa: F401 - the slow import, before "ready"


def handle(request: dict[str, Any]) -> dict[str, Any]:
    if request["op"] == "catalog":
        return {"datasets": catalog()}
    key = (request["name"], int(request["level"]), int(request["seed"]))
    if request["op"] == "generate":
        dataset, entry = generate_item(*key)
        _CACHE[key] = (dataset, entry)
        if len(_CACHE) > CACHE_ITEMS:
            _CACHE.popitem(last=False)
        answer = entry.get("answer")
        return {"question": str(entry["question"]), "answer": None if answer is None else str(answer)}
    if request["op"] != "score":
        raise ValueError(f"unknown op {request['op']!r}")
    if key not in _CACHE:
        return {"missing": True}
    dataset, entry = _CACHE[key]
    score, error = score_item(dataset, entry, str(request["answer"]), key[2])
    return {"score": score} if error is None else {"score": 0.0, "error": error}
