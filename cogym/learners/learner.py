"""The Learner: batch of Turns -> the algorithm's advantages -> objective -> engine step -> metrics.

It only orchestrates. Every formula lives in :mod:`advantages`, :mod:`losses` and
:mod:`objective`; everything particular to an algorithm (its config, advantages, state, loss) lives
in its plug-in under :mod:`cogym.learners.algorithms`. It trains on the exact token ids of the rollout:
``prompt_ids + response_ids`` of each Turn, with the loss mask on the response, and uses the Turn's
behaviour log-probabilities as ``logp_old``. Advantage statistics are computed per role, never
across roles (docs/algorithms.md §2).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file

from cogym.agents.conversation import join_turns
from cogym.agents.policy import Policy
from cogym.core.types import Turn
from cogym.learners import registry, torch_dist as dist
from cogym.learners.algorithm import Algorithm, Context
from cogym.learners.batch import (micro_batches, response_logp, response_logp_entropy, sum_over_ranks, TokenBatch,
                                  training_forward)
from cogym.learners.config import LearnerConfig
from cogym.learners.dapo import apply_overlong_shaping, FILTER_PREDICATES, group_decisions
from cogym.learners.engines import Engine, make_engine, save_weights
from cogym.learners.pipeline import role_advantages
from cogym.learners.registry import FROZEN
from cogym.learners.rows import MicroStep, TrainBatch

__all__ = ["Learner", "TokenBatch", "micro_batches", "response_logp", "response_logp_entropy", "sum_over_ranks",
           "DYNAMIC_SAMPLING"]

DYNAMIC_SAMPLING = ("off", *FILTER_PREDICATES)
STATE_FILE = "state.json"
REFERENCE_FILE = "reference.safetensors"  # the KL reference, when ref_sync_every moves it
TRAINER_OLD = "logp_trainer_old"  # MicroStep.rows: the first epoch's (pre-update) log-probs of the rows


def sequences(cfg: LearnerConfig, turns: Sequence[Turn]) -> list[Turn]:
    """The rows a learner trains on: with ``multi_turn: joined`` (the default) each seat's conversation
    moves of one game joined into one sequence (:func:`~cogym.agents.conversation.join_turns`), except
    for roles whose algorithm works on single moves (``Algorithm.per_move_rows``: RAE, SPIN); with
    ``turns``, every move a row of its own."""
    if cfg.multi_turn != "joined":
        return list(turns)
    per_move = {r for r in {t.role for t in turns}
                if cfg.role_algorithms.get(r, cfg.algorithm) != FROZEN
                and registry.get(cfg.role_algorithms.get(r, cfg.algorithm)).per_move_rows}
    return join_turns(turns, joinable=lambda t: t.role not in per_move)


class Learner:
    """Trains one policy with its algorithm (and, per role, others: ``role_algorithms``) on an engine.
    ``algorithms``: name -> the algorithm plug-in (holding its state: critic, PRM, baselines, opponent)."""

    def __init__(self, policy: Policy, cfg: LearnerConfig, engine: Engine | None = None,
                 temperature: float = 1.0, reference: torch.nn.Module | None = None,
                 critic_weights: Path | None = None, game_id: str = "game", max_new_tokens: int | None = None,
                 policies: dict[str, Policy] | None = None, seed: int = 0) -> None:
        """``temperature`` is the rollout's sampling temperature: log-probs are taken at it, so
        the ratio against the behaviour log-probs is 1 on fresh samples. ``reference`` is the
        frozen KL anchor (needed only with KL on) and PRIME's pi_ref; by default a copy of the policy
        as given (pass the initial model when resuming from trained weights).
        ``critic_weights``: a saved critic directory to resume the PPO critic from. ``game_id``
        keys the RAE baselines; ``max_new_tokens`` (the policy's response limit) is L_max of
        overlong shaping. ``policies``: the run's other policies, which an algorithm may read (a teacher).
        ``seed``: the run's seed, the root of the algorithms' random draws (:class:`Context`)."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if cfg.algorithm == FROZEN:
            raise ValueError("algorithm 'frozen' trains nothing: a frozen policy has no Learner")
        cfg.validate()
        if cfg.dynamic_sampling not in DYNAMIC_SAMPLING:
            raise ValueError(f"dynamic_sampling must be one of {', '.join(DYNAMIC_SAMPLING)}, got {cfg.dynamic_sampling!r}")
        if cfg.overlong_buffer > 0 and not max_new_tokens:
            raise ValueError("overlong shaping needs the policy's max_new_tokens (L_max)")
        self.policy, self.cfg, self.temperature = policy, cfg, temperature
        self.game_id, self.max_new_tokens = game_id, max_new_tokens
        self.ref_model = None
        if cfg.kl_in_reward != "off" or cfg.kl_in_loss != "off":
            self.ref_model = (reference if reference is not None else copy.deepcopy(policy.model)).eval()
            self.ref_model.requires_grad_(False)
        # Algorithms copy the policy's weights (critic, PRM, opponent) before an engine may partition them.
        ctx = Context(policy, cfg, temperature, reference, game_id, {"critic": critic_weights} if critic_weights else {},
                      dict(policies or {}), seed)
        self.algorithms: dict[str, Algorithm] = {name: registry.get(name)(cfg.settings(name), ctx)
                                                 for name in cfg.algorithm_names()}
        if self.algorithm.own_reference and cfg.ref_sync_every:
            self.ref_model = self.algorithm.reference  # the reference ref_sync_every moves (DPO's pi_ref; KL is off)
        self.engine = engine or make_engine(policy.model, cfg)
        policy.gather = self.engine.gathered_params
        self.steps = 0

    @property
    def algorithm(self) -> Algorithm:
        """The policy's own algorithm (it decides the batch and the loss; role algorithms give advantages)."""
        return self.algorithms[self.cfg.algorithm]

    def algorithm_of(self, role: str) -> str:
        return self.cfg.role_algorithms.get(role, self.cfg.algorithm)

    # -- checkpoint ------------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        """Everything besides the policy weights: optimizer, each algorithm's state, step count."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.engine.save(directory)
        state = {"steps": self.steps}
        if self.cfg.ref_sync_every and dist.rank() == 0:  # the moved reference; every rank holds the same copy
            save_weights(self.ref_model, directory / REFERENCE_FILE)
        for alg in self.algorithms.values():
            state.update(alg.save(directory))
        (directory / STATE_FILE).write_text(json.dumps(state))

    def load(self, directory: Path) -> None:
        """Restore what :meth:`save` wrote (the critic's weights come in through ``critic_weights``)."""
        directory = Path(directory)
        path = directory / STATE_FILE
        state = json.loads(path.read_text()) if path.is_file() else {}
        if self.cfg.ref_sync_every:
            self._load_reference(directory / REFERENCE_FILE)
        for alg in self.algorithms.values():
            alg.load(directory, state)
        self.engine.load(directory)
        if "steps" not in state:
            raise FileNotFoundError(f"no learner state {STATE_FILE} under {directory}")
        self.steps = int(state["steps"])

    def _load_reference(self, path: Path) -> None:
        """The moved KL reference :meth:`save` wrote (a run saved with ``ref_sync_every: 0`` has none:
        the reference is then the initial model, as it was)."""
        if not path.is_file():
            return

        try:
            self.ref_model.load_state_dict(load_file(str(path)))
        except RuntimeError as exc:
            raise ValueError(f"{path} does not fit the KL reference: {exc}") from None

    # -- advantages and dynamic sampling ------------------------------------------------------------

    def advantages(self, b: TokenBatch, ref_logp: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Per-token advantages (N, L), computed separately for each role in the batch, which rows
        to train on (N,) bool (RAE drops rows whose advantage is exactly 0), and metrics."""
        adv, keep, metrics, _ = role_advantages(self, b, ref_logp)
        return adv, keep, metrics

    def shaped(self, scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Outcome scores with DAPO's overlong penalty (§7.4) when ``overlong_buffer`` > 0."""
        if self.cfg.overlong_buffer <= 0:
            return scores
        return apply_overlong_shaping(scores, lengths, self.max_new_tokens, self.cfg.overlong_buffer,
                                      self.cfg.overlong_penalty)

    def group_decisions(self, turns: Sequence[Turn]) -> dict:
        """DAPO dynamic sampling (§7.2): {group key: kept} over these turns' groups, in order of play."""
        return group_decisions(self.cfg, sequences(self.cfg, turns), self.shaped)

    def sequences(self, turns: Sequence[Turn]) -> list[Turn]:
        """The rows this learner trains on (:func:`sequences`)."""
        return sequences(self.cfg, turns)

    # -- the update ------------------------------------------------------------------------------

    def update(self, turns: Sequence[Turn]) -> dict[str, float]:
        """One optimizer step per epoch on these turns; returns metrics."""
        if not turns:
            return {}
        data = self.algorithm.train_batch(self, self.sequences(turns))
        metrics = dict(data.metrics)
        if data.batch is None:
            return metrics
        sums: dict[str, float] = {}
        model = self.engine.train_module
        # Eval mode: dropout off, so the training forward is the distribution that sampled
        # (ratio 1 on fresh samples); gradients flow all the same.
        with training_forward(model):
            for epoch in range(self.cfg.epochs):
                for k, ix in enumerate(data.chunks):
                    self._micro_step(model, data, k, ix, sums, epoch)
                metrics.update(self.engine.step())
                self.steps += 1
                if self.cfg.ref_sync_every and self.steps % self.cfg.ref_sync_every == 0:
                    self.sync_reference()
        sums = sum_over_ranks(sums)  # each rank's share of the step-level sums and means -> the global values
        metrics.update({k: v / self.cfg.epochs for k, v in sums.items()})
        metrics.update(self.algorithm.finish(self, data))
        return metrics

    def sync_reference(self) -> None:
        """Move the KL reference toward the policy: each weight becomes ``ref_sync_mix`` * policy +
        (1 - ``ref_sync_mix``) * reference (``ref_sync_every``; a mix of 1 copies the policy)."""
        ref = dict(self.ref_model.named_parameters())
        mix = float(self.cfg.ref_sync_mix)
        with torch.no_grad(), self.engine.gathered_params():
            for name, p in self.policy.model.named_parameters():
                if name not in ref or ref[name].shape != p.shape:
                    raise ValueError(f"the KL reference has no weight {name!r} of shape {tuple(p.shape)} to move; "
                                     "ref_sync_every needs a reference of the policy's architecture")
                r = ref[name]
                r.copy_(torch.lerp(r.float(), p.detach().to(r.device).float(), mix).to(r.dtype))

    def _micro_step(self, model: torch.nn.Module, data: TrainBatch, k: int, ix: torch.Tensor, sums: dict,
                    epoch: int = 0) -> None:
        """Forward and backward of micro-batch ``k`` (rows ``ix``) in pass ``epoch``; its metrics added to ``sums``.

        The loss is normalised by the GLOBAL counts, so the micro-batches' (and the ranks') losses
        add up to the step's loss; scaled by W, the W ranks' gradients average (the engines'
        cross-rank mean) to the one-process gradient. The first epoch's forward runs before any
        optimizer step, so it is the trainer's probability of the policy that sampled: it goes to the
        loss as ``rows["logp_trainer_old"]`` (the mismatch metrics and corrections, §5.6), kept per row
        for the later epochs (their micro-batches are the same rows)."""
        last = k == len(data.chunks) - 1
        if len(ix) == 0:
            # No row of this rank at this micro-step: take part with a zero loss all the same
            # (ZeRO-2 reduces gradients at every micro-step, a collective every rank must join).
            logp = response_logp(model, data.batch.rows(torch.arange(1)), self.temperature, self.cfg.packing)
            self.engine.backward(logp.sum() * 0.0, last=last)
            return
        mb = data.batch.rows(ix)
        if self.cfg.entropy_coef > 0:
            logp, entropy = response_logp_entropy(model, mb, self.temperature, self.cfg.packing)
        else:
            logp, entropy = response_logp(model, mb, self.temperature, self.cfg.packing), None
        rows = {key: (value[ix] if value is not None else None) for key, value in data.rows.items()}
        if epoch == 0:
            rows[TRAINER_OLD] = logp.detach()
            if self.cfg.epochs > 1:
                if data.rows.get(TRAINER_OLD) is None:
                    data.rows[TRAINER_OLD] = torch.zeros(data.batch.mask.shape, dtype=logp.dtype, device=logp.device)
                data.rows[TRAINER_OLD][ix.to(logp.device)] = logp.detach()
        loss, step_metrics = self.algorithm.loss(MicroStep(mb, logp, entropy, rows, k, data.num_tokens, data.num_seqs,
                                                           self.steps))
        world = dist.world_size()
        self.engine.backward(loss * world if world > 1 else loss, last=last)
        sums["loss"] = sums.get("loss", 0.0) + float(loss.detach())
        for name, value in step_metrics.items():
            sums[name] = sums.get(name, 0.0) + value
