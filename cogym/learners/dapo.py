"""DAPO-style pieces as pure functions (docs/algorithms.md §7.2, §7.4).

* Overlong reward shaping (§7.4, vector V13): a soft length penalty added to the outcome reward,
  plus OpenRLHF's ProRL "stop properly" penalty and overlong filtering (truncated rows masked out).
* Dynamic sampling (§7.2, vector V14): group-filter predicates given per-response scores and
  explicit group ids, and a pure helper that picks the groups that fill a batch of a target size.

Clip-higher (§7.1) lives in :func:`cogym.learners.losses.clipped_policy_loss` (``clip_low`` /
``clip_high``) and token-level aggregation (§7.3) in :func:`cogym.learners.losses.aggregate`.

Nothing here calls a model; the rollout loop decides when to generate more.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Hashable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from cogym.agents.conversation import longest_message

__all__ = [
    "FILTER_PREDICATES",
    "overlong_penalty",
    "apply_overlong_shaping",
    "stop_properly_penalty",
    "mask_truncated",
    "filter_groups",
    "select_groups",
    "need_more_rounds",
]

F64 = torch.float64


# -- overlong reward shaping (§7.4) ------------------------------------------------------------

def _check_overlong_args(max_len: int, buffer_len: int, factor: float) -> None:
    if not max_len > 0:
        raise ValueError(f"max_len must be > 0, got {max_len}")
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"buffer_len must be in (0, max_len={max_len}], got {buffer_len}")
    if not factor >= 0:
        raise ValueError(f"factor must be >= 0, got {factor}")


def overlong_penalty(
    lengths: Tensor,
    max_len: int,
    buffer_len: int,
    factor: float = 1.0,
    *,
    cap: bool = False,
) -> Tensor:
    """Soft overlong punishment (§7.4) of each response length ``|o_i|``::

        exceed_i  = |o_i| - (max_len - buffer_len)
        penalty_i = min(-exceed_i / buffer_len * factor, 0)

    i.e. 0 up to ``max_len - buffer_len`` tokens, then linear down to ``-factor`` at ``max_len``.

    Args:
        lengths: (N,) response lengths (number of generated tokens, e.g. ``mask.sum(1)``).
        max_len: ``L_max``, the max response length (verl DAPO script 20480).
        buffer_len: ``B_o`` (verl ``overlong_buffer.len``, DAPO script 4096).
        factor: ``f`` (verl ``overlong_buffer.penalty_factor``, DAPO script 1.0).
        cap: False (canonical, verl): ``exceed`` is not capped, so lengths beyond ``max_len``
            are punished below ``-factor``. True (OpenRLHF compat): ``exceed`` is capped at
            ``buffer_len``, so the penalty bottoms out at ``-factor``. Identical for
            ``|o_i| <= max_len``.

    Returns:
        (N,) float64 penalties (<= 0), to be ADDED to the outcome reward.
    """
    _check_overlong_args(max_len, buffer_len, factor)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (N,), got shape {tuple(lengths.shape)}")
    n = lengths.to(F64)
    if bool((n < 0).any()):
        raise ValueError("lengths must be >= 0")
    exceed = n - float(max_len - buffer_len)
    if cap:
        exceed = exceed.clamp_max(float(buffer_len))
    # + 0.0 turns the -0.0 of lengths exactly at max_len - buffer_len into +0.0
    return (-exceed / float(buffer_len) * float(factor)).clamp_max(0.0) + 0.0


def apply_overlong_shaping(
    scores: Tensor,
    lengths: Tensor,
    max_len: int,
    buffer_len: int,
    factor: float = 1.0,
    *,
    cap: bool = False,
) -> Tensor:
    """``scores + overlong_penalty(lengths, ...)``: (N,) -> (N,) in the scores' floating dtype.

    Integer scores (0/1 accuracies) come back in float64.
    """
    if scores.shape != lengths.shape:
        raise ValueError(f"scores and lengths must both be (N,), got {tuple(scores.shape)} and {tuple(lengths.shape)}")
    pen = overlong_penalty(lengths, max_len, buffer_len, factor, cap=cap)
    dtype = scores.dtype if scores.is_floating_point() else F64
    return (scores.to(F64) + pen).to(dtype)


def stop_properly_penalty(scores: Tensor, truncated: Tensor, coef: float) -> Tensor:
    """OpenRLHF ProRL "stop properly" penalty (§7.4) on (N,) scores.

    Truncated responses (``truncated`` (N,) bool: hit the length limit without EOS) get
    ``R * coef`` when ``coef >= 0`` and ``R := coef`` when ``coef < 0``; others are unchanged.
    """
    if scores.shape != truncated.shape or scores.dim() != 1:
        raise ValueError(f"scores and truncated must both be (N,), got {tuple(scores.shape)} and {tuple(truncated.shape)}")
    s = scores.to(F64)
    new = s * float(coef) if coef >= 0 else torch.full_like(s, float(coef))
    dtype = scores.dtype if scores.is_floating_point() else F64
    return torch.where(truncated.to(torch.bool), new, s).to(dtype)


def mask_truncated(mask: Tensor, truncated: Tensor) -> Tensor:
    """Overlong filtering (TRL ``mask_truncated_completions``, SPIRAL ``ignore_no_eos``; §7.4).

    Returns ``mask`` (N, L) with the rows where ``truncated`` (N,) is True zeroed: they become
    fully-masked rows, which the advantage estimators exclude from every statistic.
    """
    if mask.dim() != 2 or truncated.shape != (mask.shape[0],):
        raise ValueError(f"need mask (N, L) and truncated (N,), got {tuple(mask.shape)} and {tuple(truncated.shape)}")
    return torch.where(truncated.to(torch.bool)[:, None], torch.zeros_like(mask), mask)


# -- dynamic sampling (§7.2) -------------------------------------------------------------------

FILTER_PREDICATES = ("std_gt_0", "mean_in_open", "mean_in_closed")
_DEFAULT_BOUNDS = {
    "mean_in_open": (Fraction(0), Fraction(1)),            # OpenRLHF --algo.dynamic_filtering default
    "mean_in_closed": (Fraction(1, 5), Fraction(4, 5)),    # PRIME filter_accuracy / SeRL bounds
}


def _fraction(x: float | int | str | Fraction) -> Fraction:
    """A bound or score as an exact rational of its shortest decimal form (0.2 -> 1/5)."""
    if isinstance(x, (Fraction, int)):
        return Fraction(x)
    if isinstance(x, float):
        if not np.isfinite(x):
            raise ValueError(f"scores and bounds must be finite, got {x}")
        return Fraction(repr(x))
    return Fraction(x)


def _exact_scores(scores: Tensor) -> list[Fraction]:
    """Scores as exact rationals, so means compare to bounds without float edge effects (§7.2).

    Integers stay integers (k/n comparisons). Floats are read as the shortest decimal that
    round-trips in THEIR dtype (a float32 0.2 is 1/5, not 0.20000000298...). bfloat16 has no
    numpy type and is read as float32.
    """
    if not scores.is_floating_point():
        return [Fraction(int(x)) for x in scores.tolist()]
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores must be finite (exclude invalid rows with `valid`)")
    if scores.dtype == F64:
        return [Fraction(repr(x)) for x in scores.tolist()]
    if scores.dtype == torch.bfloat16:
        scores = scores.to(torch.float32)
    arr = scores.detach().cpu().numpy()
    return [Fraction(np.format_float_positional(x, unique=True, trim="0")) for x in arr]


def _bounds(predicate: str, bounds) -> tuple[Fraction | None, Fraction | None]:
    """The (lo, hi) of a mean predicate: given, else its default; (None, None) for std_gt_0."""
    if predicate == "std_gt_0":
        return None, None
    if bounds is None:
        return _DEFAULT_BOUNDS[predicate]
    lo, hi = _fraction(bounds[0]), _fraction(bounds[1])
    if lo > hi:
        raise ValueError(f"bounds must have lo <= hi, got {bounds}")
    return lo, hi


def _keeps(vals: list[Fraction], predicate: str, lo: Fraction | None, hi: Fraction | None) -> bool:
    """Whether a group with these (exact) valid scores passes the predicate; no valid row: dropped."""
    n = len(vals)
    if n == 0:
        return False
    if predicate == "std_gt_0":
        return n == 1 or min(vals) != max(vals)
    mean = sum(vals, Fraction(0)) / n
    return (lo < mean < hi) if predicate == "mean_in_open" else (lo <= mean <= hi)


def _filter_keys(scores: Tensor, groups, predicate: str, lengths, max_response_length) -> list:
    """filter_groups' argument checks; the group key of each row."""
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D (N,), got shape {tuple(scores.shape)}")
    n_rows = scores.shape[0]
    keys = groups.tolist() if isinstance(groups, Tensor) else list(groups)
    if isinstance(groups, Tensor) and (groups.is_floating_point() or groups.dtype == torch.bool):
        raise ValueError(f"groups must be an integer tensor or a sequence of keys, got {groups.dtype}")
    if len(keys) != n_rows:
        raise ValueError(f"groups must have length {n_rows}, got {len(keys)}")
    if predicate not in FILTER_PREDICATES:
        raise ValueError(f"predicate must be one of {FILTER_PREDICATES}, got {predicate!r}")
    if (lengths is None) != (max_response_length is None):
        raise ValueError("lengths and max_response_length must be given together")
    return keys


def _group_members(keys: list, exact: list[Fraction], ok: list[bool], lens: list | None) -> tuple[dict, dict]:
    """{group: its valid rows' exact scores} (every group listed) and {group: its longest valid row}."""
    exact_valid = iter(exact)
    members: dict[Hashable, list[Fraction]] = {}
    longest: dict[Hashable, float] = {}
    for i, k in enumerate(keys):
        members.setdefault(k, [])
        if ok[i]:
            members[k].append(next(exact_valid))
            if lens is not None:
                longest[k] = max(longest.get(k, -float("inf")), lens[i])
    return members, longest


def filter_groups(
    scores: Tensor,
    groups: Tensor | Sequence[Hashable],
    *,
    predicate: str = "std_gt_0",
    bounds: tuple[float | str | Fraction, float | str | Fraction] | None = None,
    valid: Tensor | None = None,
    lengths: Tensor | None = None,
    max_response_length: int | None = None,
) -> tuple[Tensor, dict[Hashable, bool]]:
    """Dynamic-sampling group filter (§7.2, vector V14): which groups to keep for training.

    Predicates (over the valid members' scores of each group, ``n`` = their count):

    * ``"std_gt_0"`` (canonical, verl DAPO recipe): keep iff the scores are not all equal
      (population std > 0) or ``n == 1``. Drops constant groups of any value.
    * ``"mean_in_open"`` (OpenRLHF ``dynamic_filtering``): keep iff ``lo < mean < hi``; default
      bounds (0, 1). Keeps a constant group whose mean is inside (e.g. all 0.3).
    * ``"mean_in_closed"`` (PRIME ``filter_accuracy``, SeRL difficulty bounds): keep iff
      ``lo <= mean <= hi``; default bounds (0.2, 0.8).

    Means are compared exactly (``sum/n`` against the bounds' decimal values as rationals), so
    1 correct out of 5 sits exactly on a 0.2 bound.

    Args:
        scores: (N,) per-response metric (accuracy, score, final reward).
        groups: (N,) group ids (integer tensor from ``group_index``, or any hashable keys).
        bounds: ``(lo, hi)`` for the mean predicates (floats are read as their decimal repr);
            ignored by ``std_gt_0``.
        valid: optional (N,) bool; rows with False (fully-masked/rejected) are left out of the
            statistics (§2.2). A group with no valid row is dropped.
        lengths, max_response_length: PRIME ``filter_truncate``: also drop groups whose longest
            valid response has ``length >= max_response_length - 1``. Give both or neither.

    Returns:
        (keep_rows (N,) bool: the row's group is kept; group_keep: {group id: kept} in
        first-seen order, ready for :func:`select_groups`).
    """
    keys = _filter_keys(scores, groups, predicate, lengths, max_response_length)
    n_rows = scores.shape[0]
    ok = [True] * n_rows if valid is None else [bool(v) for v in valid.tolist()]
    if len(ok) != n_rows:
        raise ValueError(f"valid must have shape ({n_rows},)")
    lens = None
    if lengths is not None:
        if lengths.shape != (n_rows,):
            raise ValueError(f"lengths must have shape ({n_rows},), got {tuple(lengths.shape)}")
        lens = lengths.tolist()
    lo, hi = _bounds(predicate, bounds)

    # only valid rows' scores are read, so invalid rows may hold NaN
    ok_t = torch.tensor(ok, dtype=torch.bool, device=scores.device) if n_rows else torch.zeros(0, dtype=torch.bool)
    members, longest = _group_members(keys, _exact_scores(scores[ok_t]), ok, lens)

    group_keep: dict[Hashable, bool] = {}
    for k, vals in members.items():
        keep = _keeps(vals, predicate, lo, hi)
        if keep and lens is not None and longest[k] >= max_response_length - 1:
            keep = False
        group_keep[k] = keep
    keep_rows = torch.tensor([group_keep[k] for k in keys], dtype=torch.bool)
    return keep_rows, group_keep


def select_groups(
    group_keep: Mapping[Hashable, bool],
    target: int,
    *,
    fill_with_failing: bool = False,
) -> list[Hashable]:
    """Pick the groups that make up a training batch of ``target`` groups (§7.2).

    ``group_keep`` maps candidate group ids to the filter's decision, in generation order (merge
    the dicts of successive generation rounds; ids must be unique across rounds).

    * ``fill_with_failing=False`` (canonical, verl DAPO): the first ``target`` passing groups,
      surplus trimmed. Fewer than ``target`` means generate another round
      (see :func:`need_more_rounds`).
    * ``fill_with_failing=True`` (PRIME oversampling): passing groups first, then failing ones,
      both in order, truncated to ``target`` (PRIME keeps ``1/oversample_factor`` of the
      candidates this way).
    """
    if target < 0:
        raise ValueError(f"target must be >= 0, got {target}")
    passing = [k for k, keep in group_keep.items() if keep]
    if fill_with_failing:
        passing += [k for k, keep in group_keep.items() if not keep]
    return passing[:target]


def need_more_rounds(num_kept: int, target: int, rounds_done: int, max_rounds: int = 10) -> bool:
    """Whether dynamic sampling must generate another batch (verl ``max_num_gen_batches``).

    True while ``num_kept < target``; raises RuntimeError once ``rounds_done >= max_rounds``
    rounds still left the batch short. ``max_rounds <= 0`` means unlimited (verl).
    """
    if num_kept >= target:
        return False
    if max_rounds > 0 and rounds_done >= max_rounds:
        raise RuntimeError(
            f"dynamic sampling kept {num_kept} < {target} groups after {rounds_done} generation rounds "
            f"(max_rounds={max_rounds}); the data may be too easy or too hard for the filter"
        )
    return True


def group_decisions(cfg, turns: Sequence, shaped: Callable[[Tensor, Tensor], Tensor]) -> dict:
    """Dynamic sampling's decision for a learner (§7.2): {group key: kept} over these turns' groups,
    in order of play, by ``cfg.dynamic_sampling`` on the turns' rewards as ``shaped`` scores them
    (overlong shaping). A bound not given is the predicate's own."""
    if not turns:
        return {}
    scores = shaped(torch.tensor([float(t.reward) for t in turns], dtype=torch.float64),
                    torch.tensor([longest_message(t) for t in turns]))
    low, high = cfg.dynamic_sampling_low, cfg.dynamic_sampling_high
    bounds = None
    if cfg.dynamic_sampling != "std_gt_0" and (low is not None or high is not None):
        default_low, default_high = _DEFAULT_BOUNDS[cfg.dynamic_sampling]
        bounds = (default_low if low is None else low, default_high if high is None else high)
    # Rows the loss will not see (truncated, with mask_truncated) do not count in the predicate either.
    valid = torch.tensor([t.finished for t in turns]) if cfg.mask_truncated else None
    _, decisions = filter_groups(scores, [t.group_key for t in turns], predicate=cfg.dynamic_sampling,
                                 bounds=bounds, valid=valid)
    return decisions
