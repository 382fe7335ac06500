"""The config boundary (issue 49, item 6): every hostile config, override or transcripts file that used to
end in a traceback, a hang or a crash deep inside training ends in one line on stderr and exit 2.

Most cases call ``cogym.runners.cli.main`` in process (each fails while the config is read, before any
model is built); a few run the real command in a subprocess to show that no traceback reaches the user
and that an alias bomb returns at all (a subprocess timeout, not a timing assertion: before the fix it
hung with memory growing).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cogym.core.errors import ConfigError
from cogym.core.text import brief, printable, twin_failure, QUOTED_CHARS
from cogym.runners.cli import main
from cogym.runners.config.load import load_config
from cogym.runners.config.schema import default_config_path
from cogym.runners.config.safe_yaml import MAX_CONFIG_BYTES, MAX_DEPTH, parse_yaml

# Aliases of aliases, each ten times the last: 10**8 strings once expanded (a "billion laughs").
ALIAS_BOMB = "run:\n  name:\n    - &a0 [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"    - &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
# 60 anchors, each 80 deep around an alias of the one before: each under MAX_DEPTH as written, 4,700 deep expanded
# (read fine before, then RecursionError wherever the config was dumped or compared).
CHAINED_ANCHORS = "game:\n  kwargs:\n    a0: &a0 " + "[" * 80 + "1" + "]" * 80 + "\n" + "".join(
    f"    a{i}: &a{i} " + "[" * 79 + f"*a{i - 1}" + "]" * 79 + "\n" for i in range(1, 60))
LONGEST_LINE = 2 * QUOTED_CHARS + 300  # the message around a quoted value (key path, hint) is short


def _one_line(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{err[:3000]}"
    assert "Traceback" not in err
    assert lines[0].startswith(f"cogym {command}: error: "), lines[0]
    assert len(lines[0]) < LONGEST_LINE, f"{len(lines[0])} characters: {lines[0][:300]}..."
    return lines[0]


def _cli_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    return _one_line(captured.err, argv[0])


def _write(path: Path, data: str | bytes) -> str:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


# ------------------------------------------------------------------------------ cogym train configs
TRAIN_FILES = {  # name -> (file contents, what the one line says)
    "alias_bomb": (ALIAS_BOMB, "once its aliases are expanded"),
    "recursive_alias": ("run:\n  name: &a [*a]\n", "recursive alias"),
    "chained_anchors_each_80_deep": (CHAINED_ANCHORS, f"more than {MAX_DEPTH} levels deep once its aliases are expanded"),
    "non_utf8": (b"run:\n  name: \"\xff\xfe\"\n", "not UTF-8"),
    "nested_5000_deep": ("game:\n  kwargs:\n    a: " + "[" * 5000 + "]" * 5000 + "\n", f"more than {MAX_DEPTH} levels"),
    "nested_mappings_5000_deep": ("game:\n  kwargs:\n    a: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "levels deep"),
    "integer_of_5000_digits": ("run:\n  seed: " + "7" * 5000 + "\n", "more than 4300 digits"),
    "a_list_not_a_mapping": ("- run\n- game\n", "mapping at the top level"),
    "bad_date": ("run:\n  name: 2026-13-45\n", "not valid YAML"),
    "escape_character": ("run:\n  name: a\x1b]0;pwned\x07\n", "unacceptable character #x001b"),
    "too_large": ("run:\n  name: x\n# " + "x" * MAX_CONFIG_BYTES + "\n", "larger than 1 MiB"),
    "long_string_value": ("run:\n  seed: '" + "9" * 100_000 + "'\n", "run.seed must be an integer"),
    "nan_in_file": ("policies:\n  solver:\n    sampling: {temperature: .nan}\n", "must be a finite number"),
}


@pytest.mark.parametrize("case", sorted(TRAIN_FILES))
def test_a_hostile_config_file_is_one_line(case, tmp_path, capsys):
    data, says = TRAIN_FILES[case]
    line = _cli_error(capsys, ["train", _write(tmp_path / f"{case}.yaml", data)])
    assert says in line


TRAIN_OVERRIDES = {  # the item 7 list of issue 49, and what a user can type next to it
    "sampling.temperature=.nan": "sampling.temperature must be a finite number",
    "policies.solver.sampling.temperature=.nan": "policies.solver.sampling.temperature must be a finite number",
    "policies.solver.sampling.top_p=.inf": "must be a finite number",
    "learners.solver.lr=1e999": "learners.solver.lr must be a finite number",
    "learners.solver.clip_low=-.inf": "must be a finite number",
    f"run.seed={2**70}": "run.seed must be an integer of 64 bits",
    f"run.seed={2**32}": "run.seed must be < 2**32",
    f"game.num_games={10**9}": "game.num_games must be at most 100,000",
    "run.name=[unclosed": "not valid YAML",
    "run.iterations=many": "run.iterations must be an integer",
    "run.name=&a [*a]": "recursive alias",
    "run=": "run must be a mapping",
    "run.name=" + "x" * 300: "each part of it must be at most 200 bytes",  # was OSError: File name too long
    'run.name="a\\0b"': "must not contain a NUL character",
    "run.name=a\x1b]0;pwned\x07": "unacceptable character #x001b",  # YAML's reader refuses it; the line escapes it
    "run.name=\udcff": "unacceptable character #xdcff",  # a byte of a non-UTF-8 argv
    "game.id=[" + "1," * 10_000 + "1]": "game.id must be a string",
}


@pytest.mark.parametrize("override", sorted(TRAIN_OVERRIDES))
def test_a_hostile_override_is_one_line(override, capsys):
    assert TRAIN_OVERRIDES[override] in _cli_error(capsys, ["train", override])


def test_a_directory_or_a_missing_file_as_config_is_one_line(tmp_path, capsys):
    assert "is a directory" in _cli_error(capsys, ["train", str(tmp_path)])
    assert "does not exist" in _cli_error(capsys, ["train", str(tmp_path / "none.yaml")])


def test_aliases_within_the_budget_still_work(tmp_path):
    text = default_config_path().read_text()
    shared = "sampling: {temperature: 1.0, max_new_tokens: 8}"
    assert text.count(shared) == 2  # the proposer's and the solver's: the second becomes an alias of the first
    head, tail = text.split(shared, 1)
    (tmp_path / "shared.yaml").write_text(head + "sampling: &s {temperature: 0.7, max_new_tokens: 8}"
                                          + tail.replace(shared, "sampling: *s"))
    loaded = load_config(tmp_path / "shared.yaml")
    assert loaded.policies["proposer"].sampling.temperature == loaded.policies["solver"].sampling.temperature == 0.7
    assert parse_yaml("a: &x [1, 2]\nb: [*x, *x]", "t") == {"a": [1, 2], "b": [[1, 2], [1, 2]]}


def test_an_error_quotes_at_most_a_bounded_part_of_a_value():
    with pytest.raises(ConfigError) as exc:
        load_config(None, ["run.name=[" + ", ".join(["'" + "y" * 1000 + "'"] * 1000) + "]"])
    assert len(str(exc.value)) < LONGEST_LINE and "run.name must be a string" in str(exc.value)
    assert len(brief("z" * 10**6)) <= QUOTED_CHARS and len(brief(10**5000)) <= QUOTED_CHARS
    assert printable("a\x1b]0;t\x07\u202eb\n") == "a\\x1b]0;t\\x07\\u202eb\n"


def test_a_raising_twin_is_named_in_one_escaped_line():
    # One message for the play loop's scripted agent and check_game; check_game's own copy used to quote
    # the exception raw (an escape sequence, a newline).
    try:
        raise ValueError("bad bid \x1b]0;pwned\x07\n" + "x" * 1000)
    except ValueError as exc:
        line = twin_failure("broken", "bidder_0", "bidder", exc)
    assert line.startswith("scripted twin 'broken' of seat 'bidder_0' (role 'bidder') raised ValueError: bad bid "
                           "\\x1b]0;pwned\\x07\\n")
    assert printable(line, keep="") == line and len(line) < LONGEST_LINE and "test_config_boundary.py:" in line


# -------------------------------------------------------------------------------- cogym tournament
TOURNAMENT = {  # extra argv -> what the one line says
    ("--games-per-pairing", str(10**12)): "tournament.games_per_pairing must be at most 1,000,000",
    (f"tournament.seed={2**70}",): "tournament.seed must be an integer of 64 bits",
    ("--seed", str(2**40)): "tournament.seed must be < 2**32",
    ("--temperature", "nan"): "sampling.temperature must be a finite number",
    ("--batch-games", str(10**9)): "tournament.batch_games must be at most 100,000",
    ("--kwarg", "deck=&a [*a]"): "recursive alias",
    ("tournament.sides=5",): "tournament.sides must be lists of seats",  # was a TypeError deep in the schedule
}


@pytest.mark.parametrize("extra", sorted(TOURNAMENT))
def test_a_hostile_tournament_setting_is_one_line(extra, tmp_path, capsys):
    argv = ["tournament", "--game", "kuhn_poker-v0", "--players", "scripted:random", "scripted:always_bet",
            "--out", str(tmp_path / "t"), "--no-progress", *extra]
    assert TOURNAMENT[extra] in _cli_error(capsys, argv)
    assert not (tmp_path / "t").exists()  # refused before a game was played


def test_a_hostile_tournament_config_file_is_one_line(tmp_path, capsys):
    path = _write(tmp_path / "t.yaml", ALIAS_BOMB.replace("run:\n  name:", "tournament:\n  players:"))
    assert "once its aliases are expanded" in _cli_error(capsys, ["tournament", "--config", path])


# ------------------------------------------------------------------------------------- cogym show
def _move(**extra) -> dict:
    return {"seat": "player_0", "role": "player", "policy": "p", "shown": "card K", "text": "bet", **extra}


def _row(**extra) -> dict:
    return {"source": "train", "iteration": 1, "pairing": None, "game": 0, "seed": 3, "episode": "it1-0",
            "max_chars": 4000, "moves": [_move()], "returns": {"player_0": 1.0}, **extra}


SHOW = {  # a transcripts.jsonl line -> what the one line says
    "a_list": ("[1, 2]", "not a JSON object"),
    "moves_not_a_list": (json.dumps(_row(moves=5)), "moves must be a list"),
    "move_not_an_object": (json.dumps(_row(moves=["bet"])), "move 1 must be a JSON object"),
    "chars_not_an_int": (json.dumps(_row(moves=[_move(chars="\x1b]0;pwned\x07")])), "chars must be an integer"),
    "iteration_a_string": (json.dumps(_row(iteration="\x1b[2J")), "iteration must be an integer"),
    "pairing_of_numbers": (json.dumps(_row(source="tournament", pairing=[1, 2])), "pairing must be two player names"),
    "returns_a_string": (json.dumps(_row(returns="all")), "returns must map seats to numbers"),
    "seat_missing": (json.dumps(_row(moves=[{"text": "x"}])), "seat must be a string"),
    "nested_5000_deep": ('{"moves": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
    "no_json_at_all": ("not json\nat all", "holds no transcript rows"),
}


@pytest.mark.parametrize("case", sorted(SHOW))
def test_a_malformed_transcripts_file_is_one_line(case, tmp_path, capsys):
    line, says = SHOW[case]
    good = "" if case == "no_json_at_all" else json.dumps(_row()) + "\n"  # a bad row after a good one still stops
    path = _write(tmp_path / "transcripts.jsonl", good + line + "\n")
    err = _cli_error(capsys, ["show", path])
    assert says in err and "\x1b" not in err


def test_a_torn_last_line_and_bad_bytes_still_show(tmp_path, capsys):
    not_utf8 = json.dumps(_row(game=1, episode="it1-X")).encode().replace(b"X", b"\xff")
    path = _write(tmp_path / "transcripts.jsonl", json.dumps(_row()).encode() + b"\n" + not_utf8 + b"\n" + b'{"source": "tr')
    assert main(["show", path]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 games" in out


# ------------------------------------------------------------------- the real command, in a subprocess
def _cogym(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # A generous bound for a loaded 2-core machine: before the fix the alias bomb never returned.
    return subprocess.run([sys.executable, "-m", "cogym.runners.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=180)


def test_the_command_prints_one_line_and_no_traceback(tmp_path):
    bomb = _write(tmp_path / "bomb.yaml", ALIAS_BOMB)
    proc = _cogym(["train", bomb], tmp_path)
    assert proc.returncode == 2 and "once its aliases are expanded" in _one_line(proc.stderr, "train")
    bad = _write(tmp_path / "transcripts.jsonl", json.dumps(_row(moves=[_move(chars="many")])) + "\n")
    proc = _cogym(["show", bad], tmp_path)
    assert proc.returncode == 2 and "chars must be an integer" in _one_line(proc.stderr, "show")


def test_another_runs_config_and_an_endpoint_query_are_read_under_the_same_bounds(tmp_path):
    from cogym.runners.tournament.players import _run_tree, endpoint_player

    (tmp_path / "config.yaml").write_text(ALIAS_BOMB)  # the run directory of a checkpoint someone sent
    with pytest.raises(ConfigError, match="once its aliases are expanded"):
        _run_tree(tmp_path)
    with pytest.raises(ConfigError, match="recursive alias"):
        endpoint_player("endpoint:http://127.0.0.1:9/v1?model=m&timeout_s=%26a%20%5B%2Aa%5D")
