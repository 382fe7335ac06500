"""The in-process transformers backend: :class:`HFBackend`, every policy's default generation backend
(see :mod:`cogym.agents.backends` for the protocol)."""

from __future__ import annotations

import inspect
from typing import Mapping, Sequence

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from cogym.agents import cascade
from cogym.agents.backends.checks import check_keys, check_update
from cogym.agents.backends.policy_view import PolicyView
from cogym.agents.sampling import draw, random_keys
from cogym.core.types import Generation, SamplingParams


PAD_MULTIPLE = 16  # prompts are left-padded to a multiple of this width (see HFBackend)
MIN_ROWS = 16  # a keyed batch of fewer prompts is filled up to this many rows (see HFBackend)


class HFBackend:
    """Generation with the policy's transformers model, in process (``model.generate``, the behaviour
    log-probs taken step by step by a forward hook: memory holds one step's ``(B, V)`` logits).

    A row's response depends only on its prompt and key, not on its batch: each step draws every
    row's token with :func:`~cogym.agents.sampling.draw` (a logits processor hands ``generate`` the
    drawn token as its only choice), and the batch is left-padded to a multiple of
    :data:`PAD_MULTIPLE` ids, so a row's ids keep their place modulo the CPU kernels' vector width.
    CPU matrix products also round a row differently when they have fewer than 16 rows (another
    kernel), so a keyed batch smaller than :data:`MIN_ROWS` is filled with copies of its first
    prompt, whose answers are dropped. Then a row's logits are bitwise those of any other batch
    (measured on CPU with fixed threads; GPU kernels promise less).

    Each distinct prompt of a batch is prefilled once and its KV cache fanned out to the rows that
    hold it (:func:`shared_prefill`; ``share_prompts=False`` prefills every row).

    It shares the model the learner trains, so after an update ``load_weights(None, version)`` only
    records the version; given a state dict, it loads it into the model (every key must be the model's)."""

    name = "hf"

    def __init__(self, policy: PolicyView, share_prompts: bool = True) -> None:
        self.policy = policy
        self.share_prompts = share_prompts  # prefill each distinct prompt once (see shared_prefill)
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def load_weights(self, weights: Mapping[str, torch.Tensor] | None, version: int) -> None:
        check_update(self.policy, self._version, version, weights)
        if weights is not None:
            model = self.policy.model
            with self.policy.gather(), torch.no_grad():
                model.load_state_dict(dict(weights), strict=False)
        self._version = version

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: "SamplingParams",
                 keys: Sequence[int] | None = None) -> list["Generation"]:
        if not prompts:
            return []
        check_keys(prompts, keys)
        policy, model = self.policy, self.policy.model
        asked = len(prompts)
        if keys is not None and not sampling.greedy and asked < MIN_ROWS:  # fill (see the class docstring)
            prompts = list(prompts) + [prompts[0]] * (MIN_ROWS - asked)
            keys = list(keys) + [keys[0]] * (MIN_ROWS - asked)
        pad = policy.tokenizer.pad_token_id
        width = -(-max(len(p) for p in prompts) // PAD_MULTIPLE) * PAD_MULTIPLE
        # (B, P), left-padded: built as one list (a tensor per row costs more than the rest of this call)
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
        kwargs = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=pad, eos_token_id=policy.eos_ids,
                      return_dict_in_generate=True)
        # Greedy or not, generate takes the argmax: when sampling, of the one token _KeyedDraw leaves.
        kwargs.update(do_sample=False)
        if not sampling.greedy:
            kwargs.update(logits_processor=[_KeyedDraw(sampling, random_keys(len(prompts)) if keys is None else keys)])
        was_training = model.training
        model.eval()
        steps = _StepLogprobs(1.0 if sampling.greedy else sampling.temperature)
        try:
            with policy.gather():
                input_ids, attention = input_ids.to(policy.device), attention.to(policy.device)
                if self.share_prompts:
                    kwargs.update(shared_prefill(model, input_ids, attention, room=sampling.max_new_tokens))
                plan = kwargs.pop("cascade", None)
                hook = getattr(model, "hf_model", model).register_forward_hook(steps, with_kwargs=True)
                try:
                    with cascade.use_cascade(getattr(model, "hf_model", model), plan):
                        out = model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
                finally:
                    hook.remove()
        finally:
            if was_training:
                model.train()
        new = out.sequences[:, width:].cpu()  # (B, T)
        logp = steps.finish(new)  # (B, T)
        new, logp = new[:asked], logp[:asked]
        eos = torch.isin(new, torch.tensor(policy.eos_ids, dtype=new.dtype))
        ended = eos.any(1)
        lengths = torch.where(ended, eos.int().argmax(1) + 1, new.shape[1]).tolist()  # up to the first end token
        new_rows, logp_rows, ended = new.tolist(), logp.tolist(), ended.tolist()
        results = []
        for i, p in enumerate(prompts[:asked]):
            n = lengths[i]
            ids = new_rows[i][:n]
            results.append(Generation(prompt_ids=list(p), response_ids=ids, logprobs=logp_rows[i][:n],
                                      text=policy.decode(ids), finished=ended[i], version=self._version))
        return results


def shared_prefill(model: torch.nn.Module, input_ids: torch.Tensor, attention: torch.Tensor, room: int = 0) -> dict:
    """Prefill every distinct prompt of a left-padded batch once and fan its KV cache out to the rows
    that hold it: ``generate``'s extra keyword arguments (the cache), or ``{}`` for a model that takes no
    cache this way.

    The cache holds all but each row's last prompt id; ``generate`` then feeds that last id of every
    row, so the first sampling step is the usual one. In group sampling (the k solvers of one problem,
    ``game.group_size`` seeds) the rows of a group hold one prompt, so the prefill runs on the
    distinct prompts only. Every batch takes this path, shared prompts or not, so a row's logits do not
    depend on whether its prompt has twins in its batch.

    ``room``: how many more ids each row will add (``max_new_tokens``). Each layer's keys and values
    are then copied once into buffers with that room to spare, and every step writes its keys and
    values in place (:class:`_RoomyLayer`) instead of concatenating a whole new cache. The attention
    reads the same numbers either way, through a view of the buffer.

    Where the model's attention is plain, the result also holds a ``cascade`` plan
    (:func:`~cogym.agents.cascade.generate_plan`; not a ``generate`` argument: the caller applies it with
    :func:`~cogym.agents.cascade.use_cascade`). Each decode step then reads a shared prompt's keys and
    values once per block of its rows, not once per row: at long prompts most of a step's attention.
    Every batch takes the plan, shared prompts or not, so that a row's numbers do not depend on which
    path its batch took."""
    base = getattr(model, "hf_model", model)
    params = inspect.signature(base.forward).parameters
    gen = getattr(base, "generation_config", None)
    if (input_ids.shape[1] < 2 or not {"position_ids", "logits_to_keep"} <= set(params)
            or getattr(gen, "cache_implementation", None) is not None or getattr(gen, "use_cache", True) is False
            or not getattr(base, "_supports_default_dynamic_cache", lambda: True)()):
        return {}  # a model that generates with a cache of its own kind, or none: generate prefills every row
    arg = "cache" if "cache" in params else "past_key_values"
    index: dict[tuple, int] = {}  # prompt -> its place among the distinct prompts
    lead: list[int] = []  # per distinct prompt, the first row that holds it
    owner: list[int] = []  # per row, its distinct prompt
    for i, row in enumerate(map(tuple, input_ids.tolist())):
        if row not in index:
            index[row] = len(lead)
            lead.append(i)
        owner.append(index[row])
    # CPU matrix products round a row differently below 16 rows (see HFBackend): the prefill runs
    # (distinct prompts) x (width - 1) rows, so a lone short prompt gets a copy that is thrown away
    copies = -(-MIN_ROWS // (input_ids.shape[1] - 1))
    distinct = torch.tensor(lead + [lead[0]] * max(0, copies - len(lead)), device=input_ids.device)
    head_ids, head_mask = input_ids[distinct, :-1], attention[distinct, :-1]
    positions = (head_mask.long().cumsum(-1) - 1).masked_fill(head_mask == 0, 0)  # as generate makes them
    cache = DynamicCache(config=getattr(base, "config", None))
    model(input_ids=head_ids, attention_mask=head_mask, position_ids=positions, use_cache=True, logits_to_keep=1,
          **{arg: cache})
    owner_t = torch.tensor(owner, device=input_ids.device)
    if room > 0 and all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", ())):
        distinct_kv = [(layer.keys, layer.values) for layer in cache.layers]  # before the rows' copies
        for layer in cache.layers:
            _RoomyLayer.adopt(layer, owner_t, room)
        if cascade.supports(base):  # every batch, shared prompts or not: a row's numbers never depend on its batch
            plan = cascade.generate_plan(owner, head_mask[:len(lead)] > 0, head_ids.shape[1], input_ids.device,
                                         distinct_kv[0][0].dtype, distinct_kv)
            return {arg: cache, "cascade": plan}
    else:
        cache.batch_select_indices(owner_t)
    return {arg: cache}


class _RoomyLayer(DynamicLayer):
    """A :class:`DynamicLayer` whose keys and values are views of buffers with room for more ids: an
    update writes the new ids' keys and values into the buffers in place and the layer's ``keys`` and
    ``values`` become longer views of them (a dynamic layer concatenates a new tensor at every step,
    copying the whole cache). Anything that replaces ``keys`` or ``values`` by other tensors (reordering,
    a reset) turns the layer back into a concatenating one for its later updates."""

    @classmethod
    def adopt(cls, layer: DynamicLayer, rows: torch.Tensor, room: int) -> None:
        """Turn a filled ``layer`` into a roomy one that holds its rows ``rows`` (as
        ``batch_select_indices`` would), with space for ``room`` more ids."""
        layer.__class__ = cls
        layer._room = []
        for name in ("keys", "values"):
            old = getattr(layer, name)
            n = old.shape[-2]
            buf = old.new_empty((len(rows), *old.shape[1:-2], n + room, old.shape[-1]))
            buf[..., :n, :].copy_(old.index_select(0, rows))
            layer._room.append(buf)
            setattr(layer, name, buf[..., :n, :])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self._in_place(key_states.shape[-2]):
            self._room = []
            return super().update(key_states, value_states, *args, **kwargs)
        keys_buf, values_buf = self._room
        n, m = self.keys.shape[-2], key_states.shape[-2]
        keys_buf[..., n:n + m, :].copy_(key_states)
        values_buf[..., n:n + m, :].copy_(value_states)
        self.keys, self.values = keys_buf[..., :n + m, :], values_buf[..., :n + m, :]
        return self.keys, self.values

    def _in_place(self, m: int) -> bool:
        """Whether ``keys`` and ``values`` are still the buffers' views and ``m`` more ids fit."""
        if not self._room or not self.is_initialized or self.keys is None or self.values is None:
            return False
        keys_buf, values_buf = self._room
        return (self.keys.data_ptr() == keys_buf.data_ptr() and self.values.data_ptr() == values_buf.data_ptr()
                and self.keys.shape[:-2] == keys_buf.shape[:-2] and self.values.shape[:-2] == values_buf.shape[:-2]
                and self.keys.stride() == keys_buf.stride() and self.values.stride() == values_buf.stride()
                and self.keys.shape[-2] == self.values.shape[-2] and self.keys.shape[-2] + m <= keys_buf.shape[-2])


class _KeyedDraw:
    """A logits processor for ``generate``: draws each row's next token with
    :func:`~cogym.agents.sampling.draw` (keyed by the row's key and the step) and leaves it as the
    only finite score, so greedy selection takes it."""

    def __init__(self, sampling: "SamplingParams", keys: Sequence[int]) -> None:
        self.sampling, self.keys, self.step = sampling, list(keys), 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(scores.float() / self.sampling.temperature, dim=-1)
        ids = draw(logp, self.sampling, self.keys, self.step)
        self.step += 1
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, ids[:, None], 0.0)


class _StepLogprobs:
    """A forward hook on the model that ``generate`` steps: the behaviour log-prob of each sampled token,
    ``log_softmax(logits / temperature)`` of the raw logits (before any processor), kept step by step.

    A step's log-softmax row ``(B, V)`` waits until the next forward, whose input is the token just
    sampled; only that token's value is kept. Memory is one step's ``(B, V)``, never ``(B, T, V)``."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.last: torch.Tensor | None = None  # (B, V): the newest step's log-softmax
        self.taken: list[torch.Tensor] = []  # per finished step, (B,)

    def __call__(self, module, args, kwargs, output) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self.last is not None:
            self.taken.append(self.last.gather(-1, ids[:, -1:].cpu()).squeeze(-1))
        logits = output.logits[:, -1, :].float().cpu() / self.temperature  # as generate's own float copy
        self.last = torch.log_softmax(logits, dim=-1)

    def finish(self, new: torch.Tensor) -> torch.Tensor:
        """Log-probs ``(B, T)`` of ``new`` (B, T), the generated ids."""
        if new.shape[1] == 0:
            return torch.zeros(new.shape, dtype=torch.float32)
        self.taken.append(self.last.gather(-1, new[:, -1:]).squeeze(-1))
        if len(self.taken) != new.shape[1]:
            raise RuntimeError(f"generate made {len(self.taken)} forwards for {new.shape[1]} tokens")
        return torch.stack(self.taken, dim=1)
