"""The data an algorithm works on: a role's rows of a batch (RoleRows), the advantages it returns for
them, the batch one update trains on (TrainBatch) and one micro-batch's step (MicroStep). They live
outside the algorithms package so the learner's pipeline can build them without importing every
algorithm."""

from __future__ import annotations

from dataclasses import dataclass, field
import torch
from cogym.learners import advantages as adv_fns
from cogym.learners.batch import TokenBatch


@dataclass
class RoleRows:
    """The rows of one role in a batch: what an estimator sees.

    ``index`` (n,): their positions in the whole batch; ``batch``: the rows themselves;
    ``token_rewards`` (n, L): the (overlong-shaped) outcome on each row's last token, plus the
    KL-in-reward shaping when enabled; ``scores`` (n,): the outcomes.
    """

    role: str
    index: torch.Tensor
    batch: TokenBatch
    token_rewards: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        return self.batch.mask

    def groups(self) -> torch.Tensor:
        """(n,) group index of each row, from the turns' explicit group keys."""
        return adv_fns.group_index(self.batch.group_keys).to(self.mask.device)
@dataclass
class Advantages:
    """An estimator's answer: ``adv`` (n, L); ``keep`` (n,) bool, rows to train on (None: all);
    ``metrics`` (logged under the role's prefix where the key has none); ``carry``: (n, ...) tensors
    handed back, for the rows that survive, to :meth:`Algorithm.after_step`."""

    adv: torch.Tensor
    keep: torch.Tensor | None = None
    metrics: dict = field(default_factory=dict)
    carry: dict = field(default_factory=dict)
@dataclass
class MicroStep:
    """One micro-batch of the update, as the loss sees it.

    ``batch``: its rows; ``logp`` (n, L): the current model's log-probs of the response tokens, with
    gradient; ``entropy`` (n, L): its next-token entropy there, with gradient, when the learner has an
    entropy bonus (``entropy_coef`` > 0), else None (no full-vocabulary logits are ever kept); ``rows``: the train batch's per-row tensors for these rows (``adv``, ``ref_logp``, ...), and
    ``logp_trainer_old`` (n, L): the learner's first-epoch forward of these rows, detached (the trainer's
    log-probs before the update; docs/algorithms.md §5.6);
    ``index``: which micro-batch of the step; ``num_tokens``/``num_seqs``: counts of the whole step;
    ``steps``: the learner's optimizer steps before this one (its update and epoch: a random draw's stream).
    """

    batch: TokenBatch
    logp: torch.Tensor
    entropy: torch.Tensor | None
    rows: dict
    index: int
    num_tokens: float
    num_seqs: float
    steps: int = 0
@dataclass
class TrainBatch:
    """What one update trains on: ``batch`` (None: nothing to train on, return ``metrics``),
    ``rows``: per-row tensors sliced into each :class:`MicroStep`, ``chunks``: this rank's
    micro-batches (row indices), and what :meth:`Algorithm.finish` needs afterwards."""

    batch: TokenBatch | None
    metrics: dict
    rows: dict = field(default_factory=dict)
    chunks: list = field(default_factory=list)
    num_tokens: float = 0.0
    num_seqs: float = 0.0
    extra: dict = field(default_factory=dict)
