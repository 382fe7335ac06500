"""Seeds derived from a run's seed, the same way everywhere.

A run has one seed (``run.seed``, a tournament's ``seed``). Every other seed (an iteration's games,
a refill round's, a rank's sampling stream, a league's draw, an evaluator's games) is derived
from it and a few *salts* that say which stream it is, through numpy's ``SeedSequence``: streams
with different salts are independent, and the same salts always give the same numbers, on every
machine and in every process.

    derive_seeds(seed, iteration, n=32)   # the 32 game seeds of an iteration
    derive_seed(seed, iteration, rank)    # one seed
    derive_rng(seed, iteration, 0x1EA6)   # a numpy Generator on that stream

Salts are non-negative integers (a constant such as ``0x1EA6`` names a stream of its own). A trailing
salt of 0 does not: ``SeedSequence`` pads its entropy with zeros, so ``derive_seeds(s, i, 0, n=k)`` is
``derive_seeds(s, i, n=k)``; a constant that names a stream is never 0.
"""

from __future__ import annotations

import numpy as np


def _entropy(seed: int, salts: tuple[int, ...]) -> list[int]:
    entropy = [int(seed), *(int(s) for s in salts)]
    if any(v < 0 for v in entropy):
        raise ValueError(f"seeds and salts must be >= 0, got {entropy}")
    return entropy


def derive_seeds(seed: int, *salts: int, n: int) -> list[int]:
    """``n`` seeds (32-bit) of the stream named by ``salts``."""
    return [int(x) for x in np.random.SeedSequence(_entropy(seed, salts)).generate_state(n)]


def derive_seed(seed: int, *salts: int) -> int:
    """One seed (32-bit) of the stream named by ``salts``: ``derive_seeds(seed, *salts, n=1)[0]``."""
    return derive_seeds(seed, *salts, n=1)[0]


def derive_rng(seed: int, *salts: int) -> np.random.Generator:
    """A numpy Generator on the stream named by ``salts`` (``np.random.default_rng([seed, *salts])``)."""
    return np.random.default_rng(_entropy(seed, salts))
