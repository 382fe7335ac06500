"""How often a solver's majority vote is right against its greedy answer, on held-out arithmetic
(docs/claims.md, ttrl): the question label-free (majority-vote) training rests on.

It samples ``--votes`` answers per problem at ``--temperature`` (default 1) and reads each as the games read an answer
(``majority_key``: its last integer). It prints the greedy accuracy, the majority of the first k samples for k = 1, 2, 4, ...
up to ``--votes``, and, for the first ``--group`` samples (the training group), SeRL's threshold table:
the share of problems whose majority holds at least t votes and how often that majority is right::

    python scripts/vote_accuracy.py --model tiny-reasoner --votes 32 --n 300
    python scripts/vote_accuracy.py --model tiny --max-new-tokens 8
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-reasoner",
                    help="an embedded model's name or a model directory (default tiny-reasoner)")
    ap.add_argument("--n", type=int, default=300, help="held-out problems (the first N; default 300)")
    ap.add_argument("--votes", type=int, default=32, help="samples per problem (default 32)")
    ap.add_argument("--group", type=int, default=8, help="the training group the threshold table reads (default 8)")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="default 32 (tiny-reasoner's longest solution is 30)")
    ap.add_argument("--system", default="Solve.", help="the solver's system message (default Solve.)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed (default 0)")
    args = ap.parse_args(argv)
    if min(args.n, args.votes, args.group, args.max_new_tokens) < 1 or args.group > args.votes:
        ap.error("--n, --votes, --group and --max-new-tokens must be >= 1, and --group at most --votes")
    if not args.temperature > 0:
        ap.error(f"--temperature must be > 0 (greedy is printed anyway), got {args.temperature}")

    import torch

    from cogym.agents.policy import Policy
    from cogym.envs.arithmetic import load_heldout
    from cogym.runners.research.build_tiny_model import majority_of, sample_answers

    torch.manual_seed(args.seed)
    policy = Policy.from_pretrained(args.model, device="cpu")
    records = load_heldout()[:args.n]
    truth = [int(r["answer"]) for r in records]
    greedy, answers = sample_answers(policy, records, votes=args.votes, max_new_tokens=args.max_new_tokens,
                                     system=args.system, temperature=args.temperature)
    n = len(records)
    print(f"{args.model}, {n} held-out problems, {args.votes} samples each at temperature {args.temperature:g}")
    print(f"greedy: {sum(g == t for g, t in zip(greedy, truth)) / n:.3f}")
    print(f"one sample: {sum(a == t for row, t in zip(answers, truth) for a in row) / (n * args.votes):.3f}")
    k = 2
    while k <= args.votes:
        print(f"majority of {k}: {sum(majority_of(row[:k])[0] == t for row, t in zip(answers, truth)) / n:.3f}")
        k *= 2
    print(f"\nmajority of the first {args.group}: agreeing votes | problems kept | majority right")
    top = [majority_of(row[:args.group]) for row in answers]
    for t in range(1, args.group + 1):
        kept = [answer == y for (answer, count), y in zip(top, truth) if count >= t]
        print(f">= {t:2d} | {len(kept) / n:.3f} | {sum(kept) / len(kept) if kept else float('nan'):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
