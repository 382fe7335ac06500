"""Supervised fine-tuning (SFT) on a dataset, or on the policy's own best turns (rejection sampling).

The loss is the negative log-likelihood of the response tokens,

    L = - sum_{rows i, tokens t} log pi(y_it | x_i, y_i<t) / N_tok

aggregated by the learner's ``loss_agg`` (token-mean by default: N_tok is the response tokens of the
whole step) with :func:`cogym.learners.losses.aggregate`. Log-probs are taken at the rollout's sampling
temperature, as every learner's are (at temperature 1, the usual case, this is the plain NLL).

What it imitates:

* ``sft_data``: a JSONL file of demonstrations, one object a line: ``{"prompt": ..., "response": ...}``
  (optionally ``"system"``), or ``{"messages": [{"role": ..., "content": ...}, ...]}`` whose last
  message is the assistant's response. The prompt is rendered with the policy's chat template as a
  game's prompt is (:meth:`cogym.agents.policy.Policy.render`), and the response is closed with the
  end-of-message id as a finished generated response is (SPIN's :func:`reference_ids`). Each update
  takes the next ``sft_batch_size`` rows of a shuffle of the file, a new one each pass, drawn from the
  run's seed, the learner and the pass number (stream ``learners.sft_data``);
  the game's turns are played and logged but not trained on.
* otherwise the game's turns of the policy (rejection sampling / expert iteration), chosen by
  ``sft_select``: ``all``; ``reward_at_least`` (reward >= ``sft_min_reward``); ``best_of_group``: in
  each group of turns (the grouped estimators' groups: a role's seats of one game, or
  ``game.group_size`` games), those whose reward is the group's highest, where the group's rewards
  differ (a group whose turns all scored alike shows no best), and at least ``sft_min_reward`` when set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from cogym.core.config_key import key
from cogym.core.types import Turn
from cogym.envs.seeds import shipped_or_path
from cogym.learners import torch_dist as dist
from cogym.learners.algorithm import Algorithm, AlgorithmConfig, check_choice, Context
from cogym.learners.algorithms.spin import end_of_message_id, reference_ids
from cogym.learners.batch import batch_groups, batch_widths, micro_batches, TokenBatch
from cogym.learners.host import LearnerHost
from cogym.learners.losses import aggregate
from cogym.learners.preference import read_jsonl, take_rows
from cogym.learners.rows import MicroStep, TrainBatch

SELECT = ("all", "best_of_group", "reward_at_least")
DATA_ROLE = "sft_data"  # the role of a dataset row (it is no seat of the game)


@dataclass(frozen=True)
class Demonstration:
    """One dataset row: the chat ``messages`` before the response, and the response text."""

    messages: tuple
    response: str


def _row(obj, where: str) -> Demonstration:
    """A JSONL line's object as a demonstration; ValueError naming ``where`` (file and line) otherwise."""
    shape = ('each line must be {"prompt": "...", "response": "..."} (optionally "system") or {"messages": '
             '[{"role": "user", "content": "..."}, ..., {"role": "assistant", "content": "..."}]}')
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: {shape}")
    if "messages" in obj:
        msgs = obj["messages"]
        ok = (isinstance(msgs, list) and len(msgs) >= 2
              and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                      for m in msgs))
        if not ok or msgs[-1]["role"] != "assistant":
            raise ValueError(f"{where}: 'messages' must be a list of at least two {{\"role\", \"content\"}} strings "
                             "whose last is the assistant's response")
        return Demonstration(tuple({"role": m["role"], "content": m["content"]} for m in msgs[:-1]), msgs[-1]["content"])
    if not isinstance(obj.get("prompt"), str) or not isinstance(obj.get("response"), str) \
            or not isinstance(obj.get("system", ""), str):
        raise ValueError(f"{where}: {shape}")
    system = ({"role": "system", "content": obj["system"]},) if obj.get("system") else ()
    return Demonstration((*system, {"role": "user", "content": obj["prompt"]}), obj["response"])


def load_demonstrations(name: str) -> list[Demonstration]:
    """The rows of an SFT file (a path, or the name of a file shipped in cogym/envs/data), read bounded
    (:func:`cogym.learners.preference.read_jsonl`); a bad line is a one-line ValueError naming the file and
    the line."""
    rows = [_row(obj, where) for where, obj in read_jsonl(name, "sft_data")]
    if not rows:
        raise ValueError(f"sft_data {name!r} has no rows; write one JSON object a line")
    return rows


def selected(turns: Sequence[Turn], select: str, min_reward: float | None) -> list[Turn]:
    """The turns ``sft_select`` keeps (module docstring), in their order."""
    if select == "all":
        return list(turns)
    if select == "reward_at_least":
        return [t for t in turns if t.reward >= min_reward]
    groups: dict = {}
    for i, t in enumerate(turns):
        groups.setdefault(t.group_key if t.group_key is not None else ("turn", i), []).append(t.reward)
    floor = -math.inf if min_reward is None else min_reward
    keep = []
    for i, t in enumerate(turns):
        rewards = groups[t.group_key if t.group_key is not None else ("turn", i)]
        if t.reward == max(rewards) > min(rewards) and t.reward >= floor:
            keep.append(t)
    return keep


# Options of the policy-gradient learner that SFT's loss has no place for: refused, not ignored.
_OFF = (("kl_in_reward", "off"), ("kl_in_loss", "off"), ("entropy_coef", 0), ("dynamic_sampling", "off"),
        ("overlong_buffer", 0), ("tis_cap", None), ("mismatch_mask", None), ("policy_loss", "vanilla"))


@dataclass
class SFTConfig(AlgorithmConfig):
    sft_data: Optional[str] = key(None, "A JSONL file of demonstrations to imitate, {\"prompt\", \"response\"} (and "
                                  "optionally \"system\") or {\"messages\"} a line: a path, or the name of a file shipped "
                                  "in cogym/envs/data (arithmetic_sft.jsonl). null: imitate the policy's own turns that "
                                  "sft_select keeps (rejection sampling).")
    sft_batch_size: int = key(32, "sft_data rows per update")
    sft_select: str = key("all", "Without sft_data, which of the policy's turns are imitated: all; reward_at_least (reward "
                          ">= sft_min_reward); best_of_group (the best-rewarded turns of each group whose rewards differ).",
                          choices=SELECT)
    sft_min_reward: Optional[float] = key(None, "the least reward of an imitated turn (reward_at_least: required; "
                                          "best_of_group: an optional floor)")

    def validate(self, common) -> None:
        """SFT has its own loss: options of the policy-gradient learner are refused, not ignored."""
        if common.role_algorithms:
            raise ValueError(f"sft has its own loss and trains every role the same way; role_algorithms must be empty, "
                             f"got {common.role_algorithms!r}")
        for name, off in _OFF:
            if getattr(common, name) != off:
                raise ValueError(f"sft has its own loss (the responses' NLL); {name} must be {off!r}, got "
                                 f"{getattr(common, name)!r} (remove {name} from this learner)")
        if self.sft_data is not None:
            if not isinstance(self.sft_data, str) or shipped_or_path(self.sft_data) is None:
                raise ValueError(f"sft_data must name a JSONL file (a path, or a file shipped in cogym/envs/data such as "
                                 f"'arithmetic_sft.jsonl') or be null, got {self.sft_data!r}")
            if self.sft_select != "all" or self.sft_min_reward is not None:
                raise ValueError("sft_select and sft_min_reward choose among the game's turns, but sft_data trains on "
                                 "the file's rows; remove them, or sft_data")
        if isinstance(self.sft_batch_size, bool) or not isinstance(self.sft_batch_size, int) or self.sft_batch_size < 1:
            raise ValueError(f"sft_batch_size must be an int >= 1 (dataset rows per update), got {self.sft_batch_size!r}")
        check_choice(self.sft_select, SELECT, "sft_select")
        m = self.sft_min_reward
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m)):
            raise ValueError(f"sft_min_reward must be a finite number or null, got {m!r}")
        if m is None and self.sft_select == "reward_at_least":
            raise ValueError("sft_select: reward_at_least needs sft_min_reward (the least reward of an imitated turn)")


class SFT(Algorithm):
    """Trains a policy on the NLL of demonstrations (``sft_data``) or of its own selected turns.
    ``seen`` counts the dataset rows trained on (the position in the file's shuffles; saved)."""

    Config = SFTConfig
    per_role = False  # its own rows and loss: a whole policy or nothing

    def __init__(self, cfg: SFTConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.data = load_demonstrations(cfg.sft_data) if cfg.sft_data is not None else None
        self.end_id = end_of_message_id(ctx.policy)
        self.seen = 0

    def advantages(self, rows):
        raise TypeError("sft has no advantages: it trains a whole policy with its own loss (role_algorithms cannot name it)")

    def next_rows(self) -> list[Demonstration]:
        """The next ``sft_batch_size`` rows: each pass over the file in a shuffle of its own."""
        out = take_rows(self.data, self.seen, self.cfg.sft_batch_size, lambda epoch: self.ctx.rng("learners.sft_data", epoch))
        self.seen += self.cfg.sft_batch_size
        return out

    def demonstration_turns(self, rows: Sequence[Demonstration]) -> list[Turn]:
        """Dataset rows as Turns: the prompt rendered as a game's is, the response closed as a generated one is."""
        policy, turns = self.ctx.policy, []
        for i, row in enumerate(rows):
            ids = reference_ids(policy, row.response, self.end_id)
            turns.append(Turn(0, f"sft-{self.seen}-{i}", DATA_ROLE, DATA_ROLE, policy.name, policy.render(row.messages),
                              ids, [0.0] * len(ids), row.response, True))
        return turns

    @torch.no_grad()
    def train_batch(self, learner: LearnerHost, turns: Sequence[Turn]) -> TrainBatch:
        cfg = self.ctx.cfg
        if self.data is not None:
            rows = self.demonstration_turns(self.next_rows())
        else:
            rows = selected([t for t in turns if t.finished or not cfg.mask_truncated], self.cfg.sft_select,
                            self.cfg.sft_min_reward)
            rows = [t for t in rows if t.response_ids and (t.mask is None or any(t.mask))]
        metrics = {"sft_rows": float(len(rows))}
        if not rows:
            return TrainBatch(None, metrics)
        b = TokenBatch.from_turns(rows, self.ctx.policy.tokenizer.pad_token_id).to(self.ctx.policy.device)
        chunks = micro_batches(batch_widths(b), cfg.micro_batch_size, cfg.max_tokens_per_micro_batch,
                               dist.rank(), dist.world_size(), batch_groups(b))
        return TrainBatch(b, metrics, chunks=chunks, num_tokens=float(b.mask.sum()), num_seqs=float(len(rows)))

    def loss(self, step: MicroStep) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.ctx.cfg
        loss = aggregate(-step.logp, step.batch.mask, cfg.loss_agg, num_tokens=step.num_tokens,
                         num_seqs=step.num_seqs, norm_const=cfg.norm_const)
        with torch.no_grad():  # the token-mean NLL whatever loss_agg is (the micro-batch's share)
            nll = float(-(step.logp * step.batch.mask).sum() / step.num_tokens)
        return loss, {"sft_nll": nll}

    def finish(self, learner: LearnerHost, data: TrainBatch) -> dict[str, float]:
        return {"sft_rows": data.num_seqs, "response_tokens": data.num_tokens}

    def save(self, directory: Path) -> dict:
        return {"sft_rows_seen": self.seen}

    def load(self, directory: Path, state: dict) -> None:
        self.seen = int(state.get("sft_rows_seen", 0))
