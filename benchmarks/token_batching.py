"""Benchmark: token-level play batched across games against one seat at a time, in one run.

1. Throughput. The same token-level workload is played by ``token_rollout`` twice per repeat from
   the same torch seed: batched (every open message of the policy advances in one forward; new
   messages are prefilled together) and with the agent's ``max_batch=1`` (one message per forward,
   the old one-seat-at-a-time path). Both draw the same tokens. Workloads, each ``--games`` games
   on the embedded tiny model with the policy's chat template as codec:
   ``interruptible_verifier`` as ``configs/interruptible_verifier.yaml`` sets it up (8 solvers a
   game, temperature 1, at most 8 tokens a message; the verifier cuts most answers after a token
   or two, so most of the work is prompt prefill), and ``proposer_solver`` as
   ``configs/proposer_solver.yaml`` (a proposer and 8 solvers, the tiny model at every seat).
   Tokens/s is model tokens over the rollout's wall time (resets and game steps included, as in
   ``rollout_vs_generate.py``); "gen" counts only the time inside the agent's calls. The bar is
   batched >= 5x one at a time.
2. Per-token cost against context. ``--rows`` messages whose prompts are ``L`` ids (32 and 512)
   are prefilled, then advanced ``--tokens`` steps in one batched forward each (an end token does
   not stop them); the per-token time is the median step over rows. The bar is a 512/32 ratio of
   at most 1.5. Attention must read every cached key and value of every row each step (no copy:
   the rows are a view of the buffer), so a token at 512 ids pays the same extra time at any row
   count, while batching shrinks the rest of its cost; the table shows 1, 8 and 32 rows.

    python benchmarks/token_batching.py [--games 32] [--repeats 3] [--rows 1 8 32] [--tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy, SamplingParams
from cogym.agents.types import Request
from cogym.envs import make
from cogym.runners.token_rollout import ChatCodec, token_rollout

SYSTEM = {"solver": "Solve.", "proposer": "Propose."}
SAMPLING = SamplingParams(max_new_tokens=8, temperature=1.0)
WORKLOADS = {  # name -> (game id, game kwargs), as the configs of the same name set them
    "interruptible_verifier": ("interruptible_verifier-v0", dict(num_solvers=8, partial_credit=0.5)),
    "proposer_solver": ("proposer_solver-v0", dict(num_solvers=8, verifier="exact", proposer_reward="learnability")),
}


def rollout_rates(policy: Policy, games: list, max_batch: int, seed: int) -> tuple[float, float, int]:
    """(tokens per second of wall time, per second inside the agent, tokens) of one rollout of ``games``."""
    agent = LLMAgent(policy, SAMPLING, name="tiny", max_batch=max_batch)
    torch.manual_seed(seed)
    res = token_rollout(games, lambda seat, role: (role, agent), SYSTEM, seeds=[seed * 1000 + g for g in range(len(games))])
    return res.generated_tokens / res.seconds, res.generated_tokens / res.generate_seconds, res.generated_tokens


def per_token_seconds(policy: Policy, rows: int, context: int, tokens: int) -> float:
    """Median seconds of one batched step of ``rows`` messages at ``context`` ids, divided by ``rows``."""
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=tokens + 1, temperature=1.0), name="solver")
    overhead = len(policy.render([{"role": "user", "content": ""}]))
    if context <= overhead:
        raise SystemExit(f"--contexts must exceed the chat template's {overhead} ids")
    text = ("1+" * context)[: context - overhead]
    requests = [Request(messages=[{"role": "user", "content": text}], role="solver", seat=f"s{i}") for i in range(rows)]
    handles = [m.handle for m in agent.begin(requests, encode=lambda t: [])]
    assert len(agent.streams.open[handles[0]].prompt_ids) == context
    agent.advance(handles)  # the prefill, not timed
    times = []
    for _ in range(tokens):
        t0 = time.perf_counter()
        agent.advance(handles)
        times.append(time.perf_counter() - t0)
    agent.close(handles)
    return statistics.median(times) / rows


def throughput(policy: Policy, codec: ChatCodec, n_games: int, repeats: int) -> None:
    print(f"{'workload':<24} {'path':<20} {'tok/s':>7} {'gen tok/s':>10} {'tokens':>7}")
    for name, (game_id, kwargs) in WORKLOADS.items():
        games = [make(game_id, granularity="token", codec=codec, max_turn_tokens=SAMPLING.max_new_tokens, **kwargs)
                 for _ in range(n_games)]
        rollout_rates(policy, games[:4], 0, seed=99)  # warm-up
        runs: dict[int, list[tuple[float, float, int]]] = {0: [], 1: []}
        for r in range(repeats):
            for cap in (0, 1):
                runs[cap].append(rollout_rates(policy, games, cap, seed=r))
        med = {cap: [statistics.median(x[k] for x in runs[cap]) for k in range(3)] for cap in runs}
        for cap, label in ((0, "batched"), (1, "one seat at a time")):
            print(f"{name:<24} {label:<20} {med[cap][0]:>7.0f} {med[cap][1]:>10.0f} {med[cap][2]:>7.0f}")
        print(f"{name:<24} ratio batched / one at a time: {med[0][0] / med[1][0]:.2f}x wall, "
              f"{med[0][1] / med[1][1]:.2f}x gen (bar: >= 5)")


def context_cost(policy: Policy, rows: list[int], contexts: list[int], tokens: int, repeats: int) -> None:
    lo, hi = contexts
    print(f"{'rows':>5} {'ms/token @' + str(lo):>14} {'ms/token @' + str(hi):>15} {'extra ms':>9} {'ratio':>7}")
    for n in rows:
        cost = {c: statistics.median(per_token_seconds(policy, n, c, tokens) for _ in range(repeats)) for c in contexts}
        print(f"{n:>5} {1e3 * cost[lo]:>14.4f} {1e3 * cost[hi]:>15.4f} {1e3 * (cost[hi] - cost[lo]):>9.4f} "
              f"{cost[hi] / cost[lo]:>6.2f}x (bar: <= 1.5)")
    print("extra ms: what a token pays for the longer context; attention reads every cached key and value of its row,")
    print("so it is about the same at any row count, while batching makes the rest of a token cheaper")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=32, help="games played at once")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32], help="messages advanced together in the context test")
    ap.add_argument("--contexts", type=int, nargs=2, default=[32, 512], help="the two context lengths compared (ids)")
    ap.add_argument("--tokens", type=int, default=32, help="steps timed per context")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    policy = Policy.from_pretrained("tiny")
    codec = ChatCodec(policy, SYSTEM)
    print(f"tiny model, {args.games} games a rollout, at most {SAMPLING.max_new_tokens} tokens a message, "
          f"median of {args.repeats} repeats, {args.threads} thread(s)")
    throughput(policy, codec, args.games, args.repeats)
    context_cost(policy, args.rows, args.contexts, args.tokens, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
