"""The policy-gradient batch: Turns -> token batch -> (shaped) rewards -> each role's advantages
from its algorithm -> the rows worth training on. And what follows the optimizer step.

This is :meth:`Algorithm.train_batch`'s default (every shipped algorithm but SPIN uses it). DAPO's
overlong shaping and truncation masking (docs/algorithms.md §7) are common learner features, so
they live here, not in an algorithm.
"""

from __future__ import annotations

from typing import Sequence

import torch

from cogym.agents.conversation import longest_message
from cogym.core.types import Turn

from cogym.learners import advantages as adv_fns
from cogym.learners import torch_dist as dist
from cogym.learners.rows import RoleRows, TrainBatch
from cogym.learners.batch import TokenBatch, batch_groups, batch_widths, micro_batches, response_logp
from cogym.learners.dapo import mask_truncated
from cogym.learners.host import LearnerHost
from cogym.learners.losses import kl_estimate


def _token_batch(learner: LearnerHost, turns: Sequence[Turn], metrics: dict) -> TokenBatch:
    """The turns as tensors, with DAPO's overlong penalty on the outcome (§7.4) and truncated
    responses left out of the loss and the statistics (overlong filtering)."""
    cfg = learner.cfg
    b = TokenBatch.from_turns(turns, learner.policy.tokenizer.pad_token_id).to(learner.policy.device)
    if cfg.overlong_buffer > 0:
        # Each message is held to max_new_tokens: a joined multi-turn row by its longest message.
        lengths = torch.tensor([longest_message(t) for t in turns], device=b.mask.device)
        shaped = learner.shaped(b.scores.double(), lengths)
        metrics["overlong_penalty"] = float((shaped - b.scores.double()).mean())
        b.scores = shaped.to(b.scores.dtype)
    if cfg.mask_truncated:
        truncated = torch.tensor([not t.finished for t in turns], device=b.mask.device)
        b.mask = mask_truncated(b.mask, truncated)
        metrics["truncated_frac"] = float(truncated.double().mean())
    return b


@torch.no_grad()
def role_advantages(learner: LearnerHost, b: TokenBatch, ref_logp: torch.Tensor | None):
    """``(adv (N, L), keep (N,), metrics, carry)``: each role's rows go to its algorithm; statistics
    are never computed across roles. ``carry``: {algorithm: (rows (N,) bool, {name: (N, ...)})}."""
    token_rewards = adv_fns.outcome_token_rewards(b.scores, b.mask)
    metrics = {}
    if learner.cfg.kl_in_reward != "off":
        kl = kl_estimate(b.logp_old, ref_logp, learner.cfg.kl_in_reward) * b.mask
        token_rewards = adv_fns.apply_kl_in_reward(token_rewards, kl, b.mask, learner.cfg.kl_reward_coef)
        metrics["kl_reward"] = float((kl.sum(1) / b.mask.sum(1).clamp(min=1)).mean())
    for alg in learner.algorithms.values():
        alg.prepare(b)
    out = torch.zeros_like(b.mask)
    keep = torch.ones(b.mask.shape[0], dtype=torch.bool, device=b.mask.device)
    carry: dict[str, tuple[torch.Tensor, dict]] = {}
    for role in sorted(set(b.roles)):
        name = learner.algorithm_of(role)
        idx = torch.tensor([i for i, r in enumerate(b.roles) if r == role], device=b.mask.device)
        res = learner.algorithms[name].advantages(RoleRows(role, idx, b.rows(idx), token_rewards[idx]))
        out[idx] = res.adv.to(out.dtype)
        if res.keep is not None:
            keep[idx] = res.keep
        # <role>/<name>, logged under the policy (<policy>/<role>/<name>); a policy named after its role
        # (seats: {solver: solver}) logs <policy>/<name>, not solver/solver/<name>.
        prefix = "" if role == learner.policy.name else f"{role}/"
        metrics.update({f"{prefix}{key}": value for key, value in res.metrics.items()})
        if res.carry:
            rows, tensors = carry.setdefault(name, (torch.zeros_like(keep), {}))
            rows[idx] = True
            for key, value in res.carry.items():
                full = tensors.setdefault(key, value.new_zeros((len(keep), *value.shape[1:])))
                full[idx] = value
    return out, keep, metrics, carry


def policy_gradient_batch(learner: LearnerHost, turns: Sequence[Turn]) -> TrainBatch:
    """The batch of one policy-gradient update: rows with advantages (and reference log-probs when
    KL is on), the rows an algorithm dropped or that have nothing to train on removed."""
    cfg, metrics = learner.cfg, {}
    b = _token_batch(learner, turns, metrics)
    ref_logp = None
    if learner.ref_model is not None:
        chunks = micro_batches(batch_widths(b), cfg.micro_batch_size, cfg.max_tokens_per_micro_batch,
                               groups=batch_groups(b))
        with torch.no_grad():
            ref_logp = torch.cat([response_logp(learner.ref_model, b.rows(ix), learner.temperature, cfg.packing)
                                  for ix in chunks])
    adv, keep, adv_metrics, carry = role_advantages(learner, b, ref_logp)
    metrics.update(adv_metrics)
    keep &= b.mask.sum(1) > 0  # rows with nothing to train on (filtered, truncated) cost no forward
    if not bool(keep.all()):
        ix = keep.nonzero(as_tuple=True)[0]
        b, adv = b.rows(ix), adv[ix]
        ref_logp = ref_logp[ix] if ref_logp is not None else None
        carry = {name: (rows[ix], {k: v[ix] for k, v in tensors.items()}) for name, (rows, tensors) in carry.items()}
    metrics["trained_rows"] = float(len(b.turns))
    if not b.turns:
        return TrainBatch(None, metrics)  # nothing left to learn from this batch: no step
    # Data parallel (W ranks): every rank holds the same global batch and trains on rows rank::W.
    chunks = micro_batches(batch_widths(b), cfg.micro_batch_size, cfg.max_tokens_per_micro_batch,
                           dist.rank(), dist.world_size(), batch_groups(b))
    return TrainBatch(b, metrics, rows={"adv": adv, "ref_logp": ref_logp}, chunks=chunks,
                      num_tokens=float(b.mask.sum()), num_seqs=float(len(b.turns)), extra={"carry": carry})


def finish_policy_gradient(learner: LearnerHost, data: TrainBatch) -> dict[str, float]:
    """After the step: each algorithm's work on its surviving rows (PPO trains its critic), then metrics."""
    metrics: dict[str, float] = {}
    b = data.batch
    for name, (rows, tensors) in data.extra["carry"].items():
        if bool(rows.any()):
            ix = rows.nonzero(as_tuple=True)[0]
            metrics.update(learner.algorithms[name].after_step(b.rows(ix.cpu()), {k: v[ix] for k, v in tensors.items()}))
    metrics["adv_abs_mean"] = float((data.rows["adv"].abs() * b.mask).sum() / data.num_tokens)
    metrics["response_tokens"] = data.num_tokens
    return metrics
