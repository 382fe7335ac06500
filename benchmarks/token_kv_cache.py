"""Benchmark: the cost of one token at token level must not grow with the transcript.

A token-level game (``proposer_solver-v0`` on a problem file, one solver, the embedded tiny model,
the policy's chat template as codec) is played one token per step, one seat at a time: the
seat's :class:`KVSession` reads the new ids of its context, a token is sampled, the game is
stepped (``token_batching.py`` measures the batched path the token rollout takes). The problem
text is sized so the seat's context starts at ``L`` tokens (32 and 512 by default), and the seat emits ``--tokens`` more (an end-of-message draw is replaced
by a random other token, so every message has the same length). The first step of a message (the
prefill) is timed apart; the printed per-token time is the median of the other steps.

The same steps without the cache (the whole context re-read every token) are the baseline: their
per-token time grows with ``L``. The acceptance bar is a 512/32 ratio of at most 1.5 with the cache.

    python benchmarks/token_kv_cache.py [--lengths 32 512] [--tokens 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from cogym.agents.kv_session import KVSession, sample_token
from cogym.agents.policy import Policy, SamplingParams
from cogym.envs import make
from cogym.runners.token_rollout import ChatCodec

SYSTEM = {"solver": "Solve."}


def _problem_file(codec: ChatCodec, length: int, tmp: Path) -> str:
    """A one-problem file whose rendered solver prompt is exactly ``length`` ids."""
    overhead = len(codec.prompt_ids("solver", ""))
    if length <= overhead:
        raise SystemExit(f"--lengths must exceed the chat template's {overhead} ids")
    question = ("1+" * length)[: length - overhead]
    path = tmp / f"len{length}.jsonl"
    path.write_text(json.dumps({"question": question, "answer": "0"}) + "\n")
    assert len(codec.prompt_ids("solver", question)) == length
    return str(path)


def per_token_seconds(policy: Policy, codec: ChatCodec, dataset: str, tokens: int, cached: bool, seed: int) -> tuple[float, float]:
    """(median seconds of a non-first step, seconds of the first step) for one message of ``tokens`` tokens."""
    env = make("proposer_solver-v0", granularity="token", codec=codec, max_turn_tokens=tokens + 1,
               source="dataset", dataset=dataset, num_solvers=1)
    env.reset(seed=seed)
    sampling = SamplingParams(max_new_tokens=tokens, temperature=1.0)
    gen = torch.Generator().manual_seed(seed)
    session = KVSession(policy)
    times = []
    for _ in range(tokens):
        t0 = time.perf_counter()
        if not cached:
            session.reset()
        token, _ = sample_token(session.next_logits(env.context_ids("solver_0")), sampling)
        if token in codec.eos_ids:  # keep the message going: same work, fixed length
            token = int(torch.randint(4, codec.vocab_size, (1,), generator=gen))
        env.step(token)
        times.append(time.perf_counter() - t0)
    assert env.in_message("solver_0"), "the message ended early; raise max_turn_tokens"
    return statistics.median(times[1:]), times[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[32, 512], help="context lengths to compare (ids)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens emitted per message")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    policy = Policy.from_pretrained("tiny")
    codec = ChatCodec(policy, SYSTEM)
    results: dict[tuple[int, bool], list[float]] = {}
    prefill: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = {n: _problem_file(codec, n, Path(tmp)) for n in args.lengths}
        per_token_seconds(policy, codec, files[args.lengths[0]], 8, True, 0)  # warm-up
        for r in range(args.repeats):
            for n in args.lengths:
                for cached in (True, False):
                    step, first = per_token_seconds(policy, codec, files[n], args.tokens, cached, seed=r)
                    results.setdefault((n, cached), []).append(step)
                    if cached:
                        prefill.setdefault(n, []).append(first)
    base = args.lengths[0]
    print(f"tiny model, {args.tokens} tokens per message, median of {args.repeats} repeats, {args.threads} thread(s)")
    print(f"{'context':>8} {'cached ms/token':>16} {'no-cache ms/token':>18} {'prefill ms':>11}")
    for n in args.lengths:
        c, u = statistics.median(results[(n, True)]), statistics.median(results[(n, False)])
        print(f"{n:>8} {1e3 * c:>16.3f} {1e3 * u:>18.3f} {1e3 * statistics.median(prefill[n]):>11.2f}")
    for n in args.lengths[1:]:
        rc = statistics.median(results[(n, True)]) / statistics.median(results[(base, True)])
        ru = statistics.median(results[(n, False)]) / statistics.median(results[(base, False)])
        print(f"per-token time ratio {n}/{base}: cached {rc:.2f}x (bar: <= 1.5), without cache {ru:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
