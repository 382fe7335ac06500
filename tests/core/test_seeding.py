"""derive_seed: one way to derive a stream's seeds from a run's seed, equal to the formulas it replaced."""

import numpy as np
import pytest

from cogym.core.seeding import derive_rng, derive_seed, derive_seeds


def test_derived_seeds_are_the_seed_sequence_ones_every_recorded_run_used():
    # The iteration seeds of recorded runs (golden metrics) came from SeedSequence([seed, iteration]).
    assert derive_seeds(0, 3, n=4) == [int(x) for x in np.random.SeedSequence([0, 3]).generate_state(4)]
    assert derive_seed(7, 2, 1) == int(np.random.SeedSequence([7, 2, 1]).generate_state(1)[0])
    assert derive_rng(5, 1, 0x1EA6).integers(1 << 30) == np.random.default_rng([5, 1, 0x1EA6]).integers(1 << 30)


def test_salts_name_independent_streams_and_repeat():
    assert derive_seeds(0, 1, n=8) == derive_seeds(0, 1, n=8)
    assert derive_seeds(0, 1, n=8) != derive_seeds(0, 2, n=8)
    assert derive_seeds(0, 1, 5, n=8) != derive_seeds(0, 1, n=8)
    # numpy pads the entropy with zeros: a trailing 0 salt is the same stream (dynamic sampling's round 0
    # is the iteration's own seeds because of it), so a constant that names a stream is never 0
    assert derive_seeds(0, 1, 0, n=8) == derive_seeds(0, 1, n=8)
    assert derive_seed(1, 1) != derive_seed(0, 1)


def test_a_negative_seed_or_salt_is_refused():
    with pytest.raises(ValueError, match=">= 0"):
        derive_seed(0, -1)
