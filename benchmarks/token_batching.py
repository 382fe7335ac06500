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
2. Per-token cost against context. ``rows`` messages whose prompts are ``L`` ids (32 and 512)
   are prefilled, then advanced ``--tokens`` steps in one batched forward each (an end token does
   not stop them); the per-token time is the median step over rows, the two contexts measured in
   turn ``--repeats`` times. Prompts come as in the workloads: ``share`` messages a prompt (the 8
   solvers of a game answer one problem), consecutive; ``share`` 1 shows all-different prompts.
   ``33x8`` adds one message with a prompt of its own to four groups of 8.
   The bar is a 512/32 ratio of at most 1.5 on the workload's layout (8 a prompt). A step reads
   each shared prompt once per group, not once per message (shared-prefix attention,
   ``cogym.agents.cascade``; "cascade" counts its forwards); a prompt of its own is read whole by
   every step of its message, so with all prompts different the extra time of a long context
   stays about the same per token while batching makes the rest cheaper.

    python benchmarks/token_batching.py [--games 32] [--repeats 5] [--layouts 1x1 8x8 32x8 33x8 32x1] [--tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.core.types import Request
from cogym.envs import make
from cogym.runners.rollout.tokens import ChatCodec, token_rollout

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


def per_token_seconds(policy: Policy, rows: int, share: int, context: int, tokens: int) -> tuple[float, int]:
    """(median seconds of one batched step of ``rows`` messages at ``context`` ids divided by ``rows``, cascade
    forwards); ``share`` consecutive messages have the same prompt."""
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=tokens + 1, temperature=1.0), name="solver")
    overhead = len(policy.render([{"role": "user", "content": ""}]))
    if context <= overhead + 4:
        raise SystemExit(f"--contexts must exceed the chat template's {overhead} ids by 4")
    texts = [(f"{g}=" + "1+" * context)[: context - overhead] for g in range(-(-rows // share))]  # differ at once
    requests = [Request(messages=[{"role": "user", "content": texts[i // share]}], role="solver", seat=f"s{i}")
                for i in range(rows)]
    handles = [m.handle for m in agent.begin(requests, encode=lambda t: [])]
    assert len(agent.streams.open[handles[0]].prompt_ids) == context
    agent.advance(handles)  # the prefill, not timed
    times = []
    for _ in range(tokens):
        t0 = time.perf_counter()
        agent.advance(handles)
        times.append(time.perf_counter() - t0)
    agent.close(handles)
    return statistics.median(times) / rows, agent.streams.cascade_steps


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


def context_cost(policy: Policy, layouts: list[tuple[int, int]], contexts: list[int], tokens: int, repeats: int) -> None:
    lo, hi = contexts
    print(f"{'rows':>5} {'a prompt':>9} {'ms/token @' + str(lo):>14} {'ms/token @' + str(hi):>15} {'extra ms':>9} "
          f"{'ratio':>7} {'cascade':>8}")
    for rows, share in layouts:
        runs: dict[int, list[tuple[float, int]]] = {c: [] for c in contexts}
        for _ in range(repeats):  # the two contexts in turn: a slow spell of the machine hits both
            for c in contexts:
                runs[c].append(per_token_seconds(policy, rows, share, c, tokens))
        cost = {c: statistics.median(x[0] for x in runs[c]) for c in contexts}
        if share == min(rows, 8) and rows % share == 0:  # the workloads' layout
            note = "(bar: <= 1.5)"
        elif share == 1:
            note = "(prompts of their own)"
        else:
            note = f"(+{rows % share} of its own)" if rows % share else "(groups of another size)"
        used = "/".join(str(runs[c][-1][1]) for c in contexts)
        print(f"{rows:>5} {share:>9} {1e3 * cost[lo]:>14.4f} {1e3 * cost[hi]:>15.4f} {1e3 * (cost[hi] - cost[lo]):>9.4f} "
              f"{cost[hi] / cost[lo]:>6.2f}x {used:>8} {note}")
    print("extra ms: what a token pays for the longer context. A prompt shared by a group is read once a step for")
    print("the group; a prompt of its own is read whole every step, which batching does not make cheaper.")
    print(f"cascade: shared-prefix decode forwards of {tokens} at {lo}/{hi} ids (at {lo} ids it saves too little to plan)")


def _layout(text: str) -> tuple[int, int]:
    rows, _, share = text.partition("x")
    try:
        rows_n, share_n = int(rows), int(share or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ROWSxSHARE, e.g. 32x8") from None
    if rows_n < 1 or not 1 <= share_n <= rows_n:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= SHARE <= ROWS")
    return rows_n, share_n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=32, help="games played at once")
    ap.add_argument("--repeats", type=int, default=5, help="medians over this many runs")
    ap.add_argument("--layouts", type=_layout, nargs="+", default=[(1, 1), (8, 8), (32, 8), (33, 8), (32, 1)],
                    help="context test: ROWSxSHARE, ROWS messages advanced together, SHARE of them a prompt")
    ap.add_argument("--contexts", type=int, nargs=2, default=[32, 512], help="the two context lengths compared (ids)")
    ap.add_argument("--tokens", type=int, default=32, help="steps timed per context")
    ap.add_argument("--skip-throughput", action="store_true", help="only the context test")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    policy = Policy.from_pretrained("tiny")
    codec = ChatCodec(policy, SYSTEM)
    print(f"tiny model, {args.games} games a rollout, at most {SAMPLING.max_new_tokens} tokens a message, "
          f"median of {args.repeats} repeats, {args.threads} thread(s)")
    if not args.skip_throughput:
        throughput(policy, codec, args.games, args.repeats)
    context_cost(policy, args.layouts, args.contexts, args.tokens, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
