"""Policy losses as plug-ins: the policy-gradient term of the objective (docs/algorithms.md
§14), chosen by the learner key ``policy_loss``. Each module of this package is one loss, registered
by name in :data:`BUILTIN`; any algorithm (advantage estimator) combines with any loss.

A loss is a function ``loss(x: PolicyLossInputs) -> (loss, metrics)``: ``loss`` is this micro-batch's
share of the step's policy-gradient term (a scalar with gradient), ``metrics`` token means over this
micro-batch's valid tokens (floats; the objective weights them by the micro-batch's token share).
A token-level loss builds its per-token losses and returns ``x.aggregate(per_token)`` (the configured
``loss_agg``, the mismatch weights applied); a sequence-level one aggregates itself. A user's loss is
a module listed in ``game.modules``::

    from cogym.learners.policy_losses import PolicyLossInputs, register

    @register("my_loss")
    def my_loss(x: PolicyLossInputs):
        m, log_ratio, adv, logp = x.valid()
        return x.aggregate(-adv * torch.exp(log_ratio)), {}

See docs/write_your_own_algorithm.md.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from cogym.core.names import did_you_mean
from cogym.core.processes import load_object, register_builtin
from cogym.learners.losses import aggregate

__all__ = ["BUILTIN", "PolicyLossFn", "PolicyLossInputs", "check_knobs", "get", "names", "register", "token_mean",
           "unregister"]


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss reads, all per-token tensors (N, L).

    ``logp``: the current log-probabilities (with gradient); ``logp_old``: the ratio's denominator (the
    sampler's log-probabilities, or the trainer's own before the update under a mismatch correction);
    ``adv``: advantages; ``mask``: the loss mask; ``weight``: the mismatch correction's per-token weights
    (detached; None without a correction); ``cfg``: the :class:`cogym.learners.objective.ObjectiveConfig`
    (``clip_low``, ``clip_high``, the losses' own knobs, ``loss_agg``); ``num_tokens`` / ``num_seqs``:
    the whole optimizer step's valid tokens / sequences; ``generator``: the CPU generator of any random
    draw (the learner derives it from the run's seed, its update and micro-batch: the same numbers in one
    process and in a Ray learner actor, whatever torch's global generator holds; None outside a learner,
    and a loss that must draw refuses it). Padding may hold garbage: read the tensors through :meth:`valid`.
    """

    logp: Tensor
    logp_old: Tensor
    adv: Tensor
    mask: Tensor
    cfg: Any
    num_tokens: float
    num_seqs: float
    weight: Optional[Tensor] = None
    generator: Optional[torch.Generator] = None

    def valid(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(m, log_ratio, adv, logp)``: the boolean mask and ``logp - logp_old``, the advantages and
        ``logp`` in at least float32, each 0 on padding (selected, not multiplied: a NaN or inf there
        reaches neither values nor gradients)."""
        m = self.mask != 0
        dtype = torch.promote_types(torch.promote_types(self.logp.dtype, self.logp_old.dtype), torch.float32)
        zero = torch.zeros((), dtype=dtype, device=self.logp.device)
        logp = torch.where(m, self.logp.to(dtype), zero)
        log_ratio = torch.where(m, self.logp.to(dtype) - self.logp_old.to(dtype), zero)
        return m, log_ratio, torch.where(m, self.adv.to(dtype), zero), logp

    def aggregate(self, per_token: Tensor, mode: Optional[str] = None) -> Tensor:
        """``per_token`` (N, L) times the mismatch weights, aggregated by ``mode`` (default: the
        configured ``loss_agg``) over the whole step's counts (:func:`cogym.learners.losses.aggregate`)."""
        if self.weight is not None:
            per_token = per_token * self.weight.to(per_token.dtype)
        return aggregate(per_token, self.mask, mode or self.cfg.loss_agg, num_tokens=self.num_tokens,
                         num_seqs=self.num_seqs, norm_const=self.cfg.norm_const)


PolicyLossFn = Callable[[PolicyLossInputs], "tuple[Tensor, dict[str, float]]"]


def token_mean(values: Tensor, m: Tensor) -> float:
    """The mean of ``values`` (N, L) over the valid tokens ``m`` (0 with none), a metric."""
    return float(torch.where(m, values.detach().to(torch.float64), 0.0).sum()) / max(int(m.sum()), 1)


# The shipped losses' knobs (learner keys): name -> (the test a value passes, what it must be).
_KNOBS: dict[str, tuple[Callable[[float], bool], str]] = {
    "clip_cov_ratio": (lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "clip_cov_lb": (lambda v: True, "a finite number"),
    "clip_cov_ub": (lambda v: True, "a finite number"),
    "kl_cov_ratio": (lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "kl_cov_coef": (lambda v: v >= 0, "a number >= 0"),
    "sapo_tau_pos": (lambda v: v > 0, "a number > 0"),
    "sapo_tau_neg": (lambda v: v > 0, "a number > 0"),
}


def check_knobs(cfg: Any) -> None:
    """ValueError naming the key for a shipped loss's knob of ``cfg`` (a learner config) out of range, or set
    (away from its default) while ``policy_loss`` is another loss: refused, not ignored."""
    for name, (ok, what) in _KNOBS.items():
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
            raise ValueError(f"{name} must be {what}, got {v!r}")
    if not cfg.clip_cov_lb < cfg.clip_cov_ub:
        raise ValueError(f"clip_cov_lb must be below clip_cov_ub (the band of covariances clip_cov may cut), got "
                         f"{cfg.clip_cov_lb!r} and {cfg.clip_cov_ub!r}")
    defaults = {f.name: f.default for f in dataclasses.fields(cfg) if f.name in _KNOBS}
    for name, default in defaults.items():
        owner = next(loss for loss in BUILTIN if name.startswith(loss + "_"))
        if getattr(cfg, name) != default and cfg.policy_loss != owner:
            raise ValueError(f"{name} is a knob of policy_loss: {owner}, but policy_loss is {cfg.policy_loss!r}; remove "
                             f"{name} or set policy_loss: {owner}")


_REGISTRY: dict[str, PolicyLossFn] = {}
# The shipped losses, in the order names() lists them: name -> "module:function". Registered on the
# first lookup (importing these modules).
BUILTIN: dict[str, str] = {
    "vanilla": "cogym.learners.policy_losses.vanilla:vanilla",
    "gspo": "cogym.learners.policy_losses.gspo:gspo",
    "cispo": "cogym.learners.policy_losses.cispo:cispo",
    "gmpo": "cogym.learners.policy_losses.gmpo:gmpo",
    "clip_cov": "cogym.learners.policy_losses.clip_cov:clip_cov",
    "kl_cov": "cogym.learners.policy_losses.kl_cov:kl_cov",
    "gpg": "cogym.learners.policy_losses.gpg:gpg",
    "sapo": "cogym.learners.policy_losses.sapo:sapo",
}
_BUILTIN_LOCK = threading.RLock()


def register(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register a policy loss function under ``name`` (``policy_loss: <name>`` in a config).
    Refuses a name already taken and a name that is not a Python identifier."""
    def deco(fn: PolicyLossFn) -> PolicyLossFn:
        _register_builtin()
        return _store(name, fn)
    return deco


def _store(name: str, fn: PolicyLossFn) -> PolicyLossFn:
    if not callable(fn):
        raise TypeError(f"@register({name!r}) decorates a policy loss function, got {fn!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"policy loss name must be a Python identifier, got {name!r}")
    if name in _REGISTRY and _REGISTRY[name] is not fn:
        raise ValueError(f"policy loss {name!r} is already registered (by {_REGISTRY[name].__module__}."
                         f"{_REGISTRY[name].__qualname__}); pick another name")
    _REGISTRY[name] = fn
    return fn


def _register_builtin() -> None:
    """Register the shipped losses not registered yet."""
    register_builtin(_REGISTRY, BUILTIN, _BUILTIN_LOCK, lambda name, ref: _store(name, load_object(ref)))


def names() -> tuple[str, ...]:
    """Every registered policy loss, shipped ones first."""
    _register_builtin()
    return tuple(_REGISTRY)


def get(name: str) -> PolicyLossFn:
    """The policy loss registered as ``name``; ValueError with a did-you-mean otherwise."""
    _register_builtin()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"policy_loss must be a registered policy loss ({', '.join(_REGISTRY)}, or a user's, registered "
                         f"by a module listed in game.modules); got {name!r}{did_you_mean(name, _REGISTRY)}") from None


def unregister(name: str) -> None:
    """Remove a registration (tests)."""
    _REGISTRY.pop(name, None)
