"""Metric sinks: where each iteration's record goes (JSONL, TensorBoard, the learning-curve plot).

The trainer hands every record to :class:`Sinks`, which hands it to each sink it holds. In a
data-parallel run only rank 0 holds sinks; the other ranks log nothing. A new destination (a
tracker, a CSV) is one more class with ``log(record)`` and ``close()``; a sink that also has
``transcripts(rows)`` receives the sampled game transcripts (:mod:`~cogym.runners.results.transcripts`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import yaml

from cogym.runners import rundir
from cogym.runners.config.schema import RunConfig
from cogym.runners.results.transcripts import TRANSCRIPTS_FILE, TranscriptWriter, markdown


class Sink(Protocol):
    def log(self, record: dict) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """``metrics.jsonl``: one JSON object per line. A new run (``start_iteration`` 1) starts the file
    again; on resume the rows logged after the checkpoint are dropped first (and a last line cut by a
    kill), so replayed iterations appear once."""

    def __init__(self, path: Path, start_iteration: int = 1) -> None:
        self.path = path
        keep = [r for r in rundir.read_jsonl(path) if _before(r, start_iteration)] if start_iteration > 1 else []
        rundir.write_jsonl(path, keep)
        self.file = rundir.open_append(path)

    def rows(self) -> list[dict]:
        return rundir.read_jsonl(self.path)

    def log(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _before(row: dict, iteration: int) -> bool:
    """Whether a logged row belongs to an iteration before ``iteration`` (a row without a number is not kept)."""
    it = row.get("iteration", 0)
    return isinstance(it, (int, float)) and not isinstance(it, bool) and it < iteration


class TensorBoardSink:
    """TensorBoard events under ``tb/``; every finite number of a record is a scalar at its iteration."""

    def __init__(self, path: Path, start_iteration: int = 1) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(path), purge_step=start_iteration if start_iteration > 1 else None)

    def log(self, record: dict) -> None:
        step = int(record.get("iteration", 0))
        for k, v in record.items():
            if k != "iteration" and isinstance(v, (int, float)) and math.isfinite(v):
                self.writer.add_scalar(k, v, step)

    def transcripts(self, rows: Sequence[dict]) -> None:
        """Each game as text (TensorBoard's text tab): tag ``transcripts/game_<g>``, at its iteration."""
        for row in rows:
            self.writer.add_text(f"transcripts/game_{row['game']}", markdown(row), int(row.get("iteration") or 0))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class TranscriptSink:
    """``transcripts.jsonl``: sampled games' full messages (:mod:`~cogym.runners.results.transcripts`); on
    resume the rows of the iterations replayed are dropped first."""

    def __init__(self, path: Path, start_iteration: int = 1) -> None:
        self.writer = TranscriptWriter(path, start_iteration)

    def log(self, record: dict) -> None:
        pass

    def transcripts(self, rows: Sequence[dict]) -> None:
        self.writer.write(rows)

    def close(self) -> None:
        self.writer.close()


class PlotSink:
    """``learning_curve.png``, drawn from metrics.jsonl when the run closes (nothing per iteration)."""

    def __init__(self, metrics: Path, out: Path, roles: tuple[str, ...]) -> None:
        self.metrics, self.out, self.roles = metrics, out, roles

    def log(self, record: dict) -> None:
        pass

    def close(self) -> None:
        if self.metrics.is_file() and self.metrics.stat().st_size:
            plot_learning_curve(self.metrics, self.out, self.roles)


class Sinks:
    """Every sink of a run, in order; ``jsonl`` (when there is one) also answers what was logged."""

    def __init__(self, sinks: Sequence[Sink] = (), jsonl: JsonlSink | None = None) -> None:
        self.sinks, self.jsonl = list(sinks), jsonl

    def logged(self, iteration: int) -> dict:
        """The merged rows already logged at ``iteration`` (e.g. 0: the evaluations before training)."""
        out: dict = {}
        for row in self.jsonl.rows() if self.jsonl is not None else []:
            if row.get("iteration") == iteration:
                out.update(row)
        return out

    def log(self, record: dict) -> None:
        for sink in self.sinks:
            sink.log(record)

    def transcripts(self, rows: Sequence[dict]) -> None:
        """Sampled games' transcripts to every sink that keeps them (the JSONL file, TensorBoard)."""
        for sink in self.sinks:
            if hasattr(sink, "transcripts"):
                sink.transcripts(rows)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def forget_attempt(path: Path) -> None:
    """Remove what an attempt that is started again from the beginning (or an earlier run that
    ``--overwrite`` replaces) wrote in run directory ``path`` (its rows, transcripts, TensorBoard events,
    game errors and plot), so the new attempt's appear once.
    Only cogym's names go: in ``tb/``, TensorBoard's event files (and ``tb/`` itself when nothing else is in it)."""
    for name in ("metrics.jsonl", TRANSCRIPTS_FILE, "game_errors.jsonl", "learning_curve.png"):
        (path / name).unlink(missing_ok=True)
    tb = path / "tb"
    if tb.is_dir() and not tb.is_symlink():
        for event in tb.glob("events.out.tfevents.*"):
            event.unlink(missing_ok=True)
        if not any(tb.iterdir()):
            tb.rmdir()  # empty now; a tb/ holding anything else stays


def open_sinks(path: Path, settings: RunConfig, resolved: dict, roles: tuple[str, ...], start_iteration: int = 1,
               main: bool = True) -> Sinks:
    """The run directory's sinks (rank 0: config.yaml written from ``resolved``, the resolved config as
    a dict; JSONL, TensorBoard and the plot as the ``run`` section ``settings`` says; a new run,
    ``start_iteration`` 1, starts metrics.jsonl, transcripts.jsonl and game_errors.jsonl over); a
    data-parallel rank r > 0 gets none."""
    if not main:
        return Sinks()
    rundir.create(path, "train")
    rundir.write_text(path / "config.yaml", yaml.safe_dump(resolved, sort_keys=False))
    jsonl = JsonlSink(path / "metrics.jsonl", start_iteration)
    sinks: list[Sink] = [jsonl]
    transcripts = path / TRANSCRIPTS_FILE
    if start_iteration == 1:  # a new run: its own files start over (an earlier run's rows are not its own)
        for name in (TRANSCRIPTS_FILE, "game_errors.jsonl"):
            if (path / name).exists() or (path / name).is_symlink():
                rundir.write_text(path / name, "")
    if settings.transcripts_every and settings.transcripts_games or transcripts.is_file():  # resume: drop replayed rows
        sinks.append(TranscriptSink(transcripts, start_iteration))
    if settings.tensorboard:
        sinks.append(TensorBoardSink(path / "tb", start_iteration))
    if settings.plot:
        sinks.append(PlotSink(path / "metrics.jsonl", path / "learning_curve.png", roles))
    return Sinks(sinks, jsonl)


HELDOUT_LABELS = {"heldout_acc": "held-out accuracy (greedy)", "heldout_sampled_acc": "held-out accuracy (sampled)"}


def plot_learning_curve(metrics_path: Path, out: Path, roles: tuple[str, ...]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = rundir.read_jsonl(metrics_path, warn=False)
    its = [r for r in rows if "rollout_s" in r]
    # Evaluations in [0, 1]: the arithmetic accuracy and every declared evaluator's win rate.
    eval_keys = sorted({k for r in rows for k in r if k in HELDOUT_LABELS or (k.startswith("eval/") and k.endswith("/win_rate"))})
    # Constrained layout makes room for the legend below the axes: inside them it would cover some
    # curve whatever its place (loc="best" only picks the least bad one), and curves fill the axes.
    fig, ax = plt.subplots(figsize=(7, 4.4), dpi=110, layout="constrained")
    for role in roles:
        xs = [r["iteration"] for r in its if f"{role}/reward" in r]
        ys = [r[f"{role}/reward"] for r in its if f"{role}/reward" in r]
        if not xs:  # the role never had a reward (e.g. no answer was ever valid): no line, no legend entry
            continue
        k = max(1, len(ys) // 40)  # moving average so the trend shows through sampling noise
        if k == 1:  # a short run: the rewards themselves (a "mean of 1" would be a copy of them)
            ax.plot(xs, ys, label=f"{role} reward")
        else:
            line, = ax.plot(xs, ys, alpha=0.25)
            smooth = np.convolve(ys, np.ones(k) / k, mode="valid")
            ax.plot(xs[k - 1:], smooth, color=line.get_color(), label=f"{role} reward (mean of {k} iterations)")
    for key, marker in zip(eval_keys, "osD^v<>"):
        pts = [(r["iteration"], r[key]) for r in rows if key in r]
        label = HELDOUT_LABELS.get(key) or key[len("eval/"):]
        ax.plot(*zip(*pts), marker=marker, linestyle="--", color={"heldout_acc": "k", "heldout_sampled_acc": "0.5"}.get(key),
                label=label)
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward / accuracy")
    ax.grid(alpha=0.3)
    labelled = len(ax.get_legend_handles_labels()[1])
    if labelled:
        fig.legend(loc="outside lower center", ncol=min(3, labelled), fontsize=8, frameon=False)
    ax.set_title(metrics_path.parent.name)
    rundir.save_figure(fig, out)
    plt.close(fig)
