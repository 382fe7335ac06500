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
value is repeated). Anything else (prefill, no plan) goes to ``transformers``' SDPA attention.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "cogym_cascade"
PLAIN = ("sdpa", "eager")  # the model implementations a cascade forward may stand in for (same maths)


@dataclass
class CascadePlan:
    """One decode forward of ``b`` rows, ``G`` groups of rows sharing a prefix, at most ``size`` rows a group.

    Own part: every row attends slots ``[own_from, W)`` of its own row under ``own_mask`` (b, 1, 1, W - own_from),
    which hides a grouped row's prefix slots. Prefix part: group ``g`` attends slots ``[prefix_from, prefix_to)``
    of row ``reps[g]`` (``rep_slice``, when set, selects the same rows as a slice) under ``prefix_mask`` (G, 1, 1, P).
    ``stack`` (G * size,) lists the row in each place of each group's query block (padding places repeat a row;
    their results are never read), ``place`` (b,) the place of each row in ``stack`` and ``gate`` (b, 1, 1) is
    0 for a row in a group and -inf for a row in none (whose prefix part then weighs nothing). ``ordered``: the
    places are the rows in order (``stack`` and ``place`` are ``arange(b)``), so nothing needs reordering.
    ``loners`` (n,): the rows in no group (a prompt of their own, the last open message of a group); they attend
    slots ``[loner_from, W)`` of their rows under ``loner_mask`` (n, 1, 1, W - loner_from), plain attention;
    ``loner_slice``, when set, selects the same (consecutive) rows as a slice."""

    own_from: int
    own_mask: torch.Tensor
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


def _manual(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` (n, Hkv, t, D) over ``k``/``v`` (n, Hkv, S, D) under an additive ``mask`` (n, 1, 1, S),
    in float32 whatever the inputs: (output (n, Hkv, t, D), log-sum-exp of the scaled scores (n, Hkv, t))."""
    scores = torch.matmul(q.float() * scale, k.float().transpose(-1, -2)) + mask.float()
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]), v.float()), lse


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
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
    of a :class:`~cogym.agents.batch_kv.BatchKV` decode. Returns ``(output (b, 1, H, D), None)``."""
    if cascade is None or query.shape[2] != 1:
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
    if p.rep_slice is not None:  # groups read together sit in order: a view
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
def use_cascade(model: torch.nn.Module, plan: CascadePlan | None) -> Iterator[dict]:
    """For the forward inside the block: the keyword arguments to pass the model (``{"cascade": plan}``)
    with the model switched to :func:`cascade_attention`, or ``{}`` (unchanged model) when there is no
    plan or the model's attention is not plain (SDPA or eager) attention. Every config that switched
    (the model's and any sub-config's that was plain) gets its own setting back."""
    config = getattr(model, "config", None)
    if plan is None or getattr(config, "_attn_implementation", None) not in PLAIN:
        yield {}
        return
    saved = [(c, c._attn_implementation_internal) for c in _configs(config)
             if getattr(c, "_attn_implementation_internal", None) in PLAIN]
    for c, _ in saved:
        c._attn_implementation_internal = NAME
    try:
        yield {"cascade": plan}
    finally:
        for c, value in saved:
            c._attn_implementation_internal = value
