"""What the ``cogym`` commands show: tournament plots and plain-text tables that stay readable with
long player names (``runs/proposer_solver-20261121-130000/step_000300/solver``), from 2 to ~40
players, in a terminal, at 80 columns and through a pipe.

Players are shown by short labels ``P1``..``Pn`` (leaderboard order, so ``Pk`` is the leaderboard's
``#k``) with a key that gives every full name; plots use the names themselves when all are short.
Text never truncates a number: columns are sized to their contents, and a matrix wider than the
terminal is printed in blocks of columns.
"""

from __future__ import annotations

import math
import shutil
import textwrap
from typing import Sequence

import numpy as np
from rich.text import Text

from cogym.core.text import printable

SHORT_NAME = 16  # plots label players by name when every name is at most this long
SCORE_WIDTH = 6  # a matrix column: "  0.62"


def plain(text: object) -> Text:
    """``text`` as a rich renderable shown character for character: no markup (``runs/exp[lr=3e-4]`` keeps
    its brackets, ``runs/a[/b]`` does not close a tag), no emoji codes, and control characters (an escape
    sequence that would set the terminal's title) shown as escapes. Every string a rich table shows
    that a user, a file or a model wrote goes through it."""
    return Text(printable(str(text), keep=""))


def terminal_width() -> int:
    """Columns of the terminal ($COLUMNS first); 80 in a pipe or a file."""
    return max(20, shutil.get_terminal_size((80, 24)).columns)


def player_labels(names: Sequence[str], short: int = SHORT_NAME) -> tuple[list[str], bool]:
    """(labels, keyed): the names themselves when every one is at most ``short`` characters, else
    ``P1``..``Pn`` (keyed: a key must give the full names)."""
    if all(len(n) <= short for n in names):
        return list(names), False
    return [f"P{k}" for k in range(1, len(names) + 1)], True


def wrap_name(name: str, width: int) -> list[str]:
    """A name cut into lines of at most ``width`` characters, after a '/' where one is near the end
    of the line (paths stay readable), else at the width. Nothing is dropped."""
    width = max(8, width)
    lines = []
    while len(name) > width:
        cut = name.rfind("/", width // 2, width) + 1 or width
        lines.append(name[:cut])
        name = name[cut:]
    return lines + [name]


def key_lines(labels: Sequence[str], names: Sequence[str], width: int, pad: int = 0) -> list[str]:
    """``P1  full name`` lines, names aligned after the longest label (or at ``pad``); a long name
    continues on indented lines under itself."""
    pad = pad or max(len(lab) for lab in labels) + 2
    out = []
    for label, name in zip(labels, names):
        parts = wrap_name(name, width - pad)
        out.append(label.ljust(pad) + parts[0])
        out.extend(" " * pad + part for part in parts[1:])
    return out


# ------------------------------------------------------------------------------------------- plots
KEY_FONT = 7  # points; monospace characters are about 0.6 of it wide
KEY_NAME_WIDTH = 64  # characters of a name per key line


def _key_layout(labels: Sequence[str], names: Sequence[str], fig_width: float) -> tuple[list[list[str]], float]:
    """The key's lines split into columns that fit ``fig_width`` inches, and its height in inches."""
    pad = max(len(lab) for lab in labels) + 2
    lines_of = [key_lines([lab], [name], KEY_NAME_WIDTH + pad, pad) for lab, name in zip(labels, names)]
    chars = max(len(line) for lines in lines_of for line in lines)
    col_in = chars * 0.6 * KEY_FONT / 72 + 0.3
    ncols = max(1, min(len(names), int((fig_width - 0.3) // col_in)))
    per_col = math.ceil(len(names) / ncols)
    columns = [[line for lines in lines_of[c * per_col:(c + 1) * per_col] for line in lines] for c in range(ncols)]
    rows = max(len(col) for col in columns)
    return columns, 0.35 + rows * 1.3 * KEY_FONT / 72


def _draw_key(fig, columns: list[list[str]], height: float, fig_width: float, fig_height: float) -> None:
    col_w = (fig_width - 0.3) / len(columns)
    for c, lines in enumerate(columns):
        fig.text((0.2 + c * col_w) / fig_width, (height - 0.15) / fig_height, "\n".join(lines), va="top", ha="left",
                 family="monospace", fontsize=KEY_FONT, linespacing=1.3)


def key_width(labels: Sequence[str], names: Sequence[str]) -> float:
    """Inches that one column of the key needs (the figure is made at least this wide)."""
    chars = max(len(line) for line in key_lines(labels, names, KEY_NAME_WIDTH + 6))
    return chars * 0.6 * KEY_FONT / 72 + 0.6


def heatmap_figure(matrix: np.ndarray, names: Sequence[str]):
    """The cross-play matrix (score of the row player against the column player) as a figure whose
    cells are 0.3-0.55 inch whatever the number of players; long names become P-labels with a key."""
    import matplotlib.pyplot as plt

    n = len(names)
    labels, keyed = player_labels(names)
    cell = min(0.55, max(0.3, 9.0 / n))
    side = cell * n
    chars = max(len(lab) for lab in labels)
    left = 0.3 + 0.075 * chars
    bottom = 0.35 if keyed else 0.25 + 0.055 * chars  # names are turned 45 degrees
    width = max(left + side + 1.0, 4.5, key_width(labels, names) if keyed else 0)
    columns, key_h = _key_layout(labels, names, width) if keyed else ([], 0.0)
    height = key_h + bottom + side + 0.5
    fig = plt.figure(figsize=(width, height), dpi=110)
    ax = fig.add_axes((left / width, (key_h + bottom) / height, side / width, side / height))
    cmap = plt.get_cmap("RdBu").with_extremes(bad="#dddddd")  # grey: never met (and the diagonal)
    im = ax.imshow(np.ma.masked_invalid(matrix), vmin=0, vmax=1, cmap=cmap)
    ax.set_xticks(range(n), labels, rotation=0 if keyed else 45, ha="center" if keyed else "right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    size = float(np.clip(cell * 72 * 0.3, 5, 8))
    for i in range(n):
        for j in range(n):
            if not math.isnan(matrix[i, j]):
                dark = abs(matrix[i, j] - 0.5) > 0.3
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=size,
                        color="white" if dark else "black")
    ax.set_title("score of row against column", fontsize=10)
    cax = fig.add_axes(((left + side + 0.15) / width, (key_h + bottom) / height, 0.15 / width, side / height))
    fig.colorbar(im, cax=cax)
    if keyed:
        _draw_key(fig, columns, key_h, width, height)
    return fig


def ratings_figure(board: Sequence[dict]):
    """Ratings with their 95% intervals, best at the top, one 0.28-inch row per player."""
    import matplotlib.pyplot as plt

    names = [row["name"] for row in board]
    n = len(names)
    labels, keyed = player_labels(names)
    left = 0.3 + 0.075 * max(len(lab) for lab in labels)
    width = max(7.0, left + 5.0, key_width(labels, names) if keyed else 0)
    columns, key_h = _key_layout(labels, names, width) if keyed else ([], 0.0)
    plot_h = 0.28 * n + 0.3
    height = key_h + 0.5 + plot_h + 0.2
    fig = plt.figure(figsize=(width, height), dpi=110)
    ax = fig.add_axes((left / width, (key_h + 0.5) / height, (width - left - 0.3) / width, plot_h / height))
    ys = np.arange(n)[::-1]
    ratings = [row["rating"] for row in board]
    if board[0]["lo"] is not None:
        lo = [row["rating"] - row["lo"] for row in board]
        hi = [row["hi"] - row["rating"] for row in board]
        ax.errorbar(ratings, ys, xerr=[lo, hi], fmt="none", ecolor="C0", capsize=3)
    ax.scatter(ratings, ys, color="k", zorder=3, s=14)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("Bradley–Terry rating (Elo scale), 95% bootstrap interval", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    if keyed:
        _draw_key(fig, columns, key_h, width, height)
    return fig


# -------------------------------------------------------------------------------------------- text
def fill(text: str, width: int, indent: str = "") -> list[str]:
    """Words wrapped to ``width``; a word (an id, a path) is never broken unless longer than a line."""
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=True) or [indent.rstrip()]


def columns(header: Sequence[str], rows: Sequence[Sequence[str]], gap: str = "  ") -> list[str]:
    """Right-aligned columns, each as wide as its widest cell."""
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    return [gap.join(cell.rjust(w) for cell, w in zip(r, widths)) for r in [header, *rows]]


def format_leaderboard(board: Sequence[dict], title: str, width: int) -> str:
    """The leaderboard as text: numbers in full, the player's name last on the row when every name
    fits the width, else on its own (wrapped) line under the row. Rows wider than ``width`` (under
    ~55 columns) run over rather than lose a digit."""
    board = [{**row, "name": printable(row["name"], keep="")} for row in board]  # an endpoint's name is anyone's
    title = printable(title, keep="")
    failed = any("failed" in row for row in board)  # games a player's endpoint made no move in (a tournament with one)
    header = ["#", "rating", "95% CI", "games", "W", "D", "L", "score"] + (["failed"] if failed else [])
    rows = []
    for k, row in enumerate(board, 1):
        ci = f"[{row['lo']:.0f}, {row['hi']:.0f}]" if row["lo"] is not None else "-"
        rows.append([str(k), f"{row['rating']:.0f}", ci, str(row["games"]), str(row["wins"]), str(row["draws"]),
                     str(row["losses"]), f"{row['score']:.3f}"] + ([str(row.get("failed", 0))] if failed else []))
    lines = columns(header, rows)
    inline = len(lines[0]) + 2 + max(len(row["name"]) for row in board) <= width
    out = fill(title, width)
    out += [lines[0] + "  player"] if inline else [lines[0], "    player"]
    for line, row in zip(lines[1:], board):
        if inline:
            out.append(f"{line}  {row['name']}")
        else:
            out.append(line)
            out.extend("    " + part for part in wrap_name(row["name"], width - 4))
    return "\n".join(out)


def format_matrix(matrix: np.ndarray, names: Sequence[str], width: int, max_players: int = 12) -> str:
    """The cross-play matrix as text with P-labels and a key; columns in blocks that fit ``width``."""
    n = len(names)
    if n > max_players:
        return f"cross-play matrix of {n} players: see matrix.csv and heatmap.png"
    names = [printable(name, keep="") for name in names]
    labels = [f"P{k}" for k in range(1, n + 1)]
    pad = max(len(lab) for lab in labels) + 1
    per_block = max(1, (width - pad) // SCORE_WIDTH)
    out = ["cross-play: mean score of row against column (- : never met)"]
    out = fill(out[0], width)
    for start in range(0, n, per_block):
        cols = range(start, min(n, start + per_block))
        if n > per_block:
            out.append(f"columns {labels[cols[0]]}-{labels[cols[-1]]}:")
        out.append(" " * pad + "".join(labels[j].rjust(SCORE_WIDTH) for j in cols))
        for i in range(n):
            cells = ("-" if math.isnan(matrix[i, j]) else f"{matrix[i, j]:.2f}" for j in cols)
            out.append(labels[i].ljust(pad) + "".join(c.rjust(SCORE_WIDTH) for c in cells))
    out.append("players (P<k> is the leaderboard's #k):")
    out.extend("  " + line for line in key_lines(labels, names, width - 2))
    return "\n".join(out)


def format_catalog(source: str, games: Sequence[dict], width: int, note: str = "") -> str:
    """A catalog source's games: counts by player count, then a table of one line each (the name after
    ``<source>:``, players, chance, information, zero-sum, reward range), or where that is wider than
    ``width``, each name with its facts wrapped under it."""
    by_players: dict[int, int] = {}
    for g in games:
        by_players[g["players"]] = by_players.get(g["players"], 0) + 1
    counts = ", ".join(f"{k} with {n} player{'s' if n > 1 else ''}" for n, k in sorted(by_players.items()))
    out = fill(f"{source} games ({len(games)}; play one as {source}:<game>): {counts}", width)
    header = ("game", "players", "chance", "information", "zero-sum", "rewards")
    rows = [(g["id"].split(":", 1)[1], str(g["players"]), g["chance"], g["information"], "yes" if g["zero_sum"] else "no", g["reward_range"])
            for g in games]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    if max(map(len, table)) <= width:
        out += ["", *table]
    else:  # too narrow for one line a game: the id, then its facts indented
        for r in rows:
            out += ["", r[0], *fill(f"{r[1]} players, chance {r[2]}, {r[3]} information, zero-sum {r[4]}, "
                                    f"rewards {r[5]}", width, "  ")]
    if note:
        out += ["", *fill(note, width)]
    return "\n".join(out)


def format_games(games: Sequence[dict], width: int, note: str = "") -> str:
    """Registered games as one block each: the id and its versions, its facts, the description, then
    each role with its scripted twins; everything wrapped to ``width``, ids and names never broken."""
    out = fill(f"registered games ({len(games)})", width)
    for g in games:
        out += ["", *fill(f"{g['id']}  (versions: {', '.join(g['versions'])})", width)]
        out += fill(f"zero-sum: {'yes' if g['zero_sum'] else 'no'}   reward range: {g['reward_range']}   "
                     f"at most {g['max_turns']} turns", width, "  ")
        out += fill(g["description"], width, "  ")
        out.append("  roles (scripted twins, for scripted:<twin> players and fixed seats):"
                   if width >= 72 else "  roles (scripted twins):")
        pad = max(len(role) for role in g["roles"]) + 6
        for role, twins in g["roles"].items():
            lines = fill(", ".join(twins) if twins else "-", width, " " * pad)
            out.append(f"    {role}".ljust(pad) + lines[0][pad:])
            out.extend(lines[1:])
    if note:
        out += ["", *fill(note, width)]
    return "\n".join(out)
