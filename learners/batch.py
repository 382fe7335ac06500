"""The tensors a learner trains on: right-padded token batches built from the rollout's Turns, the
log-probabilities of their response tokens under a model, and the data-parallel split into micro-batches."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from cogym.agents.types import Turn

from . import torch_dist as dist


@dataclass
class TokenBatch:
    """Right-padded training tensors for N turns.

    ``input_ids``/``attention_mask``: (N, W) prompt + response; ``resp_index``: (N, L) position in
    the logits of the token *predicting* each response token; ``mask``: (N, L) 1 on response tokens;
    ``logp_old``: (N, L) behaviour log-probabilities; ``scores``: (N,) outcome rewards; ``turns``:
    the N Turns themselves (episode, seat and info of each row).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    resp_ids: torch.Tensor
    resp_index: torch.Tensor
    mask: torch.Tensor
    logp_old: torch.Tensor
    scores: torch.Tensor
    roles: list[str]
    group_keys: list
    turns: list

    @classmethod
    def from_turns(cls, turns: Sequence[Turn], pad_id: int) -> "TokenBatch":
        n = len(turns)
        width = max(len(t.prompt_ids) + len(t.response_ids) for t in turns)
        lmax = max(len(t.response_ids) for t in turns)
        input_ids = torch.full((n, width), pad_id, dtype=torch.long)
        attn = torch.zeros((n, width), dtype=torch.long)
        resp_ids = torch.zeros((n, lmax), dtype=torch.long)
        resp_index = torch.zeros((n, lmax), dtype=torch.long)
        mask = torch.zeros((n, lmax))
        logp_old = torch.zeros((n, lmax))
        for i, t in enumerate(turns):
            p, r = len(t.prompt_ids), len(t.response_ids)
            input_ids[i, : p + r] = torch.tensor(t.prompt_ids + t.response_ids)
            attn[i, : p + r] = 1
            resp_ids[i, :r] = torch.tensor(t.response_ids)
            resp_index[i, :r] = torch.arange(p - 1, p + r - 1)
            mask[i, :r] = 1.0
            logp_old[i, :r] = torch.tensor(t.logprobs, dtype=torch.float32)
        scores = torch.tensor([float(t.reward) for t in turns])
        return cls(input_ids, attn, resp_ids, resp_index, mask, logp_old, scores,
                   [t.role for t in turns], [t.group_key for t in turns], list(turns))

    def to(self, device: torch.device) -> "TokenBatch":
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.resp_ids.to(device),
                          self.resp_index.to(device), self.mask.to(device), self.logp_old.to(device),
                          self.scores.to(device), self.roles, self.group_keys, self.turns)

    def rows(self, idx: torch.Tensor) -> "TokenBatch":
        ii = idx.tolist()
        return TokenBatch(self.input_ids[idx], self.attention_mask[idx], self.resp_ids[idx], self.resp_index[idx],
                          self.mask[idx], self.logp_old[idx], self.scores[idx], [self.roles[i] for i in ii],
                          [self.group_keys[i] for i in ii], [self.turns[i] for i in ii])


def response_logits_and_logp(model: torch.nn.Module, b: TokenBatch,
                             temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits / temperature (N, L, V) at the positions that predict each response token, and the
    log-probs (N, L) of the response tokens under them (the distribution the rollout sampled)."""
    width = int(b.attention_mask.sum(1).max())
    logits = model(input_ids=b.input_ids[:, :width], attention_mask=b.attention_mask[:, :width]).logits
    idx = b.resp_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    resp_logits = logits.gather(1, idx).float() / temperature  # (N, L, V)
    logp = torch.log_softmax(resp_logits, dim=-1).gather(-1, b.resp_ids.unsqueeze(-1)).squeeze(-1)
    return resp_logits, logp * b.mask


def shard_chunks(n_rows: int, micro_batch_size: int, rank: int = 0, world: int = 1) -> list[torch.Tensor]:
    """Row indices of one rank's micro-batches: rows ``rank::world`` in chunks of at most
    ``micro_batch_size`` rows, the same number of chunks on every rank (a chunk is empty where a rank
    runs out of rows). One rank: ``arange(n_rows).split(micro_batch_size)``."""
    if world == 1:
        return list(torch.arange(n_rows).split(micro_batch_size))
    per_rank = math.ceil(n_rows / world)
    return list(torch.arange(rank, n_rows, world).tensor_split(max(1, math.ceil(per_rank / micro_batch_size))))


def sum_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """``{key: sum over ranks}`` (a key missing on a rank counts 0); the identity in one process."""
    if dist.world_size() == 1:
        return values
    total: dict[str, float] = {}
    for part in dist.all_gather_objects(values):
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + value
    return total
