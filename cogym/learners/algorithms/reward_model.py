"""A reward-model learner (docs/algorithms.md §17): a scalar head on a copy of the
policy's trunk (:class:`cogym.learners.reward_model.RewardModel`), trained on the game's preference
pairs: every two rows of one prompt whose rewards differ, the higher one chosen
(:func:`cogym.learners.pairs.reward_pairs`, ``all``; ``rm_level: outcome``), or on step labels (``rm_level: process``). It trains with its own engine and learning
rate (``rm_lr``), ``epochs`` optimizer steps a batch; the policy's own weights do not move. Its state
(the head and trunk, with their optimizer) is saved under ``reward_model/`` of the learner's
checkpoint, with its update count in ``state.json``.

Another policy's learner takes its reward from it with ``reward_from: <this policy>``
(:meth:`RewardModelAlgorithm.rewards`; cogym/runners/train/rewards.py): this learner then trains
on that policy's turns, with the game's rewards; with ``rm_warmup: N`` the policy it pays gets no batch
(it takes no step) until the reward model has trained on N batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from cogym.core.config_key import key
from cogym.core.types import Turn
from cogym.learners.algorithm import Algorithm, AlgorithmConfig, Context, check_choice, check_number
from cogym.learners.batch import TokenBatch
from cogym.learners.host import LearnerHost
from cogym.learners.pairs import refuse_policy_gradient_keys, reward_pairs
from cogym.learners.reward_model import RM_LEVELS, RM_LOSSES, RewardModel, step_ends
from cogym.learners.rows import TrainBatch

STATE_DIR = "reward_model"


@dataclass
class RewardModelConfig(AlgorithmConfig):
    rm_loss: str = key("bt", "bt: -log sigmoid(s(chosen) - s(rejected) - rm_margin) (TRL, OpenRLHF's PairWiseLoss); "
                       "logexp: log(1 + exp(s(rejected) - s(chosen))) (OpenRLHF's LogExpLoss)", choices=RM_LOSSES)
    rm_margin: float = key(0.0, "the margin of the bt loss: a pair costs until its chosen score leads by it")
    rm_lr: Optional[float] = key(None, "the reward model's learning rate; null: the learner's lr")
    rm_level: str = key("outcome", "outcome: pairs of one group's rows ranked by the game's reward, scored at the last "
                        "token; process: each step (a move of a multi-turn row, else a line) labelled, binary "
                        "cross-entropy at its last token", choices=RM_LEVELS)
    rm_warmup: int = key(0, "reward_from: the policies this reward model pays get no batch (they take no step) until it "
                         "has trained on rm_warmup batches; it trains all the while")

    def validate(self, common) -> None:
        check_choice(self.rm_loss, RM_LOSSES, "rm_loss")
        check_choice(self.rm_level, RM_LEVELS, "rm_level")
        check_number("rm_margin", self.rm_margin, -float("inf"))
        if isinstance(self.rm_warmup, bool) or not isinstance(self.rm_warmup, int) or self.rm_warmup < 0:
            raise ValueError(f"rm_warmup must be an integer >= 0 (batches the reward model trains on before it pays), "
                             f"got {self.rm_warmup!r}")
        if self.rm_loss == "logexp" and self.rm_margin != 0:
            raise ValueError(f"rm_margin={self.rm_margin} needs rm_loss: bt (the logexp loss takes no margin)")
        if self.rm_lr is not None:
            check_number("rm_lr", self.rm_lr, 0.0, open_low=True)
        refuse_policy_gradient_keys(common, "reward_model", "it trains a scalar head, not the policy")


class RewardModelAlgorithm(Algorithm):
    """Trains the reward model on each batch (one optimizer step an epoch); the policy takes no step."""

    Config = RewardModelConfig
    per_role = False  # its own rows and loss: a whole policy or nothing
    data_parallel = False

    def __init__(self, cfg: RewardModelConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.rm = RewardModel(ctx.policy.model, ctx.cfg, lr=cfg.rm_lr if cfg.rm_lr is not None else ctx.cfg.lr)
        self.newline_ids: set[int] = set()  # ids whose text holds a line break (process level: a line ends there)
        if cfg.rm_level == "process":
            tok = ctx.policy.tokenizer
            self.newline_ids = {i for t, i in tok.get_vocab().items() if "\n" in tok.convert_tokens_to_string([t])}
        self.updates = 0  # batches trained on (each takes epochs optimizer steps)

    @property
    def paying(self) -> bool:
        """Whether its rewards pay the policies that take them: it has trained on ``rm_warmup`` batches."""
        return self.updates >= self.cfg.rm_warmup

    def advantages(self, rows):
        raise TypeError("reward_model has no advantages: it trains a scalar head (role_algorithms cannot name it)")

    def batch(self, turns: Sequence[Turn]) -> TokenBatch:
        return TokenBatch.from_turns(turns, self.ctx.policy.tokenizer.pad_token_id).to(self.ctx.policy.device)

    @torch.no_grad()
    def rewards(self, turns: Sequence[Turn]) -> list[float]:
        """The reward model's reward of each row, with its current weights: the score at the last token
        (outcome), or the least step probability ``min sigmoid(s(step))`` (process)."""
        if not turns:
            return []
        b = self.batch(turns)
        if self.cfg.rm_level == "outcome":
            return self.rm.score_batch(b, self.ctx.cfg.micro_batch_size).tolist()
        module = self.rm.engine.train_module
        module.eval()
        ends = step_ends(b, self.newline_ids)
        return [float(torch.sigmoid(s).min()) for s in self.rm.step_scores(b, ends, module)]

    def train_batch(self, learner: LearnerHost, turns: Sequence[Turn]) -> TrainBatch:
        """The reward model's update(s) on these rows; nothing is left for the policy's own step."""
        if self.cfg.rm_level == "process":
            metrics = self._train_process(turns)
        else:
            metrics = self._train_pairs(turns)
        if "rm/loss" in metrics:
            self.updates += 1
            metrics["loss"] = metrics["rm/loss"]  # the step's loss, under the name every learner logs it
        return TrainBatch(None, metrics)

    def _train_pairs(self, turns: Sequence[Turn]) -> dict[str, float]:
        pairs = reward_pairs(turns, "all")
        if not pairs:
            return {"rm/pairs": 0.0}
        chosen, rejected = zip(*pairs)
        b = self.batch([turns[i] for i in chosen] + [turns[i] for i in rejected])
        metrics: dict[str, float] = {}
        for _ in range(self.ctx.cfg.epochs):
            step = self.rm.train_pairs(b, len(pairs), self.ctx.cfg.micro_batch_size, kind=self.cfg.rm_loss,
                                       margin=self.cfg.rm_margin)
            metrics = metrics or step  # the first epoch's: the scores before this batch's first step
        return {"rm/pairs": float(len(pairs)), **{f"rm/{k}": v for k, v in metrics.items()}}

    def _train_process(self, turns: Sequence[Turn]) -> dict[str, float]:
        b = self.batch(turns)
        ends = step_ends(b, self.newline_ids)
        labels = [self.step_labels(t, len(e)) for t, e in zip(turns, ends)]
        metrics: dict[str, float] = {}
        for _ in range(self.ctx.cfg.epochs):
            step = self.rm.train_steps(b, ends, labels, self.ctx.cfg.micro_batch_size)
            metrics = metrics or step  # the first epoch's
        return {"rm/steps": float(sum(len(e) for e in ends)), **{f"rm/{k}": v for k, v in metrics.items()}}

    @staticmethod
    def step_labels(turn: Turn, steps: int) -> torch.Tensor:
        """A row's step labels: the game's ``step_labels`` (a list of numbers in [0, 1], one a step),
        else the row's reward (in [0, 1]) for every step."""
        given = turn.info.get("step_labels")
        labels = [float(x) for x in given] if isinstance(given, (list, tuple)) else [float(turn.reward)] * steps
        if len(labels) != steps or any(not 0.0 <= x <= 1.0 for x in labels):
            raise ValueError(f"rm_level: process needs {steps} step labels in [0, 1] for a row of seat {turn.seat!r}, "
                             f"got {labels[:8]} (infos['step_labels'], else the reward for every step)")
        return torch.tensor(labels)

    def save(self, directory: Path) -> dict:
        self.rm.save(Path(directory) / STATE_DIR)
        return {"rm_updates": self.updates}

    def load(self, directory: Path, state: dict) -> None:
        self.rm.load(Path(directory) / STATE_DIR)
        self.updates = int(state.get("rm_updates", 0))
