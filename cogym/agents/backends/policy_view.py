"""What a generation backend uses of the policy it generates for, as a Protocol.

:class:`cogym.agents.policy.Policy` is one (it builds its backend, so the backends depend on this
small module rather than on ``policy.py``, which imports them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol, Sequence

import torch


class PolicyView(Protocol):
    """The policy as a backend sees it."""

    name: str
    model: torch.nn.Module  # a LoRA policy's is an adapter view (``peft``, ``base_ref``, ``adapter``)
    tokenizer: Any
    eos_ids: list[int]  # the token ids that end a response
    gather: Callable[[], ContextManager]  # makes the full weights visible (ZeRO-3 gathers its shards)

    @property
    def device(self) -> torch.device: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def save(self, path: str | Path) -> None: ...
