"""What cogym shows: tournament plots sized to the players with P-labels and a key, and text tables
that keep every number whole at 80 columns and in a pipe."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from cogym.runners.display import (  # noqa: E402
    format_games,
    format_leaderboard,
    format_matrix,
    heatmap_figure,
    player_labels,
    ratings_figure,
    wrap_name,
)

RUNS = ["proposer_solver-20261121-130000", "proposer_solver-20261122-091500", "debate_grpo-20261123-174210"]


def _names(n: int) -> list[str]:
    out = [f"runs/{RUNS[k % 3]}/step_{100 * (k // 3 + 1):06d}/solver" for k in range(n - 2)]
    return out + ["scripted:oracle", "runs/" + "a_very_long_experiment_name_" * 3 + "x/step_000100/proposer"]


def _matrix(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)), 1)
    m = upper + np.tril(1 - upper.T, -1)
    np.fill_diagonal(m, np.nan)
    return m


def _board(names: list[str]) -> list[dict]:
    return [{"name": name, "rating": 300.0 - 17 * k, "lo": 250.0 - 17 * k, "hi": 341.0 - 17 * k, "games": 1200,
             "wins": 700 - k, "draws": 13, "losses": 487 + k, "score": 0.589 - k / 1000} for k, name in enumerate(names)]


def _figure_text(fig) -> str:
    return "\n".join(t.get_text() for t in fig.texts)


def _unwrapped(text: str) -> str:
    """The key's text with line breaks and indentation removed (wrapped names joined again)."""
    return re.sub(r"\n\s*", "", text)


def test_labels_are_names_when_short_else_p_labels():
    assert player_labels(["scripted:nash", "tiny"]) == (["scripted:nash", "tiny"], False)
    labels, keyed = player_labels(_names(3))
    assert keyed and labels == ["P1", "P2", "P3"]


def test_wrap_name_keeps_every_character_and_prefers_slashes():
    name = _names(3)[0]
    assert wrap_name(name, 40) == ["runs/proposer_solver-20261121-130000/", "step_000100/solver"]
    long = _names(3)[-1]  # a path part longer than a line is cut inside it
    parts = wrap_name(long, 40)
    assert "".join(parts) == long and all(len(p) <= 40 for p in parts) and len(parts) == 3


@pytest.mark.parametrize("n", [3, 12, 30])
def test_heatmap_ticks_are_p_labels_and_the_key_names_every_player(n):
    names = _names(n)
    fig = heatmap_figure(_matrix(n), names)
    ax = fig.axes[0]
    fig.canvas.draw()
    expected = [f"P{k}" for k in range(1, n + 1)]
    assert [t.get_text() for t in ax.get_xticklabels()] == expected
    assert [t.get_text() for t in ax.get_yticklabels()] == expected
    key = _unwrapped(_figure_text(fig))
    for label, name in zip(expected, names):
        assert re.search(rf"{label}\s+{re.escape(name)}", key), name
    # every cell is at least 0.3 inch wide, whatever n
    width_in = ax.get_position().width * fig.get_size_inches()[0]
    assert width_in / n >= 0.3 - 1e-9
    # the key is inside the figure
    renderer = fig.canvas.get_renderer()
    for t in fig.texts:
        box = t.get_window_extent(renderer)
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width + 1, t.get_text()[:40]
    plt.close(fig)


def test_figures_grow_with_the_number_of_players():
    sizes = []
    for n in (3, 12, 30):
        heat, rate = heatmap_figure(_matrix(n), _names(n)), ratings_figure(_board(_names(n)))
        sizes.append((*heat.get_size_inches(), rate.get_size_inches()[1]))
        plt.close(heat)
        plt.close(rate)
    for small, big in zip(sizes, sizes[1:]):
        assert all(b > s for s, b in zip(small, big)), sizes


def test_short_names_label_the_heatmap_themselves_without_a_key():
    names = ["scripted:nash", "scripted:random", "tiny"]
    fig = heatmap_figure(_matrix(3), names)
    fig.canvas.draw()
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == names
    assert not fig.texts
    plt.close(fig)


def test_ratings_rows_are_p_labels_best_first_and_the_key_names_every_player():
    names = _names(12)
    fig = ratings_figure(_board(names))
    fig.canvas.draw()
    ticks = sorted(fig.axes[0].get_yticklabels(), key=lambda t: -t.get_position()[1])  # top to bottom
    assert [t.get_text() for t in ticks] == [f"P{k}" for k in range(1, 13)]
    key = _unwrapped(_figure_text(fig))
    assert all(name in key for name in names)
    plt.close(fig)


def _numbers(text: str) -> list[str]:
    return re.findall(r"-?\d+\.\d+|-?\d+", text)


@pytest.mark.parametrize("width", [80, 40])
def test_matrix_text_prints_every_score_in_full(width):
    names = _names(12)
    m = _matrix(12, seed=3)
    text = format_matrix(m, names, width)
    assert "…" not in text and all(len(line) <= width for line in text.splitlines())
    rows = [line.split() for line in text.splitlines() if re.fullmatch(r"P\d+(\s+(-|\d\.\d\d))+", line.strip())]
    cells = {}
    for row in rows:  # blocks of columns: a row's cells are spread over the blocks, in order
        cells.setdefault(row[0], []).extend(row[1:])
    assert sorted(cells, key=lambda s: int(s[1:])) == [f"P{k}" for k in range(1, 13)]
    for i in range(12):
        assert cells[f"P{i + 1}"] == ["-" if math.isnan(v) else f"{v:.2f}" for v in m[i]]
    assert all(name in _unwrapped(text) for name in names)


def test_matrix_of_a_large_pool_points_to_the_files():
    assert "matrix.csv" in format_matrix(_matrix(13), _names(13), 80)


@pytest.mark.parametrize("width", [80, 60])
def test_leaderboard_text_keeps_numbers_whole_and_names_in_full(width):
    names = _names(5)
    board = _board(names)
    text = format_leaderboard(board, "cogym tournament: kuhn_poker-v0, 1200 games (tournaments/kuhn_poker-v0)", width)
    assert "…" not in text and all(len(line) <= width for line in text.splitlines())
    for row in board:
        numbers = [f"{row['rating']:.0f}", f"[{row['lo']:.0f}, {row['hi']:.0f}]", str(row["wins"]), f"{row['score']:.3f}"]
        assert any(all(x in line for x in numbers) for line in text.splitlines()), numbers
        assert row["name"] in _unwrapped(text)
    short = format_leaderboard(_board(["scripted:nash", "tiny"]), "t", 80).splitlines()
    assert short[2].endswith("scripted:nash") and "0.589" in short[2]


def test_tournament_cli_through_a_pipe_prints_numbers_in_full(tmp_path):
    out = tmp_path / "t"
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, "-m", "cogym.runners.cli", "tournament", "--game", "kuhn_poker-v0", "--players",
         "scripted:nash", "scripted:random", "scripted:always_bet", "scripted:calling_station",
         "--games-per-pairing", "6", "--out", str(out), "--no-progress", "--bootstrap", "20", "--no-plots"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    csv_rows = (out / "matrix.csv").read_text().splitlines()[1:]
    for k, line in enumerate(csv_rows, 1):
        expected = ["-" if v == "" else f"{float(v):.2f}" for v in line.split(",")[1:]]
        printed = next(row for row in text.splitlines() if row.startswith(f"P{k} "))
        assert printed.split()[1:] == expected


def test_games_text_at_80_and_40_columns_never_breaks_an_id():
    games = [{"id": "interruptible_verifier-v0", "versions": ["v0"], "zero_sum": False, "reward_range": "[0, 1]",
              "max_turns": 8, "description": "k solvers answer an arithmetic problem; a verifier stops an answer at "
                                             "its first wrong token.",
              "roles": {"solver": ["oracle", "last_digit_wrong", "rambler", "random"], "verifier": []}}]
    for width in (80, 40):
        lines = format_games(games, width).splitlines()
        assert all(len(line) <= width for line in lines)
        assert any(line.startswith("interruptible_verifier-v0") for line in lines)
        solver = [k for k, line in enumerate(lines) if line.strip().startswith("solver")][0]
        twins = " ".join(lines[solver:solver + 3])
        assert all(t in twins.split(", ") or t in re.split(r"[,\s]+", twins) for t in games[0]["roles"]["solver"])
