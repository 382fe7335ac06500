"""A key/value cache for many messages at once: one preallocated padded buffer, a row per message.

Token-level play advances every open message of a policy in one forward. Messages start and end
at different times and have different lengths, so each row keeps its own span of valid slots
``[start, length)``; a forward reads the rows ``[r0, r1)`` (a view, never a copy), writes the new
keys/values at each row's own next slot, and attends through a 4-D additive mask that hides every
slot outside a row's span. Rows ``[0, n)`` are the open messages: a message joins at row ``n`` and
a leaving one is replaced by the last row (one row copied once, not per step), so the open rows
stay contiguous. Capacity (rows and slots) grows by doubling, so the per-token cost is one write
plus attention over the longest open context, flat in the number of tokens already cached.

Rows that hold the same prompt prefix can be tagged with a group (:meth:`share`); with
:attr:`plan_shared` on, a decode step then reads each group's prefix once, not once per row
(:mod:`~cogym.agents.cascade`), when that saves at least :data:`MIN_SAVED` slot reads.

The object passed as ``past_key_values`` only needs ``update(key, value, layer_idx)``: what every
Hugging Face decoder calls on its cache; the 4-D mask is passed through unchanged by
``transformers``' mask builder. It holds no model and knows nothing of sampling.
"""

from __future__ import annotations

import torch

from cogym.agents.cascade import CascadePlan

MIN_SAVED = 2048  # slot reads (rows x slots, per layer) a cascade step must save to be worth its extra ops


class BatchKV:
    """Per layer, keys and values ``(R, H, W, D)`` (rows, kv heads, slots, head dim) plus per-row spans."""

    def __init__(self, device: torch.device | str = "cpu", rows: int = 8, slots: int = 64) -> None:
        self.device = torch.device(device)
        self.rows_cap, self.slots_cap = rows, slots
        self.keys: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []
        # Per open row (plain lists: a handful of small ops a step, cheaper than tensor ops).
        self.start: list[int] = []  # first valid slot
        self.length: list[int] = []  # next free slot
        self.shared: list[tuple[int, int]] = []  # (group, prefix slots) of a row sharing a prefix, else (-1, 0)
        self.cascade: CascadePlan | None = None  # decode: the shared-prefix plan of the forward in flight
        self.plan_shared = False  # plan shared-prefix decode steps (the owner sets it when its model supports them)
        self._view: tuple[int, int] = (0, 0)  # rows of the forward in flight
        self._write: tuple[torch.Tensor, torch.Tensor] | None = None  # decode: (row index (b,), slot (b,)); None: prefill
        self._width = 0  # slots the forward in flight attends over
        self._window = 0  # prefill: the first slot the forward in flight writes

    @property
    def n(self) -> int:
        """Open rows: ``[0, n)``."""
        return len(self.length)

    # ------------------------------------------------------------------ rows
    def add_rows(self, k: int, width: int) -> int:
        """Open ``k`` rows at the end, about to be prefilled with ``width`` slots; return the first."""
        r0 = self.n
        self._reserve(r0 + k, width)
        self.start += [0] * k
        self.length += [0] * k
        self.shared += [(-1, 0)] * k
        return r0

    def share(self, r: int, group: int, slots: int) -> None:
        """Tag row ``r``: its first ``slots`` slots (from its span start) hold the same keys and values as
        those of every other row tagged ``group``."""
        self.shared[r] = (group, slots)

    def add_row_with(self, span: list[tuple[torch.Tensor, torch.Tensor]]) -> int:
        """Open a row at the end holding ``span`` (per layer ``(H, m, D)``, from :meth:`read_span`) at
        slots ``[0, m)``, ready for a decode step; return it."""
        m = span[0][0].shape[1]
        r = self.add_rows(1, m + 1)
        self.write_span(r, 0, span)
        self.start[r], self.length[r] = 0, m
        return r

    def remove_row(self, r: int) -> int | None:
        """Close row ``r``; the last row moves into it. Returns the old index of the moved row (None if none)."""
        last = self.n - 1
        if not 0 <= r <= last:
            raise IndexError(f"row {r} is not open (open rows: {self.n})")
        moved = None
        if r != last:
            used = self.length[last]
            for buf in self.keys + self.values:
                if buf is not None:
                    buf[r, :, :used] = buf[last, :, :used]  # one row's span, once per finished message
            self.start[r], self.length[r] = self.start[last], self.length[last]
            self.shared[r] = self.shared[last]
            moved = last
        del self.start[last], self.length[last], self.shared[last]
        if self.n == 0:  # nothing open: give the memory back between rollouts
            self.keys, self.values = [], []
        return moved

    def _reserve(self, rows: int, slots: int) -> None:
        """Grow capacity (doubling) to hold ``rows`` rows of ``slots`` slots; existing content is kept."""
        new_rows, new_slots = self.rows_cap, self.slots_cap
        while new_rows < rows:
            new_rows *= 2
        while new_slots < slots:
            new_slots *= 2
        if (new_rows, new_slots) == (self.rows_cap, self.slots_cap):
            return
        for bufs in (self.keys, self.values):
            for i, old in enumerate(bufs):
                if old is not None:
                    grown = old.new_zeros((new_rows, old.shape[1], new_slots, old.shape[3]))
                    grown[: old.shape[0], :, : old.shape[2]] = old
                    bufs[i] = grown
        self.rows_cap, self.slots_cap = new_rows, new_slots

    # ------------------------------------------------------------------ forwards
    def prepare_prefill(self, r0: int, r1: int, lengths: list[int], dtype: torch.dtype, fed: int | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Set up a prefill of rows ``[r0, r1)`` whose prompts have ``lengths`` ids, left-padded to
        ``P = max(lengths)``; the forward reads the last ``q = fed`` slots (default all ``P``), the
        slots before them already hold their keys and values (a shared prefix, :meth:`write_span`).
        Returns ``(mask (b, 1, q, P), position_ids (b, q))``."""
        width = max(lengths)
        q = width if fed is None else fed
        self._reserve(r1, width)
        self.start[r0:r1] = [width - n for n in lengths]
        self.length[r0:r1] = [width] * (r1 - r0)
        self.shared[r0:r1] = [(-1, 0)] * (r1 - r0)
        self.cascade = None
        k = torch.arange(width)
        qs = torch.arange(width - q, width)  # (q,) the slots the forward writes
        start = torch.tensor(self.start[r0:r1], dtype=torch.long)[:, None, None]  # (b, 1, 1)
        allowed = (k[None, None, :] >= start) & (k[None, None, :] <= qs[None, :, None])  # (b, q, P): own span, causal
        # A padding query sees only itself: never an empty row (NaN that would reach the cache).
        allowed |= (k[None, None, :] == qs[None, :, None]) & (qs[None, :, None] < start)
        self._view, self._write, self._width, self._window = (r0, r1), None, width, width - q
        positions = (qs[None, :] - start[:, :, 0]).clamp(min=0)  # (b, q)
        return self._additive(allowed[:, None], dtype), positions.to(self.device)

    def write_span(self, r: int, slot: int, span: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Put per-layer keys and values ``(H, m, D)`` (from :meth:`read_span`) at slots ``[slot, slot + m)`` of row ``r``."""
        for layer, (key, value) in enumerate(span):
            self.keys[layer][r, :, slot: slot + key.shape[1]] = key
            self.values[layer][r, :, slot: slot + value.shape[1]] = value

    def read_span(self, r: int, slot: int, m: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of row ``r``'s keys and values at slots ``[slot, slot + m)``, per layer ``(H, m, D)``."""
        return [(k[r, :, slot: slot + m].clone(), v[r, :, slot: slot + m].clone()) for k, v in zip(self.keys, self.values)]

    def prepare_decode(self, r0: int, r1: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Set up one new id for each of rows ``[r0, r1)``, written at its next slot.
        Returns ``(mask (b, 1, 1, W), position_ids (b, 1))``, ``W`` the longest span end of these rows; with a
        shared-prefix plan (:attr:`cascade`) the mask is the plan's own-part mask instead."""
        width = max(self.length[r0:r1]) + 1
        self._reserve(r1, width)
        write = torch.tensor(self.length[r0:r1], dtype=torch.long)  # (b,)
        starts = torch.tensor(self.start[r0:r1], dtype=torch.long)  # (b,)
        self.cascade = self._plan(r0, r1, width, dtype)
        if self.cascade is None:
            k = torch.arange(width)
            allowed = (k[None, :] >= starts[:, None]) & (k[None, :] <= write[:, None])  # (b, W)
            mask = self._additive(allowed[:, None, None], dtype)
        else:  # the cascade reads its own masks: the model only passes this one through
            mask = self.cascade.own_mask
        self.length[r0:r1] = [n + 1 for n in self.length[r0:r1]]
        rows = torch.arange(r1 - r0, device=self.device)
        self._view, self._write, self._width = (r0, r1), (rows, write.to(self.device)), width
        positions = (write - starts)[:, None]  # (b, 1)
        return mask, positions.to(self.device)

    def _plan(self, r0: int, r1: int, width: int, dtype: torch.dtype) -> CascadePlan | None:
        """The shared-prefix plan of a decode step of rows ``[r0, r1)`` (before their lengths grow), or None when
        :attr:`plan_shared` is off, no two rows share a prefix or it would save fewer than :data:`MIN_SAVED` slot
        reads. Rows in no group of two or more (loners) attend their whole span on their own."""
        if not self.plan_shared:
            return None
        tags: dict[int, list[int]] = {}
        for i, (g, _) in enumerate(self.shared[r0:r1]):
            tags.setdefault(g, []).append(i)
        groups = {g: rows for g, rows in tags.items() if g >= 0 and len(rows) > 1}
        if not groups:
            return None
        b = r1 - r0
        starts = self.start[r0:r1]
        grouped = [i for rows in groups.values() for i in rows]
        loners = sorted(set(range(b)) - set(grouped))
        own = list(starts)  # the first slot each row reads from its own row
        for i in grouped:
            own[i] += self.shared[r0 + i][1]
        reps = [rows[0] for rows in groups.values()]
        spans = [(starts[i], starts[i] + self.shared[r0 + i][1]) for i in reps]
        own_from, p0, p1 = min(own[i] for i in grouped), min(s for s, _ in spans), max(e for _, e in spans)
        loner_from = min((starts[i] for i in loners), default=width)
        reads = len(reps) * (p1 - p0) + b * (width - own_from) + len(loners) * (width - loner_from)
        if b * width - reads < MIN_SAVED:
            return None
        last = torch.tensor(self.length[r0:r1], dtype=torch.long)[:, None]  # the slot this step writes
        k = torch.arange(own_from, width)
        first = torch.tensor([max(o, own_from) for o in own], dtype=torch.long)[:, None]
        own_mask = self._additive(((k[None] >= first) & (k[None] <= last))[:, None, None], dtype)
        k = torch.arange(p0, p1)
        lo, hi = (torch.tensor(x, dtype=torch.long)[:, None] for x in zip(*spans))
        prefix_mask = self._additive(((k[None] >= lo) & (k[None] < hi))[:, None, None], dtype)
        size = max(len(rows) for rows in groups.values())
        stack = [rows[min(j, len(rows) - 1)] for rows in groups.values() for j in range(size)]
        place, gate = [0] * b, [float("-inf")] * b
        for g, rows in enumerate(groups.values()):
            for j, i in enumerate(rows):
                place[i], gate[i] = g * size + j, 0.0
        step = reps[1] - reps[0] if len(reps) > 1 else 1
        even = step > 0 and reps == list(range(reps[0], reps[0] + step * len(reps), step))
        dev = self.device
        plan = CascadePlan(own_from=own_from, own_mask=own_mask, reps=torch.tensor(reps, device=dev),
                           rep_slice=slice(reps[0], reps[-1] + 1, step) if even else None,
                           prefix_from=p0, prefix_to=p1, prefix_mask=prefix_mask, stack=torch.tensor(stack, device=dev),
                           place=torch.tensor(place, device=dev), gate=torch.tensor(gate, device=dev).view(b, 1, 1),
                           size=size, ordered=stack == list(range(b)))  # ordered: equal groups in row order, no loner
        if loners:
            k = torch.arange(loner_from, width)
            index = torch.tensor(loners, dtype=torch.long)
            first = torch.tensor(starts, dtype=torch.long)[index, None]
            plan.loners, plan.loner_from = index.to(dev), loner_from
            if loners == list(range(loners[0], loners[-1] + 1)):  # consecutive rows: read through a view
                plan.loner_slice = slice(loners[0], loners[-1] + 1)
            plan.loner_mask = self._additive(((k[None] >= first) & (k[None] <= last[index]))[:, None, None], dtype)
        return plan

    def _additive(self, allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask.to(self.device)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``key``/``value`` ``(b, H, q, D)`` of the forward in flight; return the rows' keys and
        values ``(b, H, W, D)`` (views of the buffer). Whatever else the attention passes (``cache_kwargs``
        up to transformers 5.23, ``kwargs=`` from 5.24) is not needed: the rotary embedding is applied
        before the cache and the mask is :meth:`attention_mask`'s."""
        while len(self.keys) <= layer_idx:
            self.keys.append(None)
            self.values.append(None)
        r0, r1 = self._view
        out = []
        for bufs, new in ((self.keys, key), (self.values, value)):
            if bufs[layer_idx] is None:
                bufs[layer_idx] = new.new_zeros((self.rows_cap, new.shape[1], self.slots_cap, new.shape[3]))
            rows = bufs[layer_idx][r0:r1]  # (b, H, S, D), a view
            if self._write is None:
                rows[:, :, self._window: self._window + new.shape[2]] = new
            else:
                rows[self._write[0], :, self._write[1]] = new[:, :, 0]
            out.append(rows[:, :, : self._width])
        return out[0], out[1]
