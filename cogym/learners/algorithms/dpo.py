"""DPO and IPO: preference optimisation on the pairs a game produces, against the policy's frozen
initial model.

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

DPO trains a whole policy with its own rows (chosen/rejected pairs) and loss through the common
:class:`cogym.learners.learner.Learner` loop; it keeps no state of its own (on resume, the run's
builder passes the initial model as the reference: ``needs_reference``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

import torch

from cogym.core.config_key import key
from cogym.core.types import Turn
from cogym.learners.algorithm import Algorithm, AlgorithmConfig, Context, check_choice
from cogym.learners.host import LearnerHost
from cogym.learners.pairs import PAIRINGS, pair_rows, refuse_policy_gradient_keys, reward_pairs
from cogym.learners.preference import check_dpo_options, DPO_LOSSES, dpo_loss
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

    def validate(self, common) -> None:
        """DPO has its own objective: options of the policy-gradient learner are refused, not ignored."""
        if common.role_algorithms:
            raise ValueError(f"DPO has its own objective and trains every role the same way; role_algorithms must be "
                             f"empty, got {common.role_algorithms!r}")
        if common.kl_in_reward != "off" or common.kl_in_loss != "off":
            raise ValueError(f"DPO has its own objective (its reference already anchors the policy, with strength "
                             f"dpo_beta); kl_in_reward and kl_in_loss must be 'off', got kl_in_reward="
                             f"{common.kl_in_reward!r}, kl_in_loss={common.kl_in_loss!r}")
        refuse_policy_gradient_keys(common, "DPO")
        check_dpo_options(self.dpo_beta, self.dpo_loss, self.dpo_label_smoothing, prefix="dpo_")
        check_choice(self.dpo_pairs, PAIRINGS, "dpo_pairs")


class DPO(Algorithm):
    """Trains a policy with DPO (or a variant: ``dpo_loss``) on the pairs of each batch, against its
    frozen initial model."""

    Config = DpoConfig
    grouped = True  # pairs are two samples of one prompt in one group
    per_role = False  # its own rows and loss: a whole policy or nothing
    needs_reference = True  # pi_ref is the policy's initial model
    data_parallel = False

    def __init__(self, cfg: DpoConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        # The reference copies the policy's weights before an engine may partition them.
        reference = ctx.reference if ctx.reference is not None else copy.deepcopy(ctx.policy.model)
        self.reference = reference.eval()
        self.reference.requires_grad_(False)

    def advantages(self, rows):
        raise TypeError("dpo has no advantages: it trains a whole policy with its own loss (role_algorithms cannot name it)")

    def pairs(self, turns: Sequence[Turn]) -> tuple[list[Turn], list[Turn]]:
        """(chosen, rejected) turns of this batch's pairs (``dpo_pairs``)."""
        pairs = reward_pairs(turns, self.cfg.dpo_pairs)
        return [turns[i] for i, _ in pairs], [turns[j] for _, j in pairs]

    def train_batch(self, learner: LearnerHost, turns: Sequence[Turn]) -> TrainBatch:
        """Rows: the n chosen responses, then the n rejected ones, with their reference log-probabilities;
        a micro-batch holds whole pairs."""
        chosen, rejected = self.pairs(turns)
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
