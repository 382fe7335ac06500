"""A scalar reward model: the pairwise losses, preference pairs from a game's groups, and the model.

The reward model is the critic's value model (:class:`cogym.learners.critic.ValueModel`: a copy of
the policy's causal-LM trunk and a linear head, starting as the mean of the hidden state) read at one position: the last
token of a row (prompt + response), as TRL's ``AutoModelForSequenceClassification`` scoring and
OpenRLHF's reward model read it. On a pair (chosen ``c``, rejected ``r``) of one prompt it trains on

* ``bt`` (Bradley-Terry; TRL's ``RewardTrainer.compute_loss``, OpenRLHF's ``PairWiseLoss``):
  ``-log sigmoid(s(c) - s(r) - margin)``;
* ``logexp`` (OpenRLHF's ``LogExpLoss``): ``log(1 + exp(s(r) - s(c)))``, no margin;

averaged over the pairs. Its process variant reads the head at each step's last token and trains
on the binary cross-entropy of ``sigmoid(s(step))`` against the step's label in [0, 1]. A step is a
move of a joined multi-turn row (a run of the ids the model wrote), and in a one-move row a line.
Saved as the critic is: ``critic.safetensors`` and its engine's optimizer state, in its own directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from cogym.core.types import Turn
from cogym.learners.batch import TokenBatch, batch_widths, micro_batches, pack_rows, training_forward
from cogym.learners.critic import Critic, WEIGHTS_FILE

RM_LOSSES = ("bt", "logexp")
RM_LEVELS = ("outcome", "process")


def pairwise_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: float | torch.Tensor = 0.0,
                  kind: str = "bt") -> torch.Tensor:
    """Per-pair loss (P,) of scores ``chosen`` and ``rejected`` (P,): ``bt`` is ``-log sigmoid(c - r -
    margin)``, ``logexp`` ``log(1 + exp(r - c))`` (it takes no margin), both computed stably."""
    if chosen.shape != rejected.shape or chosen.dim() != 1:
        raise ValueError(f"pairwise_loss needs two (P,) tensors of one shape, got {tuple(chosen.shape)} and "
                         f"{tuple(rejected.shape)}")
    if kind == "bt":
        return -F.logsigmoid(chosen - rejected - margin)
    if kind == "logexp":
        if not (isinstance(margin, (int, float)) and margin == 0):
            raise ValueError("the logexp loss takes no margin (OpenRLHF's LogExpLoss ignores it); use bt")
        return F.softplus(rejected - chosen)
    raise ValueError(f"rm_loss must be one of {', '.join(RM_LOSSES)}, got {kind!r}")


def pair_metrics(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, float]:
    """``accuracy``: the share of pairs with ``s(c) > s(r)`` (a tie counts as wrong, as in TRL);
    ``margin``: the mean of ``s(c) - s(r)``."""
    return {"accuracy": float((chosen > rejected).double().mean()), "margin": float((chosen - rejected).double().mean())}


def process_loss(step_scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-step binary cross-entropy (S,) of ``sigmoid(step_scores)`` against ``labels`` in [0, 1]."""
    return F.binary_cross_entropy_with_logits(step_scores.float(), labels.float(), reduction="none")


def last_positions(b: TokenBatch) -> torch.Tensor:
    """(N,) position of each right-padded row's last token (prompt + response)."""
    return b.attention_mask.sum(1) - 1


def step_ends(b: TokenBatch, newline_ids: set[int]) -> list[list[int]]:
    """Each row's step ends as positions in its input ids: the last id of each run of model-written ids
    (a move) when the row holds several moves; else each response id holding a newline, and the last."""
    out = []
    width = b.attention_mask.sum(1).tolist()
    for i, t in enumerate(b.turns):
        prompt = width[i] - len(t.response_ids)
        mask = b.mask[i, :len(t.response_ids)].tolist()
        runs = [k for k in range(len(mask)) if mask[k] and (k + 1 == len(mask) or not mask[k + 1])]
        if len(runs) <= 1:
            last = len(t.response_ids) - 1
            runs = sorted({k for k, tok in enumerate(t.response_ids) if tok in newline_ids and k < last} | {last})
        out.append([prompt + k for k in runs])
    return out


class RewardModel(Critic):
    """The critic's value model and engine, read at a row's last token (:meth:`scores`) or at its step
    ends (:meth:`step_scores`), trained on pairs (:meth:`train_pairs`) or step labels (:meth:`train_steps`)."""

    def __init__(self, policy_model: torch.nn.Module, cfg, lr: float) -> None:
        """The head starts as the mean of the last hidden state (weight 1/hidden size, bias 0), not at zero as
        the critic's: a zero head would tie every pair, and a policy paid by it would get no advantage from
        the first batch. Deterministic, so it needs no seed."""
        super().__init__(policy_model, cfg, lr=lr, value_clip=None)
        with torch.no_grad():
            self.model.head.weight.fill_(1.0 / self.model.head.in_features)

    def _values(self, module: torch.nn.Module, b: TokenBatch) -> torch.Tensor:
        width = int(b.attention_mask.sum(1).max())
        return module(input_ids=b.input_ids[:, :width], attention_mask=b.attention_mask[:, :width])  # (N, W)

    def scores(self, b: TokenBatch, module: torch.nn.Module | None = None) -> torch.Tensor:
        """(N,) the head at each row's last token (with gradient when grad is on)."""
        values = self._values(module or self.engine.train_module, b)
        return values.gather(1, last_positions(b)[:, None]).squeeze(1)

    def step_scores(self, b: TokenBatch, ends: list[list[int]], module: torch.nn.Module | None = None) -> list[torch.Tensor]:
        """Each row's head values at its step ends (``ends``, from :func:`step_ends`)."""
        values = self._values(module or self.engine.train_module, b)
        return [values[i, torch.tensor(e, device=values.device)] for i, e in enumerate(ends)]

    def _chunks(self, b: TokenBatch, rows: int) -> list[torch.Tensor]:
        return micro_batches(batch_widths(b), rows, self.cfg.max_tokens_per_micro_batch)

    @torch.no_grad()
    def score_batch(self, b: TokenBatch, micro_batch_size: int) -> torch.Tensor:
        """(N,) scores of a whole batch, in micro-batches, without gradient."""
        module = self.engine.train_module
        module.eval()
        return torch.cat([self.scores(b.rows(ix), module) for ix in self._chunks(b, micro_batch_size)])

    def train_pairs(self, b: TokenBatch, n: int, micro_batch_size: int, *, kind: str, margin: float) -> dict[str, float]:
        """One optimizer step on the mean pair loss; rows ``i`` and ``n + i`` of ``b`` are pair ``i``'s
        chosen and rejected responses, and a micro-batch holds whole pairs."""
        module, widths = self.engine.train_module, batch_widths(b)
        tokens = self.cfg.max_tokens_per_micro_batch
        runs = pack_rows([max(widths[i], widths[i + n]) for i in range(n)], max(1, micro_batch_size // 2),
                         tokens // 2 if tokens else None)
        sums = {"loss": 0.0, "accuracy": 0.0, "margin": 0.0}
        with training_forward(module):
            for k, run in enumerate(runs):
                ix = torch.tensor(run)
                s = self.scores(b.rows(torch.cat([ix, ix + n])), module)
                chosen, rejected = s[:len(run)], s[len(run):]
                loss = pairwise_loss(chosen, rejected, margin, kind).sum() / n
                self.engine.backward(loss, last=k == len(runs) - 1)
                sums["loss"] += float(loss.detach())
                for name, value in pair_metrics(chosen.detach(), rejected.detach()).items():
                    sums[name] += value * len(run) / n
            stats = self.engine.step()
        return {**sums, **({"grad_norm": stats["grad_norm"]} if "grad_norm" in stats else {})}

    def train_steps(self, b: TokenBatch, ends: list[list[int]], labels: list[torch.Tensor],
                    micro_batch_size: int) -> dict[str, float]:
        """One optimizer step on the mean binary cross-entropy over every step of the batch."""
        module = self.engine.train_module
        total = float(sum(len(e) for e in ends))
        sums = {"loss": 0.0, "accuracy": 0.0}
        chunks = self._chunks(b, micro_batch_size)
        with training_forward(module):
            for k, ix in enumerate(chunks):
                rows = ix.tolist()
                s = torch.cat(self.step_scores(b.rows(ix), [ends[i] for i in rows], module))
                y = torch.cat([labels[i] for i in rows]).to(s.device)
                loss = process_loss(s, y).sum() / total
                self.engine.backward(loss, last=k == len(chunks) - 1)
                sums["loss"] += float(loss.detach())
                sums["accuracy"] += float(((s.detach() > 0) == (y > 0.5)).double().sum()) / total
            stats = self.engine.step()
        return {**sums, **({"grad_norm": stats["grad_norm"]} if "grad_norm" in stats else {})}

    def load(self, directory: Path) -> None:
        """The weights and optimizer state :meth:`save` wrote under ``directory``."""
        path = Path(directory) / WEIGHTS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no reward-model weights {WEIGHTS_FILE} under {directory}")
        device = next(self.model.parameters()).device
        self.model.load_state_dict(load_file(str(path), device=str(device)))
        self.load_optimizer(directory)
