"""The tensors a learner trains on: right-padded token batches built from the rollout's Turns, the
log-probabilities of their response tokens under a model, and the data-parallel split into micro-batches."""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Sequence

import torch
from torch.utils.checkpoint import checkpoint
from transformers.modeling_layers import GradientCheckpointingLayer

from cogym.core import seeding
from cogym.core.types import Turn
from cogym.agents import cascade
from cogym.learners import packing as packing_mod, torch_dist as dist
from cogym.learners.losses import entropy_from_logits


@dataclass
class TokenBatch:
    """Right-padded training tensors for N turns.

    ``input_ids``/``attention_mask``: (N, W) prompt + response; ``resp_index``: (N, L) position in
    the logits of the token *predicting* each response token; ``mask``: (N, L) 1 on response tokens
    the model generated (a joined multi-turn turn's ``Turn.mask``: 0 on the game's messages inside it);
    ``logp_old``: (N, L) behaviour log-probabilities; ``scores``: (N,) outcome rewards; ``turns``:
    the N Turns themselves (episode, seat and info of each row).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    resp_ids: torch.Tensor
    resp_index: torch.Tensor
    mask: torch.Tensor
    logp_old: torch.Tensor
    scores: torch.Tensor
    roles: list[str]
    group_keys: list
    turns: list

    @classmethod
    def from_turns(cls, turns: Sequence[Turn], pad_id: int) -> "TokenBatch":
        n = len(turns)
        width = max(len(t.prompt_ids) + len(t.response_ids) for t in turns)
        lmax = max(len(t.response_ids) for t in turns)
        # Each tensor is built from one list of rows: a tensor op per row costs more than the rest.
        ids, attn, resp_ids, resp_index, mask, logp_old = [], [], [], [], [], []
        for t in turns:
            p, r = len(t.prompt_ids), len(t.response_ids)
            fill, rest = width - p - r, lmax - r
            ids.append(list(t.prompt_ids) + list(t.response_ids) + [pad_id] * fill)
            attn.append([1] * (p + r) + [0] * fill)
            resp_ids.append(list(t.response_ids) + [0] * rest)
            resp_index.append(list(range(p - 1, p + r - 1)) + [0] * rest)
            if t.mask is not None and len(t.mask) != r:
                raise ValueError(f"a turn's mask has {len(t.mask)} entries for {r} response tokens")
            mask.append(([1.0] * r if t.mask is None else [float(m) for m in t.mask]) + [0.0] * rest)
            if len(t.logprobs) != r:
                raise ValueError(f"a turn has {len(t.logprobs)} log-probs for {r} response tokens")
            logp_old.append(list(t.logprobs) + [0.0] * rest)
        scores = torch.tensor([float(t.reward) for t in turns])
        as_long = dict(dtype=torch.long)
        return cls(torch.tensor(ids, **as_long).reshape(n, width), torch.tensor(attn, **as_long).reshape(n, width),
                   torch.tensor(resp_ids, **as_long).reshape(n, lmax),
                   torch.tensor(resp_index, **as_long).reshape(n, lmax),
                   torch.tensor(mask, dtype=torch.float32).reshape(n, lmax),
                   torch.tensor(logp_old, dtype=torch.float32).reshape(n, lmax), scores,
                   [t.role for t in turns], [t.group_key for t in turns], list(turns))

    def to(self, device: torch.device) -> "TokenBatch":
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.resp_ids.to(device),
                          self.resp_index.to(device), self.mask.to(device), self.logp_old.to(device),
                          self.scores.to(device), self.roles, self.group_keys, self.turns)

    def rows(self, idx: torch.Tensor) -> "TokenBatch":
        ii = idx.tolist()
        return TokenBatch(self.input_ids[idx], self.attention_mask[idx], self.resp_ids[idx], self.resp_index[idx],
                          self.mask[idx], self.logp_old[idx], self.scores[idx], [self.roles[i] for i in ii],
                          [self.group_keys[i] for i in ii], [self.turns[i] for i in ii])


# Elements of one chunk of output-layer logits (fp32: 128 MiB): a 103-token vocabulary takes every
# response token of a micro-batch in one chunk, Qwen2.5's 151,936 about 220 tokens a chunk.
HEAD_CHUNK_ELEMENTS = 1 << 25


@contextlib.contextmanager
def training_forward(module: torch.nn.Module):
    """The mode of a training forward: eval (no dropout, so the forward is the distribution that
    sampled; gradients flow all the same), except that the decoder layers that checkpoint their
    activations (``gradient_checkpointing``) are flagged as training, the only mode in which
    transformers recomputes them. Restored afterwards: generation must not see the flag (it turns
    the KV cache off)."""
    module.eval()
    layers = [m for m in module.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]
    for m in layers:
        m.training = True  # this module only: its attention and MLP (and their dropout) stay in eval mode
    try:
        yield
    finally:
        for m in layers:
            m.training = False


def response_logp(model: torch.nn.Module, b: TokenBatch, temperature: float = 1.0,
                  packing: str = "auto") -> torch.Tensor:
    """Log-probs (N, L) of the response tokens under ``model`` at ``temperature`` (the distribution the
    rollout sampled from), 0 where ``b.mask`` is 0. Differentiable when grad is enabled. ``packing``
    (auto | on | off): whether the forward may lay the rows out packed, prompts shared
    (:mod:`~cogym.learners.packing`; ``LearnerConfig.packing``)."""
    return _response_scores(model, b, temperature, entropy=False, packing=packing)[0]


def response_logp_entropy(model: torch.nn.Module, b: TokenBatch, temperature: float = 1.0,
                          packing: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, entropy)``, both (N, L) and 0 where ``b.mask`` is 0: the response tokens' log-probs and
    the entropy of the next-token distribution (softmax of logits / temperature) at each of them."""
    return _response_scores(model, b, temperature, entropy=True, packing=packing)


def _response_scores(model: torch.nn.Module, b: TokenBatch, temperature: float,
                     entropy: bool, packing: str = "auto") -> tuple[torch.Tensor, torch.Tensor | None]:
    """The training forward. The network runs over prompt + response (plain: right-padded rows;
    packed: :mod:`~cogym.learners.packing`); the output layer runs only at the positions that predict
    a response token under the mask, a chunk of tokens at a time, and under grad each chunk is
    recomputed in the backward instead of kept. So no (N, L, V) or (N, W, V) tensor ever exists: the
    logits' memory is one chunk's, whatever the vocabulary or batch."""
    if packing not in packing_mod.PACKING:
        raise ValueError(f"packing must be one of {', '.join(packing_mod.PACKING)}, got {packing!r}")
    inner = _unwrap(model)
    # A LoRA policy's view activates its adapter around its own forward only: the head calls below
    # (an adapted output layer included) must see the same adapter.
    with inner.active() if hasattr(inner, "active") and hasattr(inner, "hf_model") else contextlib.nullcontext():
        if packing == "auto":
            _check_packing(model, b.input_ids.device)
        return _scores(model, b, temperature, entropy, _packed_layout(model, b, packing))


def _check_packing(model: torch.nn.Module, device: torch.device) -> None:
    """The one-time check of ``packing: auto`` (:mod:`~cogym.learners.packing`), at a model's first scoring
    call: a fixed batch of groups that share prompts, scored plain and packed without grad. Every call's
    first forward does it, whatever its own batch, so every data-parallel rank runs the same forwards
    (ZeRO-3 gathers parameters in each one) and reaches the same verdict."""
    base = _transformers_model(model)
    if packing_mod.checked(base) is not None or packing_mod.model_allows(base) is not None:
        return
    vocab = int(getattr(packing_mod.text_config(base), "vocab_size", 0) or 0)
    if vocab < 8:
        return
    g = seeding.torch_generator("learners.packing_check", 0)
    turns = []
    for k, (p, r) in enumerate([(12, 5)] * 3 + [(9, 3)] * 3 + [(14, 6), (5, 2)]):
        if k in (0, 3, 6, 7):  # a new prompt: two groups of three, then two rows of their own
            prompt = torch.randint(4, vocab, (p,), generator=g).tolist()
        response = torch.randint(4, vocab, (r,), generator=g).tolist()
        turns.append(Turn(game_index=k, episode_id="check", seat="s", role="r", policy_id="p", prompt_ids=prompt,
                          response_ids=response, logprobs=[0.0] * r, text="", finished=True))
    b = TokenBatch.from_turns(turns, 0).to(device)
    try:
        layout = _packed_layout(model, b, "on")
        with torch.no_grad():
            plain = _scores(model, b, 1.0, False, None)[0]
            packed = _scores(model, b, 1.0, False, layout)[0]
    except Exception as exc:  # noqa: BLE001 - a model that cannot run the packed forward trains plain
        packing_mod.record_failure(base, exc)
        return
    packing_mod.record_check(base, plain, packed, b.mask > 0, packing_mod.tolerance(_dtype(base)))


def _packed_layout(model: torch.nn.Module, b: TokenBatch, packing: str):
    """The packed layout of this batch's forward, or None for the plain one."""
    if packing == "off" or not b.turns or len(b.turns) != b.input_ids.shape[0]:
        return None
    base = _transformers_model(model)
    why = packing_mod.model_allows(base)
    if why is not None:
        if packing == "on":
            raise ValueError(f"packing: on, but {type(base).__name__} cannot take a packed forward: {why} "
                             "(set packing: auto or off)")
        return None
    if packing == "auto" and not packing_mod.checked(base):
        return None
    lengths = b.attention_mask.sum(1).tolist()
    ids = b.input_ids.tolist()  # one copy off the device, not one a row
    prompts, responses = [], []
    for i, t in enumerate(b.turns):
        p = len(t.prompt_ids)
        if p == 0 or p + len(t.response_ids) != lengths[i]:  # rows not built from these turns: keep them plain
            return None
        prompts.append(ids[i][:p])
        responses.append(ids[i][p:lengths[i]])
    hidden = int(getattr(packing_mod.text_config(base), "hidden_size", 0) or 0)
    return packing_mod.plan(prompts, responses, hidden, force=packing == "on", per_unit=_may_attend_per_unit(base))


def _dtype(base: torch.nn.Module) -> torch.dtype:
    return next((p.dtype for p in base.parameters() if p.is_floating_point()), torch.float32)


def _scores(model: torch.nn.Module, b: TokenBatch, temperature: float, entropy: bool,
            layout: "packing_mod.PackedLayout | None") -> tuple[torch.Tensor, torch.Tensor | None]:
    rows, cols = b.mask.nonzero(as_tuple=True)
    if layout is None:
        width = int(b.attention_mask.sum(1).max())
        inputs = dict(input_ids=b.input_ids[:, :width], attention_mask=b.attention_mask[:, :width])
        at = (rows, b.resp_index[rows, cols])
    else:
        device = b.input_ids.device
        inputs = dict(input_ids=layout.input_ids.to(device), position_ids=layout.position_ids.to(device),
                      attention_mask=layout.additive_mask(_dtype(_transformers_model(model)), device))
        at = (layout.score_row.to(device)[rows, cols], layout.score_col.to(device)[rows, cols])
    parts = _decoder_and_head(model)
    with _unit_attention(model, layout):
        if parts is None:  # a model without the standard decoder/head split: full logits, then select
            hidden, head = _positions(model(**inputs).logits, at), None
            vocab = hidden.shape[-1]
        else:
            decoder, head, vocab = parts
            seen: list[torch.Tensor] = []
            hook = decoder.register_forward_hook(lambda _m, _a, out: seen.append(
                out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]))
            try:  # through the model's own forward (engine hooks run); its head only at the last position
                model(**inputs, logits_to_keep=1, use_cache=False)
            finally:
                hook.remove()
            hidden = _positions(seen[-1], at)  # (K, H): the K scored positions
    targets = b.resp_ids[rows, cols]
    step = max(1, HEAD_CHUNK_ELEMENTS // max(1, vocab))
    pieces = []
    for i in range(0, len(targets), step):
        args = (head, hidden[i:i + step], targets[i:i + step], temperature, entropy)
        if torch.is_grad_enabled() and head is not None and len(targets) > step:
            pieces.append(checkpoint(_head_scores, *args, use_reentrant=False))
        else:
            pieces.append(_head_scores(*args))
    logp = b.mask.new_zeros(b.mask.shape, dtype=torch.float32)
    ent = b.mask.new_zeros(b.mask.shape, dtype=torch.float32) if entropy else None
    if not pieces:  # nothing to score: a zero that still hangs on the graph (a backward reaches the model)
        return logp + hidden.sum() * 0.0, ent
    logp = logp.index_put((rows, cols), torch.cat([p[0] for p in pieces]))
    if entropy:
        ent = ent.index_put((rows, cols), torch.cat([p[1] for p in pieces]))
    return logp, ent


def _unit_attention(model: torch.nn.Module, layout: "packing_mod.PackedLayout | None"):
    """The packed forward attends per unit (:func:`~cogym.agents.cascade.unit_attention`) where that pays and the
    model allows it: ``sdpa`` attention, and no gradient checkpointing (its recomputation in the backward
    would run outside this block)."""
    if layout is None or not layout.spans:
        return contextlib.nullcontext()
    base = _transformers_model(model)
    hidden = int(getattr(packing_mod.text_config(base), "hidden_size", 0) or 0)
    if not _may_attend_per_unit(base) or not cascade.units_pay(layout.spans, layout.input_ids.shape[1], hidden):
        return contextlib.nullcontext()
    return cascade.unit_attention(base, layout.spans)


def _may_attend_per_unit(base: torch.nn.Module) -> bool:
    """SDPA attention and no gradient checkpointing (whose recomputation would run outside the block)."""
    return (getattr(getattr(base, "config", None), "_attn_implementation", None) == "sdpa"
            and not getattr(base, "is_gradient_checkpointing", False))


def _positions(x: torch.Tensor, at: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``x[at]``: the (K, H) rows of ``x`` (B, W, H) at positions ``at`` = (row, column) indices, with a
    backward that repeats bit for bit. A packed layout scores one position more than once (a shared
    prompt's last token predicts the first token of each of its responses), and on CPU the backward of
    advanced indexing adds the repeated rows with parallel atomic adds, in whatever order the threads
    reach them: two identical runs then differed in the last bits of the gradient under CPU load.
    ``index_select``'s backward (``index_add_``) adds them in index order; on CUDA advanced indexing's
    backward sorts the indices and is the deterministic one (``index_add_`` uses atomics there)."""
    if x.device.type != "cpu":
        return x[at]
    flat = x.reshape(-1, x.shape[-1])  # (B*W, H)
    return flat.index_select(0, at[0] * x.shape[1] + at[1])


def _head_scores(head: torch.nn.Module | None, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                 entropy: bool) -> tuple[torch.Tensor, ...]:
    """Log-prob of ``targets`` (and the entropy) under ``head(hidden) / temperature`` (``head`` None:
    ``hidden`` are the logits already)."""
    logits = (head(hidden) if head is not None else hidden).float() / temperature  # (k, V)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (logp, entropy_from_logits(logits)) if entropy else (logp,)


def _decoder_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module, int] | None:
    """A transformers causal LM's decoder (its output: the final hidden states), output layer and vocabulary size,
    through the wrappers cogym puts around it (a DeepSpeed engine, a LoRA view, a PEFT model); None when the model
    has no such split or its forward takes no ``logits_to_keep``."""
    base = _transformers_model(model)
    try:
        decoder, head = base.get_decoder(), base.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if decoder is None or decoder is base or not isinstance(head, torch.nn.Module):
        return None
    if not takes_logits_to_keep(model):
        return None
    vocab = getattr(head, "out_features", None) or getattr(getattr(base, "config", None), "vocab_size", None)
    return (decoder, head, int(vocab)) if vocab else None


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module a training engine (DeepSpeed's, DDP) wraps, or ``model`` itself."""
    return model.module if isinstance(getattr(model, "module", None), torch.nn.Module) else model


def _transformers_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside the wrappers cogym puts around it (an engine, a LoRA view, PEFT)."""
    base = _unwrap(model)
    base = getattr(base, "hf_model", base)  # cogym's LoRA view: the shared transformers model inside
    return base.get_base_model() if hasattr(base, "get_base_model") else base


def takes_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether the model's forward computes logits at only the last ``logits_to_keep`` positions when asked."""
    return "logits_to_keep" in inspect.signature(_transformers_model(model).forward).parameters


def micro_batches(widths: Sequence[int], micro_batch_size: int, max_tokens: int | None = None,
                  rank: int = 0, world: int = 1, groups: Sequence[object] | None = None) -> list[torch.Tensor]:
    """Row indices of one rank's micro-batches. Rank ``r`` takes rows ``r::world``; consecutive rows
    go into one micro-batch while it has at most ``micro_batch_size`` rows and at most ``max_tokens``
    padded tokens (rows x its widest row; a row wider than that alone is a micro-batch by itself).
    ``groups``: a key per row (its prompt); a micro-batch then ends before a group of consecutive rows
    with one key rather than inside it where it can, so a packed forward shares each prompt once
    (:func:`pack_rows`). Every rank gets the same number of micro-batches (empty ones where a rank
    has fewer)."""
    packs = []
    for r in range(world):
        idx = list(range(r, len(widths), world))
        keys = [groups[i] for i in idx] if groups is not None else None
        runs = pack_rows([widths[i] for i in idx], micro_batch_size, max_tokens, keys)
        packs.append([[idx[i] for i in run] for run in runs])
    count = max(1, max(len(p) for p in packs))
    mine = packs[rank] + [[]] * (count - len(packs[rank]))
    return [torch.tensor(run, dtype=torch.long) for run in mine]


def pack_rows(widths: Sequence[int], max_rows: int, max_tokens: int | None = None,
              groups: Sequence[object] | None = None) -> list[list[int]]:
    """Consecutive runs of ``range(len(widths))``, each of at most ``max_rows`` items whose count x
    largest width is at most ``max_tokens`` (None: no token limit); an item wider than ``max_tokens``
    makes a run of its own. With ``groups`` (a key per item), a run that would end inside a group of
    consecutive items with one key ends before the group instead, unless the group began the run."""
    def fits(n: int, top: int) -> bool:
        return n <= max_rows and (max_tokens is None or n * top <= max_tokens)

    runs: list[list[int]] = []
    run: list[int] = []
    top = 0  # the widest item of ``run``
    start = 0  # where in ``run`` the group of its last item began
    for i, w in enumerate(widths):
        w = int(w)
        if run and not fits(len(run) + 1, max(top, w)):
            tail = run[start:] if groups is not None and start > 0 and groups[i] == groups[run[-1]] else []
            tail_top = max((int(widths[j]) for j in tail), default=0)
            if tail and fits(len(tail) + 1, max(tail_top, w)):
                runs.append(run[:start])
                run, top = tail, tail_top
            else:
                runs.append(run)
                run, top = [], 0
            start = 0
        if groups is not None and run and groups[i] != groups[run[-1]]:
            start = len(run)
        run.append(i)
        top = max(top, w)
    if run:
        runs.append(run)
    return runs


def batch_widths(b: TokenBatch) -> list[int]:
    """Each row's prompt + response length (its width in a right-padded forward)."""
    return b.attention_mask.sum(1).tolist()


def batch_groups(b: TokenBatch) -> list[object] | None:
    """Each row's prompt, the key :func:`micro_batches` keeps groups together by (None: rows not from turns)."""
    if not b.turns or len(b.turns) != b.input_ids.shape[0]:
        return None
    index: dict[tuple, int] = {}
    return [index.setdefault(tuple(t.prompt_ids), len(index)) for t in b.turns]


def sum_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """``{key: sum over ranks}`` (a key missing on a rank counts 0); the identity in one process."""
    if dist.world_size() == 1:
        return values
    total: dict[str, float] = {}
    for part in dist.all_gather_objects(values):
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + value
    return total
