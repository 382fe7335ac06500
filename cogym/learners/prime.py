"""PRIME's implicit process reward model (docs/algorithms.md §8.1), trained online with its own engine.

The PRM ``pi_phi`` is a causal LM (a copy of the policy's weights, or ``cfg.prime_model``) scored
against a frozen reference ``pi_ref`` (by default a copy of the PRM's initial weights, so ``q = 0``
before any update). ``q[i, t] = log pi_phi - log pi_ref`` of each response token, at the rollout's
sampling temperature and with dropout off; the process rewards are ``prime_process_rewards(q)``,
and ``update`` takes one optimizer step of the cross-entropy of ``sigma(beta * sum_t q)`` against
the outcome labels. It is saved as its own directory: ``prm.safetensors`` (all PRM weights) and its
engine's optimizer state; the reference is not saved.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import torch
from safetensors.torch import load_file

from cogym.agents.loading import load_causal_lm
from cogym.learners.batch import batch_widths, micro_batches, response_logp, TokenBatch, training_forward
from cogym.learners.config import LearnerConfig
from cogym.learners.engines import make_engine, save_weights
from cogym.learners.multiagent import prime_ce_loss, prime_process_rewards, prime_q

WEIGHTS_FILE = "prm.safetensors"
PRM_MAX_GRAD_NORM = 10.0  # docs/algorithms.md §8.1: PRM grad clip 10, constant learning rate


def _vocab_size(model: torch.nn.Module) -> int:
    return int(model.config.vocab_size)


def _load_hf(path: str, like: torch.nn.Module) -> torch.nn.Module:
    """An HF causal LM from ``path`` on the device, in the dtype and with the attention kernel and
    gradient checkpointing of ``like`` (the policy's model)."""
    if not Path(path).is_dir():
        raise ValueError(f"prime_model {path!r} is not a directory; give an HF causal-LM directory or '' for a copy of the policy")
    p = next(like.parameters())
    config = getattr(like, "config", None)
    return load_causal_lm(path, p.dtype, p.device, getattr(config, "_attn_implementation", None),
                          any(getattr(m, "gradient_checkpointing", False) is True for m in like.modules()))


class PrimeRewardModel:
    """The implicit PRM and its engine: ``q`` / ``process_rewards`` to score, ``update`` to train."""

    def __init__(self, policy_model: torch.nn.Module, cfg: LearnerConfig, weights: Path | None = None,
                 temperature: float = 1.0, reference: torch.nn.Module | None = None, prime=None) -> None:
        """Build the PRM from ``policy_model`` (copied) or ``cfg.prime_model``, then load ``weights``
        (a directory written by :meth:`save`) if given. ``reference``: the frozen ``pi_ref``, used as
        is; by default a copy of the PRM's initial weights. ``cfg``: the learner's common config
        (engine, ZeRO); ``prime``: PRIME's config (by default ``cfg.settings("prime")``). Call before
        any engine partitions ``policy_model``."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.cfg = cfg
        self.prime = prime = prime if prime is not None else cfg.settings("prime")
        self.temperature = temperature
        if prime.prime_model:
            self.model = _load_hf(prime.prime_model, policy_model)
            if _vocab_size(self.model) != _vocab_size(policy_model):
                raise ValueError(f"prime_model {prime.prime_model!r} has vocabulary size {_vocab_size(self.model)}, "
                                 f"but the policy's is {_vocab_size(policy_model)}; the PRM must score the policy's tokens")
        else:
            self.model = copy.deepcopy(policy_model)
        self.ref_model = reference if reference is not None else copy.deepcopy(self.model)
        if _vocab_size(self.ref_model) != _vocab_size(self.model):
            raise ValueError(f"the PRM's reference has vocabulary size {_vocab_size(self.ref_model)}, "
                             f"the PRM {_vocab_size(self.model)}")
        self.ref_model.eval().requires_grad_(False)
        self.model.requires_grad_(True)
        self.model.eval()
        if weights is not None:
            self.model.load_state_dict(load_file(str(Path(weights) / WEIGHTS_FILE)))
        prm_cfg = copy.copy(cfg)
        prm_cfg.lr = prime.prime_lr
        prm_cfg.max_grad_norm = PRM_MAX_GRAD_NORM
        self.engine = make_engine(self.model, prm_cfg)

    def _logps(self, mb: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(log pi_phi with grad if enabled, log pi_ref without) of ``mb``'s response tokens."""
        with torch.no_grad():
            ref = response_logp(self.ref_model, mb, self.temperature, self.cfg.packing)
        return response_logp(self.engine.train_module, mb, self.temperature, self.cfg.packing), ref

    @torch.no_grad()
    def q(self, b: TokenBatch, micro_batch_size: int) -> torch.Tensor:
        """``q = log pi_phi - log pi_ref`` (N, L), 0 on padding."""
        self.engine.train_module.eval()
        chunks = micro_batches(batch_widths(b), micro_batch_size, self.cfg.max_tokens_per_micro_batch)
        return torch.cat([prime_q(*self._logps(mb), mb.mask) for mb in (b.rows(ix) for ix in chunks)])

    @torch.no_grad()
    def process_rewards(self, b: TokenBatch, micro_batch_size: int) -> torch.Tensor:
        """Process rewards (N, L) from ``q`` with ``prime_beta``, ``prime_granularity``, ``prime_norm``."""
        return prime_process_rewards(self.q(b, micro_batch_size), b.mask, beta=self.prime.prime_beta,
                                     granularity=self.prime.prime_granularity, norm=self.prime.prime_norm)

    def update(self, b: TokenBatch, acc: torch.Tensor, micro_batch_size: int) -> dict[str, float]:
        """One optimizer step on the CE loss against labels ``acc`` (N,) in [0, 1], averaged over the
        rows with a response token (a batch without any is a no-op and returns ``{}``). ``prm_acc``:
        the fraction of those rows where ``beta * sum q > 0`` agrees with ``acc > 0.5``, before the step."""
        module = self.engine.train_module
        acc = acc.to(b.mask.device)
        valid = b.mask.sum(1) > 0
        n_valid = int(valid.sum())
        if n_valid == 0:
            return {}
        beta = self.prime.prime_beta
        chunks = micro_batches(batch_widths(b), micro_batch_size, self.cfg.max_tokens_per_micro_batch)
        loss_sum, agree = 0.0, 0
        with training_forward(module):  # no dropout: the same forward as ``q``
            for k, ix in enumerate(chunks):
                mb = b.rows(ix)
                logp, ref = self._logps(mb)
                share = float(valid[ix.to(valid.device)].sum()) / n_valid  # this micro-batch's rows in the batch mean
                loss = prime_ce_loss(logp, ref, mb.mask, acc[ix], beta=beta) * share
                self.engine.backward(loss, last=k == len(chunks) - 1)
                loss_sum += float(loss.detach())
                with torch.no_grad():
                    z = beta * prime_q(logp, ref, mb.mask).sum(1)
                    mv = mb.mask.sum(1) > 0
                    agree += int(((z > 0) == (acc[ix] > 0.5))[mv].sum())
            stats = self.engine.step()
        metrics = {"prm_loss": loss_sum, "prm_acc": agree / n_valid}
        if "grad_norm" in stats:
            metrics["prm_grad_norm"] = stats["grad_norm"]
        return metrics

    def save(self, directory: Path) -> None:
        """``prm.safetensors`` (the PRM's weights) and the engine's optimizer state."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_weights(self.model, directory / WEIGHTS_FILE, self.engine)
        self.engine.save(directory)

    def load(self, directory: Path) -> None:
        """Restore what :meth:`save` wrote: weights first, then the optimizer (no unrestricted pickle)."""
        directory = Path(directory)
        state = load_file(str(directory / WEIGHTS_FILE))
        with self._writable_params():
            self.model.load_state_dict(state)
        self.engine.load(directory)

    def _writable_params(self) -> contextlib.AbstractContextManager:
        if self.engine.name == "deepspeed" and self.cfg.zero_stage == 3:
            import deepspeed

            return deepspeed.zero.GatheredParameters(list(self.model.parameters()), modifier_rank=0)
        return contextlib.nullcontext()
