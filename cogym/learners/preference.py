"""DPO's losses on sequence log-probabilities (Rafailov et al. 2023, "Direct Preference Optimization";
its variants as TRL 1.16.0 computes them in ``DPOTrainer._compute_loss``; docs/algorithms.md §16).

For a pair (chosen ``y_w``, rejected ``y_l``) of one prompt, with ``log pi`` summed over the response
tokens, the policy's log-ratios to the reference are ``c = log pi(y_w) - log pi_ref(y_w)`` and
``r = log pi(y_l) - log pi_ref(y_l)``, and ``d = c - r``. The implicit rewards are ``beta * c`` and
``beta * r``. Per pair, with ``eps`` the label smoothing:

* ``sigmoid`` (DPO; with ``eps`` > 0 conservative DPO): ``-(1 - eps) log s(beta d) - eps log s(-beta d)``
* ``hinge`` (SLiC): ``max(0, 1 - beta d)``
* ``ipo``: ``(c / |y_w| - r / |y_l| - 1 / (2 beta))^2``, the log-ratios averaged over each response's tokens
* ``robust`` (rDPO, ``eps`` the probability a label is flipped):
  ``(-(1 - eps) log s(beta d) + eps log s(-beta d)) / (1 - 2 eps)``

``s`` is the logistic function. :func:`load_preferences` reads an offline preference file (JSONL of
``{"prompt", "chosen", "rejected"}``), bounded; :func:`take_rows` takes such a file's rows (or an SFT
file's) batch after batch, pass after pass.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from cogym.envs.seeds import shipped_or_path

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


# ----------------------------------------------------------------------------- offline preference files
MAX_FILE_BYTES = 256 << 20  # a preference file is read whole: at most 256 MiB
MAX_FILE_ROWS = 1_000_000
PAIR_SHAPE = 'each line must be {"prompt": "...", "chosen": "...", "rejected": "..."} (optionally "system")'


@dataclass(frozen=True)
class Preference:
    """One row of a preference file: the chat ``messages`` before the response, and the two responses."""

    messages: tuple
    chosen: str
    rejected: str


def read_jsonl(name: str, label: str, max_bytes: int = MAX_FILE_BYTES, max_rows: int = MAX_FILE_ROWS):
    """``(where, object)`` of each non-blank line of a JSONL file (a path, or the name of a file shipped in
    cogym/envs/data), read bounded; ``where`` names ``label`` (the key that names the file), the file and
    the line. Every problem is a one-line ValueError."""
    path = shipped_or_path(name) if isinstance(name, str) and name else None
    if path is None:
        raise ValueError(f"{label} {name!r} does not exist (neither a path nor a file shipped in cogym/envs/data)")
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{label} {str(path)!r} cannot be read as UTF-8 text ({exc})") from None
    if len(raw) > max_bytes:
        raise ValueError(f"{label} {str(path)!r} is larger than {max_bytes >> 20} MiB; split it or sample from it")
    rows = 0
    # Lines end at "\n" only: str.splitlines would also split at U+2028 and the like, which JSON strings may hold raw.
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        rows += 1
        if rows > max_rows:
            raise ValueError(f"{label} {str(path)!r} holds more than {max_rows} rows; split it or sample from it")
        where = f"{label} {str(path)!r} line {lineno}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; nesting deeper than the stack
            raise ValueError(f"{where}: not a readable JSON row ({type(exc).__name__}: {str(exc)[:80]})") from None


def load_preferences(name: str, label: str = "dpo_data") -> list[Preference]:
    """The rows of a preference file (:func:`read_jsonl`), each ``{"prompt", "chosen", "rejected"}`` strings
    (optionally ``"system"``); a bad line is a one-line ValueError naming the file and the line."""
    rows = []
    for where, obj in read_jsonl(name, label):
        fields = ("prompt", "chosen", "rejected")
        if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) for k in fields) \
                or not isinstance(obj.get("system", ""), str):
            raise ValueError(f"{where}: {PAIR_SHAPE}")
        if obj["chosen"] == obj["rejected"]:
            raise ValueError(f"{where}: chosen and rejected are the same text; a pair needs two different responses")
        system = ({"role": "system", "content": obj["system"]},) if obj.get("system") else ()
        rows.append(Preference((*system, {"role": "user", "content": obj["prompt"]}), obj["chosen"], obj["rejected"]))
    if not rows:
        raise ValueError(f"{label} {name!r} has no rows; {PAIR_SHAPE}")
    return rows


def take_rows(rows: Sequence, start: int, size: int,
              shuffle: Optional[Callable[[int], np.random.Generator]] = None) -> list:
    """Rows ``start`` to ``start + size`` (exclusive) of a file read pass after pass: the k-th is row
    ``k % n`` of pass ``k // n``, in the file's order, or with ``shuffle`` (pass number -> a seeded
    generator) in that pass's own permutation of the ``n`` rows."""
    n, out, orders = len(rows), [], {}
    for k in range(start, start + size):
        epoch, i = divmod(k, n)
        if shuffle is not None:
            if epoch not in orders:
                orders[epoch] = shuffle(epoch).permutation(n)
            i = int(orders[epoch][i])
        out.append(rows[i])
    return out
