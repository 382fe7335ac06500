"""The critic of PPO: a value model (a causal-LM trunk and a scalar head) with its own engine.

``V[i, t]`` is the value of the state before response token ``t`` of row ``i``: the value head
read at the same position whose logits predict that token (``TokenBatch.resp_index``). The critic
starts from the policy's weights (trunk) and a zero head, so ``V = 0`` before any update, and it
trains on the clipped value loss of docs/algorithms.md §4.1 against GAE returns. It is saved as its
own directory: ``critic.safetensors`` (all weights) and its engine's optimizer state.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from safetensors.torch import load_file

from cogym.learners.batch import batch_widths, micro_batches, takes_logits_to_keep, training_forward
from cogym.learners.config import LearnerConfig
from cogym.learners.engines import make_engine, save_weights
from cogym.learners.gae import clipped_value_loss
from cogym.learners.losses import aggregate

WEIGHTS_FILE = "critic.safetensors"


class ValueModel(torch.nn.Module):
    """A causal LM's last hidden state through a linear head: ``forward(...) -> values (N, W)``."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm
        self.head = torch.nn.Linear(lm.config.hidden_size, 1, dtype=next(lm.parameters()).dtype)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        # logits_to_keep=1: the LM's output layer runs at one position, not over (N, W, vocabulary)
        extra = {"logits_to_keep": 1} if takes_logits_to_keep(self.lm) else {}
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **extra)
        return self.head(out.hidden_states[-1]).squeeze(-1).float()  # (N, W)


def response_values(module: torch.nn.Module, b) -> torch.Tensor:
    """Values (N, L) of the states before each response token of TokenBatch ``b`` (0 on padding)."""
    width = int(b.attention_mask.sum(1).max())
    values = module(input_ids=b.input_ids[:, :width], attention_mask=b.attention_mask[:, :width])  # (N, W)
    return values.gather(1, b.resp_index) * b.mask


class Critic:
    """A value model and its engine; ``values`` for GAE, ``update`` on the clipped value loss."""

    def __init__(self, policy_model: torch.nn.Module, cfg: LearnerConfig, weights: Path | None = None, *,
                 lr: float = 1e-4, value_clip: float | None = 0.5) -> None:
        """``weights``: a saved critic directory to start from (resume); else the policy's trunk, zero head.
        ``cfg``: the learner's common config (engine, ZeRO); ``lr``: the critic's own learning rate;
        ``value_clip``: the value clip of the loss (None: unclipped)."""
        self.cfg = cfg
        self.value_clip = value_clip
        self.model = ValueModel(copy.deepcopy(policy_model))
        self.model.lm.requires_grad_(True)
        if weights is not None:
            self.model.load_state_dict(load_file(str(Path(weights) / WEIGHTS_FILE)))
        critic_cfg = copy.copy(cfg)
        critic_cfg.lr = lr
        self.engine = make_engine(self.model, critic_cfg)

    @torch.no_grad()
    def values(self, b, micro_batch_size: int) -> torch.Tensor:
        """V_old (N, L) for the batch, computed before any update of this step."""
        module = self.engine.train_module
        module.eval()
        chunks = micro_batches(batch_widths(b), micro_batch_size, self.cfg.max_tokens_per_micro_batch)
        return torch.cat([response_values(module, b.rows(ix)) for ix in chunks])

    def update(self, b, old_values: torch.Tensor, returns: torch.Tensor, micro_batch_size: int) -> dict[str, float]:
        """One optimizer step on ``0.5 * token-mean(max((V-G)^2, (clip(V, V_old±c) - G)^2))``."""
        module = self.engine.train_module
        n_tok = float(b.mask.sum())
        chunks = micro_batches(batch_widths(b), micro_batch_size, self.cfg.max_tokens_per_micro_batch)
        sums = {"vf_loss": 0.0, "vf_clipfrac": 0.0}
        with training_forward(module):  # no dropout: the same forward as ``values``
            for k, ix in enumerate(chunks):
                mb = b.rows(ix)
                v = response_values(module, mb)
                per_token, metrics = clipped_value_loss(v, old_values[ix], returns[ix], mb.mask,
                                                        clip_value=self.value_clip)
                loss = aggregate(per_token, mb.mask, "token-mean", num_tokens=n_tok, num_seqs=float(len(ix)))
                self.engine.backward(loss, last=k == len(chunks) - 1)
                share = float(mb.mask.sum()) / max(n_tok, 1.0)
                sums["vf_loss"] += float(loss.detach())
                sums["vf_clipfrac"] += float(metrics.get("vf_clipfrac", 0.0)) * share
            stats = self.engine.step()
        if "grad_norm" in stats:
            sums["vf_grad_norm"] = stats["grad_norm"]
        return sums

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_weights(self.model, directory / WEIGHTS_FILE, self.engine)
        self.engine.save(directory)

    def load_optimizer(self, directory: Path) -> None:
        self.engine.load(Path(directory))
