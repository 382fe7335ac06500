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
from cogym.agents.lora import adapter_base, ADAPTER_CONFIG, adapter_param_pattern, AdapterView, FALLBACK_TARGETS, is_adapter_dir, LoraConfig, require_peft
from cogym.core import seeding
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
        if is_adapter_dir(path):
            return load_adapter_policy(path, name=name, dtype=dtype, device=device, **options)
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


def _target_modules(model: torch.nn.Module, lora: LoraConfig) -> list[str] | None:
    """``lora.target_modules``, or None (peft's default for the model type), or q_proj/v_proj."""
    if lora.target_modules:
        return list(lora.target_modules)
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    if getattr(model.config, "model_type", None) in TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING:
        return None
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    if all(t in names for t in FALLBACK_TARGETS):
        return list(FALLBACK_TARGETS)
    raise ModelLoadError(f"peft has no default LoRA target modules for model type {model.config.model_type!r}; "
                         "set policies.<id>.lora.target_modules (e.g. [q_proj, v_proj])")


class LoraBase:
    """One base causal LM, loaded once, carrying one LoRA adapter per policy (``add``)."""

    def __init__(self, path: str | Path, dtype: str | torch.dtype = torch.float32, device: str = "auto",
                 attn_implementation: str | None = None, gradient_checkpointing: bool = False) -> None:
        """``path``: an HF causal-LM directory or ``"tiny"`` (written as given into saved adapters);
        ``dtype``, ``attn_implementation``, ``gradient_checkpointing``: as for ``Policy.from_pretrained``."""
        require_peft()
        self.path = str(path)
        self.dir = resolve_model_dir(path)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = load_causal_lm(self.dir, dtype, device, attn_implementation, gradient_checkpointing)
        self.model.requires_grad_(False)
        self.peft = None  # the peft model, once the first adapter is added
        self.trainable: dict[str, bool] = {}

    def add(self, name: str, lora: LoraConfig | None = None, adapter_dir: str | Path | None = None,
            trainable: bool = True, seed: int = 0):
        """Add adapter ``name`` (fresh from ``lora``, or loaded from ``adapter_dir``) and return its Policy.

        A fresh adapter's random A matrices are drawn from a generator seeded by ``seed`` and ``name``
        (the global torch RNG is left as it was), so a run's LoRA init is fixed by its seed.
        ``trainable=False`` (a frozen policy) keeps the adapter's weights out of every optimizer.
        """
        peft = require_peft()

        if not name or "." in name or name in "lora_":
            raise ModelLoadError(f"a LoRA adapter is named after its policy, and {name!r} cannot name a peft adapter "
                                 "(no dots, and not a part of 'lora_'); rename the policy")
        if name in self.trainable:
            raise ModelLoadError(f"the base model {self.path!r} already has an adapter {name!r}")
        if adapter_dir is not None:
            adapter_dir = Path(adapter_dir)
            if not is_adapter_dir(adapter_dir):
                raise ModelLoadError(f"{str(adapter_dir)!r} is not a LoRA adapter directory (no {ADAPTER_CONFIG})")
            try:
                if self.peft is None:
                    self.peft = peft.PeftModel.from_pretrained(self.model, str(adapter_dir), adapter_name=name,
                                                               is_trainable=True)
                else:
                    self.peft.load_adapter(str(adapter_dir), adapter_name=name, is_trainable=True)
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise ModelLoadError(f"could not load the LoRA adapter at {str(adapter_dir)!r} onto {self.path!r}: {exc}") from exc
        else:
            if lora is None or not lora.enabled:
                raise ModelLoadError(f"adapter {name!r}: give a LoraConfig with r > 0 or an adapter directory")
            config = peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                     target_modules=_target_modules(self.model, lora), task_type="CAUSAL_LM")
            dev = self.model.device
            devices = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
            try:
                with torch.random.fork_rng(devices=devices):
                    seeding.torch_seed("adapter.init", seed, name)  # fixed by (seed, name), apart from the others
                    if self.peft is None:
                        self.peft = peft.get_peft_model(self.model, config, adapter_name=name)
                    else:
                        self.peft.add_adapter(name, config)
            except ValueError as exc:  # e.g. a target module the model does not have
                raise ModelLoadError(f"could not add LoRA adapter {name!r} to {self.path!r}: {exc}") from exc
        self.trainable[name] = bool(trainable)
        self._apply_requires_grad()
        self.peft.eval()
        view = AdapterView(self.peft, name, base_ref=self.path)
        tok_dir = adapter_dir if adapter_dir is not None and (Path(adapter_dir) / "tokenizer_config.json").is_file() else self.dir
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
        return Policy(view, tokenizer, name=name)

    def base_view(self) -> AdapterView:
        """The base model with every adapter disabled (a LoRA policy's KL reference), sharing the weights."""
        if self.peft is None:
            raise ValueError("no adapter has been added yet")
        return AdapterView(self.peft, None, base_ref=self.path)

    def _apply_requires_grad(self) -> None:
        """Base frozen; each adapter trainable as declared (peft resets these flags when adapters are added)."""
        pattern = adapter_param_pattern()
        for pname, p in self.peft.named_parameters():
            m = pattern.search(pname)
            p.requires_grad_(bool(m is not None and self.trainable.get(m.group(1), False)))


def load_adapter_policy(path: str | Path, name: str | None = None, dtype: torch.dtype = torch.float32,
                        device: str = "auto", **options):
    """A Policy from an adapter directory alone: its base (from ``adapter_config.json``) + the adapter.
    ``options``: ``attn_implementation`` and ``gradient_checkpointing`` of the base model."""
    path = Path(path)
    base = LoraBase(adapter_base(path), dtype=dtype, device=device, **options)
    return base.add(name or path.name.replace(".", "_") or "adapter", adapter_dir=path)
