"""The Learner: batch of Turns -> advantages -> loss -> engine step -> metrics.

It only orchestrates; every formula lives in :mod:`advantages` and :mod:`losses`
(ALGORITHMS.md). It trains on the exact token ids of the rollout: ``prompt_ids + response_ids``
of each Turn, with the loss mask on the response, and uses the Turn's behaviour log-probabilities
as ``logp_old``. Advantage statistics are computed per role, never across roles.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from cogym.agents.policy import Policy
from cogym.agents.types import Turn

from . import advantages as adv_fns
from .config import LearnerConfig
from .gae import gae_advantages
from .critic import Critic
from .engines import Engine, make_engine
from .losses import aggregate, clipped_policy_loss, entropy_from_logits, kl_estimate


@dataclass
class TokenBatch:
    """Right-padded training tensors for N turns.

    ``input_ids``/``attention_mask``: (N, W) prompt + response; ``resp_index``: (N, L) position in
    the logits of the token *predicting* each response token; ``mask``: (N, L) 1 on response tokens;
    ``logp_old``: (N, L) behaviour log-probabilities; ``scores``: (N,) outcome rewards.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    resp_ids: torch.Tensor
    resp_index: torch.Tensor
    mask: torch.Tensor
    logp_old: torch.Tensor
    scores: torch.Tensor
    roles: list[str]
    group_keys: list

    @classmethod
    def from_turns(cls, turns: Sequence[Turn], pad_id: int) -> "TokenBatch":
        n = len(turns)
        width = max(len(t.prompt_ids) + len(t.response_ids) for t in turns)
        lmax = max(len(t.response_ids) for t in turns)
        input_ids = torch.full((n, width), pad_id, dtype=torch.long)
        attn = torch.zeros((n, width), dtype=torch.long)
        resp_ids = torch.zeros((n, lmax), dtype=torch.long)
        resp_index = torch.zeros((n, lmax), dtype=torch.long)
        mask = torch.zeros((n, lmax))
        logp_old = torch.zeros((n, lmax))
        for i, t in enumerate(turns):
            p, r = len(t.prompt_ids), len(t.response_ids)
            input_ids[i, : p + r] = torch.tensor(t.prompt_ids + t.response_ids)
            attn[i, : p + r] = 1
            resp_ids[i, :r] = torch.tensor(t.response_ids)
            resp_index[i, :r] = torch.arange(p - 1, p + r - 1)
            mask[i, :r] = 1.0
            logp_old[i, :r] = torch.tensor(t.logprobs, dtype=torch.float32)
        scores = torch.tensor([float(t.reward) for t in turns])
        return cls(input_ids, attn, resp_ids, resp_index, mask, logp_old, scores,
                   [t.role for t in turns], [t.group_key for t in turns])

    def to(self, device: torch.device) -> "TokenBatch":
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.resp_ids.to(device),
                          self.resp_index.to(device), self.mask.to(device), self.logp_old.to(device),
                          self.scores.to(device), self.roles, self.group_keys)

    def rows(self, idx: torch.Tensor) -> "TokenBatch":
        ii = idx.tolist()
        return TokenBatch(self.input_ids[idx], self.attention_mask[idx], self.resp_ids[idx], self.resp_index[idx],
                          self.mask[idx], self.logp_old[idx], self.scores[idx], [self.roles[i] for i in ii],
                          [self.group_keys[i] for i in ii])


def response_logits_and_logp(model: torch.nn.Module, b: TokenBatch,
                             temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits / temperature (N, L, V) at the positions that predict each response token, and the
    log-probs (N, L) of the response tokens under them (the distribution the rollout sampled)."""
    width = int(b.attention_mask.sum(1).max())
    logits = model(input_ids=b.input_ids[:, :width], attention_mask=b.attention_mask[:, :width]).logits
    idx = b.resp_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    resp_logits = logits.gather(1, idx).float() / temperature  # (N, L, V)
    logp = torch.log_softmax(resp_logits, dim=-1).gather(-1, b.resp_ids.unsqueeze(-1)).squeeze(-1)
    return resp_logits, logp * b.mask


def _outcome(fn: Callable) -> Callable:
    """Adapt an outcome estimator: its score is the sum of the (possibly KL-shaped) token rewards."""
    def run(cfg: LearnerConfig, scores, token_rewards, mask, groups):
        return fn(cfg, token_rewards.sum(1), mask, groups)
    return run


def _reinforce_pp(cfg: LearnerConfig, scores, token_rewards, mask, groups):
    return adv_fns.reinforce_pp_advantages(token_rewards, mask, gamma=cfg.gamma, whiten_mode=cfg.whiten)[0], {}


# name -> fn(cfg, scores (N,), token_rewards (N, L), mask (N, L), groups (N,)) -> (adv (N, L), stats)
ADVANTAGES: dict[str, Callable] = {
    "grpo": _outcome(lambda c, s, m, g: adv_fns.grpo_advantages(s, m, g, eps=c.grpo_eps)),
    "dr_grpo": _outcome(lambda c, s, m, g: adv_fns.grpo_advantages(s, m, g, eps=c.grpo_eps, norm_by_std=False)),
    "rloo": _outcome(lambda c, s, m, g: adv_fns.rloo_advantages(s, m, g)),
    "reinforce_pp_baseline": _outcome(
        lambda c, s, m, g: adv_fns.reinforce_pp_baseline_advantages(s, m, g, whiten_mode=c.whiten)),
    "reinforce_pp": _reinforce_pp,
}


PPO = "ppo"  # GAE against a learned critic (learners/critic.py); not a stateless estimator
ALGORITHMS = (*ADVANTAGES, PPO)


class Learner:
    """Trains one policy with one algorithm on an engine (and, for PPO, a critic on its own engine)."""

    def __init__(self, policy: Policy, cfg: LearnerConfig, engine: Engine | None = None,
                 temperature: float = 1.0, reference: torch.nn.Module | None = None,
                 critic_weights: Path | None = None) -> None:
        """``temperature`` is the rollout's sampling temperature: log-probs are taken at it, so
        the ratio against the behaviour log-probs is 1 on fresh samples. ``reference`` is the
        frozen KL anchor (needed only with KL on); by default a copy of the policy as given.
        ``critic_weights``: a saved critic directory to resume the PPO critic from."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        for name in (cfg.algorithm, *cfg.role_algorithms.values()):
            if name not in ALGORITHMS:
                raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {name!r}")
        self.policy = policy
        self.cfg = cfg
        needs_ref = cfg.kl_in_reward != "off" or cfg.kl_in_loss != "off"
        if needs_ref:
            self.ref_model = (reference if reference is not None else copy.deepcopy(policy.model)).eval()
            self.ref_model.requires_grad_(False)
        else:
            self.ref_model = None
        uses_ppo = PPO in (cfg.algorithm, *cfg.role_algorithms.values())
        # The critic copies the policy's weights before an engine may partition them.
        self.critic = Critic(policy.model, cfg, critic_weights) if uses_ppo else None
        self.engine = engine or make_engine(policy.model, cfg)
        self._old_values: torch.Tensor | None = None  # (N, L) critic values of the batch being trained
        self._returns: torch.Tensor | None = None  # (N, L) GAE returns of the PPO rows
        policy.gather = self.engine.gathered_params
        self.steps = 0

    @torch.no_grad()
    def _ref_logp(self, b: TokenBatch) -> torch.Tensor:
        return response_logits_and_logp(self.ref_model, b, self.temperature)[1]

    @torch.no_grad()
    def advantages(self, b: TokenBatch, ref_logp: torch.Tensor | None) -> tuple[torch.Tensor, dict]:
        """Per-token advantages (N, L), computed separately for each role in the batch."""
        token_rewards = adv_fns.outcome_token_rewards(b.scores, b.mask)
        metrics = {}
        if self.cfg.kl_in_reward != "off":
            kl = kl_estimate(b.logp_old, ref_logp, self.cfg.kl_in_reward) * b.mask
            token_rewards = adv_fns.apply_kl_in_reward(token_rewards, kl, b.mask, self.cfg.kl_reward_coef)
            metrics["kl_reward"] = float((kl.sum(1) / b.mask.sum(1).clamp(min=1)).mean())
        out = torch.zeros_like(b.mask)
        self._returns = None
        for role in sorted(set(b.roles)):
            name = self.cfg.role_algorithms.get(role, self.cfg.algorithm)
            idx = torch.tensor([i for i, r in enumerate(b.roles) if r == role], device=b.mask.device)
            if name == PPO:
                if self._old_values is None:
                    raise RuntimeError("PPO advantages need the critic's values: call update(), which computes them first")
                adv, returns = gae_advantages(token_rewards[idx], self._old_values[idx], b.mask[idx], gamma=self.cfg.gamma,
                                              lam=self.cfg.lam, whiten_mode=self.cfg.whiten)
                out[idx] = adv.to(out.dtype)
                if self._returns is None:
                    self._returns = torch.zeros_like(b.mask)
                self._returns[idx] = returns.to(out.dtype)
                metrics[f"{role}/value_mean"] = float((self._old_values[idx] * b.mask[idx]).sum() / b.mask[idx].sum().clamp(min=1))
                continue
            fn = ADVANTAGES[name]
            groups = adv_fns.group_index([b.group_keys[i] for i in idx.tolist()]).to(b.mask.device)
            adv, stats = fn(self.cfg, b.scores[idx], token_rewards[idx], b.mask[idx], groups)
            out[idx] = adv.to(out.dtype)
            # frac_zero_std, singleton_groups, ... per role (ALGORITHMS.md §2.9: reported, not hidden)
            metrics.update({f"{role}/{name}": float(value) for name, value in stats.items()})
        return out, metrics

    def update(self, turns: Sequence[Turn]) -> dict[str, float]:
        """One optimizer step per epoch on these turns; returns metrics."""
        if not turns:
            return {}
        cfg = self.cfg
        b = TokenBatch.from_turns(turns, self.policy.tokenizer.pad_token_id).to(self.policy.device)
        chunks = torch.arange(len(turns)).split(cfg.micro_batch_size)
        ref_logp = None
        if self.ref_model is not None:
            ref_logp = torch.cat([self._ref_logp(b.rows(ix)) for ix in chunks])
        self._old_values = self.critic.values(b, cfg.micro_batch_size) if self.critic is not None else None
        adv, metrics = self.advantages(b, ref_logp)
        n_tok = float(b.mask.sum())
        n_seq = float(len(turns)) if cfg.loss_agg == "dr_grpo" else float((b.mask.sum(1) > 0).sum())
        sums: dict[str, float] = {}
        model = self.engine.train_module
        # Eval mode: dropout off, so the training forward is the distribution that sampled
        # (ratio 1 on fresh samples); gradients flow all the same.
        model.eval()
        for _ in range(cfg.epochs):
            for k, ix in enumerate(chunks):
                mb = b.rows(ix)
                logits, logp = response_logits_and_logp(model, mb, self.temperature)
                pg, pg_metrics = clipped_policy_loss(logp, mb.logp_old, adv[ix], mb.mask, clip_low=cfg.clip_low,
                                                     clip_high=cfg.clip_high, dual_clip=cfg.dual_clip)
                agg = dict(num_tokens=n_tok, num_seqs=n_seq, norm_const=cfg.norm_const)
                loss = aggregate(pg, mb.mask, cfg.loss_agg, **agg)
                share = float(mb.mask.sum()) / n_tok  # this micro-batch's weight in step-level token means
                if cfg.kl_in_loss != "off":
                    kl = kl_estimate(logp, ref_logp[ix], cfg.kl_in_loss)
                    kl_term = aggregate(kl, mb.mask, cfg.loss_agg, **agg)
                    loss = loss + cfg.kl_loss_coef * kl_term
                    sums["kl_loss"] = sums.get("kl_loss", 0.0) + float(kl_term.detach())
                if cfg.entropy_coef > 0:
                    ent = aggregate(entropy_from_logits(logits), mb.mask, cfg.loss_agg, **agg)
                    loss = loss - cfg.entropy_coef * ent
                    sums["entropy"] = sums.get("entropy", 0.0) + float(ent.detach())
                self.engine.backward(loss, last=k == len(chunks) - 1)
                sums["loss"] = sums.get("loss", 0.0) + float(loss.detach())
                with torch.no_grad():
                    drift = ((logp - mb.logp_old).abs() * mb.mask).sum() / n_tok
                sums["logprob_drift"] = sums.get("logprob_drift", 0.0) + float(drift)
                for name, value in pg_metrics.items():
                    sums[name] = sums.get(name, 0.0) + float(value) * share
            metrics.update(self.engine.step())
            self.steps += 1
        metrics.update({k: v / cfg.epochs for k, v in sums.items()})
        if self.critic is not None and self._returns is not None:
            # Only the PPO rows train the critic (rows of other roles have no GAE returns).
            ppo_rows = [i for i, r in enumerate(b.roles) if cfg.role_algorithms.get(r, cfg.algorithm) == PPO]
            sub = b.rows(torch.tensor(ppo_rows))
            ix = torch.tensor(ppo_rows, device=b.mask.device)
            metrics.update(self.critic.update(sub, self._old_values[ix], self._returns[ix], cfg.micro_batch_size))
        metrics["adv_abs_mean"] = float((adv.abs() * b.mask).sum() / n_tok)
        metrics["response_tokens"] = n_tok
        return metrics
