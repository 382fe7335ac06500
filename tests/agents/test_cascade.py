"""Shared-prefix (cascade) attention: the kernel against plain attention, the plan, and token streaming through it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cogym.agents import batch_kv, cascade
from cogym.agents.batch_kv import BatchKV
from cogym.agents.llm import LLMAgent
from cogym.core.types import SamplingParams
from cogym.core.types import Request
from model_helpers import full_logp


def _filled(lengths: list[int], groups: dict[int, tuple[list[int], int]], kv_heads: int = 2, dim: int = 8,
            seed: int = 0) -> tuple[BatchKV, torch.Tensor, torch.Tensor]:
    """A cache of ``len(lengths)`` prefilled rows (left-padded) with random keys and values; the rows of each
    group hold the same first ``prefix`` slots of their span and are tagged with it. Returns (cache, K, V)."""
    g = torch.Generator().manual_seed(seed)
    b, width = len(lengths), max(lengths)
    kv = BatchKV("cpu", rows=2, slots=8)
    kv.plan_shared = True
    kv.add_rows(b, width)
    kv.prepare_prefill(0, b, lengths, torch.float32)
    keys, values = torch.randn(b, kv_heads, width, dim, generator=g), torch.randn(b, kv_heads, width, dim, generator=g)
    for tag, (rows, prefix) in groups.items():
        first = width - lengths[rows[0]]
        for r in rows:
            start = width - lengths[r]
            keys[r, :, start: start + prefix] = keys[rows[0], :, first: first + prefix]
            values[r, :, start: start + prefix] = values[rows[0], :, first: first + prefix]
            kv.share(r, tag, prefix)
    kv.update(keys, values, 0)
    return kv, keys, values


def _full_attention(kv: BatchKV, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain attention of the decode step just prepared, every row over its whole span; (b, 1, H, D)."""
    b = q.shape[0]
    slots = torch.arange(k.shape[2])
    start, last = torch.tensor(kv.start[:b]), torch.tensor(kv.length[:b]) - 1  # length has grown by the step
    allowed = (slots[None] >= start[:, None]) & (slots[None] <= last[:, None])
    rep = q.shape[1] // k.shape[1]
    out = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                         attn_mask=allowed[:, None, None])
    return out.transpose(1, 2)


@pytest.mark.parametrize("fused", [True, False], ids=["fused-kernel", "matmuls"])
@pytest.mark.parametrize("layout", ["ordered", "evenly-spaced", "scattered"])
def test_cascade_attention_equals_attention_over_whole_rows(monkeypatch, fused: bool, layout: str) -> None:
    """Grouped-query heads (4 query heads on 2 key/value heads), prefixes of different lengths and, by layout,
    groups of unequal size and rows in no group: the same output as attention over every row's whole span."""
    monkeypatch.setattr(batch_kv, "MIN_SAVED", -10**9)  # a plan whatever it saves
    if not fused:
        monkeypatch.setattr(cascade, "_FLASH_CPU", None)
    if layout == "ordered":  # every row in a group, groups of equal size in row order: nothing reordered
        lengths, groups = [60] * 6, {0: ([0, 1, 2], 50), 1: ([3, 4, 5], 40)}
    elif layout == "evenly-spaced":  # first rows 0 and 2: the prefixes are read through a view; row 4 in no group
        lengths, groups = [60, 58, 61, 60, 55, 20], {0: ([0, 1, 3], 50), 1: ([2, 5], 15)}
    else:  # first rows 0, 1 and 5: the prefixes are copied; rows 3 and 7 in no group (copied too)
        lengths, groups = [60, 58, 61, 60, 55, 20, 12, 33], {0: ([0, 2], 50), 1: ([1, 4], 30), 2: ([5, 6], 10)}
    kv, _, _ = _filled(lengths, groups)
    kv.prepare_decode(0, len(lengths), torch.float32)
    plan = kv.cascade
    assert plan is not None and plan.ordered == (layout == "ordered")
    assert (plan.rep_slice is not None) == (layout != "scattered")
    assert (plan.loners is None) == (layout == "ordered")  # a row in no group attends its whole span alone
    assert (plan.loner_slice is not None) == (layout == "evenly-spaced")  # one loner: a view of its row
    g = torch.Generator().manual_seed(1)
    k, v = kv.update(torch.randn(len(lengths), 2, 1, 8, generator=g), torch.randn(len(lengths), 2, 1, 8, generator=g), 0)
    q = torch.randn(len(lengths), 4, 1, 8, generator=g)
    out, weights = cascade.cascade_attention(None, q, k, v, plan.own_mask, cascade=plan)
    assert weights is None and out.shape == (len(lengths), 1, 4, 8)
    assert torch.allclose(out, _full_attention(kv, q, k, v), atol=1e-6)


def test_a_plan_is_made_only_when_rows_share_enough() -> None:
    kv, _, _ = _filled([300] * 4, {0: ([0], 290), 1: ([1], 290)})  # tagged, but no tag held twice
    kv.prepare_decode(0, 4, torch.float32)
    assert kv.cascade is None
    kv, _, _ = _filled([40] * 4, {0: ([0, 1, 2, 3], 30)})  # shared, but a short prompt: saves too little
    kv.prepare_decode(0, 4, torch.float32)
    assert kv.cascade is None
    kv, _, _ = _filled([1000] * 4, {0: ([0, 1, 2, 3], 990)})
    mask, _ = kv.prepare_decode(0, 4, torch.float32)
    plan = kv.cascade
    assert plan is not None and mask is plan.own_mask
    assert (plan.prefix_from, plan.prefix_to, plan.own_from) == (0, 990, 990)
    assert (plan.own_mask[:, 0, 0] == 0).sum(-1).tolist() == [11] * 4  # 10 own prompt slots and the new one
    kv.prepare_prefill(0, 4, [1000] * 4, torch.float32)  # a prefill drops the plan and the tags
    assert kv.cascade is None and kv.shared == [(-1, 0)] * 4


def test_a_moved_row_keeps_its_tag() -> None:
    kv, _, _ = _filled([30, 30, 30], {0: ([0, 1], 20), 7: ([2], 25)})
    assert kv.remove_row(0) == 2
    assert kv.shared == [(7, 25), (0, 20)]


def test_the_model_gets_its_attention_back(any_policy) -> None:
    policy = any_policy
    model = policy.model
    before = model.config._attn_implementation
    plan = object()
    with cascade.use_cascade(model, None) as extra:
        assert extra == {} and model.config._attn_implementation == before
    with pytest.raises(RuntimeError):
        with cascade.use_cascade(model, plan) as extra:
            assert extra == {"cascade": plan} and model.config._attn_implementation == cascade.NAME
            raise RuntimeError("a forward that fails")
    assert model.config._attn_implementation == before
    model.config._attn_implementation = "flex_attention"  # not plain attention: left alone
    with cascade.use_cascade(model, plan) as extra:
        assert extra == {}
    model.config._attn_implementation = before


def test_messages_sharing_long_prompts_decode_through_the_cascade_exactly(any_policy, monkeypatch) -> None:
    """Three problems, four messages each, and a message with a prompt of its own, prompts of ~120 ids: decode
    steps read each shared prompt once a group; log-probs equal a full forward's while rows leave (the last row
    moves: groups out of order), and one message a forward (no cascade) draws the same tokens from one seed."""
    policy = any_policy
    monkeypatch.setattr(batch_kv, "MIN_SAVED", 0)  # prompts the tiny model can read; any saving takes the cascade
    plans: list = []
    make_plan = BatchKV._plan
    monkeypatch.setattr(BatchKV, "_plan", lambda self, *a: plans.append(make_plan(self, *a)) or plans[-1])
    texts = [f"{p}=" + "12+" * 40 for p in (1, 2, 3, 4)]  # the fourth: a prompt of its own
    requests = [Request(messages=[{"role": "user", "content": texts[i // 4]}], role="solver", seat=f"s{i}")
                for i in range(13)]
    runs = []
    for cap in (0, 1):
        torch.manual_seed(5)
        agent = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=0.8), name="p", max_batch=cap)
        agent.streams.eos = frozenset()  # every message runs to its limit
        opened = agent.begin(requests, encode=lambda t: [])
        live = [m.handle for m in opened]
        emitted: dict = {h: [] for h in live}
        for step in range(7):
            for h, t in zip(list(live), agent.advance(live)):
                if t.id is not None:
                    emitted[h].append(t)
            if step == 2:  # two early rows leave: later rows move into their places
                agent.close([live.pop(0), live.pop(4)])
        agent.close(live)
        runs.append((agent.streams.cascade_steps, opened, emitted))
    (steps, opened, emitted), (single_steps, _, single) = runs
    assert steps > 0 and single_steps == 0
    made = [p for p in plans if p is not None]
    assert all(p.loners is not None for p in made)  # the message with a prompt of its own reads it alone
    assert len({p.rep_slice is None for p in made}) == 2  # groups in order, then moved
    for m in opened:
        toks = emitted[m.handle]
        assert [t.logprob for t in toks] == pytest.approx(full_logp(policy, m.prompt_ids, [t.id for t in toks], 0.8),
                                                          abs=1e-5)
    assert [[t.id for t in v] for v in emitted.values()] == [[t.id for t in v] for v in single.values()]


@pytest.mark.parametrize("fused", [True, False], ids=["fused-kernel", "matmuls"])
def test_a_bfloat16_model_gets_bfloat16_back(monkeypatch, fused: bool) -> None:
    monkeypatch.setattr(batch_kv, "MIN_SAVED", -10**9)
    if not fused:
        monkeypatch.setattr(cascade, "_FLASH_CPU", None)
    kv, _, _ = _filled([40, 40, 40], {0: ([0, 1, 2], 30)})
    for layer in (kv.keys, kv.values):
        layer[0] = layer[0].to(torch.bfloat16)
    kv.prepare_decode(0, 3, torch.bfloat16)
    new = torch.randn(3, 2, 1, 8).to(torch.bfloat16)
    k, v = kv.update(new, new, 0)
    q = torch.randn(3, 4, 1, 8).to(torch.bfloat16)
    out, _ = cascade.cascade_attention(None, q, k, v, kv.cascade.own_mask, cascade=kv.cascade)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), _full_attention(kv, q.float(), k.float(), v.float()), atol=3e-2)


def test_only_models_whose_attention_it_computes_get_the_cascade(any_policy, monkeypatch) -> None:
    policy = any_policy
    model = policy.model
    assert cascade.supports(model)
    # A window applies unless the config says it is unused (Qwen2's use_sliding_window; Llama's has no such flag).
    window = {"sliding_window": 16, **({"use_sliding_window": True} if hasattr(model.config, "use_sliding_window") else {})}
    for settings in ({"attn_logit_softcapping": 30.0}, window, {"v_head_dim": 16}, {"scale_attn_by_inverse_layer_idx": True}):
        with monkeypatch.context() as patch:
            for name, value in settings.items():
                patch.setattr(model.config, name, value, raising=False)
            assert not cascade.supports(model), settings
    assert cascade.supports(model)
    with monkeypatch.context() as patch:
        patch.setattr(model.config, "sliding_window", 16, raising=False)
        patch.setattr(model.config, "use_sliding_window", False, raising=False)
        assert cascade.supports(model)  # a window the model does not use
    monkeypatch.setattr(model.model.layers[0].self_attn, "sinks", torch.nn.Parameter(torch.zeros(4)), raising=False)
    assert not cascade.supports(model)  # attention sinks (gpt-oss)
    # A model it does not support streams as before: no plan is made, log-probs stay exact.
    monkeypatch.setattr(batch_kv, "MIN_SAVED", 0)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=3, temperature=1.0), name="p")
    opened = agent.begin([Request(messages=[{"role": "user", "content": "7=" + "1+" * 30}], role="s", seat=f"s{i}")
                          for i in range(3)], encode=lambda t: [])
    steps = [agent.advance([m.handle for m in opened]) for _ in range(3)]
    assert agent.streams.cascade_steps == 0 and not agent.streams.cache.plan_shared
    ids = [t.id for t in (step[0] for step in steps) if t.id is not None]
    logp = [t.logprob for t in (step[0] for step in steps) if t.id is not None]
    assert logp == pytest.approx(full_logp(policy, opened[0].prompt_ids, ids, 1.0), abs=1e-5)


def test_errors_rather_than_dropping_what_it_cannot_compute(monkeypatch) -> None:
    monkeypatch.setattr(batch_kv, "MIN_SAVED", -10**9)
    kv, _, _ = _filled([40, 40, 40], {0: ([0, 1, 2], 30)})
    kv.prepare_decode(0, 3, torch.float32)
    k, v = kv.update(torch.randn(3, 2, 1, 8), torch.randn(3, 2, 1, 8), 0)
    with pytest.raises(NotImplementedError, match="softcap"):
        cascade.cascade_attention(None, torch.randn(3, 4, 1, 8), k, v, None, cascade=kv.cascade, softcap=30.0)
    with pytest.raises(NotImplementedError, match="value head size"):
        cascade.cascade_attention(None, torch.randn(3, 4, 1, 8), k, v[..., :4], None, cascade=kv.cascade)


def test_every_config_gets_its_own_attention_back() -> None:
    from transformers import LlavaConfig

    config = LlavaConfig()
    config.text_config._attn_implementation_internal = "sdpa"
    config.vision_config._attn_implementation_internal = "eager"
    config._attn_implementation_internal = "sdpa"
    holder = torch.nn.Module()
    holder.config = config
    with cascade.use_cascade(holder, object()) as extra:
        assert extra and config.text_config._attn_implementation == cascade.NAME
    assert (config._attn_implementation, config.text_config._attn_implementation,
            config.vision_config._attn_implementation) == ("sdpa", "sdpa", "eager")
