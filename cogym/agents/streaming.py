"""Token streaming with a policy: the model implementation of :class:`~cogym.core.types.TokenStreaming`.

:class:`PolicyStreams` writes messages with a policy, every open message in one batched forward
over a :class:`~cogym.agents.batch_kv.BatchKV` cache: a new message is prefilled once (the new
messages of one call together, left-padded; a prefix shared with earlier prompts is copied, not
recomputed, see :class:`SharedPrefixes`), each further token feeds only the id sampled last.
Sampling is :func:`~cogym.agents.sampling.sample_tokens`, the semantics of ``Policy.generate``:
temperature, top-k, top-p, behaviour log-probs of the tempered unfiltered distribution, each
message's draws keyed by its request's key and its token count. A message
ends at an end-of-sequence token (part of the response: the model chose it) or, one step after its
``max_new_tokens``-th token, with a :class:`Token` that has no id (the limit chose it).

:class:`~cogym.agents.text_streams.TextStreams` is the other one: whole-text answers token by token.
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import torch

from cogym.agents.batch_kv import BatchKV
from cogym.agents.cascade import supports, use_cascade
from cogym.agents.sampling import random_keys, sample_tokens
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.core.types import Message, Request, Token


class SharedPrefixes:
    """Keys and values of prompt prefixes that several messages share (the chat template and system
    message of a role, a problem that several seats answer), so a new message computes only the rest
    of its prompt. A prefix is learnt when a prompt's common prefix with the previous prompt is at
    least ``min_len`` ids, and a prompt seen again among the last ``capacity`` keeps all but its last
    id; at most ``capacity`` prefixes are kept (oldest dropped). It is only valid for the weights it
    was computed with: the owner clears it whenever its cache empties (between rollouts).
    """

    def __init__(self, min_len: int = 8, capacity: int = 64) -> None:
        self.min_len, self.capacity = min_len, capacity
        self.spans: dict[tuple[int, ...], list] = {}
        self._last: list[int] = []
        self._recent: dict[tuple[int, ...], None] = {}  # prompts read lately (ordered: oldest first)

    def longest(self, prompt: list[int]) -> tuple[tuple[int, ...], list] | None:
        """The longest kept prefix of ``prompt`` that leaves at least one id to compute."""
        whole = tuple(prompt[:-1])
        if whole in self.spans:  # the prompt was read before: all but its last id is kept
            return whole, self.spans[whole]
        best = None
        for ids, span in self.spans.items():
            if len(ids) < len(prompt) and tuple(prompt[: len(ids)]) == ids and (best is None or len(ids) > len(best[0])):
                best = (ids, span)
        return best

    def learn(self, prompt: list[int], read: Callable[[int], list]) -> None:
        """Keep the prefix ``prompt`` shares with the previous prompt (``read(m)`` copies its first m slots)."""
        m = 0
        for a, b in zip(prompt, self._last):
            if a != b:
                break
            m += 1
        seen = tuple(prompt)
        if seen in self._recent:
            m = len(prompt)
        m = min(m, len(prompt) - 1)
        self._last = list(prompt)
        self._recent[seen] = None
        if len(self._recent) > self.capacity:
            self._recent.pop(next(iter(self._recent)))
        key = tuple(prompt[:m])
        if m < self.min_len or key in self.spans or (self.longest(prompt) or ((),))[0] == key:
            return
        if len(self.spans) >= self.capacity:
            self.spans.pop(next(iter(self.spans)))
        self.spans[key] = read(m)

    def clear(self) -> None:
        self.spans.clear()
        self._recent.clear()


@dataclass
class _Open:
    prompt_ids: list[int]
    row: int | None = None  # its row in the cache once prefilled
    emitted: int = 0
    pending: int | None = None  # the last id sampled, not yet read by the model
    key: int | None = None  # its sampling key (Request.key; None: one from torch's global generator)


class PolicyStreams:
    """Open messages of one policy, batched. ``max_batch`` caps the rows of one forward (1: one
    message at a time, the slow path kept for comparison)."""

    def __init__(self, policy: Policy, max_batch: int = 0) -> None:
        self.policy, self.max_batch = policy, max_batch
        self.cache = BatchKV(policy.device)
        self.open: dict[Hashable, _Open] = {}
        self.owner: list[Hashable] = []  # owner[row]: the handle of the message in that cache row
        self.eos = frozenset(int(e) for e in policy.eos_ids)
        self.fed_tokens = 0  # ids read by the model, all messages (cache reuse: prompt + 1 per further token)
        self._prefixes = SharedPrefixes()
        self._groups: dict[tuple[int, ...], int] = {}  # shared prefix -> its group tag in the cache
        self.cascade_steps = 0  # decode forwards that read shared prefixes once per group
        self._ids = itertools.count()
        self._cache_arg = _cache_arg(policy.model)  # once: _forward runs every step of every message

    def begin(self, requests: Sequence[Request]) -> list[Message]:
        out = []
        for r in requests:
            handle = next(self._ids)
            self.open[handle] = _Open(prompt_ids=self.policy.prompt_of(r),
                                      key=r.key if r.key is not None else random_keys(1)[0])
            out.append(Message(handle=handle, prompt_ids=list(self.open[handle].prompt_ids)))
        return out

    @torch.no_grad()
    def advance(self, handles: Sequence[Hashable], sampling: SamplingParams) -> list[Token]:
        """The next token of every message in ``handles``: one prefill forward for the new ones,
        one decode forward per contiguous run of cache rows for the others (one run when every open
        message advances), then one batched draw."""
        msgs = [self.open[h] for h in handles]
        live = [i for i, m in enumerate(msgs) if m.emitted < sampling.max_new_tokens]
        logits: dict[int, torch.Tensor] = {}
        read: dict[int, int] = {}
        model = self.policy.model
        was_training = model.training
        if was_training:  # (toggling walks every module: only when needed)
            model.eval()
        try:
            with self.policy.gather():
                # A new message whose prompt is cached but for its last id joins the decode forward.
                new = [i for i in live if msgs[i].row is None and not self._attach(handles[i])]
                decode = sorted((i for i in live if msgs[i].row is not None), key=lambda i: msgs[i].row)
                for chunk in self._chunks(new):
                    out, fed = self._prefill([handles[i] for i in chunk])
                    logits.update(zip(chunk, out))
                    read.update(zip(chunk, fed))
                for run in self._runs(decode, msgs):
                    logits.update(zip(run, self._decode([msgs[i] for i in run])))
                    read.update((i, 1) for i in run)
        finally:
            if was_training:
                model.train()
        tokens = [Token(id=None, end=True) for _ in msgs]  # the length limit ends the others
        if live:
            ids, logp = sample_tokens(torch.stack([logits[i] for i in live]), sampling,  # (b,), (b,)
                                      [msgs[i].key for i in live], [msgs[i].emitted for i in live])
            for i, tok, lp in zip(live, ids.tolist(), logp.tolist()):
                msgs[i].emitted += 1
                msgs[i].pending = tok
                tokens[i] = Token(id=tok, end=tok in self.eos, logprob=lp, read=read[i])
                self.fed_tokens += read[i]
        return tokens

    def close(self, handles: Sequence[Hashable]) -> None:
        for h in handles:
            msg = self.open.pop(h)
            if msg.row is None:
                continue
            moved = self.cache.remove_row(msg.row)
            last = self.owner.pop()
            if moved is not None:  # the last row now lives in the freed one
                self.owner[msg.row] = last
                self.open[last].row = msg.row
        if self.cache.n == 0:  # between rollouts the weights may change: shared prefixes go with the cache
            self._prefixes.clear()
            self._groups.clear()

    # ------------------------------------------------------------------ internals
    def _chunks(self, idx: list[int]) -> list[list[int]]:
        step = self.max_batch or max(len(idx), 1)
        return [idx[k: k + step] for k in range(0, len(idx), step)]

    def _runs(self, idx: list[int], msgs: list[_Open]) -> list[list[int]]:
        """``idx`` (sorted by row) cut where rows are not consecutive, and into chunks of ``max_batch``."""
        runs: list[list[int]] = []
        for i in idx:
            if runs and msgs[runs[-1][-1]].row + 1 == msgs[i].row and len(runs[-1]) < (self.max_batch or len(idx)):
                runs[-1].append(i)
            else:
                runs.append([i])
        return runs

    def _attach(self, handle: Hashable) -> bool:
        """Give a new message a row holding its prompt's cache but for the last id (which its first
        decode step reads), when a shared prefix covers that much; whether it did."""
        msg = self.open[handle]
        shared = self._prefixes.longest(msg.prompt_ids)
        if shared is None or len(shared[0]) != len(msg.prompt_ids) - 1:
            return False
        msg.row = self.cache.add_row_with(shared[1])
        msg.pending = msg.prompt_ids[-1]
        self.owner.append(handle)
        self._tag(msg)
        return True

    def _tag(self, msg: _Open) -> None:
        """Tag the message's row with the longest shared prefix of its prompt (the row holds that prefix's
        keys and values from its span start), so decode steps may read it once for all rows that hold it."""
        shared = self._prefixes.longest(msg.prompt_ids)
        if shared is not None:
            self.cache.share(msg.row, self._groups.setdefault(shared[0], len(self._groups)), len(shared[0]))

    def _prefill(self, handles: list[Hashable]) -> tuple[torch.Tensor, list[int]]:
        """Read the prompts of new messages (new rows at the end of the cache), each from its longest
        shared prefix on; logits ``(b, V)`` and the ids each row read."""
        msgs = [self.open[h] for h in handles]
        lengths = [len(m.prompt_ids) for m in msgs]
        width = max(lengths)
        shared = [self._prefixes.longest(m.prompt_ids) for m in msgs]  # (prefix ids, its cache) or None
        q = max(n - (len(p[0]) if p else 0) for n, p in zip(lengths, shared))  # slots to compute
        pad = self.policy.tokenizer.pad_token_id or 0
        ids = torch.full((len(msgs), q), pad, dtype=torch.long)  # (b, q): each prompt's last q ids, left-padded
        for k, m in enumerate(msgs):
            tail = m.prompt_ids[-q:]
            ids[k, q - len(tail):] = torch.tensor(tail, dtype=torch.long)
        if self.cache.n == 0:  # an empty cache holds no buffers: follow the model if it moved (or changed)
            self.cache.device = self.policy.device
            self.cache.plan_shared = supports(self.policy.model)
        r0 = self.cache.add_rows(len(msgs), width)
        for k, (m, n, p) in enumerate(zip(msgs, lengths, shared)):
            m.row = r0 + k
            if p is not None:
                self.cache.write_span(m.row, width - n, p[1])
        self.owner.extend(handles)
        mask, positions = self.cache.prepare_prefill(r0, r0 + len(msgs), lengths, self._dtype(), fed=q)
        logits = self._forward(ids, mask, positions)
        for m, n in zip(msgs, lengths):
            self._prefixes.learn(m.prompt_ids, lambda size, m=m, n=n: self.cache.read_span(m.row, width - n, size))
        for m in msgs:  # after learning: messages read together tag the prefix they share
            self._tag(m)
        return logits, [min(q, n) for n in lengths]

    def _decode(self, msgs: list[_Open]) -> torch.Tensor:
        """Read each message's last sampled id (rows ``msgs[0].row ..``, consecutive); logits ``(b, V)``."""
        ids = torch.tensor([[m.pending] for m in msgs], dtype=torch.long)  # (b, 1)
        mask, positions = self.cache.prepare_decode(msgs[0].row, msgs[-1].row + 1, self._dtype())
        return self._forward(ids, mask, positions)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        model = self.policy.model
        with use_cascade(model, self.cache.cascade) as extra:  # a decode step with a shared-prefix plan
            self.cascade_steps += bool(extra)
            out = model(input_ids=ids.to(self.policy.device), attention_mask=mask, position_ids=positions,
                        **{self._cache_arg: self.cache}, use_cache=True, logits_to_keep=1, **extra)
        return out.logits[:, -1].float().cpu()  # (b, V)

    def _dtype(self) -> torch.dtype:
        return next(self.policy.model.parameters()).dtype


def _cache_arg(model: torch.nn.Module) -> str:
    """The forward's name for the KV cache: ``cache`` from transformers 5.24 (``past_key_values``
    still works there, with a deprecation warning), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
