"""Pure scoring rules of proposer_solver-v0, against docs/algorithms.md V11 and hand values."""

from __future__ import annotations

import pytest

from cogym.envs.arithmetic import Domain
from cogym.envs.proposer_solver import band_reward, invalid_reason, learnability_reward, solver_reward


@pytest.mark.parametrize(
    "successes, n, expected",
    [(2, 8, 0.75), (7, 8, 0.125), (8, 8, 0.0), (0, 8, 0.0), (1, 2, 0.5), (1, 1, 0.0), (0, 1, 0.0), (3, 5, 0.4)],
)
def test_learnability_reward_paper_column_of_v11(successes: int, n: int, expected: float) -> None:
    assert learnability_reward(successes, n) == pytest.approx(expected, abs=1e-12)


def test_learnability_reward_is_zero_exactly_at_the_ends_and_positive_inside() -> None:
    n = 16
    values = [learnability_reward(s, n) for s in range(n + 1)]
    assert values[0] == 0.0 and values[-1] == 0.0
    assert all(v > 0 for v in values[1:-1])
    assert values[1:-1] == sorted(values[1:-1], reverse=True)  # easier problems earn less


@pytest.mark.parametrize(
    "successes, n, low, high, expected",
    [
        (1, 5, 0.2, 0.8, 1.0),   # low edge, inclusive
        (4, 5, 0.2, 0.8, 1.0),   # high edge, inclusive
        (0, 5, 0.2, 0.8, 0.0),
        (5, 5, 0.2, 0.8, 0.0),
        (3, 5, 0.2, 0.8, 1.0),
        (7, 10, 0.7, 0.9, 1.0),  # naive 0.7 * 10 = 7.000000000000001 > 7 would drop this
        (3, 10, 0.1, 0.3, 1.0),
        (3, 10, 0.1 + 0.2, 0.5, 1.0),  # 0.30000000000000004 is float noise for 3/10
        (1, 10, 0.2, 0.8, 0.0),
        (9, 10, 0.2, 0.8, 0.0),
        (0, 4, 0.0, 0.0, 1.0),   # degenerate band: only s = 0
        (4, 4, 0.0, 1.0, 1.0),   # the CLI default band keeps everything
        (1, 3, 1 / 3, 2 / 3, 1.0),
        (2, 3, 1 / 3, 2 / 3, 1.0),
    ],
)
def test_band_reward_edges(successes: int, n: int, low: float, high: float, expected: float) -> None:
    assert band_reward(successes, n, low, high) == expected


def test_band_reward_matches_serl_keep_column_of_v10() -> None:
    # V10 group means 0.6, 1.0, 0.2, 0.4 with n = 5 -> keep, drop, keep, keep.
    assert [band_reward(s, 5, 0.2, 0.8) for s in (3, 5, 1, 2)] == [1.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("fn", [lambda s, n: learnability_reward(s, n), lambda s, n: band_reward(s, n, 0.2, 0.8)])
@pytest.mark.parametrize("successes, n, message", [(3, 2, "successes must be in"), (-1, 4, "successes must be in"), (0, 0, "n must be >= 1")])
def test_rules_reject_impossible_counts(fn, successes: int, n: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fn(successes, n)


def test_solver_reward_adds_the_format_bonus_only_for_a_bare_integer() -> None:
    assert solver_reward(True, "82", 0.1) == pytest.approx(1.1)
    assert solver_reward(True, " 82\n", 0.1) == pytest.approx(1.1)
    assert solver_reward(True, "The answer is 82", 0.1) == 1.0
    assert solver_reward(False, "83", 0.1) == pytest.approx(0.1)
    assert solver_reward(False, "no idea", 0.1) == 0.0


def test_invalid_reason_says_what_is_wrong() -> None:
    domain = Domain(max_operand=99, ops="+-")
    assert "at most 32" in invalid_reason("7" * 1000, domain)
    assert "outside the domain" in invalid_reason("100+1", domain)
    assert "outside the domain" in invalid_reason("3*4", domain)
    assert "not a problem of the form" in invalid_reason("hello", domain)
