"""``learning_curve.png`` (runners/sinks.py): its labels say what is drawn, and its legend covers no data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _metrics(path: Path, iterations: int, evals: bool = True) -> Path:
    """A metrics.jsonl of a run of ``iterations`` iterations of two roles (and held-out evaluations)."""
    rows = [{"iteration": 0, "heldout_acc": 0.2}] if evals else []
    rows += [{"iteration": it, "rollout_s": 1.0, "proposer/reward": 1.0 - it / iterations, "solver/reward": it / iterations}
             for it in range(1, iterations + 1)]
    if evals:
        rows[-1]["heldout_acc"] = 0.9
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _draw(tmp_path: Path, iterations: int, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Plot a run and read the figure as it is saved: the legend's labels and where legend and axes lie."""
    import matplotlib.figure

    from cogym.runners.train.sinks import plot_learning_curve

    seen: dict = {}
    save = matplotlib.figure.Figure.savefig

    def spy(fig, *args, **kwargs):
        fig.canvas.draw()
        (ax,) = fig.axes
        legend = ax.get_legend() or fig.legends[0]
        seen.update(labels=[t.get_text() for t in legend.get_texts()], legend=legend.get_window_extent(),
                    axes=ax.get_window_extent(), lines=[line for line in ax.get_lines()])
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    out = tmp_path / "learning_curve.png"
    # a judge that never had a reward gets no line and no legend entry
    plot_learning_curve(_metrics(tmp_path / "metrics.jsonl", iterations), out, ("proposer", "solver", "judge"))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return seen


def test_a_short_run_s_curves_say_no_mean_of_1(tmp_path, monkeypatch):
    seen = _draw(tmp_path, 6, monkeypatch)
    assert seen["labels"] == ["proposer reward", "solver reward", "held-out accuracy (greedy)"]
    assert not any("mean of" in label for label in seen["labels"])
    assert len(seen["lines"]) == 3  # one line a role: no faint raw copy under an identical "mean"


def test_a_long_run_s_curves_name_the_moving_average(tmp_path, monkeypatch):
    seen = _draw(tmp_path, 120, monkeypatch)
    assert seen["labels"] == ["proposer reward (mean of 3 iterations)", "solver reward (mean of 3 iterations)", "held-out accuracy (greedy)"]


@pytest.mark.parametrize("iterations", [6, 120])
def test_the_legend_lies_outside_the_axes(tmp_path, monkeypatch, iterations):
    """Inside the axes a legend covers some curve whatever its place (loc="best" only picks the least bad)."""
    seen = _draw(tmp_path, iterations, monkeypatch)
    legend, axes = seen["legend"], seen["axes"]
    assert legend.y1 <= axes.y0 or legend.x0 >= axes.x1, (legend, axes)
