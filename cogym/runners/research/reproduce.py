"""``cogym reproduce CLAIM``: run a paper's claim in miniature, over seeds, and say whether it holds.

A :class:`Claim` is a few *arms* (a shipped config plus overrides: the method and its baselines at
equal budget), the *measures* read off each run (a summary value, a gain from before to after, or a
training metric averaged over the last iterations) and a *judge* that turns the per-seed values into
a verdict: ``reproduced``, ``partially`` or ``not reproduced``, with the reason in one line.

``reproduce`` trains every arm once per seed (``run.seed`` = 0, 1, ...), in this process, one run
after another; it prints a table of mean ± std and the per-seed values, and writes ``results.json``
and ``results.png`` (each measure per arm: mean, std and the seeds) into the output directory, with
each run's own directory (config, metrics.jsonl, summary.json) under ``<arm>/seed<k>``.

The claims, their papers, their arms and the measured tables are in docs/claims.md.
"""

from __future__ import annotations

import json
import math
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cogym.core.errors import CogymError
from cogym.core.names import did_you_mean
from cogym.runners.config.load import load_config
from cogym.runners.config.schema import default_config_path
from cogym.runners.display import columns, fill
import cogym.runners.research.claims  # noqa: F401  (registers the shipped claims)
from cogym.runners.research.claim import CLAIMS, VERDICTS, Arm, Claim, Values, mean, std
from cogym.runners.train.loop import train

CONFIGS = default_config_path().parent  # the shipped configs (cogym.configs)


class ClaimError(CogymError, ValueError):
    """A claim that cannot be reproduced as asked: an unknown name, an arm whose config is not shipped,
    or a run that logged no value of a measure."""


def claim_named(name: str) -> Claim:
    if name not in CLAIMS:
        hint = did_you_mean(name, CLAIMS)
        raise ClaimError(f"unknown claim {name!r}{hint}; known: {', '.join(CLAIMS)} (cogym reproduce --list)")
    return CLAIMS[name]


def all_claims() -> list[Claim]:
    return list(CLAIMS.values())


# ------------------------------------------------------------------------------ running
@dataclass
class Results:
    claim: str
    seeds: list[int]
    values: Values = field(default_factory=dict)
    cpu_s: dict[str, list[float]] = field(default_factory=dict)  # arm -> CPU seconds per seed
    wall_s: dict[str, list[float]] = field(default_factory=dict)
    curves: dict[str, list[list[tuple[int, float]]]] = field(default_factory=dict)  # arm -> per seed (it, value)
    overrides: list[str] = field(default_factory=list)
    verdict: str = ""
    reason: str = ""

    def as_json(self, claim: Claim) -> dict:
        return {
            "claim": claim.name, "paper": claim.paper, "statement": claim.statement, "seeds": self.seeds,
            "overrides": self.overrides, "verdict": self.verdict, "reason": self.reason,
            "arms": {arm.name: {"config": arm.config, "overrides": list(arm.overrides), "about": arm.about,
                                "cpu_s": self.cpu_s.get(arm.name, []), "wall_s": self.wall_s.get(arm.name, []),
                                "measures": {m.name: {"values": self.values[arm.name][m.name],
                                                      "mean": mean(self.values[arm.name][m.name]),
                                                      "std": std(self.values[arm.name][m.name])}
                                             for m in claim.measures}}
                     for arm in claim.arms if arm.name in self.values},
            "cpu_minutes": sum(sum(v) for v in self.cpu_s.values()) / 60,
        }


def arm_config(arm: Arm, seed: int, extra: Sequence[str] = ()):
    """The config of ``arm`` for ``seed``: its file, its overrides, the seed, no checkpoints, TensorBoard
    or plots, then ``extra`` (the command line's overrides, applied to every arm)."""
    path = CONFIGS / arm.config
    if not path.is_file():
        raise ClaimError(f"arm {arm.name!r}: no shipped config {arm.config!r} in {CONFIGS}")
    fixed = [f"run.seed={seed}", "run.checkpoint_every=0", "run.tensorboard=false", "run.plot=false",
             "run.transcripts_every=0"]
    return load_config(str(path), [*arm.overrides, *fixed, *extra])


def reproduce(claim: Claim, seeds: int, out: Path, extra: Sequence[str] = (),
              progress: Callable[[str], None] | None = None) -> Results:
    """Train every arm of ``claim`` once per seed into ``out``; return the values, times and verdict."""
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    results = Results(claim.name, list(range(seeds)), overrides=list(extra))
    for arm in claim.arms:  # every config loads before the first run starts (a typo fails at once)
        arm_config(arm, 0, extra)
    total, done = seeds * len(claim.arms), 0
    for seed in range(seeds):
        for arm in claim.arms:
            cfg = arm_config(arm, seed, extra)
            run_dir = out / arm.name / f"seed{seed}"
            if progress:
                progress(f"[{done + 1}/{total}] {claim.name}: {arm.name}, seed {seed}")
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu0, wall0 = usage.ru_utime + usage.ru_stime, time.perf_counter()
            summary = train(cfg, run_dir, progress=False)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            results.cpu_s.setdefault(arm.name, []).append(usage.ru_utime + usage.ru_stime - cpu0)
            results.wall_s.setdefault(arm.name, []).append(time.perf_counter() - wall0)
            rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
            values = results.values.setdefault(arm.name, {})
            for m in claim.measures:
                try:
                    values.setdefault(m.name, []).append(m.read(summary, rows))
                except KeyError as exc:
                    raise ClaimError(f"claim {claim.name!r}, measure {m.name!r}: the run of arm {arm.name!r} "
                                     f"logged no {exc.args[0]!r} (see {run_dir})") from exc
            if claim.curve:
                curve = [(int(r["iteration"]), float(r[claim.curve])) for r in rows
                         if isinstance(r.get(claim.curve), (int, float)) and r.get("iteration") is not None]
                results.curves.setdefault(arm.name, []).append(curve)
            done += 1
    results.verdict, results.reason = claim.judge(results.values)
    if results.verdict not in VERDICTS:
        raise ValueError(f"claim {claim.name!r}: its judge returned {results.verdict!r}, not one of {VERDICTS}")
    return results


# ------------------------------------------------------------------------------ showing
def _fmt(v: float) -> str:
    return "nan" if math.isnan(v) else f"{v:.3f}"


def format_results(claim: Claim, results: Results) -> str:
    """The table: one row per (measure, arm) with mean ± std and the per-seed values, then the verdict."""
    lines = [f"{claim.name}: {claim.paper}", f"claim: {claim.statement}",
             f"seeds: {', '.join(map(str, results.seeds))}"
             + (f"; overrides: {' '.join(results.overrides)}" if results.overrides else ""), ""]
    rows = []
    for m in claim.measures:
        for arm in claim.arms:
            vals = results.values[arm.name][m.name]
            if all(math.isnan(v) for v in vals):  # the arm does not log it (a metric of another verifier, say)
                rows.append([m.name, arm.name, "not logged", ""])
                continue
            rows.append([m.name, arm.name, f"{_fmt(mean(vals))} ± {_fmt(std(vals))}", " ".join(_fmt(v) for v in vals)])
    lines += columns(["measure", "arm", "mean ± std", "per seed"], rows)
    cpu = sum(sum(v) for v in results.cpu_s.values()) / 60
    lines += ["", f"verdict: {results.verdict} ({results.reason})", f"CPU time: {cpu:.1f} min"]
    return "\n".join(lines)


def plot_results(claim: Claim, results: Results, path: Path) -> None:
    """Each measure per arm (mean, std bar, one dot per seed), and the claim's curve when it has one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = len(claim.measures) + (1 if claim.curve and results.curves else 0)
    cols = min(3, panels)
    rows_n = math.ceil(panels / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.4 * rows_n), squeeze=False)
    names = [a.name for a in claim.arms]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, m in enumerate(claim.measures):
        ax = axes[k // cols][k % cols]
        for i, arm in enumerate(names):
            vals = [v for v in results.values[arm][m.name] if not math.isnan(v)]
            if vals:
                ax.bar(i, np.mean(vals), yerr=std(vals), color=colors[i % len(colors)], alpha=0.5, capsize=4)
                ax.scatter([i] * len(vals), vals, color="black", s=12, zorder=3)
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        ax.set_title(f"{m.name} ({m.better}er is better)" if m.better else m.name, fontsize=9)
        ax.axhline(0, color="grey", lw=0.5)
    if panels > len(claim.measures):
        ax = axes[(panels - 1) // cols][(panels - 1) % cols]
        for i, arm in enumerate(names):
            for j, curve in enumerate(results.curves.get(arm, [])):
                if curve:
                    its, vs = zip(*curve)
                    ax.plot(its, vs, color=colors[i % len(colors)], alpha=0.7, lw=1, label=arm if j == 0 else None,
                            marker="o" if len(its) < 3 else None)
        ax.set_title(claim.curve, fontsize=9)
        ax.set_xlabel("iteration", fontsize=8)
        ax.legend(fontsize=7)
    for k in range(panels, rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    n = len(results.seeds)
    fig.suptitle(f"{claim.name}: {results.verdict} ({n} seed{'s' if n != 1 else ''})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_list(claims: Sequence[Claim], width: int = 80) -> str:
    """``cogym reproduce --list``: each claim, its paper, arms and measured time for 3 seeds."""
    out = []
    for c in claims:
        time_s = f"{c.minutes:.0f} CPU-minutes for 3 seeds" if c.minutes is not None else "time not measured yet"
        out.append(f"{c.name}  ({time_s})")
        out += fill(c.paper, width, "    ")
        out += fill(c.statement, width, "    ")
        out += fill("arms: " + ", ".join(a.name for a in c.arms), width, "    ")
        out.append("")
    return "\n".join(out).rstrip()
