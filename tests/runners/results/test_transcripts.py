"""Transcripts: what the models wrote, kept by `cogym train` (run.transcripts_every / transcripts_games) and
`cogym tournament --transcripts K` in one row format, printed by `cogym show`; and the package-root exports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cogym.runners.cli import main
from cogym.runners.results.transcripts import (MAX_CHARS, SHOWN_LINES, TRANSCRIPTS_FILE, TranscriptWriter, format_transcript,
                                       read_transcripts, select, transcript_row, transcripts_due)

COGYM = Path(sys.executable).with_name("cogym")
ROW_KEYS = {"source", "iteration", "pairing", "game", "seed", "episode", "max_chars", "moves", "returns"}
MOVE_KEYS = {"seat", "role", "policy", "text"}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kuhn(model_dir, *extra: str):
    from cogym.runners.config.load import load_config

    return load_config(Path(__file__).parents[3] / "cogym" / "configs" / "kuhn_poker.yaml",
                       [f"policies.player.model={model_dir}", "game.num_games=4", "run.checkpoint_every=0",
                        "run.plot=false", "eval.evaluators={}", *extra])


# ------------------------------------------------------------------------------------------ train
@pytest.fixture(scope="module")
def kuhn_run(tiny_model_dir, tmp_path_factory):
    """A 4-iteration run keeping 3 games every 3 iterations, with every rollout it played recorded."""
    from cogym.runners.train.iteration import Sampler
    from cogym.runners.train.loop import train

    played: dict[int, object] = {}
    real = Sampler.sample

    def spy(self, iteration):
        out = real(self, iteration)
        played[iteration] = out[0]
        return out

    cfg = _kuhn(tiny_model_dir, "run.iterations=4", "run.transcripts_every=3", "run.transcripts_games=3")
    path = tmp_path_factory.mktemp("transcripts") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Sampler, "sample", spy)
        train(cfg, run_path=path, progress=False)
    return cfg, path, played


def test_train_keeps_the_first_games_of_iteration_1_every_nth_and_the_last(kuhn_run):
    _, path, _ = kuhn_run
    rows = _rows(path / TRANSCRIPTS_FILE)
    assert [(r["iteration"], r["game"]) for r in rows] == [(it, g) for it in (1, 3, 4) for g in range(3)]
    for r in rows:
        assert set(r) == ROW_KEYS and r["source"] == "train" and r["pairing"] is None
        assert r["episode"] == f"it{r['iteration']}-{r['game']}" and r["max_chars"] == MAX_CHARS
        # "shown" (what the seat was given) once the rollout records it; older runs have the four fields
        assert r["moves"] and all(MOVE_KEYS <= set(m) <= MOVE_KEYS | {"shown"} for m in r["moves"])
        assert r["moves"][0]["seat"] == "player_0" and r["moves"][0]["policy"] == "player"  # first acts first


def test_train_transcripts_are_the_messages_the_rollout_produced(kuhn_run):
    from cogym.runners.train.iteration import grouped, iteration_seeds

    cfg, path, played = kuhn_run
    for r in _rows(path / TRANSCRIPTS_FILE):
        res, g = played[r["iteration"]], r["game"]
        assert r["moves"] == res.moves[g]
        assert r["returns"] == res.returns[g]
        assert r["seed"] == grouped(iteration_seeds(cfg.run.seed, r["iteration"], 4), 1)[g]
        # the model's moves, in order, are the texts of the Turns its learner trained on in that game
        turns = [t for t in res.turns if t.game_index == g]
        assert [m["text"] for m in r["moves"] if m["policy"] == "player"] == [t.text for t in turns]
        assert {t.episode_id for t in turns} <= {r["episode"]}
        assert [m["seat"] for m in r["moves"] if m["policy"] == "player"] == [t.seat for t in turns]
        for m in r["moves"]:
            if m["policy"] != "player":
                assert m["policy"] == "scripted:random" and m["seat"] == "player_1"


def test_iteration_1_replayed_from_scratch_writes_the_same_messages(kuhn_run, tiny_model_dir):
    """Iteration 1 plays the initial weights: a fresh build replaying its rollout gets the stored messages."""
    from cogym.runners.train.build import build
    from cogym.runners.rollout.turns import rollout
    from cogym.runners.train.iteration import Sampler

    cfg, path, _ = kuhn_run
    res = Sampler(build(cfg), rollout).sample(1)[0]
    stored = [r for r in _rows(path / TRANSCRIPTS_FILE) if r["iteration"] == 1]
    assert [r["moves"] for r in stored] == res.moves[:3]
    assert any(m["text"] for r in stored for m in r["moves"] if m["policy"] == "player")


def test_train_transcripts_reach_tensorboard_as_text(kuhn_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, path, _ = kuhn_run
    events = EventAccumulator(str(path / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    tags = [t for t in events.Tags()["tensors"] if t.startswith("transcripts/")]
    assert sorted(tags) == [f"transcripts/game_{g}/text_summary" for g in range(3)]
    game0 = events.Tensors("transcripts/game_0/text_summary")
    assert [e.step for e in game0] == [1, 3, 4]
    first = _rows(path / TRANSCRIPTS_FILE)[0]
    text = game0[0].tensor_proto.string_val[0].decode()
    assert text.startswith("**train  iteration 1  game 0") and first["moves"][0]["text"].strip()[:20] in text


def test_cogym_show_prints_a_training_run(kuhn_run, capsys):
    _, path, _ = kuhn_run
    assert main(["show", str(path), "--width", "80"]) == 0
    out = capsys.readouterr().out
    rows = _rows(path / TRANSCRIPTS_FILE)
    assert f"{path / TRANSCRIPTS_FILE}: 9 of 9 games, iterations 1, 3, 4" in " ".join(out.split("\n\n")[0].split())
    for r in rows:
        assert f"== train  iteration {r['iteration']}  game {r['game']}  seed {r['seed']}  episode {r['episode']} " in out
    assert out.count("rewards: player_0 ") == 9
    assert "  1  player_0  role first  policy player" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    # filters: one iteration, one seat, the last games
    assert main(["show", str(path), "--iteration", "3", "--seat", "player_0", "--last", "2"]) == 0
    out = capsys.readouterr().out
    # the header wraps at the width, and where depends on the length of the temporary path
    assert ": 2 of 9 games" in " ".join(out.split())
    assert out.count("== train  iteration 3") == 2 and "== train  iteration 4" not in out
    assert "player_1  role" not in out
    # --json: the selected rows themselves
    assert main(["show", str(path), "--iteration", "4", "--json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [r for r in rows if r["iteration"] == 4]


def test_cogym_show_names_what_exists_when_a_filter_matches_nothing(kuhn_run, capsys):
    _, path, _ = kuhn_run
    assert main(["show", str(path), "--iteration", "2"]) == 2
    err = capsys.readouterr().err
    assert "no transcripts of iteration 2" in err and "1, 3, 4" in err
    assert main(["show", str(path), "--seat", "nobody"]) == 2
    assert "seats: player_0" in capsys.readouterr().err


def test_cogym_show_in_a_pipe_has_no_color_and_fits_80_columns(kuhn_run):
    _, path, _ = kuhn_run
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([str(COGYM), "show", str(path), "--iteration", "1"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and proc.stdout.count("== train  iteration 1") == 3
    assert max(len(line) for line in proc.stdout.splitlines()) == 80  # the header rules are the pipe's 80


def test_a_run_with_transcripts_off_writes_none_and_show_says_how(tiny_model_dir, tmp_path, capsys):
    from cogym.runners.train.loop import train

    train(_kuhn(tiny_model_dir, "run.iterations=1", "run.transcripts_every=0", "run.tensorboard=false"),
          run_path=tmp_path / "off", progress=False)
    assert (tmp_path / "off" / "metrics.jsonl").is_file() and not (tmp_path / "off" / TRANSCRIPTS_FILE).exists()
    capsys.readouterr()  # what training printed (a one-iteration run may warn about a policy with zero advantages)
    assert main(["show", str(tmp_path / "off")]) == 2
    err = capsys.readouterr().err
    assert "has no transcripts" in err and "run.transcripts_every=N" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def test_transcript_config_keys(tiny_model_dir):
    from cogym.runners.config.load import load_config
    from cogym.core.errors import ConfigError
    from cogym.runners.config.schema import RunConfig

    assert (RunConfig().transcripts_every, RunConfig().transcripts_games) == (10, 2)
    cfg = _kuhn(tiny_model_dir, "run.transcripts_every=5", "run.transcripts_games=1")
    assert (cfg.run.transcripts_every, cfg.run.transcripts_games) == (5, 1)
    assert cfg.to_dict()["run"]["transcripts_every"] == 5  # written to config.yaml, read back on --resume
    for bad in ("run.transcripts_every=-1", "run.transcripts_games=-2"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            load_config(None, [bad])
    with pytest.raises(ConfigError, match="transcripts_evry"):
        load_config(None, ["run.transcripts_evry=3"])
    assert [it for it in range(1, 11) if transcripts_due(it, 4, 10)] == [1, 4, 8, 10]
    assert [it for it in range(1, 11) if transcripts_due(it, 1, 10)] == list(range(1, 11))
    assert not any(transcripts_due(it, 0, 10) for it in range(1, 11))


# ------------------------------------------------------------------------------------- tournament
@pytest.fixture(scope="module")
def kuhn_tournament(tiny_model_dir, tmp_path_factory):
    """A model against two scripted players, keeping 3 games of each pairing, with every rollout recorded."""
    import cogym.runners.tournament.play as rollout_mod  # the module whose rollout plays the batches
    from cogym.runners.tournament.players import resolve_players
    from cogym.runners.tournament.run import run_tournament
    from cogym.runners.tournament.spec import TournamentSpec

    played: dict[str, tuple[list[int], object]] = {}
    real = rollout_mod.rollout

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        played[kwargs["episode_prefix"]] = (list(kwargs["game_indices"]), res)
        return res

    out = tmp_path_factory.mktemp("tournament") / "t"
    players = resolve_players([str(tiny_model_dir), "scripted:random", "scripted:always_bet"])
    spec = TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4, batch_games=5, transcripts=3,
                          prompts={"first": "Poker.", "second": "Poker."}, max_new_tokens=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rollout_mod, "rollout", spy)
        rows = run_tournament(spec, out, progress=False)
    return out, rows, played, [p.name for p in players]


def test_tournament_keeps_the_first_k_games_of_each_pairing(kuhn_tournament):
    out, rows, _, names = kuhn_tournament
    stored = _rows(out / TRANSCRIPTS_FILE)
    assert len(rows) == 3 * 4 and len(stored) == 3 * 3
    assert all("transcript" not in r for r in _rows(out / "results.jsonl"))  # results.jsonl stays as it was
    by_id = {r["id"]: r for r in rows}
    for t in stored:
        assert set(t) == ROW_KEYS and t["source"] == "tournament" and t["iteration"] is None
        a, b, k, order = json.loads(t["game"])
        assert [a, b] == t["pairing"] and 2 * k + order < 3
        result = by_id[t["game"]]
        assert t["seed"] == result["seed"]
        seat_a = "player_0" if order == 0 else "player_1"
        assert t["returns"][seat_a] == result["return_a"]
        assert {m["policy"] for m in t["moves"]} <= {a, b}
        assert all(m["policy"] == (a if m["seat"] == seat_a else b) for m in t["moves"])
    assert sorted({tuple(t["pairing"]) for t in stored}) == sorted(
        (x, y) for i, x in enumerate(names) for y in names[i + 1:])


def test_tournament_transcripts_are_the_messages_the_rollout_produced(kuhn_tournament):
    out, _, played, names = kuhn_tournament
    model = names[0]
    checked = 0
    for t in _rows(out / TRANSCRIPTS_FILE):
        prefix, index = t["episode"].rsplit("-", 1)
        indices, res = played[prefix]
        g = indices.index(int(index))
        assert t["moves"] == res.moves[g] and t["returns"] == res.returns[g]
        turns = [x for x in res.turns if x.game_index == int(index)]
        assert [m["text"] for m in t["moves"] if m["policy"] == model] == [x.text for x in turns]
        checked += bool(turns)
    assert checked >= 4  # the model moved in the games of its two pairings


def test_cogym_show_prints_a_tournament(kuhn_tournament, capsys):
    out, _, _, names = kuhn_tournament
    assert main(["show", str(out), "--player", "scripted:always_bet", "--width", "80"]) == 0
    text = capsys.readouterr().out
    assert ": 6 of 9 games" in " ".join(text.split())  # the header wraps where the temporary path's length puts it
    assert text.count("tournament  ") == 6 and f"{names[1]} vs scripted:always_bet" in text
    assert "seed index 0, seat order 1" in text and "policy scripted:always_bet" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    assert main(["show", str(out), "--iteration", "1"]) == 2  # a tournament has no iterations
    assert "iterations with transcripts: none" in capsys.readouterr().err


def test_tournament_cli_transcripts_option_and_show(tmp_path, capsys):
    out = tmp_path / "t"
    argv = ["tournament", "--game", "kuhn_poker-v0", "--players", "scripted:nash", "scripted:always_check",
            "--games-per-pairing", "4", "--no-progress", "--no-plots", "--bootstrap", "0"]
    assert main([*argv, "--out", str(out)]) == 0
    capsys.readouterr()
    assert not (out / TRANSCRIPTS_FILE).exists()
    assert main(["show", str(out)]) == 2
    assert "--transcripts K" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "t2"), "--transcripts", "2"]) == 0
    capsys.readouterr()
    assert len(_rows(tmp_path / "t2" / TRANSCRIPTS_FILE)) == 2
    assert main(["show", str(tmp_path / "t2")]) == 0
    text = capsys.readouterr().out
    assert text.count("tournament  scripted:nash vs scripted:always_check") == 2
    assert "policy scripted:always_check" in text and "rewards: player_0 " in text


# ------------------------------------------------------------------------------ rows and printing
def _row(texts: list[str], **kw) -> dict:
    moves = [{"seat": f"player_{i % 2}", "role": "r", "policy": "p", "text": t} for i, t in enumerate(texts)]
    return transcript_row("train", moves, {"player_0": 1.0, "player_1": -0.5}, 7, "it1-0", 0, iteration=1, **kw)


def test_a_stored_message_is_bounded_and_says_so():
    row = _row(["x" * (MAX_CHARS + 10), "short"])
    assert len(row["moves"][0]["text"]) == MAX_CHARS and row["moves"][0]["chars"] == MAX_CHARS + 10
    assert "chars" not in row["moves"][1]
    assert f"[stored cut at {MAX_CHARS} of {MAX_CHARS + 10} characters]" in format_transcript(row)
    assert _row(["y" * 50], max_chars=20)["moves"][0] == {"seat": "player_0", "role": "r", "policy": "p",
                                                           "text": "y" * 20, "chars": 50}


def test_messages_wrap_and_are_cut_unless_full():
    long = " ".join(f"word{i}" for i in range(400))
    short_view, full_view = format_transcript(_row([long]), 60), format_transcript(_row([long]), 60, full=True)
    assert all(len(line) <= 60 for line in full_view.splitlines())
    assert "--full shows all" in short_view and "word399" not in short_view
    # header, the note that what the seats were shown is not recorded, who, lines, rewards
    assert len(short_view.splitlines()) == 1 + 1 + 1 + SHOWN_LINES + 1
    assert "word399" in full_view and "--full" not in full_view
    assert "rewards: player_0 +1, player_1 -0.5" in full_view


def _shown_row(shown: list[str | None]) -> dict:
    """A game whose moves carry what each seat was shown (None: a move without the field)."""
    moves = [{"seat": f"player_{i % 2}", "role": "r", "policy": "p", "text": f"move {i}"} | ({} if s is None else {"shown": s})
             for i, s in enumerate(shown)]
    return transcript_row("train", moves, {"player_0": 1.0}, 7, "it1-0", 0, iteration=1)


def test_show_prints_what_each_seat_was_shown_before_its_move(tmp_path, capsys):
    from cogym.runners.results.transcripts import SHOWN_PROMPT_CHARS, SHOWN_PROMPT_LINES

    obs = "\n".join(f"line {i}: " + "fact " * 8 for i in range(12)) + "\nYour move: END-OF-OBSERVATION"
    path = tmp_path / TRANSCRIPTS_FILE
    path.write_text(json.dumps(_shown_row(["card Q; history: none; moves: 1=check 2=bet", obs])) + "\n")
    assert main(["show", str(tmp_path), "--width", "80"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines())
    lines = out.splitlines()
    first = lines.index("  1  player_0  role r  policy p")
    assert lines[first + 1] == "       shown: card Q; history: none; moves: 1=check 2=bet"
    assert lines[first + 2] == "       move 0"
    # a long observation: its start, at most SHOWN_PROMPT_LINES lines and SHOWN_PROMPT_CHARS characters, then a marker
    second = lines.index("  2  player_1  role r  policy p")
    block = lines[second + 1: lines.index("       move 1")]
    assert block[0].startswith("       shown: line 0: fact") and "END-OF-OBSERVATION" not in out
    assert len(block) <= SHOWN_PROMPT_LINES + 1 and sum(len(line.strip()) for line in block[:-1]) <= SHOWN_PROMPT_CHARS
    assert block[-1].strip() == f"... cut ({len(obs)} characters; --full shows all)"
    # --full: all of it, uncut, each line under the label
    assert main(["show", str(tmp_path), "--width", "80", "--full"]) == 0
    full = capsys.readouterr().out
    assert "END-OF-OBSERVATION" in full and "cut (" not in full and all(len(line) <= 80 for line in full.splitlines())
    assert "              line 11: fact" in full  # the observation's own lines, indented under "shown: "
    assert full.index("shown: line 0") < full.index("line 11: fact") < full.index("       move 1")


def test_what_a_seat_was_shown_is_stored_bounded_and_escaped():
    row = _shown_row(["x" * (MAX_CHARS + 5), "\x1b[31mred\x1b[0m", ""])
    assert row["moves"][0]["shown"] == "x" * MAX_CHARS and row["moves"][0]["shown_chars"] == MAX_CHARS + 5
    assert "shown_chars" not in row["moves"][1] and "chars" not in row["moves"][0]
    full = format_transcript(row, full=True)
    assert f"[observation stored cut at {MAX_CHARS} of {MAX_CHARS + 5} characters]" in full
    assert "\x1b" not in full and "shown: \\x1b[31mred" in full
    assert "shown: (empty)" in full


def test_transcripts_without_what_was_shown_say_not_recorded():
    old = format_transcript(_shown_row([None, None]))  # written before the rollout recorded it
    assert old.count("(not recorded)") == 1 and "what each seat was shown: (not recorded)" in old
    assert old.count("shown:") == 1 and "       move 1" in old  # no per-move line
    mixed = format_transcript(_shown_row(["card K", None]))
    assert "shown: card K" in mixed and "       shown: (not recorded)" in mixed
    assert "what each seat was shown" not in mixed
    assert all(len(line) <= 30 for line in format_transcript(_shown_row([None]), 30).splitlines())  # the note wraps


def test_model_output_cannot_drive_the_terminal():
    text = format_transcript(_row(["red \x1b[31mALERT\x1b[0m\rback\n  indented"]))
    assert "\x1b" not in text and "\r" not in text
    assert "red \\x1b[31mALERT\\x1b[0m\\rback" in text and "\n         indented" in text
    assert "(empty message)" in format_transcript(_row(["  \n"]))


def test_read_keeps_a_replayed_game_once_and_skips_a_cut_line(tmp_path):
    path = tmp_path / TRANSCRIPTS_FILE
    a, b = _row(["first"]), _row(["other"])
    b["game"] = 1
    again = _row(["replayed"])
    path.write_text("".join(json.dumps(r) + "\n" for r in (a, b, again)) + '{"source": "tr')
    assert [r["moves"][0]["text"] for r in read_transcripts(tmp_path)] == ["other", "replayed"]
    assert read_transcripts(path) == read_transcripts(tmp_path)
    assert [r["game"] for r in select(read_transcripts(tmp_path), last=1)] == [0]


def test_a_resumed_run_drops_the_transcripts_of_the_iterations_it_replays(tmp_path):
    path = tmp_path / TRANSCRIPTS_FILE
    w = TranscriptWriter(path)
    w.write([{**_row(["a"]), "iteration": it} for it in (1, 2, 3)])
    w.close()
    w = TranscriptWriter(path, start_iteration=3)
    w.write([{**_row(["b"]), "iteration": 3}])
    w.close()
    assert [(r["iteration"], r["moves"][0]["text"]) for r in _rows(path)] == [(1, "a"), (2, "a"), (3, "b")]


def test_show_without_a_directory_or_transcripts_is_one_line_saying_how(tmp_path, capsys):
    assert main(["show", str(tmp_path / "missing")]) == 2
    assert "no such run or tournament directory" in capsys.readouterr().err
    (tmp_path / "results.jsonl").write_text("")
    assert main(["show", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--transcripts K" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------- exports
def test_package_roots_export_the_public_names():
    import cogym.agents as agents
    import cogym.runners as runners
    from cogym.agents import LLMAgent, Policy, Request, SamplingParams, ScriptedAgent, Turn
    from cogym.agents.llm import LLMAgent as LLMAgent2
    from cogym.agents.policy import Policy as Policy2
    from cogym.core.types import SamplingParams as SamplingParams2
    from cogym.agents.scripted import ScriptedAgent as ScriptedAgent2
    from cogym.core.types import Request as Request2, Turn as Turn2
    from cogym.runners import load_config, read_transcripts as read2, run_tournament
    from cogym.runners.config.load import load_config as load_config2
    from cogym.runners.tournament.run import run_tournament as run_tournament2

    assert (Policy, SamplingParams, LLMAgent, ScriptedAgent, Request, Turn) == (
        Policy2, SamplingParams2, LLMAgent2, ScriptedAgent2, Request2, Turn2)
    assert (load_config, run_tournament, read2) == (load_config2, run_tournament2, read_transcripts)
    for pkg in (agents, runners):
        for name in pkg.__all__:
            assert getattr(pkg, name) is not None, f"{pkg.__name__}.{name}"
        assert set(pkg.__all__) <= set(dir(pkg))
        with pytest.raises(AttributeError):
            pkg.NoSuchName  # noqa: B018
    assert "train" not in runners.__all__  # a subpackage: `from cogym.runners.train import train`


def test_package_roots_stay_light():
    """Importing the package roots (and the games) loads no torch: the `cogym` command and envs start fast."""
    code = ("import sys; import cogym.envs, cogym.agents, cogym.core.types, cogym.agents.scripted, cogym.runners, "
            "cogym.runners.cli, cogym.runners.results.transcripts; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_show_has_help_and_is_listed(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["show", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(opt in out for opt in ("--iteration", "--last", "--seat", "--role", "--player", "--full", "--json"))
    assert "what the seat was shown" in " ".join(out.split())
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "show" in capsys.readouterr().out


def test_headers_seats_and_policies_are_escaped_and_paired_games_are_labelled():
    from cogym.runners.results.transcripts import format_transcript

    row = {"source": "tournament", "pairing": ["runs/x\x1b]0;pwned\x07", "runs/x\x1b]0;pwned\x07"],
           "game": json.dumps(["paired", "runs/x", 3]), "seed": 1, "episode": "t0-1",
           "moves": [{"seat": "s\x1b[2J", "role": "r", "policy": "p\x07", "text": "hi"}], "returns": {"s\x1b[2J": 1.0}}
    out = format_transcript(row)
    assert "\x1b" not in out and "\x07" not in out
    assert "tournament (paired)" in out and "seed index 3" in out and " vs " not in out
