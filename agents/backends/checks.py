"""Argument checks every backend makes the same way (the contract's errors)."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Mapping, Sequence

import torch

if TYPE_CHECKING:
    from cogym.agents.policy import Policy


def check_update(policy: "Policy", current: int, version: int, weights: Mapping[str, torch.Tensor] | None) -> None:
    """New weights are not older than the ones in use, and name only weights the policy's model has."""
    if version < current:
        raise ValueError(f"policy {policy.name!r}: weights of version {version} are older than the "
                         f"version {current} the backend generates with")
    if weights is not None:
        unknown = sorted(set(weights) - set(policy.model.state_dict()))
        if unknown:
            raise KeyError(f"policy {policy.name!r}: {len(unknown)} weights the model does not have, "
                           f"e.g. {unknown[:3]}")


def check_keys(prompts: Sequence, keys: Sequence[int] | None) -> None:
    """One sampling key per prompt, when keys are given."""
    if keys is not None and len(keys) != len(prompts):
        raise ValueError(f"need one sampling key per prompt: {len(prompts)} prompts, {len(keys)} keys")


VLLM_EXTRA = ("install the vllm extra: pip install 'cogym[vllm]' (on a machine without a GPU, "
              "scripts/build_vllm_cpu.sh builds vLLM's CPU backend)")


def vllm_available() -> bool:
    """Whether vLLM can be imported here (without importing it)."""
    return importlib.util.find_spec("vllm") is not None
