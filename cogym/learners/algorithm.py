"""The plug-in API of an algorithm (docs/write_your_own_algorithm.md).

An algorithm is a subclass of :class:`Algorithm` registered under a name with
:func:`cogym.learners.algorithms.register`. It holds:

* ``Config``: a dataclass of its own keys (flat keys under ``learners.<id>:`` in YAML, next to the
  common ones of :class:`cogym.learners.config.LearnerConfig`), which validates itself;
* ``advantages(rows)``: the advantages of one role's rows of a batch;
* ``grouped``: True when its baseline is a group of turns (the builder refuses groups of one);
* optional state (``save``/``load``), per-batch preparation (``prepare``), work after the
  optimizer step (``after_step``), and, for the policy's own algorithm, the micro-batch ``loss``
  (by default :func:`cogym.learners.objective.objective`) and the batch it trains on (``train_batch``).

The Learner calls these hooks; it knows no algorithm by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from cogym.agents.policy import Policy
from cogym.core import seeding
from cogym.core.config_key import key
from cogym.core.names import did_you_mean
from cogym.core.types import Turn
from cogym.learners import advantages as adv_fns, torch_dist as dist
from cogym.learners.batch import TokenBatch
from cogym.learners.host import CommonConfig, LearnerHost
from cogym.learners.objective import objective, ObjectiveConfig
from cogym.learners.pipeline import finish_policy_gradient, policy_gradient_batch
from cogym.learners.rows import Advantages, MicroStep, RoleRows, TrainBatch


@dataclass
class AlgorithmConfig:
    """Base of an algorithm's config. Subclasses add dataclass fields (with defaults) and extend
    :meth:`validate`; a field name is a YAML key, so it must not repeat a common learner key."""

    def validate(self, common: CommonConfig) -> None:
        """Raise ValueError("<key> must ..., got ...; <fix>") for a value that cannot run; ``common``
        is the learner's common config, for checks across the two."""


def check_number(name: str, value: Any, low: float, high: float = math.inf, *, open_low: bool = False) -> None:
    """ValueError unless ``value`` is a finite number in [low, high] ((low, high] with ``open_low``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < low or value > high or (open_low and value == low):
        bounds = f"> {low}" if open_low and high == math.inf else (f">= {low}" if high == math.inf else f"in [{low}, {high}]")
        raise ValueError(f"{name} must be a finite number {bounds}, got {value!r}")


def check_choice(value: Any, options: Sequence[str], name: str) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}; got {value!r}{did_you_mean(value, options)}")


@dataclass
class Discounted(AlgorithmConfig):
    """``gamma``: the discount over tokens (or over turns, for RAE)."""

    gamma: float = key(1.0, "the discount over tokens (or over turns, for RAE)")

    def validate(self, common: CommonConfig) -> None:
        super().validate(common)
        check_number("gamma", self.gamma, 0.0, 1.0)


@dataclass
class Whitened(AlgorithmConfig):
    """``whiten``: verl (token-weighted, Bessel) or openrlhf (population variance) whitening."""

    whiten: str = key("verl", "verl (token-weighted, Bessel) or openrlhf (population variance) whitening",
                      choices=adv_fns.WHITEN_MODES)

    def validate(self, common: CommonConfig) -> None:
        super().validate(common)
        check_choice(self.whiten, adv_fns.WHITEN_MODES, "whiten")


@dataclass
class Context:
    """What an algorithm may use of the learner it serves, given when it is built."""

    policy: Policy
    cfg: CommonConfig  # the common learner config (a LearnerConfig)
    temperature: float = 1.0  # the rollout's sampling temperature (log-probs are taken at it)
    reference: torch.nn.Module | None = None  # the policy's initial model, when it is not ``policy.model``
    game_id: str = "game"
    resume: dict = field(default_factory=dict)  # e.g. {"critic": Path}: saved weights to start from
    policies: dict[str, Policy] = field(default_factory=dict)  # the run's other loaded policies (a distillation teacher)
    seed: int = 0  # the run's seed (run.seed): every random draw of the learner derives from it (rng, generator)

    def rng(self, salt: str, *parts: int) -> np.random.Generator:
        """A numpy generator on stream ``salt`` of cogym/core/seeding.py for this learner: (run seed, the
        policy's name, *parts), e.g. a pass number; the same in one process and in a Ray learner actor."""
        return seeding.rng(salt, self.seed, self.policy.name, *parts)

    def generator(self, salt: str, *parts: int) -> torch.Generator:
        """A CPU torch generator on stream ``salt`` for this learner, as :meth:`rng` (torch's global one is
        left alone)."""
        return seeding.torch_generator(salt, self.seed, self.policy.name, *parts)

    def plugin_rng(self, stream: int, *parts: int) -> np.random.Generator:
        """A numpy generator for an algorithm plug-in of a user's (stream ``learners.plugin``): ``stream`` is
        the plug-in's own number, which keeps its draws apart from another plug-in's; ``parts`` e.g. a pass."""
        return self.rng("learners.plugin", stream, *parts)

    def plugin_generator(self, stream: int, *parts: int) -> torch.Generator:
        """A CPU torch generator for an algorithm plug-in of a user's, as :meth:`plugin_rng`."""
        return self.generator("learners.plugin_torch", stream, *parts)


class Algorithm:
    """Base class of every algorithm. Subclasses set ``name`` (by :func:`register`), ``Config`` and
    ``grouped``, and implement :meth:`advantages`; the other hooks have working defaults."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = AlgorithmConfig
    grouped: ClassVar[bool] = False  # its baseline is a group of turns (grouped by (episode, role) or game.group_size)
    per_role: ClassVar[bool] = True  # may train one role of a policy whose algorithm is another (role_algorithms)
    needs_reference: ClassVar[bool] = False  # needs the policy's initial model (build passes it on resume)
    data_parallel: ClassVar[bool] = True  # may train in several torch.distributed processes
    # End-of-game facts it reads from Turn.outcome (cogym.core.outcome); the builder refuses a game
    # that declares none of them for any role the policy trains with this algorithm (GameSpec.outcomes).
    # Its rows are single moves: a seat's conversation moves are not joined into one sequence for it
    # (multi_turn: joined), e.g. a per-move discount (RAE, TRR++) or a per-move reference (SPIN).
    per_move_rows: ClassVar[bool] = False
    outcome_keys: ClassVar[tuple[str, ...]] = ()
    # Its own frozen reference (``self.reference``) anchors the policy, with KL off (DPO's pi_ref): the
    # learner's ref_sync_every / ref_sync_mix move it as they move a KL reference.
    own_reference: ClassVar[bool] = False
    # Its baseline is the reward of a greedy game (ReMax): the training rollout plays one more game per
    # group from the group's seed, this policy's seats decoding greedily, and sets each of the group's
    # turns' Turn.baseline to its seat's return there (cogym.runners.train.iteration; not trained on).
    greedy_baseline: ClassVar[bool] = False

    def __init__(self, cfg: AlgorithmConfig, ctx: Context) -> None:
        self.cfg = cfg
        self.ctx = ctx

    # -- advantages (every algorithm) ----------------------------------------------------------------

    def prepare(self, batch: TokenBatch) -> None:
        """Called once per update with the whole batch, before any role's advantages."""

    def advantages(self, rows: RoleRows) -> Advantages:
        raise NotImplementedError(f"algorithm {self.name!r} implements no advantages()")

    def after_step(self, batch: TokenBatch, carry: dict) -> dict[str, float]:
        """After the policy's optimizer step, with this algorithm's surviving rows and their carry."""
        return {}

    # -- state ---------------------------------------------------------------------------------

    def save(self, directory: Path) -> dict:
        """Write this algorithm's state under the learner's checkpoint ``directory``; return entries
        to add to the learner's ``state.json`` (JSON values)."""
        return {}

    def load(self, directory: Path, state: dict) -> None:
        """Restore what :meth:`save` wrote (``state``: the learner's ``state.json``)."""

    # -- the policy's own algorithm: the batch and the loss ---------------------------------------------

    def train_batch(self, learner: LearnerHost, turns: Sequence[Turn]) -> TrainBatch:
        """The batch one update trains on; by default the policy-gradient batch (advantages per role)."""
        return policy_gradient_batch(learner, turns)

    def loss(self, step: MicroStep) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss of one micro-batch and its metrics (each the micro-batch's share of the step value).
        Override to add a term: ``loss, m = super().loss(step); return loss + c * extra, m``."""
        mb = step.batch
        # The trainer's log-probs before the update (the first epoch's forward; absent: this forward's own)
        trainer_old = step.rows.get("logp_trainer_old")
        loss, metrics = objective(step.logp, mb.logp_old, step.rows["adv"], mb.mask, ObjectiveConfig.of(self.ctx.cfg),
                                  num_tokens=step.num_tokens, num_seqs=step.num_seqs, entropy=step.entropy,
                                  ref_logp=step.rows.get("ref_logp"),
                                  logp_trainer_old=trainer_old if trainer_old is not None else step.logp.detach(),
                                  generator=self.ctx.generator("learners.policy_loss", step.steps, step.index, dist.rank()))
        with torch.no_grad():
            drift = ((step.logp - mb.logp_old).abs() * mb.mask).sum() / step.num_tokens
        metrics["logprob_drift"] = float(drift)
        return loss, metrics

    def finish(self, learner: LearnerHost, data: TrainBatch) -> dict[str, float]:
        """Metrics after the step (and the work of the algorithms that train on this batch's rows)."""
        return finish_policy_gradient(learner, data)
