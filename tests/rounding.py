"""Equality up to float rounding, for tests that compare two runs of the same computation.

The same code and seed on two CPUs (AVX2 against AVX-512), or in two batch shapes (one rollout
against its shares gathered, one process against Ray workers), can round float sums differently:
log-probs and losses then differ from the 6th digit on, while every token, reward and count is the
same. :func:`same` compares floats within ``REL`` relative or ``ABS`` absolute, and everything else
(ids, rewards that are counts, flags, strings, lengths, keys) exactly.
"""

from __future__ import annotations

import math

REL, ABS = 1e-4, 1e-5


def close(a: float, b: float) -> bool:
    """Two floats equal to rounding (NaN equals NaN)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL, abs_tol=ABS)


def same(a, b) -> bool:
    """``a == b``, with floats compared to rounding (NaN equals NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return close(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
