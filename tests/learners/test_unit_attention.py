"""Packed training forwards that attend per unit (agents/cascade.py ``unit_attention``) and micro-batches that
keep a prompt's rows together (learners/batch.py ``pack_rows`` with groups): the same log-probs, losses and
gradients as the plain forward, to float rounding, with fewer query-key pairs and fewer prompt copies."""

from __future__ import annotations

import pytest
import torch

from cogym.agents import cascade
from cogym.learners import packing as packing_mod
from cogym.learners.batch import TokenBatch, _packed_layout, batch_groups, micro_batches, pack_rows
from tests.learners.test_packing import _assert_same, _group_turns, _random_llama


@pytest.fixture
def every_packing_per_unit(monkeypatch):
    """Attend per unit whatever the widths (the rule would keep these small rows dense); count the calls."""
    calls = []
    per_unit = cascade._per_unit
    monkeypatch.setattr(cascade, "units_pay", lambda spans, width, hidden: True)
    monkeypatch.setattr(cascade, "_per_unit", lambda *a, **k: calls.append(len(a[5])) or per_unit(*a, **k))
    return calls


@pytest.mark.parametrize("kv_heads", [8, 2], ids=["mha", "gqa"])
def test_per_unit_attention_gives_the_plain_forwards_log_probs_and_gradients(every_packing_per_unit, kv_heads):
    model = _random_llama(kv_heads)
    b = TokenBatch.from_turns(_group_turns(103, groups=5, size=5, singles=4, seed=1), 0)
    layout = _packed_layout(model, b, "on")
    assert any(len(row) > 1 for row in layout.spans)  # rows holding several units: there is something to skip
    _assert_same(model, b, entropy=True)
    assert every_packing_per_unit  # the packed forwards (and their backward's graph) went through the units
    assert model.config._attn_implementation == "sdpa"  # given back after each forward


def test_per_unit_attention_on_the_tiny_model(policy, every_packing_per_unit):
    b = TokenBatch.from_turns(_group_turns(policy.model.config.vocab_size), policy.tokenizer.pad_token_id)
    _assert_same(policy.model, b)
    assert every_packing_per_unit


def test_a_layouts_spans_cover_each_row_unit_by_unit_then_its_padding():
    b = TokenBatch.from_turns(_group_turns(103, groups=4, size=3, singles=3, seed=2), 0)
    layout = _packed_layout(_random_llama(), b, "on")
    width = layout.input_ids.shape[1]
    for r, row in enumerate(layout.spans):
        assert row[0][0] == 0 and row[-1][1] == width  # the trailing padding is a span too
        assert all(a[1] == c[0] for a, c in zip(row, row[1:]))  # end to end
        for s, e in row:  # a span reads nothing outside itself
            allowed = layout.allowed[r, s:e]
            assert not bool(allowed[:, :s].any()) and not bool(allowed[:, e:].any())


def test_the_rule_keeps_narrow_rows_of_a_narrow_model_dense_and_splits_wide_ones():
    narrow = [[(0, 20), (20, 40)]] * 26  # the tiny model's rows: two units of 20
    assert not cascade.units_pay(narrow, 40, hidden=128)
    wide = [[(0, 370), (370, 740), (740, 1110), (1110, 1219)]]  # a 30M model's row of three units and a plain row
    assert cascade.units_pay(wide, 1219, hidden=512)
    assert not cascade.units_pay([[(0, 1219)]], 1219, hidden=512)  # one unit: nothing to skip


def test_unit_attention_leaves_a_model_of_other_attention_alone():
    model = _random_llama()
    model.config._attn_implementation = "eager"
    with cascade.unit_attention(model, [[(0, 4), (4, 8)]]):
        assert model.config._attn_implementation == "eager"
    model.config._attn_implementation = "sdpa"
    with cascade.unit_attention(model, [[(0, 4), (4, 8)]]):
        assert model.config._attn_implementation == cascade.NAME
    assert model.config._attn_implementation == "sdpa"


def test_micro_batches_end_before_a_group_rather_than_inside_it():
    widths, groups = [160] * 64, [i // 8 for i in range(64)]
    assert [len(r) for r in pack_rows(widths, 256, 4096)] == [25, 25, 14]  # rows x widest <= 4096: 25 rows
    runs = pack_rows(widths, 256, 4096, groups)
    assert [len(r) for r in runs] == [24, 24, 16]  # three whole groups, three, two
    assert [i for r in runs for i in r] == list(range(64))
    for r in runs:
        assert len({groups[i] for i in r}) * 8 == len(r)


def test_a_group_wider_than_a_micro_batch_is_still_cut_and_limits_still_hold():
    widths, groups = [10] * 12, [0] * 10 + [1, 1]
    runs = pack_rows(widths, 4, None, groups)
    assert [i for r in runs for i in r] == list(range(12)) and all(len(r) <= 4 for r in runs)
    assert runs[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the big group is cut where it must be
    widths = [5, 9, 3, 20, 4, 4, 4, 2]
    runs = pack_rows(widths, 3, 18, [0, 0, 1, 1, 1, 2, 2, 2])
    for r in runs:
        assert len(r) <= 3 and (len(r) == 1 or len(r) * max(widths[i] for i in r) <= 18)
    assert [i for r in runs for i in r] == list(range(8))


def test_micro_batches_keep_groups_per_rank_and_batch_groups_keys_rows_by_prompt():
    b = TokenBatch.from_turns(_group_turns(103, groups=3, size=4, singles=2, seed=0), 0)
    keys = batch_groups(b)
    assert keys[:12] == [0] * 4 + [1] * 4 + [2] * 4 and len(set(keys[12:])) == 2
    widths = [10] * len(keys)
    per_rank = [micro_batches(widths, 4, None, rank=r, world=2, groups=keys) for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1])
    assert sorted(i for chunks in per_rank for c in chunks for i in c.tolist()) == list(range(len(keys)))
    for chunks in per_rank:  # a rank's two rows of each group of four sit in one micro-batch
        for c in chunks:
            rows = c.tolist()
            for g in {keys[i] for i in rows if keys[i] < 3}:
                assert sum(keys[i] == g for i in rows) == 2


def test_the_plan_packs_units_into_wider_rows_when_they_may_attend_on_their_own():
    rng = __import__("random").Random(0)
    prompts, responses = [], []
    for g in range(3):  # three groups of 8 like the mid GRPO workload's: 128-id prompts, answers of 20-31 ids
        prompt = [rng.randrange(4, 100) for _ in range(128)]
        for _ in range(8):
            prompts.append(prompt)
            responses.append([rng.randrange(4, 100) for _ in range(rng.randint(20, 31))])
    dense = packing_mod.plan(prompts, responses, hidden=256)
    units = packing_mod.plan(prompts, responses, hidden=256, per_unit=True)
    # dense attention over a row costs its width squared: narrower rows, each group split with a prompt copy
    assert dense.input_ids.shape[0] == 4
    assert units.input_ids.shape[0] == 1 and len(units.spans[0]) == 3  # each group once, its prompt once
    assert units.input_ids.numel() < dense.input_ids.numel()
    assert cascade.units_pay(units.spans, units.input_ids.shape[1], 256)
