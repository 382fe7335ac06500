"""Benchmark: what the scorer sandbox (``cogym.core.sandbox``) costs per scored answer, in the same run.

Scores answers to reasoning-gym items through three workers built from the same handler
(``envs/_reasoning_gym_worker.py``) and prints, per worker, the median and p99 milliseconds per scored
answer (the round trip ``reasoning_gym.score`` pays) and their ratio to the first:

* ``unsandboxed``: the worker before the sandbox: one subprocess that scores in place, with the
  parent's environment (the baseline);
* ``fallback``: the sandbox without namespaces: a fork per answer, rlimits, a scrubbed environment;
* ``sandbox``: the sandbox as this machine gives it (``isolation()``): with user, PID, network and mount
  namespaces where allowed.

Answers alternate between an item's reference answer and a wrong one, over a few datasets whose scorers
``eval`` (spiral_matrix), parse with sympy (countdown) or compare strings (basic_arithmetic). Each worker
is timed twice: answers back to back (a batch of games scoring at once: each answer also waits for the
previous answer's fork to be cleaned up and the next one made) and spaced by ``--gap-ms`` (answers
between generations: the sandbox has made its next fork before the answer comes).

    python benchmarks/sandbox_cost.py [--answers 300] [--gap-ms 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from cogym.core.sandbox import Sandbox, isolation
from cogym.envs import reasoning_gym as rg

HANDLER = Path(rg.__file__).with_name("_reasoning_gym_worker.py")
DATASETS = ("spiral_matrix", "countdown", "basic_arithmetic")
ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _in_place_handler(folder: str) -> Path:
    """The handler with scoring moved into the warm process (no fork per answer): the worker before the sandbox."""
    path = Path(folder) / "in_place_handler.py"
    path.write_text(
        "import importlib.util\n"
        f"_spec = importlib.util.spec_from_file_location('_rg_handler', {str(HANDLER)!r})\n"
        "_rg = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_rg)\n"
        "setup, handle, FAILED = _rg.setup, _rg.handle, _rg.FAILED\n"
        "IN_PLACE = frozenset({'catalog', 'generate', 'score'})\n")
    return path


def _measure(box: Sandbox, answers: int, gap_s: float) -> list[float]:
    """Seconds per scored answer over ``answers`` answers (after the items are made and one warm-up each)."""
    items = []
    for name in DATASETS:
        reply = box.request({"op": "generate", "name": name, "level": 0, "seed": 3, "timeout_s": 10.0}, 10.25)
        assert reply is not None and "answer" in reply, reply
        items.append((name, reply["answer"]))
    times = []
    for i in range(answers + len(items)):
        name, answer = items[i % len(items)]
        time.sleep(gap_s)
        request = {"op": "score", "name": name, "level": 0, "seed": 3, "timeout_s": 5.0,
                   "answer": answer if i % 2 == 0 else "wrong"}
        t0 = time.perf_counter()
        reply = box.request(request, 5.25)
        elapsed = time.perf_counter() - t0
        assert reply is not None and "score" in reply, reply
        assert (reply["score"] == 1.0) == (i % 2 == 0), (name, reply)
        if i >= len(items):  # the first answer of each item warms up
            times.append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=30.0)
    args = parser.parse_args()
    print(f"isolation here: {isolation().description}")
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.answers} answers per worker")
    with tempfile.TemporaryDirectory() as folder:
        workers = {
            "unsandboxed": Sandbox(_in_place_handler(folder), "baseline", "", env=ENV, namespaces=False),
            "fallback": Sandbox(HANDLER, "fallback", "", env=ENV, namespaces=False),
            "sandbox": Sandbox(HANDLER, "sandbox", "", env=ENV),
        }
        results: dict[tuple[str, str], list[float]] = {}
        try:
            for spacing, gap_s in (("back to back", 0.0), (f"{args.gap_ms:g} ms apart", args.gap_ms / 1e3)):
                for label, box in workers.items():
                    results[label, spacing] = _measure(box, args.answers, gap_s)
        finally:
            for box in workers.values():
                box.close()
    print(f"{'answers':<14} {'worker':<12} {'median ms':>10} {'p99 ms':>8} {'median x':>9} {'p99 x':>7}")
    for (label, spacing), times in results.items():
        base = results["unsandboxed", spacing]
        ratios = [statistics.median(times) / statistics.median(base), _p99(times) / _p99(base)]
        print(f"{spacing:<14} {label:<12} {statistics.median(times) * 1e3:>10.2f} {_p99(times) * 1e3:>8.2f} "
              f"{ratios[0]:>9.2f} {ratios[1]:>7.2f}")


def _p99(times: list[float]) -> float:
    return statistics.quantiles(times, n=100)[98]


if __name__ == "__main__":
    main()
