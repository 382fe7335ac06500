"""LoRA policies: several seats' policies as named adapters on ONE shared base model (peft).

A :class:`LoraBase` loads a base causal LM once and wraps it in a peft model; every LoRA policy
on that base is one named LoRA adapter of it (the policy id: :meth:`Policy.from_adapter
<cogym.agents.policy.Policy.from_adapter>`; a run's policies share their bases through
:class:`LoraBases`), and its ``Policy.model`` is an
:class:`AdapterView`: a small ``nn.Module`` whose forward and ``generate`` first make its own
adapter the active one, then call the shared peft model. The base weights are frozen; each
view's ``parameters()`` are the (shared, frozen) base weights and its own adapter only, so an
engine built on a view steps that adapter and nothing else, and code written for a plain HF
model (learners, critics, KV sessions) works on a view unchanged.

peft's adapter switching (``set_adapter``, ``disable_adapter``) also rewrites ``requires_grad``
of the adapter weights; a view puts every flag back as it was, so which weights train is decided
once, when the adapter is added (``trainable``), and by whoever calls ``requires_grad_`` on a copy.

A LoRA policy saves as a standard peft adapter directory (``adapter_config.json``,
``adapter_model.safetensors``) plus its tokenizer; ``adapter_config.json`` names the base model,
so :meth:`Policy.from_pretrained <cogym.agents.policy.Policy.from_pretrained>` loads such a
directory as base + adapter. peft is optional: ``pip install peft`` (or ``cogym[lora]``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer

from cogym.agents.embedded import EMBEDDED_MODELS
from cogym.agents.errors import ModelLoadError
from cogym.agents.loading import load_causal_lm, resolve_model_dir
from cogym.core import seeding
from cogym.core.config_key import key

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# Llama-style attention projections: the usual LoRA targets, used when peft knows no default for a model type.
FALLBACK_TARGETS = ("q_proj", "v_proj")


@dataclass
class LoraConfig:
    """LoRA settings of one policy. ``r == 0``: off (the whole model trains)."""

    r: int = key(0, "rank of the adapter; 0 = no LoRA")
    alpha: float = key(16.0, "scaling: the update is (alpha / r) * B @ A")
    dropout: float = key(0.0, "on the adapter's input, in train mode only")
    target_modules: list = key(factory=list, help="module names; empty: peft's default for the architecture")

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 0:
            raise ValueError(f"r must be an integer >= 0 (0: LoRA off), got {self.r!r}")
        if not self.alpha > 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if any(not isinstance(m, str) or not m for m in self.target_modules):
            raise ValueError(f"target_modules must be a list of module names, got {self.target_modules!r}")

    @property
    def enabled(self) -> bool:
        return self.r > 0


def require_peft():
    """Import peft, or fail with the command that installs it."""
    try:
        import peft
    except ImportError as exc:
        raise ModelLoadError("LoRA policies (policies.<id>.lora.r > 0) need the peft package: "
                             "pip install peft (or pip install 'cogym[lora]')") from exc
    return peft


def peft_available() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


def is_adapter_dir(path: str | Path) -> bool:
    """A peft adapter directory (what a LoRA policy saves), as opposed to a full HF model directory."""
    if str(path) in EMBEDDED_MODELS:  # an embedded model's name, not a path
        return False
    path = Path(path)
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def adapter_base(path: str | Path) -> str:
    """The base model an adapter directory was trained on (``base_model_name_or_path``)."""
    cfg = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
    base = cfg.get("base_model_name_or_path")
    if not base:
        raise ModelLoadError(f"{str(path)!r} is a LoRA adapter directory whose {ADAPTER_CONFIG} names no base model "
                             "(base_model_name_or_path)")
    return str(base)


def adapter_param_pattern() -> re.Pattern:
    from peft.tuners.lora import LoraLayer

    names = "|".join(re.escape(n) for n in LoraLayer.adapter_layer_names)
    # "...q_proj.lora_A.solver.weight" -> adapter "solver"
    return re.compile(rf"(?:^|\.)(?:{names})\.([^.]+)(?:\.|$)")


@contextlib.contextmanager
def _keep_requires_grad(module: torch.nn.Module):
    """Run a peft call that rewrites ``requires_grad`` (adapter switching), then put every flag back."""
    flags = [(p, p.requires_grad) for p in module.parameters()]
    try:
        yield
    finally:
        for p, flag in flags:
            if p.requires_grad != flag:
                p.requires_grad_(flag)


class AdapterView(torch.nn.Module):
    """One policy's view of a shared peft model: its adapter active in every forward and generate.

    ``adapter=None`` is the base model itself (every adapter disabled): the KL reference of a LoRA
    policy, which starts as the base (a fresh adapter's B matrix is zero), at no extra memory.
    """

    def __init__(self, peft_model: torch.nn.Module, adapter: str | None, base_ref: str = "") -> None:
        super().__init__()
        self.peft = peft_model
        self.adapter = adapter
        self.base_ref = base_ref  # the base model as configured ("tiny" or a directory), written into saves
        self._pattern = adapter_param_pattern()
        self._active_depth = 0  # nesting of active() blocks: only the outermost sets the adapter

    # -- parameters: the base and this view's own adapter ----------------------------------------

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        for name, p in super().named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate):
            m = self._pattern.search(name)
            if m is None or m.group(1) == self.adapter:
                yield name, p

    def adapter_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, parameter)`` of this view's adapter only."""
        return [(n, p) for n, p in self.named_parameters() if self._pattern.search(n)]

    # -- forwards -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def active(self):
        """Make this view's adapter the active one (or disable every adapter for the base view).
        Re-entrant: a forward inside an ``active()`` block leaves the setting to the outer block."""
        if self._active_depth:
            self._active_depth += 1
            try:
                yield
            finally:
                self._active_depth -= 1
            return
        self._active_depth = 1
        try:
            with self._activate():
                yield
        finally:
            self._active_depth = 0

    @contextlib.contextmanager
    def _activate(self):
        if self.adapter is None:
            with _keep_requires_grad(self.peft), self.peft.disable_adapter():
                yield
            return
        if list(self.peft.active_adapters) != [self.adapter]:
            with _keep_requires_grad(self.peft):
                self.peft.set_adapter(self.adapter)
        yield

    def forward(self, *args, **kwargs):
        with self.active():
            return self.peft(*args, **kwargs)

    def generate(self, *args, **kwargs):
        with self.active():
            return self.peft.generate(*args, **kwargs)

    # -- what code written for an HF model reads ---------------------------------------------------

    @property
    def hf_model(self) -> torch.nn.Module:
        """The shared transformers model (with peft's LoRA layers injected)."""
        return self.peft.get_base_model()

    @property
    def config(self):
        return self.hf_model.config

    @property
    def generation_config(self):
        return self.hf_model.generation_config

    @generation_config.setter
    def generation_config(self, value) -> None:
        self.hf_model.generation_config = value

    def get_output_embeddings(self):
        return self.hf_model.get_output_embeddings()

    def get_input_embeddings(self):
        return self.hf_model.get_input_embeddings()

    # -- saving ---------------------------------------------------------------------------------

    def save_adapter(self, path: str | Path, base: str) -> None:
        """Write this adapter as a peft adapter directory at ``path`` (safetensors), naming ``base``."""
        if self.adapter is None:
            raise ValueError("the base view has no adapter to save")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.peft.peft_config[self.adapter].base_model_name_or_path = base
        # peft writes a non-default adapter into <dir>/<adapter name>; keep the policy directory flat.
        with tempfile.TemporaryDirectory(dir=path, prefix=".adapter-") as tmp:
            self.peft.save_pretrained(tmp, selected_adapters=[self.adapter], safe_serialization=True,
                                      save_embedding_layers=False)
            src = Path(tmp) / self.adapter
            for item in src.iterdir():
                dest = path / item.name
                if dest.is_dir():
                    shutil.rmtree(dest)
                os.replace(item, dest)


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
    """One base causal LM, loaded once, carrying one LoRA adapter per policy (``add``; a policy on it
    is :meth:`Policy.from_adapter <cogym.agents.policy.Policy.from_adapter>`)."""

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
            trainable: bool = True, seed: int = 0) -> tuple[AdapterView, object]:
        """Add adapter ``name`` (fresh from ``lora``, or loaded from ``adapter_dir``); its model (an
        :class:`AdapterView`) and its tokenizer (the adapter directory's, else the base model's).

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
        tok_dir = adapter_dir if adapter_dir is not None and (adapter_dir / "tokenizer_config.json").is_file() else self.dir
        return view, AutoTokenizer.from_pretrained(tok_dir)

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


class LoraBases:
    """A run's base models for LoRA policies: one :class:`LoraBase` per base model directory, which every
    LoRA policy on that base shares (:meth:`add`); its :meth:`reference` is the base itself."""

    def __init__(self) -> None:
        self.bases: dict[str, LoraBase] = {}  # resolved base model directory -> its LoraBase

    @staticmethod
    def base_of(model: str | Path) -> str:
        """The base model directory a LoRA policy's ``model`` names (an adapter directory names its base)."""
        base = adapter_base(model) if is_adapter_dir(model) else model
        try:
            return str(resolve_model_dir(base).resolve())
        except ModelLoadError as exc:
            raise ModelLoadError(f"policies: {exc}") from exc

    def add(self, name: str, model: str | Path, lora: LoraConfig, adapter_dir: Path | None = None,
            trainable: bool = True, seed: int = 0, device: str = "auto", **options) -> tuple[AdapterView, object]:
        """Policy ``name``'s adapter on the base model its config ``model`` names (loaded with ``device`` and
        ``options``, ``LoraBase``'s, when no policy uses it yet): fresh from ``lora``, or from
        ``adapter_dir`` (a checkpoint being resumed, or a ``model`` that is itself a trained adapter),
        whose rank and alpha must be ``lora``'s. Its model and tokenizer, as :meth:`LoraBase.add`."""
        where = f"policies.{name}.lora"
        if adapter_dir is not None:
            saved = json.loads((Path(adapter_dir) / ADAPTER_CONFIG).read_text())
            if saved.get("r") != lora.r or float(saved.get("lora_alpha", 0)) != lora.alpha:
                raise ModelLoadError(f"{where}: the adapter at {str(adapter_dir)!r} has r={saved.get('r')}, alpha="
                                     f"{saved.get('lora_alpha')}, but the config says r={lora.r}, alpha={lora.alpha}; "
                                     "make them equal")
        base = self.base_of(model)
        if base not in self.bases:
            self.bases[base] = LoraBase(adapter_base(model) if is_adapter_dir(model) else model, device=device, **options)
        try:
            return self.bases[base].add(name, lora, adapter_dir=adapter_dir, trainable=trainable, seed=seed)
        except ModelLoadError as exc:
            raise ModelLoadError(f"{where}: {exc}") from exc

    def reference(self, model: str | Path) -> AdapterView:
        """The base model of a LoRA policy whose config names ``model``, every adapter disabled (its KL
        reference: a fresh adapter adds zero), sharing the base weights instead of copying them."""
        return self.bases[self.base_of(model)].base_view()
