"""Benchmark: rollout tokens/s with the vLLM generation backend against the HF backend, side by side.

The workload is the default config's rollout (32 games of proposer_solver-v0, 8 solvers each, the
embedded tiny model at both seats, the default sampling settings). Two policies hold the same weights:
one generates with :class:`~cogym.agents.backends.HFBackend` (the default), the other with
:class:`~cogym.agents.backends.vllm.VLLMBackend`. Each repeat plays one rollout with each, on the same
seeds, alternating which goes first; a rollout is timed end to end (game resets, prompts, batched
generation, log-probs, Turns) and its generated tokens counted (up to and including the end token).
The first repeat of each warms up and is not counted. It prints tokens/s of each and the ratio
vllm / hf, per repeat and as medians.

It needs vLLM: on a machine without a GPU, build its CPU backend with scripts/build_vllm_cpu.sh and run
this script with that venv's python. On the CPU backend vLLM's engine runs in its own process and binds
its threads to the cores (VLLM_CPU_OMP_THREADS_BIND); HF runs in this process with torch's threads.

    python benchmarks/rollout_vllm_vs_hf.py [--repeats 10] [--games N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from cogym.agents.backends.vllm import VLLMBackend, require_vllm
from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy
from cogym.envs import make
from cogym.runners.config.load import load_config
from cogym.runners.rollout.turns import rollout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--games", type=int, default=None, help="games per rollout (default: the default config's)")
    args = ap.parse_args()
    require_vllm()
    torch.manual_seed(0)
    cfg = load_config(None)
    sampling = {pid: pc.sampling for pid, pc in cfg.policies.items()}
    hf = Policy.from_pretrained("tiny", name="hf")
    vllm = Policy.from_pretrained("tiny", name="vllm")
    vllm.backend = VLLMBackend(vllm)
    t0 = time.perf_counter()
    vllm.backend.start()  # outside the timed rollouts
    start_s = time.perf_counter() - t0
    agents = {name: {role: LLMAgent(policy, sampling[role]) for role in sampling}
              for name, policy in (("hf", hf), ("vllm", vllm))}
    games = [make(cfg.game.id, **cfg.game.kwargs) for _ in range(args.games or cfg.game.num_games)]
    system = {role: p.system for role, p in cfg.prompts.items()}
    tps: dict[str, list[float]] = {"hf": [], "vllm": []}
    for rep in range(args.repeats + 1):  # repeat 0 warms up
        seeds = [rep * 1000 + g for g in range(len(games))]
        line = []
        for name in (("hf", "vllm") if rep % 2 == 0 else ("vllm", "hf")):
            t0 = time.perf_counter()
            res = rollout(games, lambda seat, role, a=agents[name]: (role, a[role]), system, seeds)
            seconds = time.perf_counter() - t0
            tokens = sum(len(t.response_ids) for t in res.turns)
            if rep:
                tps[name].append(tokens / seconds)
            line.append(f"{name} {tokens} tokens in {seconds:.3f}s = {tokens / seconds:.0f} tok/s")
        if rep:
            print(f"repeat {rep}: {' | '.join(sorted(line))} | ratio vllm/hf {tps['vllm'][-1] / tps['hf'][-1]:.2f}")
    result = {"games": len(games), "repeats": args.repeats, "hf_tokens_per_s": statistics.median(tps["hf"]),
              "vllm_tokens_per_s": statistics.median(tps["vllm"]),
              "ratio_vllm_over_hf": statistics.median(v / h for v, h in zip(tps["vllm"], tps["hf"])),
              "vllm_engine_start_s": start_s, "device": "cuda" if torch.cuda.is_available() else "cpu"}
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}, indent=1))
    vllm.backend.close()


if __name__ == "__main__":
    main()
