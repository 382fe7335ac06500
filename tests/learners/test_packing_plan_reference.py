"""learners/packing.plan picks its budget from unit and row widths alone and builds the chosen layout
from Python lists: its layouts must be, tensor for tensor, those of the direct construction (every
budget's units and packed rows built, each slot written into a tensor), kept here as the reference."""

from __future__ import annotations

import random

import pytest
import torch

from cogym.learners import packing as packing_mod


def _reference_units(prompts, responses, share, budget):
    groups: dict = {}
    for i, p in enumerate(prompts):
        groups.setdefault(tuple(p) if share and len(p) > 0 else ("row", i), []).append(i)
    units = []  # (prompt, rows, segments)
    for key, rows in groups.items():
        if len(rows) == 1 or key[:1] == ("row",):
            for i in rows:
                full = list(prompts[i]) + list(responses[i])
                units.append(([], [i], [full[:max(1, len(full) - 1)]]))
            continue
        prompt = list(prompts[rows[0]])
        unit = (prompt, [], [])
        for i in rows:
            seg = list(responses[i])[:-1]
            if unit[1] and _width(unit) + len(seg) > budget:
                units.append(unit)
                unit = (prompt, [], [])
            unit[1].append(i)
            unit[2].append(seg)
        units.append(unit)
    return units


def _width(unit) -> int:
    return len(unit[0]) + sum(len(s) for s in unit[2])


def _reference_bins(units, budget):
    bins, room = [], []
    for unit in sorted(units, key=lambda u: -_width(u)):
        for k, free in enumerate(room):
            if _width(unit) <= free:
                bins[k].append(unit)
                room[k] -= _width(unit)
                break
        else:
            bins.append([unit])
            room.append(budget - _width(unit))
    return bins


def _reference_layout(bins, prompts, responses):
    n, lmax = len(prompts), max((len(r) for r in responses), default=0)
    width = max(sum(_width(u) for u in b) for b in bins)
    ids = torch.zeros((len(bins), width), dtype=torch.long)
    pos = torch.zeros((len(bins), width), dtype=torch.long)
    seg = torch.full((len(bins), width), -1, dtype=torch.long)
    parents = []
    score_row = torch.zeros((n, max(1, lmax)), dtype=torch.long)
    score_col = torch.zeros((n, max(1, lmax)), dtype=torch.long)
    shared_rows = 0
    for b, units in enumerate(bins):
        at = 0
        for prompt, rows, segments in units:
            parent = -2
            if prompt:
                p = len(prompt)
                ids[b, at:at + p] = torch.tensor(prompt)
                pos[b, at:at + p] = torch.arange(p)
                parent = len(parents)
                seg[b, at:at + p] = parent
                parents.append(-2)
                last_prompt = at + p - 1
                at += p
                shared_rows += len(rows)
            for i, s in zip(rows, segments):
                k = len(s)
                ids[b, at:at + k] = torch.tensor(s, dtype=torch.long)
                pos[b, at:at + k] = torch.arange(len(prompt), len(prompt) + k)
                seg[b, at:at + k] = len(parents)
                parents.append(parent)
                r = len(responses[i])
                if r:
                    score_row[i, :r] = b
                    if prompt:
                        score_col[i, 0] = last_prompt
                        score_col[i, 1:r] = torch.arange(at, at + r - 1)
                    else:
                        q = len(prompts[i])
                        score_col[i, :r] = torch.arange(at + q - 1, at + q - 1 + r)
                at += k
    parent_of = torch.tensor(parents + [-2], dtype=torch.long)
    up = parent_of[seg]
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    allowed = causal & ((seg[:, :, None] == seg[:, None, :]) | (up[:, :, None] == seg[:, None, :]))
    allowed &= (seg[:, None, :] >= 0) | torch.eye(width, dtype=torch.bool)
    return ids, pos, allowed, score_row, score_col, shared_rows


def _reference_plan(prompts, responses, hidden, share=True, force=False):
    n = len(prompts)
    full = [len(p) + len(r) for p, r in zip(prompts, responses)]
    plain = packing_mod._cost([max(1, f - 1) for f in full], n, hidden)
    if max(full) > packing_mod.MAX_PACKED_WIDTH:
        return None
    best, best_cost, budget = None, None, max(full)
    while True:
        bins = _reference_bins(_reference_units(prompts, responses, share, budget), budget)
        cost = packing_mod._cost([max(sum(_width(u) for u in b) for b in bins)], len(bins), hidden)
        if best_cost is None or cost < best_cost:
            best, best_cost = bins, cost
        if budget >= packing_mod.MAX_PACKED_WIDTH or budget >= sum(full):
            break
        budget = min(2 * budget, packing_mod.MAX_PACKED_WIDTH)
    if not force and best_cost > packing_mod.MIN_SAVING * plain:
        return None
    return _reference_layout(best, prompts, responses)


def _batch(rng: random.Random, groups: int, size: int, singles: int, prompt_len: tuple, response_len: tuple):
    prompts, responses = [], []
    for _ in range(groups):
        prompt = [rng.randrange(4, 100) for _ in range(rng.randint(*prompt_len))]
        for _ in range(rng.randint(1, size)):
            prompts.append(prompt)
            responses.append([rng.randrange(4, 100) for _ in range(rng.randint(*response_len))])
    for _ in range(singles):
        prompts.append([rng.randrange(4, 100) for _ in range(rng.randint(*prompt_len))])
        responses.append([rng.randrange(4, 100) for _ in range(rng.randint(*response_len))])
    order = list(range(len(prompts)))
    rng.shuffle(order)
    return [prompts[i] for i in order], [responses[i] for i in order]


@pytest.mark.parametrize("seed", range(40))
def test_plan_gives_the_reference_layout(seed):
    rng = random.Random(seed)
    shape = [(8, 8, 1, (10, 16), (0, 8)), (3, 8, 2, (100, 128), (1, 32)), (6, 40, 0, (5, 9), (0, 3)),
             (0, 1, 12, (1, 30), (0, 12)), (12, 3, 4, (2, 60), (1, 40))][seed % 5]
    prompts, responses = _batch(rng, *shape)
    for share, force, hidden in [(True, False, 64), (True, True, 512), (False, True, 16), (False, False, 2048)]:
        got = packing_mod.plan(prompts, responses, hidden, share=share, force=force)
        want = _reference_plan(prompts, responses, hidden, share=share, force=force)
        assert (got is None) == (want is None)
        if got is None:
            continue
        for a, b in zip((got.input_ids, got.position_ids, got.allowed, got.score_row, got.score_col), want[:5]):
            assert a.dtype == b.dtype and torch.equal(a, b)
        assert got.shared_rows == want[5]


def test_plan_splits_a_group_wider_than_its_budget_as_the_reference_does():
    """Groups whose prompt and responses exceed the first budgets: every budget splits them differently."""
    rng = random.Random(7)
    prompts = [[5] * 40] * 30 + [[6] * 3] * 5
    responses = [[rng.randrange(4, 100) for _ in range(rng.randint(0, 50))] for _ in prompts]
    got = packing_mod.plan(prompts, responses, 128, force=True)
    want = _reference_plan(prompts, responses, 128, force=True)
    assert torch.equal(got.allowed, want[2]) and torch.equal(got.input_ids, want[0])
    assert torch.equal(got.score_col, want[4])
