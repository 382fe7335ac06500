"""``cogym config``: every config key with its type, default and meaning."""

from __future__ import annotations

import argparse
import sys

from cogym.runners.config.reference import config_page, format_text, reference
from cogym.runners.display import terminal_width

DESCRIPTION = ("Print every key a config takes (cogym train and cogym eval, or --command tournament), with its type, "
               "default and meaning, read from the schema. --markdown prints docs/config.md.")


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--command", dest="of", choices=("train", "eval", "tournament"), default="train",
                   help="whose config (default train; eval reads the same config)")
    c.add_argument("--markdown", action="store_true", help="the whole reference as Markdown (docs/config.md)")


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        sys.stdout.write(config_page())
        return 0
    print(format_text(reference(args.of), terminal_width(), with_algorithms=args.of != "tournament"))
    return 0
