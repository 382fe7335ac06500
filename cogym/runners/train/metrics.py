"""What a rollout and a run report: per-role rewards and game-declared metrics, the diversity of
proposed problems, throughput, the retokenization drift check, and the run's summary."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from cogym.envs.search import NgramEmbedder

from cogym.runners.rollout.loop import RolloutResult

# Roles whose problems (infos[seat]["problem"]) are their own output: their diversity is logged.
DIVERSITY_ROLES = ("proposer",)
_DIVERSITY_EMBEDDER = NgramEmbedder()  # the novelty filter's vectors (cogym.envs.novelty): idf 1, default n-grams
MAX_DIVERSITY_PROBLEMS = 2048  # problems of one iteration compared pairwise (bounds the n x n product: 16 MB)


def problem_diversity(problems: Sequence[str]) -> dict[str, float]:
    """``distinct_problems``: how many different texts; ``nn_distance`` (two or more problems): the
    mean over problems of ``1 - cos`` to the nearest *other* problem of the set, on the hashed
    character n-gram vectors of :class:`~cogym.envs.search.NgramEmbedder` (a repeated problem counts 0).
    At most the first ``MAX_DIVERSITY_PROBLEMS`` are compared, each read to 256 characters."""
    problems = [p[:256] for p in problems[:MAX_DIVERSITY_PROBLEMS]]
    out = {"distinct_problems": float(len(set(problems)))}
    if len(problems) >= 2:
        v = _DIVERSITY_EMBEDDER.embed(problems)
        sims = v @ v.T
        np.fill_diagonal(sims, -np.inf)
        out["nn_distance"] = float(np.mean(1.0 - np.clip(sims.max(axis=1), -1.0, 1.0)))
    return out


def rollout_metrics(res: RolloutResult, roles: tuple[str, ...]) -> dict[str, float]:
    m: dict[str, float] = {}
    for role in roles:
        infos = [(g, seat, i) for g, seats in enumerate(res.infos) for seat, i in seats.items() if i.get("role") == role]
        # Seats whose info says correct=None never answered (the game ended before their turn).
        played = [(g, seat, i) for g, seat, i in infos if i.get("correct", True) is not None]
        if played:
            m[f"{role}/reward"] = float(np.mean([res.returns[g].get(seat, 0.0) for g, seat, _ in played]))
        answered = [i["correct"] for _, _, i in played if "correct" in i]
        if answered:
            m[f"{role}/correct"] = float(np.mean(answered))
        if any("invalid" in i for _, _, i in infos):
            m[f"{role}/invalid"] = float(np.mean([bool(i.get("invalid")) for _, _, i in infos]))
        # Game-declared end-of-game metrics: infos[seat]["metrics"] = {name: float | bool | None};
        # None means "not defined for this episode" and is left out of the mean.
        values: dict[str, list[float]] = {}
        for _, _, i in infos:
            for key, v in (i.get("metrics") or {}).items():
                if v is not None:
                    values.setdefault(key, []).append(float(v))
        for key, vs in values.items():
            m[f"{role}/{key}"] = float(np.mean(vs))
        if role in DIVERSITY_ROLES:  # one problem per game: the one its seat posed (None: invalid, not posed)
            posed = {g: i["problem"] for g, _, i in infos if isinstance(i.get("problem"), str)}
            if posed:
                for key, value in problem_diversity([posed[g] for g in sorted(posed)]).items():
                    m[f"{role}/{key}"] = value
    m["tokens_per_s"] = res.generated_tokens / max(res.generate_seconds, 1e-9)
    m["rollout_s"] = res.seconds
    m["turns"] = float(len(res.turns))
    for key, value in res.stats.items():  # e.g. token level: ids the models read, cache restarts
        m[f"rollout/{key}"] = float(value)
    return m


def retokenize_mismatch(policy, turns) -> float:
    """Fraction of turns whose decoded text does not re-encode to the generated ids.

    Training always uses the generated ids (token-in, token-out); this only measures how far a
    decode-then-re-encode pipeline would have drifted.
    """
    eos = set(policy.eos_ids)
    bad = 0
    for t in turns:
        ids = [i for i in t.response_ids if i not in eos]
        bad += policy.tokenizer.encode(t.text, add_special_tokens=False) != ids
    return bad / len(turns)


def mean_last(rows: list[dict], key: str, k: int = 5) -> float | None:
    vals = [r[key] for r in rows if key in r]
    return float(np.mean(vals[-k:])) if vals else None


MAX_REWARD_WINDOW = 5  # iterations in each of the summary's two reward means, at most


def reward_window(iterations: int) -> int:
    """How many iterations each of the summary's reward means (the first and the last) covers: at most
    ``MAX_REWARD_WINDOW`` and at most half of ``iterations``, so the two windows never share an
    iteration and "first -> last" compares different iterations (1 for a 1-iteration run: its one)."""
    return max(1, min(MAX_REWARD_WINDOW, iterations // 2))


def reward_summary(history: Sequence[dict], roles: Sequence[str]) -> dict:
    """Each role's mean reward over the first and the last :func:`reward_window` iterations of
    ``history`` (the keys keep the names ``<role>_reward_first5`` / ``_last5`` that summary.json has
    always had, also when a short run's window is smaller than 5)."""
    k = reward_window(len(history))
    summary: dict = {}
    for role in roles:
        first = [r[f"{role}/reward"] for r in history[:k] if f"{role}/reward" in r]
        last = mean_last(list(history), f"{role}/reward", k)
        if last is not None:
            summary[f"{role}_reward_first5"] = float(np.mean(first)) if first else None
            summary[f"{role}_reward_last5"] = last
    return summary


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def reward_rows(summary: dict) -> list[tuple[str, str]]:
    """The summary table's reward rows, (label, value) per role: ``first -> last`` with the iterations
    each mean covers (this process's: a resumed run's start at ``first_iteration``), one value for a
    1-iteration run, and only the last mean for a role with no reward in the first window."""
    n, a = int(summary.get("iterations") or 0), int(summary.get("first_iteration") or 1)
    k = reward_window(n - a + 1)
    rows = []
    for key in summary:
        if not key.endswith("_reward_last5"):
            continue
        role = key[: -len("_reward_last5")]
        first, last = summary.get(f"{role}_reward_first5"), summary[key]
        if n <= a:  # one iteration: one value, not a mean compared with itself
            rows.append((f"{role} reward (iteration {n})" if n else f"{role} reward", f"{last:.3f}"))
        elif first is None:  # the role had no reward in the first window
            rows.append((f"{role} reward (mean of iterations {_span(n - k + 1, n)})", f"{last:.3f}"))
        else:
            rows.append((f"{role} reward (iterations {_span(a, a + k - 1)} -> {_span(n - k + 1, n)})",
                         f"{first:.3f} -> {last:.3f}"))
    return rows
