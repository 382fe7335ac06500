"""How often a model answers held-out arithmetic right under different prompts (docs/claims.md, debate_truth).

Each prompt is a system message and a text format in which ``{q}`` stands for the question; the answer
is the first integer in the first 16 characters of the reply, as debate-v0 reads a debater's answer.
It prints, per prompt, the share right with greedy decoding and with one sample at temperature 1::

    python scripts/prompt_accuracy.py                                   # the debate_truth table
    python scripts/prompt_accuracy.py --system Solve. --format '{q}' --format 'Q: {q} A:' --n 500
    python scripts/prompt_accuracy.py --votes 8 --n 300          # the ttrl table: is a confident vote right?

``--votes K`` samples K answers per problem under each prompt and prints, for each agreement level t,
the share of problems whose majority answer has at least t votes and how often that majority is the
true answer: what a SeRL-style majority-threshold filter would keep and how good its labels would be.
"""

from __future__ import annotations

import argparse
import re

FIRST_INTEGER = re.compile(r"-?\d{1,12}")
DEBATE_VIEW = "{q} A=? B=?\nA:"  # debate-v0's view for debater A's first message in answers="chosen" mode


def answer_of(text: str) -> int | None:
    m = FIRST_INTEGER.search(text[:16])
    return int(m.group()) if m else None


def accuracy(policy, records: list[dict], system: str, fmt: str, temperature: float) -> float:
    from cogym.core.types import SamplingParams
    from cogym.runners.rollout.loop import chat_messages

    prompts = [policy.render(chat_messages(system, fmt.format(q=r["question"]))) for r in records]
    outs = policy.generate(prompts, SamplingParams(max_new_tokens=8, temperature=temperature))
    return sum(answer_of(o.text) == int(r["answer"]) for r, o in zip(records, outs)) / len(records)


def vote_table(policy, records: list[dict], system: str, fmt: str, votes: int) -> list[tuple[int, float, float]]:
    """(t, share of problems kept at >= t agreeing votes, share of those whose majority answer is true)."""
    from collections import Counter

    from cogym.core.types import SamplingParams
    from cogym.runners.rollout.loop import chat_messages

    prompts = [policy.render(chat_messages(system, fmt.format(q=r["question"]))) for r in records for _ in range(votes)]
    outs = policy.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0))
    top: list[tuple[int, bool]] = []
    for i, r in enumerate(records):
        counts = Counter(a for a in (answer_of(o.text) for o in outs[i * votes:(i + 1) * votes]) if a is not None)
        answer, n = counts.most_common(1)[0] if counts else (None, 0)
        top.append((n, answer == int(r["answer"])))
    rows = []
    for t in range(1, votes + 1):
        kept = [right for n, right in top if n >= t]
        rows.append((t, len(kept) / len(top), sum(kept) / len(kept) if kept else float("nan")))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="model directory or 'tiny' (default)")
    ap.add_argument("--n", type=int, default=200, help="held-out problems (the first N; default 200)")
    ap.add_argument("--system", action="append", help="system message (repeatable; default: Debate. and Solve.)")
    ap.add_argument("--format", action="append", help="text with {q} for the question (repeatable; default: "
                    "the debate view and the question alone)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for the sampled column")
    ap.add_argument("--votes", type=int, default=0, help="K > 0: the majority-of-K table instead")
    args = ap.parse_args(argv)
    if args.n < 1 or args.votes < 0:
        ap.error("--n must be >= 1 and --votes >= 0")
    formats = args.format or [DEBATE_VIEW, "{q}"]
    if any("{q}" not in f for f in formats):
        ap.error("every --format needs {q}, where the question goes")

    import torch

    from cogym.agents.policy import Policy
    from cogym.envs.arithmetic import load_heldout

    policy = Policy.from_pretrained(args.model, name="probe")
    records = load_heldout()[: args.n]
    if args.votes:
        for system in args.system or ["Solve."]:
            for fmt in args.format or ["{q}"]:
                torch.manual_seed(args.seed)
                print(f"system {system!r}, text {fmt!r}, majority of {args.votes} at temperature 1:")
                print(f"{'agreeing votes':>15} {'kept':>6} {'majority right':>15}")
                for t, kept, right in vote_table(policy, records, system, fmt, args.votes):
                    print(f"{f'>= {t}':>15} {kept:>6.2f} {right:>15.2f}")
        return 0
    print(f"{'system':<10} {'text':<20} {'greedy':>7} {'sample':>7}")
    for system in args.system or ["Debate.", "Solve."]:
        for fmt in formats:
            torch.manual_seed(args.seed)
            greedy = accuracy(policy, records, system, fmt, 0.0)
            sample = accuracy(policy, records, system, fmt, 1.0)
            shown = fmt.replace("\n", "\\n")  # one line per prompt
            print(f"{system:<10} {shown:<20} {greedy:>7.3f} {sample:>7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
