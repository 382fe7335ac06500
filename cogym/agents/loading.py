"""Finding and loading a causal LM: the embedded models, local directories and Hub ids in the local
cache (never a download), dtypes and attention kernels."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import torch
from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import LocalEntryNotFoundError
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from cogym.agents.embedded import EMBEDDED_MODELS
from cogym.agents.errors import ModelLoadError


def embedded_model_path(name: str = "tiny") -> Path:
    """Directory of the embedded model ``name`` (a key of ``EMBEDDED_MODELS``)."""
    if name not in EMBEDDED_MODELS:
        raise ValueError(f"no embedded model {name!r}; the embedded models are {', '.join(EMBEDDED_MODELS)}")
    return Path(str(resources.files("cogym.agents").joinpath(EMBEDDED_MODELS[name])))


def tiny_model_path() -> Path:
    """Directory of the embedded char-level model that ships with cogym."""
    return embedded_model_path("tiny")


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name, as the Hugging Face Hub spells model ids


def resolve_model_dir(path: str | Path) -> Path:
    """The HF model directory ``path`` names, checked to be one: a directory, an embedded model's name
    (``"tiny"``, ``"tiny-verifier"``) or a Hub id (``"Qwen/Qwen2.5-0.5B"``) whose snapshot is in the local
    Hugging Face cache."""
    path = embedded_model_path(str(path)) if str(path) in EMBEDDED_MODELS else Path(path)
    if not path.is_dir() and HUB_ID.match(str(path)):
        path = _hub_snapshot(str(path))
    if not path.is_dir():
        raise ModelLoadError(f"model path {str(path)!r} does not exist or is not a directory; give an HF model "
                             "directory, a checkpoint's policy directory, a Hub id (owner/name) in the local cache, or an embedded "
                             f"model ({', '.join(repr(n) for n in EMBEDDED_MODELS)})")
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{str(path)!r} has no config.json, so it is not an HF model directory")
    return path


def _hub_snapshot(repo_id: str) -> Path:
    """The snapshot of Hub model ``repo_id`` in the local Hugging Face cache (never a download: run time
    may have no network, and a mistyped local path must not start one)."""
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        raise ModelLoadError(
            f"{repo_id!r} is not a directory, and no Hub model of that id is in the local cache "
            f"{constants.HF_HUB_CACHE!r}; fetch it where there is network (`hf download {repo_id}`) and copy the "
            "cache here (or set HF_HOME / HF_HUB_CACHE to it), or pass the model's directory") from None


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"bf16"`` / ``"bfloat16"`` / ``torch.bfloat16`` (and the same for fp32 and fp16) -> the torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype} is not one of float32, bfloat16, float16")
        return dtype
    if str(dtype).lower() not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[str(dtype).lower()]


def attention_implementations() -> list[str]:
    """The ``attn_implementation`` names transformers accepts here (kernels it knows of, installed or not)."""
    return ["eager", *(k for k in ALL_ATTENTION_FUNCTIONS.valid_keys() if "|" not in k)]


def load_causal_lm(path: str | Path, dtype: str | torch.dtype = torch.float32, device: str = "cpu",
                   attn_implementation: str | None = None, gradient_checkpointing: bool = False) -> torch.nn.Module:
    """The causal LM of HF model directory ``path`` in ``dtype`` on ``device``, in eval mode, with its
    attention kernel and gradient checkpointing as asked (see :meth:`Policy.from_pretrained`)."""
    kwargs = {"dtype": parse_dtype(dtype)}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
    except (OSError, ValueError, ImportError, SafetensorError) as exc:
        raise ModelLoadError(f"could not load the model at {str(path)!r}: {exc}") from exc
    if gradient_checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise ModelLoadError(f"the model at {str(path)!r} ({type(model).__name__}) does not support gradient "
                                 "checkpointing; set gradient_checkpointing: false")
        enable_checkpointing(model)
    return model.eval()


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Turn on activation (gradient) checkpointing, non-reentrant, under either of transformers' names
    for it (``activation_checkpointing_enable`` in newer 5.x releases, ``gradient_checkpointing_enable``
    before: vLLM's CPU wheel pins transformers < 5.20, which has only the older)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def checkpointing_on(model: torch.nn.Module) -> bool:
    """Whether activation checkpointing is on (either of transformers' names for the flag)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(flag if flag is not None else getattr(model, "is_gradient_checkpointing", False))
