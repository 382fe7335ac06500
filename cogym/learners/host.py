"""What an algorithm and the policy-gradient pipeline use of the learner they serve, as Protocols.

:class:`cogym.learners.learner.Learner` and :class:`cogym.learners.config.LearnerConfig` are the real
ones. Both import the algorithms (through the registry), so :mod:`cogym.learners.algorithm` and
:mod:`cogym.learners.pipeline` name these Protocols instead, and the imports point one way.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Protocol

import torch

from cogym.agents.policy import Policy


class CommonConfig(Protocol):
    """The learner's common keys (``LearnerConfig``'s fields) that the shipped algorithms and the
    pipeline read; an algorithm may read any other common key of the config it is given."""

    algorithm: str
    role_algorithms: dict
    micro_batch_size: int
    max_tokens_per_micro_batch: Optional[int]
    packing: str
    kl_in_reward: str
    kl_reward_coef: float
    kl_in_loss: str
    overlong_buffer: int
    mask_truncated: bool


class LearnerHost(Protocol):
    """The learner an algorithm's ``train_batch`` and ``finish`` hooks are given."""

    policy: Policy
    cfg: CommonConfig
    temperature: float  # the rollout's sampling temperature
    ref_model: torch.nn.Module | None  # the KL reference, when KL is on
    engine: Any  # the optimizer engine (cogym.learners.engines.Engine)
    algorithms: Mapping[str, Any]  # name -> the Algorithm instance the learner trains with

    def algorithm_of(self, role: str) -> str: ...

    def shaped(self, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor: ...
