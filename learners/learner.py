"""The Learner: batch of Turns -> advantages -> loss -> engine step -> metrics.

It only orchestrates; every formula lives in :mod:`advantages` and :mod:`losses`
(ALGORITHMS.md). It trains on the exact token ids of the rollout: ``prompt_ids + response_ids``
of each Turn, with the loss mask on the response, and uses the Turn's behaviour log-probabilities
as ``logp_old``. Advantage statistics are computed per role, never across roles.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from cogym.agents.policy import Policy
from cogym.agents.types import Turn

from . import advantages as adv_fns
from . import torch_dist as dist
from .config import LearnerConfig
from .gae import gae_advantages
from .critic import Critic
from .dapo import _DEFAULT_BOUNDS as DEFAULT_BOUNDS
from .dapo import FILTER_PREDICATES, apply_overlong_shaping, filter_groups, mask_truncated
from .engines import Engine, make_engine
from .losses import aggregate, clipped_policy_loss, entropy_from_logits, kl_estimate
from .multiagent import RAEBaselines, nonzero_rows, prime_advantages, rae_turn_discount, trr_pp_advantages


@dataclass
class TokenBatch:
    """Right-padded training tensors for N turns.

    ``input_ids``/``attention_mask``: (N, W) prompt + response; ``resp_index``: (N, L) position in
    the logits of the token *predicting* each response token; ``mask``: (N, L) 1 on response tokens;
    ``logp_old``: (N, L) behaviour log-probabilities; ``scores``: (N,) outcome rewards; ``turns``:
    the N Turns themselves (episode, seat and info of each row).
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
    turns: list

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
                   [t.role for t in turns], [t.group_key for t in turns], list(turns))

    def to(self, device: torch.device) -> "TokenBatch":
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.resp_ids.to(device),
                          self.resp_index.to(device), self.mask.to(device), self.logp_old.to(device),
                          self.scores.to(device), self.roles, self.group_keys, self.turns)

    def rows(self, idx: torch.Tensor) -> "TokenBatch":
        ii = idx.tolist()
        return TokenBatch(self.input_ids[idx], self.attention_mask[idx], self.resp_ids[idx], self.resp_index[idx],
                          self.mask[idx], self.logp_old[idx], self.scores[idx], [self.roles[i] for i in ii],
                          [self.group_keys[i] for i in ii], [self.turns[i] for i in ii])


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


def shard_chunks(n_rows: int, micro_batch_size: int, rank: int = 0, world: int = 1) -> list[torch.Tensor]:
    """Row indices of one rank's micro-batches: rows ``rank::world`` in chunks of at most
    ``micro_batch_size`` rows, the same number of chunks on every rank (a chunk is empty where a rank
    runs out of rows). One rank: ``arange(n_rows).split(micro_batch_size)``."""
    if world == 1:
        return list(torch.arange(n_rows).split(micro_batch_size))
    per_rank = math.ceil(n_rows / world)
    return list(torch.arange(rank, n_rows, world).tensor_split(max(1, math.ceil(per_rank / micro_batch_size))))


def sum_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """``{key: sum over ranks}`` (a key missing on a rank counts 0); the identity in one process."""
    if dist.world_size() == 1:
        return values
    total: dict[str, float] = {}
    for part in dist.all_gather_objects(values):
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + value
    return total


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
RAE = "rae"  # SPIRAL: EMA baseline per (game, seat), state kept by the learner and checkpointed
TRR_PP = "trr_pp"  # Absolute Zero: REINFORCE++ whitened within each (task, role)
PRIME = "prime"  # implicit process rewards from a PRM trained online (learners/prime.py)
ALGORITHMS = (*ADVANTAGES, PPO, RAE, TRR_PP, PRIME)
DYNAMIC_SAMPLING = ("off", *FILTER_PREDICATES)
RAE_STATE_FILE = "rae_baselines.json"


class Learner:
    """Trains one policy with one algorithm on an engine (and, for PPO, a critic on its own engine;
    for PRIME, an implicit PRM on its own engine)."""

    def __init__(self, policy: Policy, cfg: LearnerConfig, engine: Engine | None = None,
                 temperature: float = 1.0, reference: torch.nn.Module | None = None,
                 critic_weights: Path | None = None, game_id: str = "game", max_new_tokens: int | None = None) -> None:
        """``temperature`` is the rollout's sampling temperature: log-probs are taken at it, so
        the ratio against the behaviour log-probs is 1 on fresh samples. ``reference`` is the
        frozen KL anchor (needed only with KL on) and PRIME's pi_ref; by default a copy of the policy
        as given (pass the initial model when resuming from trained weights).
        ``critic_weights``: a saved critic directory to resume the PPO critic from. ``game_id``
        keys the RAE baselines; ``max_new_tokens`` (the policy's response limit) is L_max of
        overlong shaping."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        names = (cfg.algorithm, *cfg.role_algorithms.values())
        for name in names:
            if name not in ALGORITHMS:
                raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {name!r}")
        if cfg.dynamic_sampling not in DYNAMIC_SAMPLING:
            raise ValueError(f"dynamic_sampling must be one of {', '.join(DYNAMIC_SAMPLING)}, got {cfg.dynamic_sampling!r}")
        if cfg.overlong_buffer > 0 and not max_new_tokens:
            raise ValueError("overlong shaping needs the policy's max_new_tokens (L_max)")
        self.policy = policy
        self.cfg = cfg
        self.game_id = game_id
        self.max_new_tokens = max_new_tokens
        needs_ref = cfg.kl_in_reward != "off" or cfg.kl_in_loss != "off"
        if needs_ref:
            self.ref_model = (reference if reference is not None else copy.deepcopy(policy.model)).eval()
            self.ref_model.requires_grad_(False)
        else:
            self.ref_model = None
        # Models copied from the policy (critic, PRM) copy its weights before an engine may partition them.
        self.critic = Critic(policy.model, cfg, critic_weights) if PPO in names else None
        self.prm = None
        if PRIME in names:
            from .prime import PrimeRewardModel

            # pi_ref is the policy's initial model (given as ``reference`` on resume), or the PRM's own start.
            prm_ref = reference if reference is not None and not cfg.prime_model else None
            self.prm = PrimeRewardModel(policy.model, cfg, temperature=temperature, reference=prm_ref)
        self.rae = RAEBaselines(cfg.rae_decay, cfg.rae_order) if RAE in names else None
        self.engine = engine or make_engine(policy.model, cfg)
        self._old_values: torch.Tensor | None = None  # (N, L) critic values of the batch being trained
        self._returns: torch.Tensor | None = None  # (N, L) GAE returns of the PPO rows
        policy.gather = self.engine.gathered_params
        self.steps = 0

    def algorithm_of(self, role: str) -> str:
        return self.cfg.role_algorithms.get(role, self.cfg.algorithm)

    # -- checkpoint ------------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        """Everything besides the policy weights: optimizer, critic, PRM, RAE baselines, step count."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.engine.save(directory)
        if self.critic is not None:
            self.critic.save(directory / "critic")
        if self.prm is not None:
            self.prm.save(directory / "prm")
        if self.rae is not None:
            values = [[list(k), v] for k, v in self.rae.values.items()]  # keys are (game id, seat)
            (directory / RAE_STATE_FILE).write_text(json.dumps({"alpha": self.rae.alpha, "order": self.rae.order,
                                                                "values": values}))
        (directory / "state.json").write_text(json.dumps({"steps": self.steps}))

    def load(self, directory: Path) -> None:
        """Restore what :meth:`save` wrote (the critic's weights come in through ``critic_weights``)."""
        directory = Path(directory)
        self.engine.load(directory)
        if self.critic is not None:
            self.critic.load_optimizer(directory / "critic")
        if self.prm is not None:
            self.prm.load(directory / "prm")
        if self.rae is not None:
            state = json.loads((directory / RAE_STATE_FILE).read_text())
            # The baselines resume; decay and order are the config's (a resumed run may change them).
            self.rae = RAEBaselines(self.rae.alpha, self.rae.order, {tuple(k): float(v) for k, v in state["values"]})
        self.steps = int(json.loads((directory / "state.json").read_text())["steps"])

    # -- advantages ------------------------------------------------------------------------------

    @torch.no_grad()
    def _ref_logp(self, b: TokenBatch) -> torch.Tensor:
        return response_logits_and_logp(self.ref_model, b, self.temperature)[1]

    def _rae(self, b: TokenBatch, metrics: dict, role: str) -> tuple[torch.Tensor, torch.Tensor]:
        """SPIRAL RAE (§8.2): one outcome per (episode, seat), in order of play; each of the seat's
        turns gets A * gamma**(turns after it) on every token; rows with A == 0 may be dropped."""
        outcomes: dict[tuple, float] = {}
        for t, score in zip(b.turns, b.scores.tolist()):  # the outcome as scored (overlong shaping included)
            outcomes.setdefault((t.episode_id, t.seat), float(score))
        keys = [(self.game_id, seat) for _, seat in outcomes]
        adv_game, self.rae = self.rae.update(keys, torch.tensor(list(outcomes.values()), dtype=torch.float64))
        by_outcome = dict(zip(outcomes, adv_game.tolist()))
        count: dict[tuple, int] = {}
        index = []
        for t in b.turns:
            key = (t.episode_id, t.seat)
            index.append(count.get(key, 0))
            count[key] = index[-1] + 1
        a = torch.tensor([by_outcome[(t.episode_id, t.seat)] for t in b.turns], dtype=torch.float64)
        k = torch.tensor(index)
        n = torch.tensor([count[(t.episode_id, t.seat)] for t in b.turns])
        per_turn = rae_turn_discount(a, k, n, gamma=self.cfg.gamma).to(device=b.mask.device, dtype=b.mask.dtype)
        for seat in sorted({s for _, s in outcomes}):
            metrics[f"{role}/rae_baseline/{seat}"] = self.rae.get((self.game_id, seat))
        keep = nonzero_rows(per_turn) if self.cfg.rae_filter_zero_adv else torch.ones(len(b.turns), dtype=torch.bool)
        metrics[f"{role}/rae_dropped"] = float((~keep).sum())
        return per_turn[:, None] * b.mask, keep.to(b.mask.device)

    def _prime(self, b: TokenBatch, metrics: dict, role: str) -> torch.Tensor:
        """PRIME (§8.1): the PRM is trained on this batch's outcome labels (before or after it scores
        it), its implicit process rewards are combined with the outcome RLOO."""
        acc = b.scores.double()
        if bool(((acc < 0) | (acc > 1)).any()):
            raise ValueError(f"PRIME needs outcome labels in [0, 1] (role {role!r} has rewards "
                             f"{sorted(set(acc.tolist()))[:6]}); use a game reward that is 0/1 correctness")
        keys = b.group_keys
        # A group of one (one turn of the role per episode) has no leave-one-out baseline: use the batch.
        if len(set(keys)) == len(keys):
            keys = [role] * len(keys)
            metrics[f"{role}/prime_batch_group"] = 1.0
        groups = adv_fns.group_index(keys).to(b.mask.device)
        mb = self.cfg.micro_batch_size
        with torch.enable_grad():
            if self.cfg.prime_update == "before":
                metrics.update({f"{role}/{k}": v for k, v in self.prm.update(b, acc, mb).items()})
            rewards = self.prm.process_rewards(b, mb)
            if self.cfg.prime_update == "after":
                metrics.update({f"{role}/{k}": v for k, v in self.prm.update(b, acc, mb).items()})
        metrics[f"{role}/prime_process_reward"] = float((rewards.sum(1)).mean())
        adv, _ = prime_advantages(rewards, acc, b.mask, groups, process_coef=self.cfg.prime_process_coef,
                                  outcome_coef=self.cfg.prime_outcome_coef)
        return adv

    @torch.no_grad()
    def advantages(self, b: TokenBatch, ref_logp: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Per-token advantages (N, L), computed separately for each role in the batch, and which
        rows to train on (N,) bool (RAE drops rows whose advantage is exactly 0)."""
        token_rewards = adv_fns.outcome_token_rewards(b.scores, b.mask)
        metrics = {}
        if self.cfg.kl_in_reward != "off":
            kl = kl_estimate(b.logp_old, ref_logp, self.cfg.kl_in_reward) * b.mask
            token_rewards = adv_fns.apply_kl_in_reward(token_rewards, kl, b.mask, self.cfg.kl_reward_coef)
            metrics["kl_reward"] = float((kl.sum(1) / b.mask.sum(1).clamp(min=1)).mean())
        out = torch.zeros_like(b.mask)
        keep = torch.ones(b.mask.shape[0], dtype=torch.bool, device=b.mask.device)
        self._returns = None
        for role in sorted(set(b.roles)):
            name = self.algorithm_of(role)
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
            if name == RAE:
                adv, keep[idx] = self._rae(b.rows(idx), metrics, role)
                out[idx] = adv.to(out.dtype)
                continue
            if name == PRIME:
                out[idx] = self._prime(b.rows(idx), metrics, role).to(out.dtype)
                continue
            if name == TRR_PP:
                key = self.cfg.trr_task_key
                tasks = [(b.turns[i].info.get(key) if key else None) for i in idx.tolist()]
                groups = adv_fns.group_index([repr(t) for t in tasks]).to(b.mask.device)
                adv, _ = trr_pp_advantages(token_rewards[idx], b.mask[idx], groups, gamma=self.cfg.gamma,
                                           whiten_mode=self.cfg.whiten)
                out[idx] = adv.to(out.dtype)
                metrics[f"{role}/trr_tasks"] = float(len(set(map(repr, tasks))))
                continue
            fn = ADVANTAGES[name]
            groups = adv_fns.group_index([b.group_keys[i] for i in idx.tolist()]).to(b.mask.device)
            adv, stats = fn(self.cfg, b.scores[idx], token_rewards[idx], b.mask[idx], groups)
            out[idx] = adv.to(out.dtype)
            # frac_zero_std, singleton_groups, ... per role (ALGORITHMS.md §2.9: reported, not hidden)
            metrics.update({f"{role}/{name}": float(value) for name, value in stats.items()})
        return out, keep, metrics

    def _shaped(self, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Outcome scores with DAPO's overlong penalty (§7.4) when ``overlong_buffer`` > 0."""
        if self.cfg.overlong_buffer <= 0:
            return scores
        return apply_overlong_shaping(scores, lengths, self.max_new_tokens, self.cfg.overlong_buffer,
                                      self.cfg.overlong_penalty)

    # -- dynamic sampling ------------------------------------------------------------------------

    def group_decisions(self, turns: Sequence[Turn]) -> dict:
        """DAPO dynamic sampling (§7.2): {group key: kept} over these turns' groups, in order of play,
        by the configured predicate on the turns' (overlong-shaped) rewards."""
        if not turns:
            return {}
        scores = self._shaped(torch.tensor([float(t.reward) for t in turns], dtype=torch.float64),
                              torch.tensor([len(t.response_ids) for t in turns]))
        low, high = self.cfg.dynamic_sampling_low, self.cfg.dynamic_sampling_high
        bounds = None  # the predicate's own, where a bound is not given
        if self.cfg.dynamic_sampling != "std_gt_0" and (low is not None or high is not None):
            default_low, default_high = DEFAULT_BOUNDS[self.cfg.dynamic_sampling]
            bounds = (default_low if low is None else low, default_high if high is None else high)
        # Rows the loss will not see (truncated, with mask_truncated) do not count in the predicate either.
        valid = torch.tensor([t.finished for t in turns]) if self.cfg.mask_truncated else None
        _, decisions = filter_groups(scores, [t.group_key for t in turns], predicate=self.cfg.dynamic_sampling,
                                     bounds=bounds, valid=valid)
        return decisions

    # -- the update ------------------------------------------------------------------------------

    def update(self, turns: Sequence[Turn]) -> dict[str, float]:
        """One optimizer step per epoch on these turns; returns metrics."""
        if not turns:
            return {}
        cfg = self.cfg
        b = TokenBatch.from_turns(turns, self.policy.tokenizer.pad_token_id).to(self.policy.device)
        metrics: dict[str, float] = {}
        if cfg.overlong_buffer > 0:  # DAPO soft overlong punishment, added to the outcome (§7.4)
            shaped = self._shaped(b.scores.double(), b.mask.sum(1))
            metrics["overlong_penalty"] = float((shaped - b.scores.double()).mean())
            b.scores = shaped.to(b.scores.dtype)
        if cfg.mask_truncated:  # overlong filtering: responses cut at the limit leave the loss and the statistics
            truncated = torch.tensor([not t.finished for t in turns], device=b.mask.device)
            b.mask = mask_truncated(b.mask, truncated)
            metrics["truncated_frac"] = float(truncated.double().mean())
        chunks = torch.arange(len(turns)).split(cfg.micro_batch_size)
        ref_logp = None
        if self.ref_model is not None:
            ref_logp = torch.cat([self._ref_logp(b.rows(ix)) for ix in chunks])
        self._old_values = self.critic.values(b, cfg.micro_batch_size) if self.critic is not None else None
        adv, keep, adv_metrics = self.advantages(b, ref_logp)
        metrics.update(adv_metrics)
        keep &= b.mask.sum(1) > 0  # rows with nothing to train on (filtered, truncated) cost no forward
        if not bool(keep.all()):
            ix = keep.nonzero(as_tuple=True)[0]
            b, adv = b.rows(ix), adv[ix]
            ref_logp = ref_logp[ix] if ref_logp is not None else None
            if self._old_values is not None:
                self._old_values = self._old_values[ix]
            if self._returns is not None:
                self._returns = self._returns[ix]
        metrics["trained_rows"] = float(len(b.turns))
        if not b.turns:
            return metrics  # nothing left to learn from this batch: no step
        n_tok = float(b.mask.sum())
        n_seq = float(len(b.turns))
        # Data parallel (W ranks): every rank holds the same global batch and trains on rows rank::W.
        # The loss stays normalised by the GLOBAL counts, so the ranks' losses add up to the global
        # loss; scaled by W, their gradients average (the engines' cross-rank mean) to the 1-process one.
        world = dist.world_size()
        chunks = shard_chunks(len(b.turns), cfg.micro_batch_size, dist.rank(), world)
        sums: dict[str, float] = {}
        model = self.engine.train_module
        # Eval mode: dropout off, so the training forward is the distribution that sampled
        # (ratio 1 on fresh samples); gradients flow all the same.
        model.eval()
        for _ in range(cfg.epochs):
            for k, ix in enumerate(chunks):
                last = k == len(chunks) - 1
                if len(ix) == 0:
                    # No row of this rank at this micro-step: take part with a zero loss all the same
                    # (ZeRO-2 reduces gradients at every micro-step, a collective every rank must join).
                    _, logp = response_logits_and_logp(model, b.rows(torch.arange(1)), self.temperature)
                    self.engine.backward(logp.sum() * 0.0, last=last)
                    continue
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
                self.engine.backward(loss * world if world > 1 else loss, last=last)
                sums["loss"] = sums.get("loss", 0.0) + float(loss.detach())
                with torch.no_grad():
                    drift = ((logp - mb.logp_old).abs() * mb.mask).sum() / n_tok
                sums["logprob_drift"] = sums.get("logprob_drift", 0.0) + float(drift)
                for name, value in pg_metrics.items():
                    sums[name] = sums.get(name, 0.0) + float(value) * share
            metrics.update(self.engine.step())
            self.steps += 1
        sums = sum_over_ranks(sums)  # each rank's share of the step-level sums and means -> the global values
        metrics.update({k: v / cfg.epochs for k, v in sums.items()})
        if self.critic is not None and self._returns is not None:
            # Only the PPO rows train the critic (rows of other roles have no GAE returns).
            ppo_rows = [i for i, r in enumerate(b.roles) if self.algorithm_of(r) == PPO]
            if ppo_rows:
                sub = b.rows(torch.tensor(ppo_rows))
                ix = torch.tensor(ppo_rows, device=b.mask.device)
                metrics.update(self.critic.update(sub, self._old_values[ix], self._returns[ix], cfg.micro_batch_size))
        metrics["adv_abs_mean"] = float((adv.abs() * b.mask).sum() / n_tok)
        metrics["response_tokens"] = n_tok
        return metrics
