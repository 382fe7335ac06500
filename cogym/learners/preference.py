"""DPO's losses on sequence log-probabilities (Rafailov et al. 2023, "Direct Preference Optimization";
its variants as TRL 1.16.0 computes them in ``DPOTrainer._compute_loss``; docs/algorithms.md, DPO and IPO).

For a pair (chosen ``y_w``, rejected ``y_l``) of one prompt, with ``log pi`` summed over the response
tokens, the policy's log-ratios to the reference are ``c = log pi(y_w) - log pi_ref(y_w)`` and
``r = log pi(y_l) - log pi_ref(y_l)``, and ``d = c - r``. The implicit rewards are ``beta * c`` and
``beta * r``. Per pair, with ``eps`` the label smoothing:

* ``sigmoid`` (DPO; with ``eps`` > 0 conservative DPO): ``-(1 - eps) log s(beta d) - eps log s(-beta d)``
* ``hinge`` (SLiC): ``max(0, 1 - beta d)``
* ``ipo``: ``(c / |y_w| - r / |y_l| - 1 / (2 beta))^2``, the log-ratios averaged over each response's tokens
* ``robust`` (rDPO, ``eps`` the probability a label is flipped):
  ``(-(1 - eps) log s(beta d) + eps log s(-beta d)) / (1 - 2 eps)``

``s`` is the logistic function.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

DPO_LOSSES = ("sigmoid", "hinge", "ipo", "robust")
SMOOTHED = ("sigmoid", "robust")  # the losses that take a label smoothing


def check_dpo_options(beta: float, loss_type: str, label_smoothing: float, prefix: str = "") -> None:
    """ValueError for a ``beta``, loss type or label smoothing :func:`dpo_loss` cannot use (``prefix``:
    how the keys are named to the user, e.g. ``dpo_``)."""
    if loss_type not in DPO_LOSSES:
        raise ValueError(f"{prefix}loss must be one of {', '.join(DPO_LOSSES)}, got {loss_type!r}")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"{prefix}beta must be a finite number > 0, got {beta!r}")
    eps = label_smoothing
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 0.5:
        raise ValueError(f"{prefix}label_smoothing must be a number in [0, 0.5) (the probability that a preference "
                         f"label is wrong), got {eps!r}")
    if eps and loss_type not in SMOOTHED:
        raise ValueError(f"{prefix}label_smoothing applies to the {' and '.join(SMOOTHED)} losses, not {loss_type!r}; "
                         f"set {prefix}label_smoothing: 0 or {prefix}loss: robust")


def dpo_loss(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
             beta: float, loss_type: str = "sigmoid", label_smoothing: float = 0.0,
             chosen_tokens: torch.Tensor | None = None,
             rejected_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, chosen_reward, rejected_reward)``, each (P,), of P pairs given their summed response
    log-probabilities under the policy and the reference, all (P,). ``chosen_tokens`` and
    ``rejected_tokens`` (P,): the response lengths, which ``ipo`` needs (counted as at least 1).
    Gradients flow through every argument as given (detach the reference upstream); the rewards are
    ``beta`` times the log-ratios, with their gradient too."""
    shapes = {tuple(t.shape) for t in (chosen, rejected, ref_chosen, ref_rejected)}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"dpo_loss needs four (P,) tensors of one shape, got shapes {sorted(shapes)}")
    check_dpo_options(beta, loss_type, label_smoothing)
    c, r = chosen - ref_chosen, rejected - ref_rejected
    z = beta * (c - r)
    eps = float(label_smoothing)
    if loss_type == "sigmoid":
        loss = -(1 - eps) * F.logsigmoid(z) - eps * F.logsigmoid(-z)
    elif loss_type == "hinge":
        loss = torch.relu(1 - z)
    elif loss_type == "robust":
        loss = (-(1 - eps) * F.logsigmoid(z) + eps * F.logsigmoid(-z)) / (1 - 2 * eps)
    else:  # ipo
        if chosen_tokens is None or rejected_tokens is None:
            raise ValueError("the ipo loss needs chosen_tokens and rejected_tokens, the responses' lengths")
        average = c / chosen_tokens.to(c.dtype).clamp(min=1.0) - r / rejected_tokens.to(r.dtype).clamp(min=1.0)
        loss = (average - 1 / (2 * beta)) ** 2
    return loss, beta * c, beta * r
