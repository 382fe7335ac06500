"""Strings that others wrote reach the terminal as text, never as markup or control sequences (issue 49,
item 6): the run directory in the end-of-run summary, every field of a crafted transcripts.jsonl that
``cogym show`` prints, player names on the tournament leaderboard, and the one-line errors that quote them.

A terminal title is set by ``ESC ] 0 ; TEXT BEL`` (an endpoint named ``%1B]0;pwned%07``); rich reads
``[/b]`` in a run directory as a closing tag (it raised after training) and ``[lr=3e-4]`` as a style
(it vanished from the table).
"""

from __future__ import annotations

import json

import numpy as np

from cogym.runners.cli import main
from cogym.runners.cli.train import print_summary
from cogym.runners.results.leaderboard import print_leaderboard, print_matrix

TITLE = "\x1b]0;pwned\x07"  # sets the terminal's title
CLEAR = "\x1b[2J\r"  # clears the screen, then writes over the line


def _raw_control(text: str) -> list[str]:
    return sorted({ch for ch in text if not ch.isprintable() and ch not in "\n"})


def _summary(run_dir: str) -> dict:
    return {"run_dir": run_dir, "wall_s": 3.0, "iterations": 1, "engines": ["torch"]}


def test_the_summary_shows_the_run_directory_as_written(capsys):
    for run_dir in ("runs/a[/b]", "runs/exp[lr=3e-4]", "runs/[bold]x[/bold]", "runs/end\\"):
        print_summary(_summary(run_dir))  # `runs/a[/b]` raised MarkupError here
        out = capsys.readouterr().out
        assert run_dir in out, out
    print_summary(_summary(f"runs/{TITLE}x"))
    out = capsys.readouterr().out
    assert _raw_control(out) == [] and "\\x1b]0;pwned\\x07x" in out


def test_the_summary_escapes_league_members(capsys):
    summary = {**_summary("runs/r"), "league": [{"member": f"league:[red]{TITLE}", "active": True, "iteration": 1,
                                                   "mu": 25.0, "sigma": 8.0, "games": 4, "learner_win_rate": 0.5}]}
    print_summary(summary)
    out = capsys.readouterr().out
    assert _raw_control(out) == [] and "league:[red]\\x1b" in out


def _move(**fields) -> dict:
    return {"seat": f"player_0{TITLE}", "role": f"player{CLEAR}", "policy": f"scripted:x{TITLE}",
            "shown": f"card K{CLEAR}", "text": f"bet{TITLE}", "error": f"boom{CLEAR}", **fields}


def _crafted(tmp_path) -> str:
    rows = [{"source": f"tournament{TITLE}", "iteration": None, "pairing": [f"a{TITLE}", f"b{CLEAR}"],
             "game": f"[\"a\", \"b\", 0, 0]{TITLE}", "seed": 1, "episode": f"e{CLEAR}", "max_chars": 4000,
             "moves": [_move(chars=9000, shown_chars=7000)], "returns": {f"player_0{TITLE}": 1.0}},
            {"source": "train", "iteration": 3, "pairing": None, "game": 0, "seed": 2, "episode": "it3-0",
             "moves": [_move()], "returns": {"player_0": -1.0}}]
    path = tmp_path / "transcripts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_show_escapes_every_field_of_a_crafted_transcript(tmp_path, capsys):
    path = _crafted(tmp_path)
    for extra in ([], ["--full"], ["--player", f"a{TITLE}"], ["--iteration", "3"]):
        assert main(["show", path, *extra]) == 0
        out = capsys.readouterr().out
        assert _raw_control(out) == [], (extra, _raw_control(out))
        assert "\\x1b]0;pwned\\x07" in out


def test_show_filter_errors_escape_the_names_they_list(tmp_path, capsys):
    path = _crafted(tmp_path)
    for extra in (["--player", "nobody"], ["--seat", "nowhere"], ["--role", f"r{TITLE}"]):
        assert main(["show", path, *extra]) == 2
        err = capsys.readouterr().err
        assert _raw_control(err) == [] and "\\x1b" in err, err


def _board(name: str) -> list[dict]:
    row = {"rating": 10.0, "lo": -5.0, "hi": 25.0, "games": 8, "wins": 5, "draws": 0, "losses": 3, "score": 0.625}
    return [{**row, "name": name, "note": f"rated +inf: never lost ({name})"},
            {**row, "name": "scripted:random", "rating": -10.0}]


def test_the_leaderboard_escapes_player_names(capsys):
    name = f"endpoint{TITLE}[bold]"
    board = _board(name)
    print_leaderboard(board, title=f"cogym tournament: kuhn_poker-v0 ({TITLE})", notes=[f"note about {name}"])
    rows = [{"a": name, "b": "scripted:random", "score": 1.0}, {"a": "scripted:random", "b": name, "score": 0.0}]
    print_matrix(rows, board)
    out = capsys.readouterr().out
    assert _raw_control(out) == [], _raw_control(out)
    assert out.count("endpoint\\x1b]0;pwned\\x07[bold]") >= 3  # the board, its note and the matrix key


def test_the_matrix_formatter_escapes_names_alone():
    from cogym.runners.display import format_matrix

    text = format_matrix(np.array([[np.nan, 1.0], [0.0, np.nan]]), [TITLE, CLEAR], 80)
    assert _raw_control(text) == [] and "\\x1b[2J\\r" in text


def test_plain_keeps_brackets_and_escapes_controls_in_any_rich_table(capsys):
    from rich.console import Console
    from rich.table import Table

    from cogym.runners.display import plain

    table = Table(title=plain("cogym eval: kuhn_poker-v0, ckpt[/b]"))  # cogym eval's title names --model
    table.add_column("evaluator")
    table.add_row(plain(f"vs[red]{TITLE}"))
    Console(width=200).print(table)
    out = capsys.readouterr().out
    assert "ckpt[/b]" in out and "vs[red]\\x1b]0;pwned\\x07" in out and _raw_control(out) == []
