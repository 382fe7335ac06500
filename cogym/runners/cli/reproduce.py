"""``cogym reproduce``: a paper's claim in miniature over seeds, with its verdict."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cogym.runners.cli.args import positive_int, UsageError
from cogym.runners.display import terminal_width
from cogym.runners.research.reproduce import all_claims, claim_named, format_list, format_results, plot_results, reproduce
from cogym.runners.rundir import RunDirError

DESCRIPTION = ("Train every arm of a claim (a method and its baselines, equal budgets) once per seed, then print "
               "mean ± std and the per-seed values of its measures and the verdict; results.json and results.png go "
               "to --out. The claims and their measured tables: docs/claims.md.")
OVERRIDES_AFTER_OPTIONS = True


def add_arguments(rp: argparse.ArgumentParser) -> None:
    rp.add_argument("claim", nargs="?", help="the claim (see --list)")
    rp.add_argument("overrides", nargs="*", help="dotted overrides applied to every arm, e.g. run.iterations=50")
    rp.add_argument("--list", action="store_true", help="list the claims with their measured CPU time")
    rp.add_argument("--seeds", type=positive_int, default=3, metavar="N", help="seeds 0..N-1 per arm (default 3)")
    rp.add_argument("--out", metavar="DIR", help="where to write the runs and results (default: "
                    "runs/reproduce/<claim>-<time>)")
    rp.add_argument("--quiet", action="store_true", help="no line per run on stderr")


def run(args: argparse.Namespace) -> int:
    if args.list:
        print(format_list(all_claims(), terminal_width()))
        return 0
    if not args.claim:
        raise UsageError("name a claim (cogym reproduce --list shows them)")
    claim = claim_named(args.claim)
    out = Path(args.out) if args.out else Path("runs") / "reproduce" / f"{claim.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--out {str(out)!r} is a file; name a new directory")
    if out.exists() and any(out.iterdir()):
        raise RunDirError(f"--out {str(out)!r} is not empty; name a new directory")
    out.mkdir(parents=True, exist_ok=True)
    results = reproduce(claim, args.seeds, out, args.overrides,
                        progress=None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True)))
    (out / "results.json").write_text(json.dumps(results.as_json(claim), indent=1) + "\n")
    plot_results(claim, results, out / "results.png")
    print(format_results(claim, results))
    print(f"\nwritten: {out / 'results.json'}, {out / 'results.png'}")
    return 0
