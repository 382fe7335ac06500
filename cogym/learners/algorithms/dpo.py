"""DPO and IPO: preference optimisation on the pairs a game produces, against the policy's frozen
initial model (or, with the learner's ``ref_sync_every``, a reference moved toward the policy every N
optimizer steps: TR-DPO).

Online DPO (Rafailov et al. 2023, "Direct Preference Optimization"; IPO: Azar et al. 2023, "A General
Theoretical Paradigm to Understand Learning from Human Preferences"); the losses are in
:mod:`cogym.learners.preference`, the equations in docs/algorithms.md (DPO and IPO).

Each update forms its pairs from the batch (:func:`cogym.learners.pairs.reward_pairs`): two samples of
one prompt (turns of one role sharing their group key, i.e. one episode's seats of the role or the
``game.group_size`` episodes of one group, and their prompt ids) ranked by the game's reward, the better
one chosen and the worse rejected; ties make no pair. ``dpo_pairs: best_worst`` takes the best and the
worst sample of each prompt, ``all`` every two samples of different rewards. The loss is the mean of
``dpo_loss`` over the pairs, with sequence log-probabilities summed over the response tokens (at the
rollout's temperature) and the reference ``pi_ref`` the policy's initial model, frozen.

With ``dpo_data`` (offline DPO), each update trains on the next ``dpo_batch_size`` pairs of a JSONL file
of ``{"prompt", "chosen", "rejected"}`` rows instead, pass after pass, in the file's order or, with
``dpo_shuffle``, in a shuffle of each pass drawn from the run's seed, the learner and the pass number
(stream ``learners.dpo_data``) (the game's turns are played and logged, not trained on). The prompt is rendered with the policy's chat template
as a game's prompt is, and each response is closed with the end-of-message id as a finished generated
response is (SPIN's :func:`~cogym.learners.algorithms.spin.reference_ids`).

DPO trains a whole policy with its own rows (chosen/rejected pairs) and loss through the common
:class:`cogym.learners.learner.Learner` loop; it keeps no state of its own (on resume, the run's
builder passes the initial model as the reference: ``needs_reference``) but the position in ``dpo_data``
(``dpo_data_seen`` in the learner's ``state.json``); a reference that ``ref_sync_every`` moves is saved
by the learner as a KL reference is (``reference.safetensors``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from cogym.core.config_key import key
from cogym.core.types import Turn
from cogym.envs.seeds import shipped_or_path
from cogym.learners.algorithm import Algorithm, AlgorithmConfig, Context, check_choice
from cogym.learners.algorithms.spin import end_of_message_id, reference_ids
from cogym.learners.host import LearnerHost
from cogym.learners.pairs import PAIRINGS, pair_rows, refuse_policy_gradient_keys, reward_pairs
from cogym.learners.preference import check_dpo_options, DPO_LOSSES, dpo_loss, load_preferences, Preference, take_rows
from cogym.learners.rows import MicroStep, TrainBatch


@dataclass
class DpoConfig(AlgorithmConfig):
    dpo_beta: float = key(0.1, "beta of DPO: the implicit reward is beta * log(pi / pi_ref); for ipo, the "
                          "regularization tau (the target margin is 1 / (2 beta))")
    dpo_loss: str = key("sigmoid", "sigmoid (DPO; with label smoothing, conservative DPO) | hinge (SLiC) | ipo | robust "
                        "(rDPO), as TRL 1.16.0 computes them", choices=DPO_LOSSES)
    dpo_label_smoothing: float = key(0.0, "the probability that a preference label is wrong, in [0, 0.5) (sigmoid and "
                                     "robust losses)")
    dpo_pairs: str = key("best_worst", "the pairs of one prompt's samples: best_worst (its best and worst sample) | "
                         "all (every two samples of different rewards); ties make no pair", choices=PAIRINGS)
    dpo_data: Optional[str] = key(None, "Offline DPO: a JSONL file of preference pairs, {\"prompt\", \"chosen\", "
                                  "\"rejected\"} (and optionally \"system\") a line, a path or the name of a file "
                                  "shipped in cogym/envs/data, trained on in file order (or dpo_shuffle's) instead of "
                                  "the game's pairs. null: the game's pairs.")
    dpo_batch_size: int = key(32, "dpo_data pairs per update")
    dpo_shuffle: bool = key(False, "shuffle dpo_data's pairs anew each pass (drawn from run.seed, the learner and the "
                            "pass number); false: the file's order")

    def validate(self, common) -> None:
        """DPO has its own objective: options of the policy-gradient learner are refused, not ignored."""
        refuse_policy_gradient_keys(common, "DPO", "its reference already anchors the policy, with strength dpo_beta")
        check_dpo_options(self.dpo_beta, self.dpo_loss, self.dpo_label_smoothing, prefix="dpo_")
        check_choice(self.dpo_pairs, PAIRINGS, "dpo_pairs")
        if self.dpo_data is not None:
            if not isinstance(self.dpo_data, str) or shipped_or_path(self.dpo_data) is None:
                raise ValueError(f"dpo_data must name a JSONL file of preference pairs (a path, or a file shipped in "
                                 f"cogym/envs/data) or be null, got {self.dpo_data!r}")
            if self.dpo_pairs != PAIRINGS[0]:
                raise ValueError("dpo_pairs forms pairs from the game's turns, but dpo_data trains on the file's pairs; "
                                 "remove dpo_pairs, or dpo_data")
        if not isinstance(self.dpo_shuffle, bool):
            raise ValueError(f"dpo_shuffle must be true or false, got {self.dpo_shuffle!r}")
        if self.dpo_shuffle and self.dpo_data is None:
            raise ValueError("dpo_shuffle shuffles the pairs of dpo_data, but dpo_data is null (the game's pairs); "
                             "remove dpo_shuffle, or set dpo_data")
        size = self.dpo_batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"dpo_batch_size must be an int >= 1 (dpo_data pairs per update), got {size!r}")


class DPO(Algorithm):
    """Trains a policy with DPO (or a variant: ``dpo_loss``) on the pairs of each batch, against its
    frozen initial model (``reference``; moved by the learner's ``ref_sync_every``)."""

    Config = DpoConfig
    grouped = True  # pairs are two samples of one prompt in one group
    per_role = False  # its own rows and loss: a whole policy or nothing
    needs_reference = True  # pi_ref is the policy's initial model
    data_parallel = False
    own_reference = True  # ref_sync_every moves pi_ref (TR-DPO)

    def __init__(self, cfg: DpoConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        # The reference copies the policy's weights before an engine may partition them.
        reference = ctx.reference if ctx.reference is not None else copy.deepcopy(ctx.policy.model)
        self.reference = reference.eval()
        self.reference.requires_grad_(False)
        self.data = load_preferences(cfg.dpo_data) if cfg.dpo_data is not None else None
        self.end_id = end_of_message_id(ctx.policy)
        self.seen = 0  # dpo_data pairs trained on (the next is the (seen % len(data))-th of pass seen // len(data))

    def advantages(self, rows):
        raise TypeError("dpo has no advantages: it trains a whole policy with its own loss (role_algorithms cannot name it)")

    def pairs(self, turns: Sequence[Turn]) -> tuple[list[Turn], list[Turn]]:
        """(chosen, rejected) turns of this batch's pairs (``dpo_pairs``)."""
        pairs = reward_pairs(turns, self.cfg.dpo_pairs)
        return [turns[i] for i, _ in pairs], [turns[j] for _, j in pairs]

    def file_pairs(self) -> tuple[list[Turn], list[Turn]]:
        """(chosen, rejected) turns of the next ``dpo_batch_size`` rows of ``dpo_data``."""
        size = self.cfg.dpo_batch_size
        shuffle = (lambda epoch: self.ctx.rng("learners.dpo_data", epoch)) if self.cfg.dpo_shuffle else None
        rows = take_rows(self.data, self.seen, size, shuffle)
        self.seen += size
        return self.row_turns(rows, "chosen"), self.row_turns(rows, "rejected")

    def row_turns(self, rows: Sequence[Preference], side: str) -> list[Turn]:
        """One side of preference rows as Turns: the prompt rendered as a game's is, the response closed
        as a generated one is."""
        policy, turns = self.ctx.policy, []
        for i, row in enumerate(rows):
            text = getattr(row, side)
            ids = reference_ids(policy, text, self.end_id)
            turns.append(Turn(0, f"dpo-{self.seen}-{i}", "dpo_data", "dpo_data", policy.name, policy.render(row.messages),
                              ids, [0.0] * len(ids), text, True))
        return turns

    def train_batch(self, learner: LearnerHost, turns: Sequence[Turn]) -> TrainBatch:
        """Rows: the n chosen responses, then the n rejected ones, with their reference log-probabilities;
        a micro-batch holds whole pairs."""
        chosen, rejected = self.file_pairs() if self.data is not None else self.pairs(turns)
        n = len(chosen)
        if n == 0:
            return TrainBatch(None, {"dpo_pairs": 0.0})
        ctx = self.ctx
        b, chunks, ref = pair_rows(chosen, rejected, self.reference, ctx.cfg, ctx.policy.device,
                                   ctx.policy.tokenizer.pad_token_id, ctx.temperature)
        return TrainBatch(b, {}, rows={"ref_seq_logp": ref}, chunks=chunks, num_tokens=float(b.mask.sum()),
                          num_seqs=float(n), extra={"pairs": n})

    def loss(self, step: MicroStep) -> tuple[torch.Tensor, dict[str, float]]:
        n, half = step.num_seqs, len(step.batch.turns) // 2
        lp, ref, tokens = step.logp.sum(1), step.rows["ref_seq_logp"], step.batch.mask.sum(1)
        cfg = self.cfg
        losses, chosen, rejected = dpo_loss(lp[:half], lp[half:], ref[:half], ref[half:], cfg.dpo_beta, cfg.dpo_loss,
                                            cfg.dpo_label_smoothing, tokens[:half], tokens[half:])
        chosen, rejected = chosen.detach(), rejected.detach()

        def share(x: torch.Tensor) -> float:  # this micro-batch's share of the mean over the step's pairs
            return float(x.detach().sum()) / n

        return losses.sum() / n, {"dpo_reward_chosen": share(chosen), "dpo_reward_rejected": share(rejected),
                                  "dpo_margin": share(chosen - rejected), "dpo_accuracy": share((chosen > rejected).float()),
                                  "dpo_chosen_logp": share(lp[:half]), "dpo_rejected_logp": share(lp[half:])}

    def finish(self, learner: LearnerHost, data: TrainBatch) -> dict[str, float]:
        n = data.extra["pairs"]
        return {"dpo_pairs": float(n), "response_tokens": float(data.batch.mask.sum())}

    def save(self, directory: Path) -> dict:
        return {"dpo_data_seen": self.seen}

    def load(self, directory: Path, state: dict) -> None:
        self.seen = int(state.get("dpo_data_seen", 0))
