"""Packed training forwards: rows laid end to end in a few long rows, and the rows of a group that
share a prompt reading one copy of it.

A plain training forward pads N rows (prompt + response) to the widest and runs every prompt once
per row. In group sampling the G rows of a prompt carry the same prompt G times, and short rows
carry padding. A *packed layout* instead lays out, in each of a few packed rows:

* a **shared unit**: one copy of a prompt, then the responses of the rows that share it, each
  response attending to the prompt and to its own earlier tokens only, at the positions it has in
  its own row (the prompt's length onwards);
* a **plain unit**: one row (prompt + response) that shares its prompt with no other row of the batch.

Units are placed first-fit by length into packed rows of a budgeted width; padding is left only at
the ends of packed rows. The model sees one 4-D attention mask (who may attend to whom) and the
per-token positions, so every token's keys, values and hidden state are those of the plain forward:
log-probs, losses and gradients equal the plain forward's to float tolerance (the gradient of a
shared prompt is the sum over its responses, as over separate copies). A row's last token predicts
nothing and is not fed.

:func:`plan` picks, per micro-batch, the budget whose layout costs least under a simple cost model
(tokens fed, plus the attention's quadratic term) and returns None when packing saves too little
over the plain forward. With ``LearnerConfig.packing: auto`` a model is packed only after a one-time
check that it computes the same thing through a packed layout (a model with sliding windows or
position-free attention would not): the training forward scores a fixed batch both ways at the
model's first call and :func:`record_check` keeps the verdict; :func:`model_allows` rules out the
models that cannot take a 4-D mask at all.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from dataclasses import dataclass
from typing import Sequence

import torch

from cogym.agents.cascade import UNIT_SAVING, unit_pairs

PACKING = ("auto", "on", "off")
MAX_PACKED_WIDTH = 2048  # a packed row is at most this wide: its mask is width^2 (wider rows: plain, even with on)
MIN_SAVING = 0.9  # pack only when the packed cost is at most this fraction of the plain cost


@dataclass
class PackedLayout:
    """A packed forward of N rows: ``input_ids``/``position_ids`` (B, T) and ``allowed`` (B, T, T) bool
    (query, key); ``score_row``/``score_col`` (N, L): the packed row and slot whose output predicts
    response token ``c`` of row ``i`` (0 past a row's response)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    allowed: torch.Tensor
    score_row: torch.Tensor
    score_col: torch.Tensor
    shared_rows: int  # rows that read a prompt shared with other rows
    spans: list[list[tuple[int, int]]] | None = None  # per packed row: each unit's (start, end), then the padding's

    def additive_mask(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The (B, 1, T, T) additive mask transformers takes as ``attention_mask``: 0 where allowed."""
        mask = torch.zeros(self.allowed.shape, dtype=dtype, device=device)
        mask.masked_fill_(~self.allowed.to(device), torch.finfo(dtype).min)
        return mask[:, None]


@dataclass
class _Unit:
    """Rows laid out together: ``prompt`` (shared; empty for a plain unit) then one segment per row."""

    prompt: list[int]
    rows: list[int]
    segments: list[list[int]]  # per row: the ids fed after the prompt
    width: int = 0  # len(prompt) + the segments' lengths, kept up to date by add()

    def __post_init__(self) -> None:
        self.width = len(self.prompt) + sum(len(s) for s in self.segments)

    def add(self, row: int, segment: list[int]) -> None:
        self.rows.append(row)
        self.segments.append(segment)
        self.width += len(segment)


def _units(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], share: bool,
           budget: int) -> list[_Unit]:
    """The units of these rows: each group of >= 2 rows with the same prompt one shared unit (split
    into several, each with its own prompt copy, where one would be wider than ``budget``), every
    other row a plain unit. A row's last token is not fed (nothing is scored from its output)."""
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(tuple(p) if share and len(p) > 0 else ("row", i), []).append(i)
    units = []
    for key, rows in groups.items():
        if len(rows) == 1 or key[:1] == ("row",):
            for i in rows:
                full = list(prompts[i]) + list(responses[i])
                units.append(_Unit([], [i], [full[:max(1, len(full) - 1)]]))
            continue
        prompt = list(prompts[rows[0]])
        unit = _Unit(prompt, [], [])
        for i in rows:
            seg = list(responses[i])[:-1]  # the prompt's last token predicts the first response token
            if unit.rows and unit.width + len(seg) > budget:
                units.append(unit)
                unit = _Unit(prompt, [], [])
            unit.add(i, seg)
        units.append(unit)
    return units


def _bins(units: list[_Unit], budget: int) -> list[list[_Unit]]:
    """First-fit decreasing: units into packed rows of at most ``budget`` ids (a wider unit alone)."""
    bins: list[list[_Unit]] = []
    room: list[int] = []
    for unit in sorted(units, key=lambda u: -u.width):
        for k, free in enumerate(room):
            if unit.width <= free:
                bins[k].append(unit)
                room[k] -= unit.width
                break
        else:
            bins.append([unit])
            room.append(budget - unit.width)
    return bins


def _cost(widths: Sequence[int], rows: int, hidden: int) -> float:
    """Relative cost of a forward over ``rows`` rows padded to ``max(widths)``: per token the layers'
    matrix products (~24 d^2) plus attention over the row (~4 T d, dense whatever the mask)."""
    t = max(widths) if widths else 0
    return rows * t * (1.0 + t / (6.0 * max(1, hidden)))


def _unit_cost(widths: list[int], rows: int, width: int, hidden: int) -> float | None:
    """The cost of ``rows`` packed rows of ``width`` holding units of these ``widths``, each unit attending on
    its own (:func:`~cogym.agents.cascade.unit_attention`): tokens fed plus each unit's quadratic term and a
    fixed cost a call; None when attending per unit would not pay (:func:`~cogym.agents.cascade.units_pay`)."""
    pairs = unit_pairs([*widths, *[0] * rows], hidden)  # and one padding span a row
    if pairs > UNIT_SAVING * rows * width * width:
        return None
    return rows * width + pairs / (6.0 * max(1, hidden))


def plan(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], hidden: int, share: bool = True,
         force: bool = False, per_unit: bool = False) -> PackedLayout | None:
    """The cheapest packed layout of these rows, or None when it costs more than :data:`MIN_SAVING`
    of the plain right-padded forward (never, with ``force``) or when a row is wider than
    :data:`MAX_PACKED_WIDTH` (with ``force`` too). ``hidden``: the model's width. ``per_unit``: the forward
    may attend per unit (:func:`~cogym.agents.cascade.unit_attention`), so a wide row of several units costs
    its units' attention, not the whole row's.

    The budgets are compared on widths alone (:func:`_unit_widths`, :func:`_bin_widths`: the same
    splits and first-fit as :func:`_units` and :func:`_bins`); only the chosen one is laid out."""
    n = len(prompts)
    if n == 0:
        return None
    full = [len(p) + len(r) for p, r in zip(prompts, responses)]
    plain = _cost([max(1, f - 1) for f in full], n, hidden)  # as if it too skipped each row's last id
    widest = max(full)
    if widest > MAX_PACKED_WIDTH:  # its mask would be too large (also with packing: on)
        return None
    groups = _group_lengths(prompts, responses, share)
    best, best_cost = None, None
    budget = widest
    while True:
        totals = _bin_widths(_unit_widths(groups, budget), budget)
        cost = _cost([max(totals)], len(totals), hidden)
        if per_unit:
            units = _unit_cost(_unit_widths(groups, budget), len(totals), max(totals), hidden)
            cost = cost if units is None else min(cost, units)
        if best_cost is None or cost < best_cost:
            best, best_cost = budget, cost
        if budget >= MAX_PACKED_WIDTH or budget >= sum(full):
            break
        budget = min(2 * budget, MAX_PACKED_WIDTH)
    if not force and best_cost > MIN_SAVING * plain:
        return None
    return _layout(_bins(_units(prompts, responses, share, best), best), prompts, responses)


def _group_lengths(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                   share: bool) -> list[tuple[int, list[int]]]:
    """The rows as :func:`_units` groups them, by length only, in its order: ``(prompt length, segment
    lengths)`` of a group sharing a prompt, ``(0, [width])`` of a row laid out plain."""
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(tuple(p) if share and len(p) > 0 else ("row", i), []).append(i)
    out: list[tuple[int, list[int]]] = []
    for key, rows in groups.items():
        if len(rows) == 1 or key[:1] == ("row",):
            for i in rows:
                f = len(prompts[i]) + len(responses[i])
                out.append((0, [max(1, f - 1) if f else 0]))
        else:
            out.append((len(prompts[rows[0]]), [max(0, len(responses[i]) - 1) for i in rows]))
    return out


def _unit_widths(groups: list[tuple[int, list[int]]], budget: int) -> list[int]:
    """The widths of :func:`_units`' units at ``budget``, from :func:`_group_lengths`."""
    widths = []
    for prompt, segments in groups:
        if prompt == 0:
            widths.extend(segments)
            continue
        width, rows = prompt, 0
        for k in segments:
            if rows and width + k > budget:
                widths.append(width)
                width, rows = prompt, 0
            width += k
            rows += 1
        widths.append(width)
    return widths


def _bin_widths(widths: list[int], budget: int) -> list[int]:
    """The width of each packed row :func:`_bins` fills with units of these widths."""
    room: list[int] = []
    for w in sorted(widths, reverse=True):
        for k, free in enumerate(room):
            if w <= free:
                room[k] -= w
                break
        else:
            room.append(budget - w)
    return [budget - free for free in room]


def _layout(bins: list[list[_Unit]], prompts, responses) -> PackedLayout:
    n = len(prompts)
    lmax = max((len(r) for r in responses), default=0)
    width = max(sum(u.width for u in b) for b in bins)
    # built as Python lists, one tensor each at the end (a tensor op per slice costs more than the rest)
    ids: list[list[int]] = []
    pos: list[list[int]] = []
    seg: list[list[int]] = []  # segment of each slot (-1: padding)
    parents: list[int] = []  # per segment: the segment it also reads (its prompt), or -2
    score_row = [[0] * max(1, lmax) for _ in range(n)]
    score_col = [[0] * max(1, lmax) for _ in range(n)]
    shared_rows = 0
    spans: list[list[tuple[int, int]]] = []
    for b, units in enumerate(bins):
        spans_b: list[tuple[int, int]] = []
        ids_b: list[int] = []
        pos_b: list[int] = []
        seg_b: list[int] = []
        for unit in units:
            spans_b.append((len(ids_b), len(ids_b) + unit.width))
            parent = -2
            p = len(unit.prompt)
            if p:
                ids_b += unit.prompt
                pos_b += range(p)
                parent = len(parents)
                seg_b += [parent] * p
                parents.append(-2)
                last_prompt = len(ids_b) - 1
                shared_rows += len(unit.rows)
            for i, s in zip(unit.rows, unit.segments):
                at, k = len(ids_b), len(s)
                ids_b += s
                pos_b += range(p, p + k)
                seg_b += [len(parents)] * k
                parents.append(parent)
                r = len(responses[i])
                if r:
                    score_row[i][:r] = [b] * r
                    if p:  # token 0 from the prompt's last slot, token c from response slot c-1
                        score_col[i][0] = last_prompt
                        score_col[i][1:r] = range(at, at + r - 1)
                    else:  # a plain row: response token c is predicted at prompt length - 1 + c
                        q = len(prompts[i])
                        score_col[i][:r] = range(at + q - 1, at + q - 1 + r)
        fill = width - len(ids_b)
        if fill:
            spans_b.append((len(ids_b), width))
        spans.append(spans_b)
        ids.append(ids_b + [0] * fill)
        pos.append(pos_b + [0] * fill)
        seg.append(seg_b + [-1] * fill)
    ids_t, pos_t, seg_t = (torch.tensor(x, dtype=torch.long) for x in (ids, pos, seg))
    score_row_t, score_col_t = torch.tensor(score_row, dtype=torch.long), torch.tensor(score_col, dtype=torch.long)
    parent_of = torch.tensor(parents + [-2], dtype=torch.long)  # index -1 (padding) -> -2: reads no prompt
    up = parent_of[seg_t]  # (B, T) the prompt segment each slot's segment reads
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    allowed = causal & ((seg_t[:, :, None] == seg_t[:, None, :]) | (up[:, :, None] == seg_t[:, None, :]))
    allowed &= (seg_t[:, None, :] >= 0) | torch.eye(width, dtype=torch.bool)  # padding is read by nothing but itself
    return PackedLayout(ids_t, pos_t, allowed, score_row_t, score_col_t, shared_rows, spans)


# ---------------------------------------------------------------------------------------------- exactness


_checked: "weakref.WeakKeyDictionary[torch.nn.Module, bool]" = weakref.WeakKeyDictionary()


def model_allows(base: torch.nn.Module) -> str | None:
    """Why this transformers model cannot take a packed layout (None: it can, pending the numeric check):
    a forward without ``position_ids``, attention that takes no 4-D mask (flash-attention kernels, ALiBi
    biases built from a 2-D mask) or that masks by itself (sliding windows, other layer types). The
    text config is read (a multimodal model's top-level config does not say). These rules are the only
    guard against masking longer than the check's short rows, which the numeric check cannot see."""
    config = getattr(base, "config", None)
    if config is None:
        return "it has no transformers config"
    if "position_ids" not in inspect.signature(base.forward).parameters:
        return "its forward takes no position_ids"
    text = text_config(base)
    impl = getattr(config, "_attn_implementation", None) or getattr(text, "_attn_implementation", None) or "eager"
    if impl not in ("sdpa", "eager"):
        return f"its attention implementation {impl!r} takes no 4-D mask"
    for c in {id(config): config, id(text): text}.values():
        if getattr(c, "alibi", False) or getattr(c, "model_type", "") in ("bloom", "mpt"):
            return "it has ALiBi position biases"
        if getattr(c, "sliding_window", None) and getattr(c, "use_sliding_window", True):
            return "it has sliding-window attention"
        if any(t != "full_attention" for t in (getattr(c, "layer_types", None) or [])):
            return "some of its layers use attention other than full attention"
    return None


def text_config(base: torch.nn.Module):
    """The config of the model's text decoder: a multimodal model's top-level config does not say
    its vocabulary, width or attention masks."""
    config = base.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def checked(base: torch.nn.Module) -> bool | None:
    """The one-time check's verdict for this model (None: not checked yet)."""
    return _checked.get(base)


def record_check(base: torch.nn.Module, plain: torch.Tensor, packed: torch.Tensor, mask: torch.Tensor,
                 tolerance: float) -> bool:
    """Compare the packed forward's log-probs with the plain forward's on one micro-batch; remember
    and return whether they agree (a disagreement warns once, and the model trains unpacked)."""
    gap = float(((plain - packed).abs() * mask).max()) if mask.any() else 0.0
    ok = gap <= tolerance
    _checked[base] = ok
    if not ok:
        warnings.warn(f"packed training forward disagrees with the plain forward by {gap:.3g} in log-prob "
                      f"(tolerance {tolerance:g}) on {type(base).__name__}: training unpacked "
                      "(set packing: off to skip this check)", RuntimeWarning, stacklevel=3)
    return ok


def record_failure(base: torch.nn.Module, exc: Exception) -> None:
    """The check's packed forward raised: remember that this model trains unpacked, and say why once."""
    _checked[base] = False
    warnings.warn(f"packed training forward failed on {type(base).__name__} ({type(exc).__name__}: {exc}): "
                  "training unpacked (set packing: off to skip this check)", RuntimeWarning, stacklevel=3)


def tolerance(dtype: torch.dtype) -> float:
    """How far a packed log-prob may be from the plain one: float rounding of the model's dtype."""
    return 1e-4 if dtype == torch.float32 else (1e-9 if dtype == torch.float64 else 5e-2)
