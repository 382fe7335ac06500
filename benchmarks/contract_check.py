"""Benchmark: what the play-time game-contract check costs, in the same run.

The play loop holds every step to the game contract (``cogym.envs.contract``): each reward a finite
number inside ``spec.reward_range``, each observation inside the game's observation space, each
``infos`` entry of the contract's types. This trains the default config
(``configs/proposer_solver.yaml``: 32 games, a proposer and 8 solvers a game) for ``--iterations``
iterations, without held-out evaluation, checkpoints, plots or TensorBoard, and times every call of
the three checks. It prints, per iteration (median over iterations 2..), the checks' milliseconds
beside the iteration's and the rollout's, and their ratio.

Then it runs the same iterations again with the checks replaced by no-ops (same seed: the same games
and tokens) and prints both runs' median rollout time, whose ratio is the check's cost as a user sees
it (within the noise of a shared machine: the timed calls above are the finer measure).

    python benchmarks/contract_check.py [--iterations 12] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from cogym.envs import contract
from cogym.runners.rollout import loop as core
from cogym.runners.rollout import turns as rollout
from cogym.runners.rollout import tokens as token_rollout
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train

SPOTS = ((core, "check_rewards"), (core, "check_infos"), (contract, "check_observation"))


def _patch(timed: bool, spent: dict[str, list[float]]) -> list[tuple]:
    """Wrap the checks with timers (``timed``) or replace them with no-ops; returns what to restore."""
    saved = []
    for module, name in SPOTS:
        fn = getattr(module, name)
        saved.append((module, name, fn))

        def wrapper(*args, _fn=fn, _calls=spent.setdefault(name, []), **kwargs):
            t0 = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                _calls.append(time.perf_counter() - t0)

        setattr(module, name, wrapper if timed else (lambda *args, **kwargs: None))
    return saved


def _run(iterations: int, overrides: list[str], timed: bool) -> tuple[list[dict], dict[str, list[float]]]:
    """One training run; its metric rows and each check's calls' seconds (none untimed)."""
    cfg = load_config(None, [f"run.iterations={iterations}", "run.checkpoint_every=0", "eval.declared=false",
                             "run.tensorboard=false", "run.plot=false", *overrides])
    spent: dict[str, list[float]] = {}
    saved = _patch(timed, spent)
    assert rollout.observed_text is contract.observed_text and token_rollout.observed_text is contract.observed_text
    try:
        with tempfile.TemporaryDirectory() as tmp:
            train(cfg, Path(tmp) / "run", progress=False)
            rows = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
    rows = [r for r in rows if "rollout_s" in r]
    return rows, spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=12, help="training iterations a run (default 12)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override (repeatable)")
    args = ap.parse_args()
    if args.iterations < 2:
        ap.error("--iterations must be >= 2 (the first iteration warms up and is not counted)")
    checked, spent = _run(args.iterations, args.set, timed=True)
    bare, _ = _run(args.iterations, args.set, timed=False)
    med = lambda rows, key: statistics.median(r[key] for r in rows[1:])  # noqa: E731
    n = len(checked)
    check_ms = sum(sum(calls) for calls in spent.values()) / n * 1e3
    print(f"default config, {args.iterations} iterations (medians over iterations 2..)")
    print(f"  contract checks      {check_ms:8.2f} ms an iteration (mean over the run's calls), of which")
    for name, calls in spent.items():
        print(f"    {name:<18} {sum(calls) / n * 1e3:8.2f} ms, {len(calls) / n:6.0f} calls of {statistics.median(calls) * 1e6:.1f} us")
    print(f"  iteration            {med(checked, 'iteration_s') * 1e3:8.1f} ms  -> checks are "
          f"{check_ms / (med(checked, 'iteration_s') * 1e3):.2%} of it")
    print(f"  rollout              {med(checked, 'rollout_s') * 1e3:8.1f} ms  -> checks are "
          f"{check_ms / (med(checked, 'rollout_s') * 1e3):.2%} of it")
    print(f"  rollout, no checks   {med(bare, 'rollout_s') * 1e3:8.1f} ms  (ratio checked / unchecked: "
          f"{med(checked, 'rollout_s') / med(bare, 'rollout_s'):.3f})")
    same = [r.get("solver/reward") for r in checked] == [r.get("solver/reward") for r in bare]
    print(f"  same rewards with and without the checks: {same}")


if __name__ == "__main__":
    main()
