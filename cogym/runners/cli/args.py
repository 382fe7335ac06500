"""Argument types the subcommands share, and the error of a command line that cannot run as given."""

from __future__ import annotations

import argparse
import math

from cogym.core.errors import CogymError


class UsageError(CogymError, ValueError):
    """A command line that cannot run as given: a flag that needs another, a missing argument, or a
    selection that names nothing there (the config's own keys are checked as a ConfigError)."""


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def nonnegative_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value
