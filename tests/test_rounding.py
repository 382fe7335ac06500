"""tests/rounding.same: floats to rounding, everything else exactly."""

from __future__ import annotations

from tests.rounding import same


def test_floats_match_to_rounding_and_nothing_else_does() -> None:
    assert same({"loss": 0.123456, "ids": [1, 2]}, {"loss": 0.1234567, "ids": [1, 2]})
    assert same([1e-7, float("nan")], [-2e-7, float("nan")])  # near zero: 1e-5 absolute; NaN equals NaN
    assert not same(0.1234, 0.1236)  # a moved value
    assert not same(float("nan"), 0.0)
    assert not same({"ids": [1, 2]}, {"ids": [1, 3]}) and not same([1, 2], [1, 2, 3])
    assert not same({"a": 1.0}, {"a": 1.0, "b": 2.0})  # a new key
    assert not same(3, 3.0) and not same(True, 1) and not same((1,), [1])  # types are exact
