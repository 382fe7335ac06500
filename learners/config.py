"""Configuration of one learner (one trained policy). Names and defaults follow ALGORITHMS.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class LearnerConfig:
    """How one policy is trained (ALGORITHMS.md names and defaults)."""

    algorithm: str = "grpo"  # grpo | dr_grpo | rloo | reinforce_pp | reinforce_pp_baseline | ppo | frozen
    # A policy shared by several roles may use a different estimator per role, e.g.
    # {proposer: reinforce_pp} on a policy whose algorithm is grpo (one model, two algorithms).
    role_algorithms: dict = field(default_factory=dict)
    engine: str = "deepspeed"  # deepspeed | torch
    lr: float = 1e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 256  # rows per forward/backward; the loss is normalised over the whole step
    epochs: int = 1
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: Optional[float] = 3.0
    loss_agg: str = "token-mean"
    norm_const: Optional[float] = None  # C of the seq-mean-token-sum-norm / dr_grpo modes
    kl_in_reward: str = "off"  # off | k1 | k2 | k3 | abs
    kl_reward_coef: float = 0.001
    kl_in_loss: str = "off"  # off | k2 | k3 | k3+ | k1+
    kl_loss_coef: float = 0.001
    entropy_coef: float = 0.0
    grpo_eps: float = 1e-6
    gamma: float = 1.0
    # PPO with a critic (algorithm or role algorithm "ppo"): GAE lambda, the critic's own learning
    # rate and the value clip of ALGORITHMS.md §4.1 (null: unclipped).
    lam: float = 1.0
    critic_lr: float = 1e-4
    value_clip: Optional[float] = 0.5
    whiten: str = "verl"  # verl | openrlhf
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_params: bool = False
