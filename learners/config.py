"""Configuration of one learner (one trained policy). Names and defaults follow ALGORITHMS.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class LearnerConfig:
    """How one policy is trained (ALGORITHMS.md names and defaults)."""

    # grpo | dr_grpo | rloo | reinforce_pp | reinforce_pp_baseline | ppo | rae | trr_pp | prime | spin | frozen
    algorithm: str = "grpo"
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
    # SPIRAL RAE (algorithm "rae", ALGORITHMS.md §8.2): one EMA baseline per (game, seat), decay
    # rae_decay, subtracted before ("pre") or after ("update_first") the update; turns whose advantage
    # is exactly 0 are dropped (filter_zero_adv). The baselines are saved with the checkpoint.
    rae_decay: float = 0.95
    rae_order: str = "pre"
    rae_filter_zero_adv: bool = True
    # Absolute Zero TRR++ (algorithm "trr_pp", §8.4): REINFORCE++ whitened within each (task, role);
    # the task is the turn's info[trr_task_key] (the game's info key naming the task type; "" = one task).
    trr_task_key: str = ""
    # DAPO dynamic sampling (§7.2): off | std_gt_0 | mean_in_open | mean_in_closed. Groups failing the
    # predicate are dropped and more episodes are played (at most max_sampling_rounds rollouts in all)
    # until as many groups survive as one rollout makes; the surplus is trimmed.
    # Bounds of the mean predicates; null: the predicate's default ((0, 1) open, (0.2, 0.8) closed).
    dynamic_sampling: str = "off"
    dynamic_sampling_low: Optional[float] = None
    dynamic_sampling_high: Optional[float] = None
    max_sampling_rounds: int = 10
    # DAPO overlong shaping (§7.4): with overlong_buffer > 0, a response longer than
    # max_new_tokens - overlong_buffer loses (excess / overlong_buffer) * overlong_penalty, up to
    # overlong_penalty at max_new_tokens. mask_truncated drops every unfinished response (cut at
    # max_new_tokens; at token level also one the game interrupted or max_turn_tokens cut) from the loss.
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    mask_truncated: bool = False
    # PRIME (algorithm "prime", §8.1): an implicit PRM (a copy of the policy's initial weights unless
    # prime_model names an HF directory) trained online with cross-entropy on the outcome labels (the
    # turn's reward, in [0, 1]) gives token-level process rewards; RLOO over the group (the batch when
    # every group has one member). prime_update: "before" (update the PRM, then score) or "after".
    prime_model: str = ""
    prime_beta: float = 0.05
    prime_lr: float = 1e-6
    prime_granularity: str = "token"
    prime_norm: str = "batch_norm"
    prime_process_coef: float = 5.0
    prime_outcome_coef: float = 5.0
    prime_update: str = "before"
    # SPIN (algorithm "spin"): the logistic loss on beta * [(log pi/pi_opp)(real) - (log pi/pi_opp)(generated)],
    # real = the game's reference response (info["reference"]), generated = the policy's own; the opponent
    # pi_opp is a frozen copy of the policy refreshed every spin_refresh updates.
    spin_beta: float = 0.1
    spin_refresh: int = 1
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_params: bool = False
