"""SPIN: self-play fine-tuning (Chen et al. 2024, "Self-Play Fine-Tuning Converts Weak Language
Models to Strong Language Models").

For a prompt ``x`` with a real response ``y`` (the game's ground truth) and a generated response
``y'`` (the policy's own sample), the loss is

    L = logistic(beta * [(log pi(y|x) - log pi_opp(y|x)) - (log pi(y'|x) - log pi_opp(y'|x))]),
    logistic(t) = log(1 + exp(-t)),

with sequence log-probabilities summed over the response tokens and ``pi_opp`` the previous
iteration's policy: a frozen copy, refreshed with the current weights every ``spin_refresh``
updates. The real response of a turn is ``turn.outcome.reference`` (games put the canonical right
answer there), tokenized and closed with the policy's end-of-message id exactly as a finished
generated response is; both responses share the turn's ``prompt_ids``. Turns without a reference
(other roles, invalid games) are skipped.

SPIN trains a whole policy with its own rows (real/generated pairs) and loss through the common
:class:`cogym.learners.learner.Learner` loop; its state is the opponent (``spin_opponent.safetensors``)
and its update count (``spin_updates`` in the learner's ``state.json``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from cogym.agents.policy import Policy
from cogym.core.config_key import key
from cogym.core.types import Turn

from cogym.learners.engines import save_weights
from cogym.learners.algorithm import Algorithm, AlgorithmConfig, Context
from cogym.learners.host import LearnerHost
from cogym.learners.pairs import pair_rows, refuse_policy_gradient_keys
from cogym.learners.rows import MicroStep, TrainBatch

OPPONENT_FILE = "spin_opponent.safetensors"
_MARK = "\x00cogym-spin-mark\x00"


def spin_loss(logp_real: torch.Tensor, logp_real_opp: torch.Tensor, logp_gen: torch.Tensor, logp_gen_opp: torch.Tensor,
              beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """SPIN's logistic loss per pair from sequence log-probabilities, all (P,).

    ``margin = (logp_real - logp_real_opp) - (logp_gen - logp_gen_opp)`` and
    ``loss = log(1 + exp(-beta * margin)) = softplus(-beta * margin)`` (stable for any margin).
    Returns ``(loss (P,), margin (P,))``; gradients flow through every argument as given (detach
    the opponent's log-probabilities upstream).
    """
    shapes = {tuple(t.shape) for t in (logp_real, logp_real_opp, logp_gen, logp_gen_opp)}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"spin_loss needs four (P,) tensors of one shape, got shapes {sorted(shapes)}")
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    margin = (logp_real - logp_real_opp) - (logp_gen - logp_gen_opp)
    return F.softplus(-beta * margin), margin


def end_of_message_id(policy: Policy) -> int:
    """The id that closes an assistant message, i.e. the last id of every finished generated response.

    Generation stops at the first id in ``policy.eos_ids`` and keeps it; a chat model ends its
    messages with the one its chat template writes after an assistant message (``<|end|>`` for the
    embedded char model, ``<|im_end|>`` for Qwen), so that one is read off the template. Falls back
    to the tokenizer's eos token (or the first eos id) when the template shows none.
    """
    tok = policy.tokenizer
    eos = set(policy.eos_ids)
    try:
        text = tok.apply_chat_template([{"role": "user", "content": "1"}, {"role": "assistant", "content": _MARK}],
                                       tokenize=False, add_generation_prompt=False)
        if isinstance(text, str) and _MARK in text:
            for i in tok.encode(text.split(_MARK, 1)[1], add_special_tokens=False):
                if i in eos:
                    return int(i)
    except Exception:  # a template that cannot render an assistant turn: use the fallback
        pass
    return int(tok.eos_token_id) if tok.eos_token_id in eos else int(policy.eos_ids[0])


def reference_ids(policy: Policy, reference: str, end_id: int | None = None) -> list[int]:
    """Token ids of the real response: the reference text, then the end-of-message id."""
    end = end_of_message_id(policy) if end_id is None else end_id
    return list(policy.tokenizer.encode(reference, add_special_tokens=False)) + [end]


@dataclass
class SpinConfig(AlgorithmConfig):
    spin_beta: float = key(0.1, "beta of the loss log(1 + exp(-beta * margin))")
    spin_refresh: int = key(1, "updates between opponent refreshes")

    def validate(self, common) -> None:
        """SPIN has its own objective: options of the policy-gradient learner are refused, not ignored."""
        # tis_cap / mismatch_mask weight a policy-gradient term; SPIN's loss has none (and its real rows no sampler)
        refuse_policy_gradient_keys(common, "SPIN", "its opponent already anchors the policy")
        beta = self.spin_beta
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
            raise ValueError(f"spin_beta must be a finite number > 0, got {beta!r}")
        if isinstance(self.spin_refresh, bool) or not isinstance(self.spin_refresh, int) or self.spin_refresh < 1:
            raise ValueError(f"spin_refresh must be an int >= 1 (updates between opponent refreshes), got {self.spin_refresh!r}")


class Spin(Algorithm):
    """Trains a policy with SPIN against a frozen opponent copy of itself. ``updates`` counts the
    updates that trained on at least one pair; after the update that brings it to a multiple of
    ``spin_refresh`` the opponent takes the current weights."""

    Config = SpinConfig
    per_move_rows = True  # a reference answers one move
    per_role = False  # its own rows and loss: a whole policy or nothing
    outcome_keys = ("reference",)  # the real response
    data_parallel = False

    def __init__(self, cfg: SpinConfig, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        # The opponent copies the policy's weights before an engine may partition them.
        self.opponent = copy.deepcopy(ctx.policy.model).eval()
        self.opponent.requires_grad_(False)
        self.end_id = end_of_message_id(ctx.policy)
        self.updates = 0
        self.engine = None  # the learner's, set by train_batch (refresh reads the trained weights)

    def pairs(self, turns: Sequence[Turn]) -> tuple[list[Turn], list[Turn]]:
        """(real, generated) turns of the usable pairs: each turn with a reference, and a shallow
        copy of it whose response is the reference's ids (behaviour log-probs unused, set to 0)."""
        real, gen = [], []
        for t in turns:
            ref = t.outcome.reference  # the game -> learner contract (cogym.core.outcome)
            if not isinstance(ref, str):
                continue
            ids = reference_ids(self.ctx.policy, ref, self.end_id)
            real.append(dataclasses.replace(t, response_ids=ids, logprobs=[0.0] * len(ids), text=ref, finished=True,
                                               mask=None))
            gen.append(t)
        return real, gen

    def advantages(self, rows):
        raise TypeError("spin has no advantages: it trains a whole policy with its own loss (role_algorithms cannot name it)")

    @torch.no_grad()
    def train_batch(self, learner: LearnerHost, turns: Sequence[Turn]) -> TrainBatch:
        """Rows: the n real responses, then the n generated ones; a micro-batch holds whole pairs
        (micro_batch_size // 2 of them, at least one, and at most max_tokens_per_micro_batch padded tokens),
        its real and generated rows in one forward."""
        self.engine = learner.engine
        real, gen = self.pairs(turns)
        n = len(real)
        if n == 0:
            return TrainBatch(None, {"spin_pairs": 0.0})
        ctx = self.ctx
        b, chunks, opponent = pair_rows(real, gen, self.opponent, ctx.cfg, ctx.policy.device,
                                        ctx.policy.tokenizer.pad_token_id, ctx.temperature)
        return TrainBatch(b, {}, rows={"opponent_logp": opponent}, chunks=chunks, num_tokens=float(b.mask.sum()),
                          num_seqs=float(n), extra={"pairs": n})

    def loss(self, step: MicroStep) -> tuple[torch.Tensor, dict[str, float]]:
        n, half = step.num_seqs, len(step.batch.turns) // 2
        lp, opp = step.logp.sum(1), step.rows["opponent_logp"]
        losses, margin = spin_loss(lp[:half], opp[:half], lp[half:], opp[half:], self.cfg.spin_beta)
        loss = losses.sum() / n  # the mean over all pairs of the step, in micro-batch shares
        return loss, {"spin_margin": float(margin.detach().sum()) / n, "spin_real_logp": float(lp[:half].detach().sum()) / n,
                      "spin_gen_logp": float(lp[half:].detach().sum()) / n}

    def finish(self, learner: LearnerHost, data: TrainBatch) -> dict[str, float]:
        self.updates += 1
        refreshed = self.updates % self.cfg.spin_refresh == 0
        if refreshed:
            self.refresh_opponent()
        n = data.extra["pairs"]
        return {"spin_pairs": float(n), "spin_refreshed": float(refreshed), "response_tokens": float(data.batch.mask[n:].sum())}

    @torch.no_grad()
    def refresh_opponent(self) -> None:
        """Copy the current weights into the opponent."""
        model = self.engine.model if self.engine is not None else self.ctx.policy.model
        with (self.engine.gathered_params() if self.engine is not None else contextlib.nullcontext()):
            params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
            for name, p in self.opponent.named_parameters():
                p.copy_(params[name].detach())
            for name, b in self.opponent.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])

    def save(self, directory: Path) -> dict:
        save_weights(self.opponent, Path(directory) / OPPONENT_FILE)  # a plain module: nothing to gather
        return {"spin_updates": self.updates}

    def load(self, directory: Path, state: dict) -> None:
        """Tensors and JSON only: nothing is unpickled."""
        path = Path(directory) / OPPONENT_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no SPIN opponent weights {OPPONENT_FILE} under {directory}")
        device = next(self.opponent.parameters()).device
        self.opponent.load_state_dict(load_file(str(path), device=str(device)), strict=True)
        self.updates = int(state.get("spin_updates", 0))
