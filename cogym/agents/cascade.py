"""Shared-prefix ("cascade") attention for batched decoding.

Messages that answer the same prompt (the solvers of one game, the samples of one GRPO group) hold
the same keys and values for that prompt. Plain attention reads that prefix once per message and
step; at long prompts and many rows that read is most of a step's cost. Here a step reads each
shared prefix once per group: the queries of a group's messages are stacked against one copy of the
prefix (its representative row), each message reads only its own slots after the prefix, and the two
partial softmaxes are merged exactly through their log-sum-exps:

    out = o_prefix + sigmoid(lse_own - lse_prefix) * (o_own - o_prefix)

where ``o`` are the two softmax-weighted outputs and ``lse`` the log-sum-exps of their scores. The
result equals attention over the whole row up to float rounding.

:class:`CascadePlan` is built by :meth:`~cogym.agents.batch_kv.BatchKV.prepare_decode` when it saves
enough reads; :func:`cascade_attention` is registered with ``transformers`` as the attention
implementation ``"cogym_cascade"`` and :func:`use_cascade` selects it for one forward, for models that
:func:`supports` (plain attention: no softcapping, sliding window or sinks). Grouped-query
attention is handled by folding the query heads of a key/value head into the query axis (no key or
value is repeated). :func:`generate_plan` makes the plan of a whole ``generate`` call (the HF
backend's shared prefill, :mod:`~cogym.agents.backends.hf`).

The same implementation serves packed training forwards (:mod:`~cogym.learners.packing`): within
:func:`unit_attention`, a forward of packed rows attends per *unit* (a shared prompt and its
responses, or one plain row), each unit's span of its packed row through ``transformers``' SDPA
attention with its own slice of the 4-D mask, never across units, which the mask hides anyway. A
row of width T holding units of width w then computes about w/T of the dense row's query-key pairs.
:func:`units_pay` says when that is worth its extra calls.

Anything else (prefill, no plan, no units) goes to ``transformers``' SDPA attention.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "cogym_cascade"
# the plan of the forwards within use_cascade, for callers that cannot pass it as an argument (``generate``)
_plan: contextvars.ContextVar["CascadePlan | None"] = contextvars.ContextVar("cogym_cascade_plan", default=None)
PLAIN = ("sdpa", "eager")  # the model implementations a cascade forward may stand in for (same maths)


@dataclass
class CascadePlan:
    """One decode forward of ``b`` rows, ``G`` groups of rows sharing a prefix, at most ``size`` rows a group.

    Own part: every row attends slots ``[own_from, W)`` of its own row under ``own_mask`` (b, 1, 1, W - own_from),
    which hides a grouped row's prefix slots (None: every one of those slots is visible, as in ``generate``).
    Prefix part: group ``g`` attends slots ``[prefix_from, prefix_to)`` of row ``reps[g]`` (``rep_slice``, when
    set, selects the same rows as a slice) under ``prefix_mask`` (G, 1, 1, P).
    ``stack`` (G * size,) lists the row in each place of each group's query block (padding places repeat a row;
    their results are never read), ``place`` (b,) the place of each row in ``stack`` and ``gate`` (b, 1, 1) is
    0 for a row in a group and -inf for a row in none (whose prefix part then weighs nothing). ``ordered``: the
    places are the rows in order (``stack`` and ``place`` are ``arange(b)``), so nothing needs reordering.
    ``loners`` (n,): the rows in no group (a prompt of their own, the last open message of a group); they attend
    slots ``[loner_from, W)`` of their rows under ``loner_mask`` (n, 1, 1, W - loner_from), plain attention;
    ``loner_slice``, when set, selects the same (consecutive) rows as a slice. ``prefix_kv``, when set, holds per
    layer (by the attention module's ``layer_idx``) the keys and values ``(G, Hkv, P, D)`` the prefix part reads
    (instead of gathering the reps' slots at every step)."""

    own_from: int
    own_mask: torch.Tensor | None
    reps: torch.Tensor
    rep_slice: slice | None
    prefix_from: int
    prefix_to: int
    prefix_mask: torch.Tensor
    stack: torch.Tensor
    place: torch.Tensor
    gate: torch.Tensor
    size: int
    ordered: bool = False
    loners: torch.Tensor | None = None
    loner_from: int = 0
    loner_mask: torch.Tensor | None = None
    loner_slice: slice | None = None
    prefix_kv: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer: each group's prefix k, v


def _manual(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` (n, Hkv, t, D) over ``k``/``v`` (n, Hkv, S, D) under an additive ``mask`` (n, 1, 1, S;
    None: none), in float32 whatever the inputs: (output (n, Hkv, t, D), log-sum-exp of the scaled scores
    (n, Hkv, t))."""
    scores = torch.matmul(q.float() * scale, k.float().transpose(-1, -2))
    if mask is not None:
        scores = scores + mask.float()
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]), v.float()), lse


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_manual`; on CPU PyTorch's fused flash kernel (float32 accumulation), which returns the log-sum-exp
    too (one op, not six)."""
    if q.device.type == "cpu" and _FLASH_CPU is not None:
        return _FLASH_CPU(q, k, v, 0.0, False, attn_mask=mask, scale=scale)
    return _manual(q, k, v, mask, scale)


_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def cascade_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      cascade: CascadePlan | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """The ``transformers`` attention interface: ``query`` (b, H, 1, D), ``key``/``value`` (b, Hkv, W, D), the rows
    of a :class:`~cogym.agents.batch_kv.BatchKV` decode or of a ``generate`` step. Returns ``(output (b, 1, H, D),
    None)``. Within :func:`unit_attention`, a packed training forward attends per unit instead."""
    if cascade is None:
        cascade = _plan.get()
    if cascade is None or query.shape[2] != 1:
        spans = _unit_spans.get()
        if (spans is not None and cascade is None and attention_mask is not None
                and attention_mask.dim() == 4 and len(spans) == query.shape[0]
                and query.shape[2] == key.shape[2] == attention_mask.shape[-1]):
            return _per_unit(module, query, key, value, attention_mask, spans, dropout=dropout,
                             scaling=scaling, **kwargs)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    unsupported = [name for name in ("softcap", "s_aux", "sliding_window") if kwargs.get(name) is not None]
    if unsupported or value.shape[-1] != query.shape[-1]:  # supports() keeps such models off this path
        raise NotImplementedError(f"shared-prefix attention cannot apply {unsupported or 'a value head size unlike the query'}")
    p = cascade
    b, heads, _, dim = query.shape
    hkv = key.shape[1]
    rep, groups = heads // hkv, p.reps.shape[0]
    scale = dim ** -0.5 if scaling is None else scaling
    q = query.reshape(b, hkv, rep, dim)  # the query heads of one kv head side by side
    o_out, o_lse = _attend(q, key[:, :, p.own_from:], value[:, :, p.own_from:], p.own_mask, scale)  # (b, Hkv, rep, .)
    stacked = (q if p.ordered else q[p.stack]).view(groups, p.size, hkv, rep, dim)
    stacked = stacked.transpose(1, 2).reshape(groups, hkv, p.size * rep, dim)  # each group's queries, one block
    window = slice(p.prefix_from, p.prefix_to)
    layer = getattr(module, "layer_idx", None)
    if p.prefix_kv is not None and layer is not None and layer < len(p.prefix_kv):  # held apart: no gather
        pk, pv = p.prefix_kv[layer]
    elif p.rep_slice is not None:  # groups read together sit in order: a view
        pk, pv = key[p.rep_slice, :, window], value[p.rep_slice, :, window]
    else:  # one copy of each prefix
        pk, pv = key[:, :, window].index_select(0, p.reps), value[:, :, window].index_select(0, p.reps)
    s_out, s_lse = _attend(stacked, pk, pv, p.prefix_mask, scale)  # (G, Hkv, size * rep, .)
    if p.ordered:  # merge in the groups' layout: the rows' results are a view of it
        o_out = o_out.view(groups, p.size, hkv, rep, dim).transpose(1, 2)  # (G, Hkv, size, rep, D)
        o_lse = o_lse.view(groups, p.size, hkv, rep).transpose(1, 2)
        own_share = torch.sigmoid(o_lse.float() - s_lse.view(groups, hkv, p.size, rep).float()).unsqueeze(-1)
        out = torch.lerp(s_out.view(groups, hkv, p.size, rep, dim).float(), o_out.float(), own_share)
        return out.to(query.dtype).transpose(1, 2).reshape(b, 1, heads, dim), None
    shared = torch.cat([s_out.float(), s_lse.unsqueeze(-1).float()], dim=-1).view(groups, hkv, p.size, rep, dim + 1)
    shared = shared.transpose(1, 2).reshape(groups * p.size, hkv, rep, dim + 1)[p.place]  # each row's prefix part
    own_share = torch.sigmoid(o_lse.float() - (shared[..., dim] + p.gate)).unsqueeze(-1)  # no group: no prefix part
    out = torch.lerp(shared[..., :dim], o_out.float(), own_share).to(query.dtype)  # s + own_share * (o - s)
    if p.loners is not None:  # rows in no group: plain attention over their whole span
        if p.loner_slice is not None:
            lk, lv, lq = key[p.loner_slice, :, p.loner_from:], value[p.loner_slice, :, p.loner_from:], q[p.loner_slice]
        else:
            lk, lv = key[:, :, p.loner_from:].index_select(0, p.loners), value[:, :, p.loner_from:].index_select(0, p.loners)
            lq = q.index_select(0, p.loners)
        out[p.loners] = _attend(lq, lk, lv, p.loner_mask, scale)[0].to(query.dtype)
    return out.reshape(b, heads, 1, dim).transpose(1, 2), None


AttentionInterface.register(NAME, cascade_attention)


def supports(model: torch.nn.Module) -> bool:
    """Whether :func:`cascade_attention` computes what ``model``'s own attention does: plain (SDPA or eager)
    attention with no logit softcapping, no sliding window, no attention sinks and values as wide as keys."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) not in PLAIN:
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "attn_logit_softcapping", None) or getattr(text, "v_head_dim", None) is not None:
        return False
    if getattr(text, "scale_attn_by_inverse_layer_idx", False):  # GPT-2's option, applied inside its own attention
        return False
    if getattr(text, "sliding_window", None) is not None and getattr(text, "use_sliding_window", True):
        return False
    return not any(getattr(m, "sinks", None) is not None for m in model.modules())


def _configs(config) -> list:
    """``config`` and its sub-configs, recursively."""
    out = [config]
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if sub is not None:
            out += _configs(sub)
    return out


@contextlib.contextmanager
def use_cascade(model: torch.nn.Module, plan: CascadePlan | None, force: bool = False) -> Iterator[dict]:
    """For the forward inside the block: the keyword arguments to pass the model (``{"cascade": plan}``; the
    forwards of this thread inside the block get the plan without them too) with the model switched to
    :func:`cascade_attention`, or ``{}`` (unchanged model) when there is no
    plan (and no ``force``) or the model's attention is not plain (SDPA or eager) attention. Every config
    that switched (the model's and any sub-config's that was plain) gets its own setting back."""
    config = getattr(model, "config", None)
    if (plan is None and not force) or getattr(config, "_attn_implementation", None) not in PLAIN:
        yield {}
        return
    saved = [(c, c._attn_implementation_internal) for c in _configs(config)
             if getattr(c, "_attn_implementation_internal", None) in PLAIN]
    for c, _ in saved:
        c._attn_implementation_internal = NAME
    token = _plan.set(plan)
    try:
        yield {"cascade": plan} if plan is not None else {}
    finally:
        _plan.reset(token)
        for c, value in saved:
            c._attn_implementation_internal = value


# ---------------------------------------------------------------------------------------- generate


GENERATE_BLOCK = 8  # the rows of one query block in a generate plan: always this many (see generate_plan)


def generate_plan(owner: Sequence[int], prefix_mask: torch.Tensor, prefix: int, device: torch.device | str,
                  dtype: torch.dtype, prefix_kv: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None
                  ) -> CascadePlan | None:
    """The plan of every decode step of one ``generate`` call over a cache whose first ``prefix`` slots of each
    row hold its prompt (all but the prompt's last id; the HF backend's shared prefill) and whose later slots
    are that row's own (the last prompt id, then each new id; never padded). ``owner`` (b,): each row's
    distinct prompt; ``prefix_mask`` (G, prefix) bool: which prefix slots of each distinct prompt are its
    ids (the rest is left padding); ``prefix_kv``: per layer, the keys and values (G, Hkv, prefix, D) of the
    distinct prompts (the prefill's), read in place of the rows' copies. None only for no rows or no prefix.

    Each distinct prompt is read once per :data:`GENERATE_BLOCK` rows holding it, from its first row; each
    block of queries has exactly that many rows (padding places repeat a row), whatever the group's
    size, so a row's logits are bitwise those of the same row with more or fewer twins in its batch."""
    b = len(owner)
    if b == 0 or prefix < 1:
        return None
    rows_of: dict[int, list[int]] = {}
    for i, g in enumerate(owner):
        rows_of.setdefault(g, []).append(i)
    size = GENERATE_BLOCK
    blocks = [(g, rows[k:k + size]) for g, rows in rows_of.items() for k in range(0, len(rows), size)]
    reps = [rows_of[g][0] for g, _ in blocks]
    stack = [rows[min(j, len(rows) - 1)] for _, rows in blocks for j in range(size)]
    place = [0] * b
    for n, (_, rows) in enumerate(blocks):
        for j, i in enumerate(rows):
            place[i] = n * size + j
    of = [g for g, _ in blocks]  # each block's distinct prompt
    allowed = prefix_mask[of].to(torch.bool)  # (blocks, prefix)
    additive = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    dev = torch.device(device)
    if prefix_kv is not None:
        index = torch.tensor(of, device=dev)
        prefix_kv = [(k[:len(of)], v[:len(of)]) if of == list(range(len(of))) else
                     (k.index_select(0, index), v.index_select(0, index)) for k, v in prefix_kv]
    return CascadePlan(own_from=prefix, own_mask=None, reps=torch.tensor(reps, device=dev), rep_slice=None,
                       prefix_from=0, prefix_to=prefix, prefix_mask=additive[:, None, None].to(dev),
                       stack=torch.tensor(stack, device=dev), place=torch.tensor(place, device=dev),
                       gate=torch.zeros((b, 1, 1), device=dev), size=size, ordered=stack == list(range(b)),
                       prefix_kv=prefix_kv)


# ---------------------------------------------------------------------------------------- packed training


UNIT_SAVING = 0.75  # attend per unit only when that costs at most this fraction of the dense rows
CALL_PAIRS = 1_000_000  # the fixed cost of one more attention call, in query-key pairs x the model's width

_unit_spans: contextvars.ContextVar[Sequence[Sequence[tuple[int, int]]] | None] = contextvars.ContextVar(
    "cogym_unit_spans", default=None)


def _per_unit(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor, spans: Sequence[Sequence[tuple[int, int]]], **kwargs
              ) -> tuple[torch.Tensor, None]:
    """SDPA attention of each packed row's units on their own: ``(output (B, T, H, D), None)``."""
    rows = []
    for b, row in enumerate(spans):
        pieces = [sdpa_attention_forward(module, query[b:b + 1, :, s:e], key[b:b + 1, :, s:e], value[b:b + 1, :, s:e],
                                         attention_mask[b:b + 1, :, s:e, s:e], **kwargs)[0] for s, e in row]
        rows.append(torch.cat(pieces, dim=1) if len(pieces) > 1 else pieces[0])  # (1, T, H, D)
    return (torch.cat(rows, dim=0) if len(rows) > 1 else rows[0]), None


def units_pay(spans: Sequence[Sequence[tuple[int, int]]], width: int, hidden: int) -> bool:
    """Whether attending per unit (``spans``: per packed row of ``width``, each unit's and its trailing padding's
    ``(start, end)``) saves enough in a model ``hidden`` wide: the units' query-key pairs, plus the fixed cost of
    each call (:data:`CALL_PAIRS` / ``hidden`` pairs), at most :data:`UNIT_SAVING` of the dense rows' pairs.
    Narrow rows of a narrow model stay dense: a call costs more there than the pairs it skips."""
    dense = len(spans) * width * width
    units = unit_pairs([e - s for row in spans for s, e in row], hidden)
    return dense > 0 and units <= UNIT_SAVING * dense


def unit_pairs(widths: Sequence[int], hidden: int) -> float:
    """What attending per span of these ``widths`` costs, in query-key pairs: each span's pairs plus the
    fixed cost of its call (:data:`CALL_PAIRS` / ``hidden``)."""
    return sum(w * w for w in widths) + len(widths) * CALL_PAIRS / max(1, hidden)


@contextlib.contextmanager
def unit_attention(model: torch.nn.Module, spans: Sequence[Sequence[tuple[int, int]]] | None) -> Iterator[None]:
    """Within this block, a packed forward of ``model`` (a transformers model with SDPA attention) in this thread
    attends per unit of ``spans`` (per packed row, the ``(start, end)`` of each unit and of the trailing padding).
    No change for ``spans`` None or a model whose attention is not SDPA."""
    config = getattr(model, "config", None)
    if spans is None or getattr(config, "_attn_implementation", None) != "sdpa":
        yield
        return
    token = _unit_spans.set(spans)
    try:
        with use_cascade(model, None, force=True):
            yield
    finally:
        _unit_spans.reset(token)
