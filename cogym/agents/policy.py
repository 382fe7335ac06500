"""A trainable policy: a Hugging Face causal LM, its tokenizer, and a generation backend.

``Policy.generate`` is the only thing a generation backend does: take a batch of prompt token
ids, return for each the generated token ids and their behaviour log-probabilities. The ids a
policy generated, and the ids it was prompted with, are the ids the learner trains on (no
decode-then-re-encode in between).
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoTokenizer, GenerationConfig

from cogym.agents.backends import GenerationBackend, HFBackend
from cogym.agents.embedded import EMBEDDED_MODELS
from cogym.agents.errors import ModelLoadError
from cogym.agents.loading import HUB_ID, load_causal_lm, parse_dtype, resolve_model_dir
from cogym.agents.lora import adapter_base, AdapterView, is_adapter_dir, LoraBase, LoraConfig
from cogym.core.types import Generation, SamplingParams

RENDER_CACHE_SIZE = 4096


class Policy:
    """A causal LM + tokenizer that generates batches and can be saved as an HF directory."""

    def __init__(self, model: torch.nn.Module, tokenizer, name: str = "policy") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        if getattr(tokenizer, "chat_template", None) is None:
            raise ModelLoadError(f"the tokenizer of policy {name!r} has no chat template; prompts are chat messages, "
                                 "so add one (tokenizer_config.json 'chat_template' or chat_template.jinja)")
        self.eos_ids = _eos_ids(model, tokenizer)
        # Sampling is cogym's (SamplingParams): a model's own generation defaults (repetition
        # penalty, min_p, ...) would reshape the distribution it samples from while the behaviour
        # log-probs and the learner see the plain one, so keep only the special-token ids.
        # The settings as they came are what save() writes back, so another tool loading a checkpoint
        # samples and pads as the original model did.
        old = getattr(model, "generation_config", None)
        self._as_loaded = (copy.deepcopy(old), tokenizer.padding_side, tokenizer.pad_token)
        model.generation_config = GenerationConfig(
            bos_token_id=getattr(old, "bos_token_id", None), eos_token_id=self.eos_ids,
            pad_token_id=getattr(old, "pad_token_id", None))
        tokenizer.padding_side = "left"  # prompts are left-padded (generation appends on the right)
        if tokenizer.pad_token_id is None:
            # Many causal LMs ship without a pad token. Padding positions are always masked
            # (attention mask in generation, loss mask in training), so the eos id is safe here.
            tokenizer.pad_token = tokenizer.eos_token
        # Context that makes the full weights visible (a ZeRO-3 engine sets it to gather shards).
        self.gather = contextlib.nullcontext
        self._render_cache: dict[tuple, list[int]] = {}
        self._tool_role: bool | None = None  # whether the chat template knows the "tool" role (probed once)
        self.backend: GenerationBackend = HFBackend(self)  # what generates (cogym.agents.backends)

    @classmethod
    def from_pretrained(cls, path: str | Path, name: str | None = None, dtype: str | torch.dtype = torch.float32,
                        device: str = "auto", attn_implementation: str | None = None,
                        gradient_checkpointing: bool = False) -> "Policy":
        """Load any HF causal-LM directory by path (``"tiny"`` and ``"tiny-verifier"`` name the embedded models).

        ``dtype`` (float32, bfloat16, float16) is the dtype the weights are held and computed in, for
        generation and the training forward alike (the engines keep float32 master weights for the
        optimizer). ``attn_implementation``: transformers' attention kernel (``sdpa``, ``eager``,
        ``flash_attention_2``, ...; None: transformers' default). ``gradient_checkpointing``: the
        decoder layers recompute their activations in the backward instead of keeping them.

        A LoRA adapter directory (what a LoRA policy saves: ``adapter_config.json`` and no
        ``config.json``) loads as its base model (named in ``adapter_config.json``) plus the adapter;
        this needs peft. ``device="auto"`` takes the GPU when torch sees one, else the CPU.
        """
        dtype = parse_dtype(dtype)
        options = dict(attn_implementation=attn_implementation, gradient_checkpointing=gradient_checkpointing)
        if is_adapter_dir(path):  # its base (from adapter_config.json) + the adapter
            base = LoraBase(adapter_base(path), dtype=dtype, device=device, **options)
            return cls.from_adapter(base, name or Path(path).name.replace(".", "_") or "adapter", adapter_dir=path)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"

        given, path = str(path), resolve_model_dir(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"could not load the tokenizer at {str(path)!r}: {exc}") from exc
        model = load_causal_lm(path, dtype, device, **options)
        default = given if given in EMBEDDED_MODELS else (given.split("/")[-1] if HUB_ID.match(given) else path.name)
        return cls(model, tokenizer, name=name or default)

    @classmethod
    def from_adapter(cls, base: LoraBase, name: str, lora: LoraConfig | None = None,
                     adapter_dir: str | Path | None = None, trainable: bool = True, seed: int = 0) -> "Policy":
        """Policy ``name``: a LoRA adapter added to ``base`` (:meth:`LoraBase.add
        <cogym.agents.lora.LoraBase.add>`: fresh from ``lora``, or loaded from ``adapter_dir``)."""
        model, tokenizer = base.add(name, lora, adapter_dir=adapter_dir, trainable=trainable, seed=seed)
        return cls(model, tokenizer, name=name)

    @property
    def lora(self) -> bool:
        """Whether this policy is a LoRA adapter (on a base model possibly shared with other policies)."""
        return isinstance(self.model, AdapterView)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def render(self, messages: Sequence[dict]) -> list[int]:
        """Prompt token ids for chat ``messages``, ending with the assistant generation prompt.

        Rendered prompts are cached: in a batched rollout many seats see the same messages (the
        k solvers of one problem, every proposer), and the chat template is the slow part. A
        ``tool`` message goes to a template that has no tool role as a ``user`` message.
        """
        key = tuple((m["role"], m["content"]) for m in messages)
        ids = self._render_cache.get(key)
        if ids is None:
            ids = list(self.tokenizer.apply_chat_template(self._chat(messages), add_generation_prompt=True,
                                                          tokenize=True, return_dict=False))
            self._cache(key, ids)
        return list(ids)

    def prompt_of(self, request) -> list[int]:
        """The prompt ids of a :class:`~cogym.core.types.Request`: a conversation's continuation
        (:meth:`continue_ids`) when the request carries the ids of the seat's last prompt and answer,
        else its conversation (a first turn) or its messages rendered whole."""
        if request.prefix_ids is not None:
            return self.continue_ids(request.prefix_ids, request.delta or [])
        return self.render(request.conversation if request.conversation is not None else request.messages)

    def continue_ids(self, prefix_ids: Sequence[int], delta: Sequence[dict]) -> list[int]:
        """The next prompt of a conversation: ``prefix_ids`` (the last prompt and the model's answer,
        verbatim), then what the chat template writes after an assistant message's content when
        ``delta`` follows it: the close of the answer (less an end id the model already wrote) and the
        new messages, ending with the generation prompt. Earlier turns are never re-tokenised, so the
        ids a learner trains on are the ids the model read and wrote (decoding and re-encoding an
        answer can give other ids)."""
        prefix = list(prefix_ids)
        after = self._after_answer(delta)
        if prefix and after and prefix[-1] in self.eos_ids and after[0] in self.eos_ids:
            after = after[1:]  # the model ended its answer itself (with the template's end id or another end id)
        return prefix + after

    # A stand-in exchange the delta renderings start from (any template renders it; its text is cut away).
    _STAND_IN = ({"role": "user", "content": "cogym-stand-in-question"},
                 {"role": "assistant", "content": "cogym-stand-in-answer"})

    def _after_answer(self, delta: Sequence[dict]) -> list[int]:
        """The ids the template writes after an assistant message's content when ``delta`` follows it, up
        to the generation prompt: the text after the stand-in answer in the rendering of (stand-in
        exchange + delta), tokenised. Every delta message's content must be in it (a template that
        drops a role it does not know would hide a tool's result from the model)."""
        key = ("<after answer>", *((m["role"], m["content"]) for m in delta))
        if key not in self._render_cache:
            answer = self._STAND_IN[1]["content"]
            chat = self._chat([*self._STAND_IN, *delta])
            text = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            after = text[text.rindex(answer) + len(answer):]
            lost = [m for m in delta if m["content"].strip() and m["content"].strip() not in after]
            if lost:
                raise ValueError(f"the chat template of policy {self.name!r} leaves out a {lost[0]['role']!r} message of a "
                                 "conversation; use a template that renders user and tool messages")
            self._cache(key, list(self.tokenizer.encode(after, add_special_tokens=False)))
        return list(self._render_cache[key])

    def _chat(self, messages: Sequence[dict]) -> list[dict]:
        """``messages`` for the chat template: ``tool`` messages as ``user`` ones when it has no tool role
        (it refuses one, or renders it without its content), then consecutive ``user`` messages merged
        into one (templates that want user and assistant to alternate refuse two in a row)."""
        if self._tool_role is None:
            marker = "cogym-tool-probe-7f3a"
            try:
                text = self.tokenizer.apply_chat_template([*self._STAND_IN, {"role": "tool", "content": marker}],
                                                          add_generation_prompt=True, tokenize=False)
                self._tool_role = marker in text
            except Exception:  # a template's raise_exception (unknown role) or any error it makes  # noqa: BLE001
                self._tool_role = False
        out: list[dict] = []
        for m in messages:
            if m["role"] == "tool" and not self._tool_role:
                m = {**m, "role": "user"}
            if m["role"] == "user" and out and out[-1]["role"] == "user":
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + m["content"]}
            else:
                out.append(dict(m))
        return out

    def _cache(self, key: tuple, ids: list[int]) -> None:
        if len(self._render_cache) >= RENDER_CACHE_SIZE:
            self._render_cache.pop(next(iter(self._render_cache)))  # oldest first
        self._render_cache[key] = ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                 keys: Sequence[int] | None = None) -> list[Generation]:
        """Generate one response per prompt, in one batched call of the policy's generation backend
        (:mod:`cogym.agents.backends`; by default :class:`~cogym.agents.backends.HFBackend`, this
        policy's own model). Behaviour log-probs are the tempered, unfiltered distribution's.
        ``keys``: one sampling key per prompt (:mod:`cogym.agents.sampling`), which fixes its draws
        whatever else is in the batch; without them keys come from torch's global generator."""
        return self.backend.generate(prompts, sampling, keys)

    @property
    def version(self) -> int:
        """The version of the weights generation uses (0 as loaded; the learner's step count after updates)."""
        return self.backend.version

    def save(self, path: str | Path) -> None:
        """An HF model directory (safetensors) and the tokenizer; a LoRA policy writes its adapter
        directory instead, which :meth:`from_pretrained` loads back onto the same base model. The
        model's generation config and the tokenizer's padding side and pad token are written as
        they came, not as cogym sets them for its own sampling."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with self.gather(), self._settings_as_loaded():
            if isinstance(self.model, AdapterView):
                # The adapter only (peft's adapter directory, safetensors), naming the base model it goes on.
                self.model.save_adapter(path, base=self.model.base_ref)
            else:
                self.model.save_pretrained(path, safe_serialization=True)
            self.tokenizer.save_pretrained(path)

    @contextlib.contextmanager
    def _settings_as_loaded(self):
        generation, side, pad = self._as_loaded
        now = (self.model.generation_config, self.tokenizer.padding_side, self.tokenizer.pad_token)
        if generation is not None:
            self.model.generation_config = generation
        self.tokenizer.padding_side, self.tokenizer.pad_token = side, pad
        try:
            yield
        finally:
            self.model.generation_config = now[0]
            self.tokenizer.padding_side, self.tokenizer.pad_token = now[1], now[2]


def _eos_ids(model, tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id}
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, (list, tuple)):
        ids.update(extra)
    ids.discard(None)
    if not ids:
        raise ModelLoadError("the tokenizer defines no eos token, so generation could never stop")
    return sorted(ids)
