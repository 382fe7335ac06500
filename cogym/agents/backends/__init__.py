"""Generation backends: what turns a batch of prompt ids into responses, behind one small protocol.

A :class:`~cogym.agents.policy.Policy` owns the tokenizer, the chat template and the trainable model;
its ``backend`` generates. Every backend does three things:

* ``generate(prompts, sampling, keys)``: per prompt, the response ids, their behaviour log-probs
  (the tempered, unfiltered distribution) and whether an end token finished it, as
  :class:`~cogym.agents.policy.Generation` records stamped with the backend's weight version.
  ``keys`` (one 63-bit sampling key per prompt, :mod:`cogym.agents.sampling`) fix each prompt's
  draws whatever else shares its batch; without them the backend takes keys from torch's global
  generator;
* ``load_weights(weights, version)``: take new weights (a state dict, or None for "the policy's
  model as it is now": the learner has just updated it in place) and the version they are;
* ``version``: the version of the weights it generates with (0: as loaded; the learner's step count
  after each update).

The backends:

* ``hf`` (:class:`~cogym.agents.backends.hf.HFBackend`): the policy's own transformers model, in
  process; every policy's default.
* ``vllm`` (:class:`~cogym.agents.backends.vllm.VLLMBackend`): a vLLM engine holding its own copy of
  the weights (the ``vllm`` extra); for LoRA policies, one engine per base model serving every adapter
  on it (:class:`~cogym.agents.backends.vllm_lora.VLLMLoraBackend`).

A policy's config picks one (``policies.<id>.generation.backend``); :func:`make_backend` builds it.
The contract every backend passes is ``tests/agents/test_backend_contract.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Protocol, Sequence, runtime_checkable

import torch

from cogym.agents.backends.hf import MIN_ROWS, PAD_MULTIPLE, HFBackend, shared_prefill
from cogym.agents.backends.policy_view import PolicyView

if TYPE_CHECKING:
    from cogym.core.types import Generation, SamplingParams

__all__ = ["BACKENDS", "GenerationBackend", "HFBackend", "MIN_ROWS", "PAD_MULTIPLE", "make_backend",
           "shared_prefill"]


@runtime_checkable
class GenerationBackend(Protocol):
    """Generates for one policy; see the module docstring."""

    name: str

    @property
    def version(self) -> int: ...

    def generate(self, prompts: Sequence[Sequence[int]], sampling: "SamplingParams",
                 keys: Sequence[int] | None = None) -> list["Generation"]: ...

    def load_weights(self, weights: Mapping[str, torch.Tensor] | None, version: int) -> None: ...


BACKENDS = ("hf", "vllm")


def make_backend(name: str, policy: PolicyView, options: Mapping | None = None,
                 shared: dict | None = None) -> GenerationBackend:
    """The backend ``name`` (one of :data:`BACKENDS`) for ``policy``; ``options`` are the backend's own
    settings (for ``vllm``: ``vllm.LLM`` engine arguments). ``shared``: where LoRA policies of one
    base model find their shared vLLM engine (one dict per run; keyed by the base model)."""
    if name == "hf":
        if options:
            raise ValueError(f"the hf backend takes no options, got {sorted(options)}")
        return HFBackend(policy)
    if name == "vllm":
        if getattr(policy, "lora", False):
            from cogym.agents.backends.vllm_lora import LoraEngine, VLLMLoraBackend

            shared = {} if shared is None else shared
            key = id(policy.model.peft)  # the base model the adapters share
            if key not in shared:
                shared[key] = LoraEngine(policy.model.base_ref, options)
            elif dict(options or {}) != shared[key].engine_args:
                raise ValueError(f"LoRA policy {policy.name!r} shares a vLLM engine with "
                                 f"{', '.join(shared[key].adapters)}, so its generation.vllm must be theirs: "
                                 f"{dict(options or {})} vs {shared[key].engine_args}")
            return VLLMLoraBackend(policy, shared[key])
        from cogym.agents.backends.vllm import VLLMBackend

        return VLLMBackend(policy, **dict(options or {}))
    raise ValueError(f"unknown generation backend {name!r}; choose one of {', '.join(BACKENDS)}")
