"""``cogym show``: print the games a run or tournament kept."""

from __future__ import annotations

import argparse
import json
import sys

from cogym.core.text import printable
from cogym.runners.cli.args import positive_int, UsageError
from cogym.runners.display import terminal_width
from cogym.runners.results.transcripts import (MAX_CHARS, SHOWN_LINES, SHOWN_PROMPT_CHARS, SHOWN_PROMPT_LINES,
                                                  format_transcripts, read_transcripts, select, transcripts_path)

DESCRIPTION = ("Print the transcripts of a cogym train run (run.transcripts_every, run.transcripts_games) or of a "
               "cogym tournament (--transcripts K): per game its source, iteration or pairing, id and seed, then every "
               "move (seat, role, policy, what the seat was shown, its message) and each seat's reward.")


def add_arguments(sh: argparse.ArgumentParser) -> None:
    sh.add_argument("path", metavar="RUN_OR_TOURNAMENT", help="a run or tournament directory, or a transcripts.jsonl")
    sh.add_argument("--iteration", type=int, metavar="N", help="only the games of training iteration N")
    sh.add_argument("--player", metavar="NAME", help="only the games NAME played (a tournament player or a policy id)")
    sh.add_argument("--seat", help="only the moves of this seat")
    sh.add_argument("--role", help="only the moves of this role")
    sh.add_argument("--last", type=positive_int, metavar="K", help="only the last K games (after the filters)")
    sh.add_argument("--full", action="store_true",
                    help=f"whole messages and observations (default: at most {SHOWN_LINES} lines of a message and "
                         f"{SHOWN_PROMPT_CHARS} characters in {SHOWN_PROMPT_LINES} lines of what its seat was shown; "
                         f"both are stored cut at {MAX_CHARS} characters)")
    sh.add_argument("--json", action="store_true", help="the selected rows as JSON lines (the transcripts.jsonl format)")
    sh.add_argument("--width", type=positive_int, metavar="COLUMNS", help="wrap to this width (default: the terminal's, "
                    "80 in a pipe)")


def run(args: argparse.Namespace) -> int:
    rows = read_transcripts(args.path)
    try:
        shown = select(rows, iteration=args.iteration, player=args.player, last=args.last, seat=args.seat, role=args.role)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        sys.stdout.write("".join(json.dumps(r) + "\n" for r in shown))
        return 0
    its = sorted({r["iteration"] for r in rows if r.get("iteration") is not None})
    what = f", iteration{'s' if len(its) > 1 else ''} {', '.join(map(str, its))}" if its else ""
    # every field of a row may come from someone else's file: what reaches the terminal is escaped
    title = printable(f"{transcripts_path(args.path)}: {len(shown)} of {len(rows)} games{what}")
    print(format_transcripts(shown, args.width or terminal_width(), full=args.full, title=title))
    return 0
