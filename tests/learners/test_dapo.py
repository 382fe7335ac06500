"""DAPO pieces against docs/algorithms.md §12 (V13 overlong shaping, V14 dynamic-sampling predicates).

Expected numbers are copied from the specification; they ARE the specification.
"""

from __future__ import annotations

import pytest
import torch

from cogym.learners.advantages import group_index
from cogym.learners.dapo import (
    FILTER_PREDICATES,
    apply_overlong_shaping,
    filter_groups,
    mask_truncated,
    need_more_rounds,
    overlong_penalty,
    select_groups,
    stop_properly_penalty,
)

DTYPES = [(torch.float64, 1e-12), (torch.float32, 1e-5)]


def close(actual, expected, atol):
    exp = torch.as_tensor(expected, dtype=torch.float64)
    assert torch.allclose(actual.to(torch.float64), exp, atol=atol, rtol=0), (actual, exp)


# ------------------------------------------------------------------ V13
V13 = [(12, 0.0), (16, 0.0), (17, -0.25), (18, -0.5), (20, -1.0)]  # L_max = 20, B_o = 4, f = 1


@pytest.mark.parametrize("cap", [False, True])
@pytest.mark.parametrize("length,expected", V13)
def test_v13_overlong_penalty(length, expected, cap):
    pen = overlong_penalty(torch.tensor([length]), 20, 4, 1.0, cap=cap)
    assert pen.dtype == torch.float64
    close(pen, [expected], 1e-12)
    assert not torch.signbit(pen).any() or expected < 0  # no -0.0 below the buffer


@pytest.mark.parametrize("dtype,atol", DTYPES)
@pytest.mark.parametrize("length,expected", V13)
def test_v13_applied_to_scores(dtype, atol, length, expected):
    scores = torch.tensor([1.0, 0.0], dtype=dtype)
    out = apply_overlong_shaping(scores, torch.tensor([length, length]), 20, 4, 1.0)
    assert out.dtype == dtype
    close(out, [1.0 + expected, expected], atol)


def test_v13_batch_and_permutation():
    lengths = torch.tensor([12, 16, 17, 18, 20])
    pen = overlong_penalty(lengths, 20, 4)
    close(pen, [e for _, e in V13], 1e-12)
    perm = torch.tensor([4, 2, 0, 3, 1])
    close(overlong_penalty(lengths[perm], 20, 4), pen[perm], 0.0)


def test_overlong_factor_scales_and_cap_compat_beyond_max_len():
    lengths = torch.tensor([17, 20, 22, 30])
    close(overlong_penalty(lengths, 20, 4, 0.5), [-0.125, -0.5, -0.75, -1.75], 1e-12)
    # canonical (verl): exceed is not capped; OpenRLHF compat caps exceed at B_o -> floor -f
    close(overlong_penalty(lengths, 20, 4), [-0.25, -1.0, -1.5, -3.5], 1e-12)
    close(overlong_penalty(lengths, 20, 4, cap=True), [-0.25, -1.0, -1.0, -1.0], 1e-12)


def test_overlong_dapo_script_defaults():
    # verl DAPO script: L_max = 20480, B_o = 4096, f = 1.0
    pen = overlong_penalty(torch.tensor([16384, 16385, 18432, 20480]), 20480, 4096)
    close(pen, [0.0, -1 / 4096, -0.5, -1.0], 1e-12)


def test_int_scores_come_back_float64():
    out = apply_overlong_shaping(torch.tensor([1, 0]), torch.tensor([18, 10]), 20, 4)
    assert out.dtype == torch.float64
    close(out, [0.5, 0.0], 1e-12)


def test_overlong_validation():
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(torch.tensor([1]), 20, 0)
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(torch.tensor([1]), 20, 21)
    with pytest.raises(ValueError, match="factor"):
        overlong_penalty(torch.tensor([1]), 20, 4, -1.0)
    with pytest.raises(ValueError, match="lengths"):
        overlong_penalty(torch.tensor([-1]), 20, 4)
    with pytest.raises(ValueError, match="1-D"):
        overlong_penalty(torch.tensor([[1]]), 20, 4)


@pytest.mark.parametrize("coef,expected", [(0.5, [0.5, 0.0, 1.0, -0.5]), (0.0, [0.0, 0.0, 1.0, -0.0]), (-1.0, [-1.0, -1.0, 1.0, -1.0])])
def test_stop_properly_penalty(coef, expected):
    scores = torch.tensor([1.0, 0.0, 1.0, -1.0])
    truncated = torch.tensor([True, True, False, True])
    out = stop_properly_penalty(scores, truncated, coef)
    assert out.dtype == torch.float32
    close(out, expected, 1e-7)


def test_mask_truncated_zeroes_rows():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.float32)
    out = mask_truncated(mask, torch.tensor([False, True, False]))
    close(out, [[1, 1, 0], [0, 0, 0], [1, 0, 0]], 0.0)
    assert out.dtype == mask.dtype


# ------------------------------------------------------------------ V14
V14_GROUPS = [
    [0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0],
    [1, 1, 1, 0, 0],
    [1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1],
    [0.3] * 5,
]
# columns: verl DAPO std>0 | OpenRLHF (0,1) strict | OpenRLHF (0.2,0.8) strict | PRIME/SeRL [0.2,0.8]
V14_KEEP = [
    (False, False, False, False),
    (True, True, False, True),
    (True, True, True, True),
    (True, True, False, True),
    (False, False, False, False),
    (False, True, True, True),
]
V14_COLUMNS = [
    ("std_gt_0", None),
    ("mean_in_open", (0.0, 1.0)),
    ("mean_in_open", (0.2, 0.8)),
    ("mean_in_closed", (0.2, 0.8)),
]
V14_CASES = [
    (rewards, pred, bounds, keep[c])
    for rewards, keep in zip(V14_GROUPS, V14_KEEP)
    for c, (pred, bounds) in enumerate(V14_COLUMNS)
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("rewards,predicate,bounds,keep", V14_CASES)
def test_v14_single_group(dtype, rewards, predicate, bounds, keep):
    rows, gk = filter_groups(torch.tensor(rewards, dtype=dtype), torch.zeros(5, dtype=torch.long),
                             predicate=predicate, bounds=bounds)
    assert gk == {0: keep}
    assert rows.dtype == torch.bool and rows.tolist() == [keep] * 5


@pytest.mark.parametrize("rewards,predicate,bounds,keep", [c for c in V14_CASES if c[0] != [0.3] * 5])
def test_v14_integer_accuracies(rewards, predicate, bounds, keep):
    _, gk = filter_groups(torch.tensor(rewards, dtype=torch.long), [7] * 5, predicate=predicate, bounds=bounds)
    assert gk == {7: keep}


@pytest.mark.parametrize("col", range(4))
def test_v14_whole_batch_shuffled_with_explicit_ids(col):
    """All six groups in one batch, rows shuffled, sparse ids: decisions follow ids, not positions."""
    pred, bounds = V14_COLUMNS[col]
    ids = [101, 5, 77, 3, 42, 9]
    scores = [x for g in V14_GROUPS for x in g]
    groups = [ids[k] for k, g in enumerate(V14_GROUPS) for _ in g]
    perm = torch.randperm(len(scores), generator=torch.Generator().manual_seed(col))
    s = torch.tensor(scores, dtype=torch.float64)[perm]
    g = torch.tensor(groups)[perm]
    rows, gk = filter_groups(s, g, predicate=pred, bounds=bounds)
    assert gk == {ids[k]: V14_KEEP[k][col] for k in range(6)}
    assert rows.tolist() == [gk[int(x)] for x in g]
    # first-seen order of the ids in the (shuffled) batch
    assert list(gk) == list(dict.fromkeys(g.tolist()))


def test_default_bounds():
    s = torch.tensor([1.0, 0, 0, 0, 0] + [0.3] * 5 + [1.0] * 5, dtype=torch.float64)
    g = torch.arange(3).repeat_interleave(5)
    assert filter_groups(s, g)[1] == {0: True, 1: False, 2: False}                             # std_gt_0
    assert filter_groups(s, g, predicate="mean_in_open")[1] == {0: True, 1: True, 2: False}    # (0, 1)
    assert filter_groups(s, g, predicate="mean_in_closed")[1] == {0: True, 1: True, 2: False}  # [0.2, 0.8]


def test_group_keys_may_be_tuples():
    keys = [("u1", "solver")] * 2 + [("u1", "proposer")] * 2
    _, gk = filter_groups(torch.tensor([1.0, 0.0, 1.0, 1.0]), keys)
    assert gk == {("u1", "solver"): True, ("u1", "proposer"): False}
    _, gk2 = filter_groups(torch.tensor([1.0, 0.0, 1.0, 1.0]), group_index(keys))
    assert gk2 == {0: True, 1: False}


def test_means_compared_exactly_at_bounds():
    # float arithmetic: (0.1 + 0.2) / 2 = 0.15000000000000002 > 0.15; the exact mean is 0.15
    s = torch.tensor([0.1, 0.2], dtype=torch.float64)
    g = torch.zeros(2, dtype=torch.long)
    assert filter_groups(s, g, predicate="mean_in_closed", bounds=(0.0, 0.15))[1] == {0: True}
    assert filter_groups(s, g, predicate="mean_in_open", bounds=(0.15, 1.0))[1] == {0: False}
    # float32 0.2 is read as 1/5 (not 0.20000000298...): on the bound
    s32 = torch.tensor([0.2, 0.2], dtype=torch.float32)
    assert filter_groups(s32, g, predicate="mean_in_open", bounds=(0.2, 1.0))[1] == {0: False}
    assert filter_groups(s32, g, predicate="mean_in_closed", bounds=(0.0, 0.2))[1] == {0: True}
    # bounds as strings / exact rationals
    assert filter_groups(s32, g, predicate="mean_in_closed", bounds=("0", "1/5"))[1] == {0: True}


def test_std_gt_0_keeps_singletons_mean_predicates_do_not_special_case_them():
    s = torch.tensor([1.0, 0.5, 0.5])
    g = torch.tensor([0, 1, 1])
    assert filter_groups(s, g)[1] == {0: True, 1: False}
    assert filter_groups(s, g, predicate="mean_in_open")[1] == {0: False, 1: True}


def test_invalid_rows_are_left_out_and_do_not_change_other_groups():
    s = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.3, 0.3])
    g = torch.tensor([0, 0, 1, 1, 2, 2])
    base = {p: filter_groups(s, g, predicate=p)[1] for p in FILTER_PREDICATES}
    # add rows: a NaN invalid member of group 1 (would make it mixed if counted) and an all-invalid group 3
    s2 = torch.cat([s, torch.tensor([float("nan"), 0.0, 5.0])])
    g2 = torch.cat([g, torch.tensor([1, 3, 3])])
    valid = torch.tensor([True] * 6 + [False, False, False])
    for p in FILTER_PREDICATES:
        rows, gk = filter_groups(s2, g2, predicate=p, valid=valid)
        assert {k: gk[k] for k in base[p]} == base[p]
        assert gk[3] is False and rows[7:].tolist() == [False, False]
    # counted as valid, the zero in row 7 would flip group 1 under std_gt_0
    s3 = torch.cat([s, torch.tensor([0.0])])
    assert filter_groups(s3, torch.cat([g, torch.tensor([1])]))[1][1] is True
    with pytest.raises(ValueError, match="finite"):
        filter_groups(s2, g2)


def test_prime_truncation_filter():
    s = torch.tensor([1.0, 0.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 1, 1])
    lengths = torch.tensor([10, 99, 10, 98])
    rows, gk = filter_groups(s, g, predicate="mean_in_closed", lengths=lengths, max_response_length=100)
    assert gk == {0: False, 1: True}  # longest 99 >= 100 - 1 drops group 0; 98 survives
    assert rows.tolist() == [False, False, True, True]
    with pytest.raises(ValueError, match="together"):
        filter_groups(s, g, lengths=lengths)


def test_filter_validation():
    s = torch.tensor([1.0, 0.0])
    with pytest.raises(ValueError, match="predicate"):
        filter_groups(s, [0, 0], predicate="acc")
    with pytest.raises(ValueError, match="length"):
        filter_groups(s, [0, 0, 0])
    with pytest.raises(ValueError, match="integer"):
        filter_groups(s, torch.tensor([0.0, 0.0]))
    with pytest.raises(ValueError, match="lo <= hi"):
        filter_groups(s, [0, 0], predicate="mean_in_open", bounds=(0.8, 0.2))


# ------------------------------------------------------------------ batch refill (§7.2)
def test_select_groups_verl_first_passing_trimmed():
    # two generation rounds, merged in order; ids unique across rounds
    round1 = {"a": False, "b": True, "c": True}
    round2 = {"d": False, "e": True, "f": True}
    assert select_groups(round1, 3) == ["b", "c"]
    assert select_groups({**round1, **round2}, 3) == ["b", "c", "e"]
    assert select_groups({**round1, **round2}, 10) == ["b", "c", "e", "f"]
    assert select_groups(round1, 0) == []


def test_select_groups_prime_fill_with_failing():
    cand = {"a": False, "b": True, "c": False, "d": True}
    assert select_groups(cand, 3, fill_with_failing=True) == ["b", "d", "a"]
    assert select_groups(cand, 1, fill_with_failing=True) == ["b"]
    with pytest.raises(ValueError):
        select_groups(cand, -1)


def test_filter_then_select_end_to_end():
    s = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    g = torch.tensor([10, 10, 11, 11, 12, 12, 13, 13])
    rows, gk = filter_groups(s, g)
    kept = select_groups(gk, 2)
    assert kept == [11, 13]
    assert rows.tolist() == [False, False, True, True, False, False, True, True]


def test_need_more_rounds():
    assert need_more_rounds(4, 4, 1) is False
    assert need_more_rounds(5, 4, 10) is False
    assert need_more_rounds(3, 4, 9, max_rounds=10) is True
    with pytest.raises(RuntimeError, match="10 generation rounds"):
        need_more_rounds(3, 4, 10, max_rounds=10)
    assert need_more_rounds(3, 4, 1000, max_rounds=0) is True  # unlimited
