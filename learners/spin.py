"""SPIN: self-play fine-tuning (Chen et al. 2024, "Self-Play Fine-Tuning Converts Weak Language
Models to Strong Language Models").

For a prompt ``x`` with a real response ``y`` (the game's ground truth) and a generated response
``y'`` (the policy's own sample), the loss is

    L = logistic(beta * [(log pi(y|x) - log pi_opp(y|x)) - (log pi(y'|x) - log pi_opp(y'|x))]),
    logistic(t) = log(1 + exp(-t)),

with sequence log-probabilities summed over the response tokens and ``pi_opp`` the previous
iteration's policy: a frozen copy, refreshed with the current weights every ``spin_refresh``
updates. The real response of a turn is ``turn.info["reference"]`` (games put the canonical right
answer there), tokenized and closed with the policy's end-of-message id exactly as a finished
generated response is; both responses share the turn's ``prompt_ids``. Turns without a reference
(other roles, invalid games) are skipped.

``SpinLearner`` has the public surface of :class:`cogym.learners.learner.Learner` that the trainer
uses: ``update(turns)``, ``save``/``load``, ``policy``, ``cfg``, ``engine``, ``steps``, ``critic``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from cogym.agents.policy import Policy
from cogym.agents.types import Turn

from .config import LearnerConfig
from .engines import Engine, make_engine, save_weights
from .learner import TokenBatch, response_logits_and_logp

ALGORITHM = "spin"
OPPONENT_FILE = "spin_opponent.safetensors"
STATE_FILE = "state.json"  # the same file (and "steps" key) Learner.save writes
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


def validate_spin_config(cfg: LearnerConfig) -> None:
    """SPIN has its own objective: options of the policy-gradient learner are refused, not ignored."""
    if cfg.algorithm != ALGORITHM:
        raise ValueError(f"SpinLearner trains algorithm 'spin', but the config says algorithm={cfg.algorithm!r}")
    if cfg.role_algorithms:
        raise ValueError(f"SPIN has its own objective and trains every role the same way; role_algorithms must be empty, "
                         f"got {cfg.role_algorithms!r}")
    if cfg.kl_in_reward != "off" or cfg.kl_in_loss != "off":
        raise ValueError(f"SPIN has its own objective (its opponent already anchors the policy); kl_in_reward and kl_in_loss "
                         f"must be 'off', got kl_in_reward={cfg.kl_in_reward!r}, kl_in_loss={cfg.kl_in_loss!r}")
    if cfg.entropy_coef != 0:
        raise ValueError(f"SPIN has its own objective; entropy_coef must be 0, got {cfg.entropy_coef!r}")
    beta = cfg.spin_beta
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"spin_beta must be a finite number > 0, got {beta!r}")
    if isinstance(cfg.spin_refresh, bool) or not isinstance(cfg.spin_refresh, int) or cfg.spin_refresh < 1:
        raise ValueError(f"spin_refresh must be an int >= 1 (updates between opponent refreshes), got {cfg.spin_refresh!r}")
    if isinstance(cfg.epochs, bool) or not isinstance(cfg.epochs, int) or cfg.epochs < 1:
        raise ValueError(f"epochs must be an int >= 1, got {cfg.epochs!r}")
    if isinstance(cfg.micro_batch_size, bool) or not isinstance(cfg.micro_batch_size, int) or cfg.micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be an int >= 1, got {cfg.micro_batch_size!r}")


class SpinLearner:
    """Trains one policy with SPIN against a frozen opponent copy of itself, on an engine.

    ``steps`` counts optimizer steps (one per epoch of an update, as in ``Learner``); ``updates``
    counts the ``update`` calls that trained on at least one pair. After the update that brings
    ``updates`` to a multiple of ``cfg.spin_refresh`` the opponent takes the current weights.
    """

    critic = None  # no value model; the trainer checks this attribute

    def __init__(self, policy: Policy, cfg: LearnerConfig, engine: Engine | None = None, temperature: float = 1.0) -> None:
        """``temperature`` is the rollout's sampling temperature: log-probs are taken at it (the
        distribution the generated responses were sampled from), for both responses and both models."""
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        validate_spin_config(cfg)
        self.policy = policy
        self.cfg = cfg
        self.temperature = float(temperature)
        # The opponent copies the policy's weights before an engine may partition them.
        self.opponent = copy.deepcopy(policy.model).eval()
        self.opponent.requires_grad_(False)
        self.engine = engine or make_engine(policy.model, cfg)
        policy.gather = self.engine.gathered_params
        self.end_id = end_of_message_id(policy)
        self.steps = 0
        self.updates = 0

    # -- opponent ---------------------------------------------------------------------------------

    @torch.no_grad()
    def refresh_opponent(self) -> None:
        """Copy the current weights into the opponent."""
        with self.engine.gathered_params():
            params = dict(self.engine.model.named_parameters())
            buffers = dict(self.engine.model.named_buffers())
            for name, p in self.opponent.named_parameters():
                p.copy_(params[name].detach())
            for name, b in self.opponent.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])

    # -- checkpoint -------------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        """The engine's state, the opponent's weights (safetensors) and the step counters."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.engine.save(directory)
        save_weights(self.opponent, directory / OPPONENT_FILE)  # a plain module: nothing to gather
        (directory / STATE_FILE).write_text(json.dumps({"steps": self.steps, "spin_updates": self.updates}))

    def load(self, directory: Path) -> None:
        """Restore what :meth:`save` wrote (tensors and JSON only: nothing is unpickled)."""
        directory = Path(directory)
        path = directory / OPPONENT_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no SPIN opponent weights {OPPONENT_FILE} under {directory}")
        device = next(self.opponent.parameters()).device
        self.opponent.load_state_dict(load_file(str(path), device=str(device)), strict=True)
        self.engine.load(directory)
        state = json.loads((directory / STATE_FILE).read_text())
        self.steps = int(state["steps"])
        self.updates = int(state.get("spin_updates", 0))

    # -- the update -------------------------------------------------------------------------------

    def pairs(self, turns: Sequence[Turn]) -> tuple[list[Turn], list[Turn]]:
        """(real, generated) turns of the usable pairs: each turn with a reference, and a shallow
        copy of it whose response is the reference's ids (behaviour log-probs unused, set to 0)."""
        real, gen = [], []
        for t in turns:
            ref = (t.info or {}).get("reference")
            if not isinstance(ref, str):
                continue
            ids = reference_ids(self.policy, ref, self.end_id)
            real.append(dataclasses.replace(t, response_ids=ids, logprobs=[0.0] * len(ids), text=ref, finished=True))
            gen.append(t)
        return real, gen

    def update(self, turns: Sequence[Turn]) -> dict[str, float]:
        """One optimizer step per epoch on the (real, generated) pairs of these turns; returns metrics."""
        real, gen = self.pairs(turns)
        n = len(real)
        if n == 0:
            return {"spin_pairs": 0.0}
        cfg = self.cfg
        b = TokenBatch.from_turns(real + gen, self.policy.tokenizer.pad_token_id).to(self.policy.device)
        # A micro-batch holds whole pairs, its real and generated rows in one forward:
        # micro_batch_size // 2 pairs (at least one), so at most micro_batch_size rows (2 when it is 1).
        per_mb = max(1, cfg.micro_batch_size // 2)
        chunks = torch.arange(n).split(per_mb)

        def rows(ix: torch.Tensor) -> TokenBatch:
            return b.rows(torch.cat([ix, ix + n]))

        def seq_logp(model: torch.nn.Module, ix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            logp = response_logits_and_logp(model, rows(ix), self.temperature)[1].sum(1)
            return logp[: len(ix)], logp[len(ix):]

        with torch.no_grad():
            opp = [seq_logp(self.opponent, ix) for ix in chunks]
        sums = {"loss": 0.0, "spin_margin": 0.0, "spin_real_logp": 0.0, "spin_gen_logp": 0.0}
        metrics: dict[str, float] = {}
        model = self.engine.train_module
        model.eval()  # dropout off: the log-probs are those of the distribution that sampled
        for _ in range(cfg.epochs):
            for k, ix in enumerate(chunks):
                lp_real, lp_gen = seq_logp(model, ix)
                losses, margin = spin_loss(lp_real, opp[k][0], lp_gen, opp[k][1], cfg.spin_beta)
                loss = losses.sum() / n  # the mean over all pairs of the step, in micro-batch shares
                self.engine.backward(loss, last=k == len(chunks) - 1)
                sums["loss"] += float(loss.detach())
                sums["spin_margin"] += float(margin.detach().sum()) / n
                sums["spin_real_logp"] += float(lp_real.detach().sum()) / n
                sums["spin_gen_logp"] += float(lp_gen.detach().sum()) / n
            metrics.update(self.engine.step())
            self.steps += 1
        self.updates += 1
        refreshed = self.updates % cfg.spin_refresh == 0
        if refreshed:
            self.refresh_opponent()
        metrics.update({k: v / cfg.epochs for k, v in sums.items()})
        metrics["spin_pairs"] = float(n)
        metrics["spin_refreshed"] = float(refreshed)
        metrics["response_tokens"] = float(b.mask[n:].sum())
        return metrics
