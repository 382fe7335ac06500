"""core.seeding's mechanics: a named stream repeats, its parts and its name matter, and a misuse is one clear error."""

import numpy as np
import pytest

from cogym.core import seeding


def test_a_stream_repeats_and_its_parts_matter():
    assert seeding.seeds("rollout.games", 0, 1, n=8) == seeding.seeds("rollout.games", 0, 1, n=8)
    assert seeding.seeds("rollout.games", 0, 1, n=8) != seeding.seeds("rollout.games", 0, 2, n=8)
    assert seeding.seeds("rollout.games", 0, 1, 5, n=8) != seeding.seeds("rollout.games", 0, 1, n=8)
    assert seeding.seed("rollout.games", 1, 1) != seeding.seed("rollout.games", 0, 1)
    assert seeding.seed("rollout.games", 3, 4) == seeding.seeds("rollout.games", 3, 4, n=2)[0]
    assert seeding.key("rollout.key", 1, 2) != seeding.key("rollout.key", 2, 1)
    assert 0 <= seeding.key("rollout.key", 5) < 2**seeding.KEY_BITS


def test_a_trailing_zero_part_is_the_same_stream():
    # numpy pads the entropy with zeros: dynamic sampling's round 0 is the iteration's own seeds because
    # of it, so a constant that names a stream (salted) is never 0
    assert seeding.seeds("rollout.games", 0, 1, 0, n=8) == seeding.seeds("rollout.games", 0, 1, n=8)


def test_a_negative_seed_or_part_is_refused():
    with pytest.raises(ValueError, match=">= 0"):
        seeding.seed("rollout.games", 0, -1)


def test_a_salt_of_another_kind_is_refused_in_one_line():
    with pytest.raises(ValueError, match="'rollout.key' is a key stream, not a numpy one") as err:
        seeding.rng("rollout.key", 0)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="is a numpy stream, not a torch one"):
        seeding.torch_seed("league.draw", 0, 1, 2)


def test_every_salt_is_of_a_known_kind_and_says_what_it_seeds():
    for name, salt in seeding.SALTS.items():
        assert salt.kind in seeding.KINDS, name
        assert salt.seeds.strip(), name


def test_salted_constants_are_distinct_and_non_zero():
    # salted(c) names the stream c: a second salt with the same constant would be the same stream
    constants = [s.formula(0)[-1] for s in seeding.SALTS.values() if s.formula.__qualname__.startswith("salted")]
    assert constants and 0 not in constants and len(set(constants)) == len(constants)


def test_a_generator_and_its_seeds_come_from_one_material():
    a = seeding.rng("league.draw", 5, 1, 0).integers(1 << 30, size=4)
    assert np.array_equal(a, np.random.default_rng(seeding.material("league.draw", "numpy", 5, 1, 0)).integers(1 << 30, size=4))
