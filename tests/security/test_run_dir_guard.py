"""The guarded run directory (issue 49, item 2): cogym train and cogym tournament never destroy, read or
write through files they did not write, write every file atomically, and resume across a torn line.

The runs are the smallest there are: a scripted proposer, the test model as solver on the torch
engine, 2 games of 2 solvers, 4 new tokens, 1-3 iterations; tournaments of scripted players."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from cogym.runners import rundir
from cogym.runners.cli import main
from cogym.runners.rundir import RunDirError
from cogym.runners.tournament.players import resolve_players
from cogym.runners.tournament.run import run_tournament
from cogym.runners.tournament.spec import TournamentSpec


def _train(model_dir: Path, run: Path | str, *extra: str) -> int:
    return main(["train", "--no-progress", "--run-dir", str(run), f"policies.proposer.model={model_dir}",
                 f"policies.solver.model={model_dir}", "seats.proposer=scripted:random", "learners.solver.engine=torch",
                 "game.num_games=2", "game.kwargs.num_solvers=2", "policies.solver.sampling.max_new_tokens=4",
                 "eval.declared=false", "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=1",
                 "run.iterations=1", *extra])


def _resume(run: Path, *extra: str) -> int:
    return main(["train", "--no-progress", "--resume", str(run), *extra])


def _one_line(err: str) -> str:
    # Warnings about the training itself (a policy that learns nothing in so short a run) are not errors.
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("cogym train: warning:")]
    assert len(lines) == 1 and "Traceback" not in err, f"expected one line, got:\n{err}"
    return lines[0]


def _digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` (links not followed) with the hash of its bytes."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """A user's directory: a commented config, notes, a tb/ and a checkpoints/ of their own."""
    d = tmp_path / "mine"
    (d / "tb").mkdir(parents=True)
    (d / "checkpoints" / "keep").mkdir(parents=True)
    (d / "config.yaml").write_text("# my carefully commented config\nrun: {iterations: 5}\n")
    (d / "notes.txt").write_text("do not lose me\n")
    (d / "tb" / "mine.txt").write_text("mine\n")
    (d / "checkpoints" / "keep" / "weights.bin").write_bytes(b"\x00" * 16)
    return d


def test_a_directory_cogym_did_not_make_is_refused_and_overwrite_keeps_foreign_files(tiny_model_dir, foreign, capsys):
    before = _digest(foreign)
    assert _train(tiny_model_dir, foreign) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(foreign) in line and "--overwrite" in line and "--resume" in line
    assert _digest(foreign) == before  # nothing written, nothing removed
    assert not (foreign / rundir.MARKER).exists()

    assert _train(tiny_model_dir, foreign, "--overwrite") == 0
    after = _digest(foreign)
    for name in ("notes.txt", "tb/mine.txt", "checkpoints/keep/weights.bin"):
        assert after[name] == before[name], name  # every file cogym does not write is kept, byte for byte
    assert "carefully" not in (foreign / "config.yaml").read_text()  # its own name: replaced
    assert (foreign / "checkpoints" / "step_000001" / rundir.CHECKPOINT_MARKER).is_file()
    assert rundir.marker_kind(foreign) == "train"
    capsys.readouterr()
    # Now it holds a cogym run: a new one there needs --overwrite (or --resume) like any other.
    assert _train(tiny_model_dir, foreign) == 2
    assert "earlier cogym train run" in _one_line(capsys.readouterr().err)


def test_run_dir_dot_with_the_users_files_is_refused_in_one_line(foreign):
    # The CLI's exit code and stderr as a user sees them: a real process.
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    before = _digest(foreign)
    proc = subprocess.run([sys.executable, "-m", "cogym.runners.cli", "train", "--run-dir", ".", "run.iterations=1"],
                          cwd=foreign, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    line = _one_line(proc.stderr)
    assert line.startswith("cogym train: error: --run-dir . ") and "--overwrite" in line and "--resume" in line
    assert _digest(foreign) == before


def test_resume_never_writes_through_a_symbolic_link_out_of_the_run(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(tiny_model_dir, run, "run.transcripts_every=1", "run.transcripts_games=1") == 0
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    (run / "transcripts.jsonl").unlink()
    (run / "transcripts.jsonl").symlink_to(notes)
    capsys.readouterr()
    assert _resume(run, "run.iterations=2") == 2
    line = _one_line(capsys.readouterr().err)
    assert "transcripts.jsonl" in line and "symbolic link" in line
    assert notes.read_text() == "my notes\n"


def test_atomic_writes_replace_a_link_and_appends_refuse_one(tmp_path):
    (tmp_path / "run").mkdir()
    target = tmp_path / "target.txt"
    target.write_text("theirs\n")
    link = tmp_path / "run" / "summary.json"
    link.symlink_to(target)
    rundir.write_json(link, {"a": 1})  # the link is replaced, its target untouched
    assert not link.is_symlink() and json.loads(link.read_text()) == {"a": 1} and target.read_text() == "theirs\n"
    (tmp_path / "run" / "metrics.jsonl").symlink_to(target)
    with pytest.raises(RunDirError, match="symbolic link"):
        rundir.open_append(tmp_path / "run" / "metrics.jsonl")
    with pytest.raises(RunDirError, match="symbolic link"):
        rundir.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert target.read_text() == "theirs\n"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["metrics.jsonl", "summary.json"]  # no temp left


def test_resume_drops_a_torn_last_line_and_says_so(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(tiny_model_dir, run, "run.iterations=2", "run.transcripts_every=1", "run.transcripts_games=1") == 0
    for name in ("metrics.jsonl", "transcripts.jsonl"):  # kill -9 while iteration 3's rows were written
        with open(run / name, "a") as f:
            f.write('{"iteration": 3, "rollout_s": 0.')
    capsys.readouterr()
    assert _resume(run, "run.iterations=3") == 0
    err = capsys.readouterr().err
    assert f"dropped the last line of {run / 'metrics.jsonl'}" in err
    assert f"dropped the last line of {run / 'transcripts.jsonl'}" in err
    its = [r["iteration"] for r in rundir.read_jsonl(run / "metrics.jsonl") if "rollout_s" in r]
    assert its == [1, 2, 3]
    assert [r["iteration"] for r in rundir.read_jsonl(run / "transcripts.jsonl")] == [1, 2, 3]


def test_resuming_a_finished_run_keeps_its_summary(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(tiny_model_dir, run) == 0
    summary = (run / "summary.json").read_bytes()
    assert "solver_reward_last5" in json.loads(summary)  # what a resume of a finished run used to lose
    metrics = (run / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert _resume(run) == 0
    assert "nothing to resume" in _one_line(capsys.readouterr().err)
    assert (run / "summary.json").read_bytes() == summary
    assert (run / "metrics.jsonl").read_bytes() == metrics


def test_a_checkpoint_directory_cogym_did_not_write_is_never_deleted(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(tiny_model_dir, run) == 0
    planted = run / "checkpoints" / "step_000002"
    planted.mkdir()
    (planted / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    assert _resume(run, "run.iterations=2") == 2  # iteration 2's checkpoint would replace it: refused before training
    line = _one_line(capsys.readouterr().err)
    assert str(planted) in line and "not written by cogym" in line
    assert (planted / "notes.txt").read_text() == "mine\n"
    # A temporary name holding what cogym did not write (a half save of an earlier version): written aside.
    planted.rename(tmp_path / "moved_away")
    half = run / "checkpoints" / ".tmp_step_000002"
    half.mkdir()
    (half / "notes.txt").write_text("mine\n")
    assert _resume(run, "run.iterations=2") == 0
    assert (half / "notes.txt").read_text() == "mine\n" and (run / "checkpoints" / "step_000002").is_dir()
    capsys.readouterr()
    # A new run that might replace it is refused before it starts, with --overwrite too.
    fresh = tmp_path / "fresh"
    (fresh / "checkpoints" / "step_000001").mkdir(parents=True)
    (fresh / "checkpoints" / "step_000001" / "notes.txt").write_text("mine\n")
    assert _train(tiny_model_dir, fresh, "--overwrite") == 2
    assert "not written by cogym" in _one_line(capsys.readouterr().err)
    assert (fresh / "checkpoints" / "step_000001" / "notes.txt").read_text() == "mine\n"


def _scripted_spec() -> TournamentSpec:
    return TournamentSpec(game="kuhn_poker-v0", players=resolve_players(["scripted:nash", "scripted:random"]),
                          games_per_pairing=2)


def test_tournament_out_is_guarded(tiny_model_dir, tmp_path, foreign, capsys):
    before = _digest(foreign)
    with pytest.raises(RunDirError, match="--overwrite"):
        run_tournament(_scripted_spec(), foreign, progress=False)
    assert _digest(foreign) == before
    assert len(run_tournament(_scripted_spec(), foreign, progress=False, overwrite=True)) == 2
    after = _digest(foreign)
    assert all(after[name] == digest for name, digest in before.items())  # none of its names is the tournament's
    assert len(run_tournament(_scripted_spec(), foreign, progress=False)) == 2  # a rerun: its own directory now
    # A training run's directory is not a tournament's, and a link out of --out is neither read nor written.
    run = tmp_path / "run"
    rundir.create(run, "train")
    (run / "config.yaml").write_text("{}\n")
    with pytest.raises(RunDirError, match="made by cogym train"):
        run_tournament(_scripted_spec(), run, progress=False)
    out, theirs = tmp_path / "t", tmp_path / "theirs.jsonl"
    theirs.write_text("{}\n")
    run_tournament(_scripted_spec(), out, progress=False)
    (out / "results.jsonl").unlink()
    (out / "results.jsonl").symlink_to(theirs)
    with pytest.raises(RunDirError, match="symbolic link"):
        run_tournament(_scripted_spec(), out, progress=False)
    assert theirs.read_text() == "{}\n"
    # From the command line: one line, exit 2.
    argv = ["tournament", "--game", "kuhn_poker-v0", "--players", "scripted:nash", "scripted:random",
            "--games-per-pairing", "2", "--no-progress", "--no-plots", "--bootstrap", "0"]
    capsys.readouterr()
    assert main([*argv, "--out", str(foreign / "notes.txt")]) == 2
    assert "is a file" in _one_line(capsys.readouterr().err)
    assert main([*argv, "--out", str(out)]) == 2
    assert "symbolic link" in _one_line(capsys.readouterr().err)


def test_a_tournament_rerun_drops_a_torn_transcript_line(tmp_path, capsys):
    out = tmp_path / "t"
    spec = _scripted_spec()
    spec.transcripts = 4
    run_tournament(spec, out, progress=False)
    with open(out / "transcripts.jsonl", "a") as f:
        f.write('{"source": "tournament", "gam')  # a kill while a row was written
    spec.games_per_pairing = 4  # two more games: their transcripts are appended
    run_tournament(spec, out, progress=False)
    assert "dropped the last line" in capsys.readouterr().err
    lines = (out / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == 4 and all(isinstance(json.loads(line), dict) for line in lines)


def _unwritable(tmp_path: Path) -> Path:
    """A directory this process cannot create: under a read-only directory, or (as root, whom
    permissions do not stop) under /sys, which refuses new directories to everyone."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return ro / "run"
    if not Path("/sys/kernel").is_dir():
        pytest.skip("running as root without /sys: no directory here refuses writes")
    return Path("/sys/cogym-guard-test/run")


def test_a_run_dir_that_is_a_file_or_unwritable_is_one_line(tiny_model_dir, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    assert _train(tiny_model_dir, afile) == 2
    assert "is a file" in _one_line(capsys.readouterr().err)
    assert afile.read_text() == "x\n"
    assert _train(tiny_model_dir, afile / "run") == 2
    assert "is a file" in _one_line(capsys.readouterr().err)
    target = _unwritable(tmp_path)
    assert _train(tiny_model_dir, target) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(target) in line and ("not writable" in line or "cannot write" in line)
    assert main(["tournament", "--game", "kuhn_poker-v0", "--players", "scripted:nash", "scripted:random",
                 "--games-per-pairing", "2", "--no-progress", "--no-plots", "--out", str(target)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("cogym tournament: error: --out") and ("not writable" in line or "cannot write" in line)


def test_trainer_state_of_the_wrong_types_is_one_line(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(tiny_model_dir, run) == 0
    state = run / "checkpoints" / "step_000001" / "trainer_state.json"
    for bad, needle in (('{"iteration": "1"}', "iteration must be an integer"), ("[1]", "JSON object"),
                        ('{"iteration": 1, "world_size": 0}', "world_size must be an integer >= 1"),
                        ("{not json", "is not JSON")):
        state.write_text(bad)
        capsys.readouterr()
        assert _resume(run, "run.iterations=2") == 2, bad
        assert needle in _one_line(capsys.readouterr().err), bad


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_malicious_pickle_in_a_checkpoint_is_refused_in_one_line(tiny_model_dir, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert _train(tiny_model_dir, run, "learners.proposer.engine=torch") == 0
    optim = run / "checkpoints" / "step_000001" / "learners" / "solver" / "optimizer.pt"
    assert optim.is_file()
    optim.write_bytes(pickle.dumps(_Payload()))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert _resume(run, "run.iterations=2") == 2
    line = _one_line(capsys.readouterr().err)
    assert "weights_only" in line and str(optim.parent) in line
    assert not (tmp_path / "pwned").exists()


def test_a_run_dir_name_the_system_refuses_is_one_line(tmp_path: Path) -> None:
    from cogym.runners import rundir

    with pytest.raises(rundir.RunDirError, match="File name too long") as err:  # ENAMETOOLONG from Path.exists
        rundir.claim(tmp_path / ("x" * 300), "train")
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


@pytest.mark.parametrize("rounds", [None, 5, [[["nobody", "x"]]], [["a"]], [[[1, 2, 3]]], [[["a"], ["b"]]], "huge",
                                    "deep"])
def test_a_schedule_json_of_the_wrong_shape_is_paired_anew(tmp_path: Path, rounds) -> None:
    from cogym.runners.tournament.schedule import Schedule

    spec = TournamentSpec(game="kuhn_poker-v0", players=resolve_players(["scripted:random", "scripted:nash"]))
    stamp = Schedule(spec, tmp_path).stamp
    good = [[[p.name for p in spec.players]]]
    (tmp_path / "schedule.json").write_text(json.dumps({**stamp, "rounds": good}))
    assert Schedule(spec, tmp_path).rounds == good  # a well-formed schedule of these players is replayed
    text = {None: "[1, 2]", "huge": '{"rounds": ' + "9" * 5000 + "}", "deep": "[" * 100_000}.get(rounds) \
        if rounds in (None, "huge", "deep") else json.dumps({**stamp, "rounds": rounds})
    (tmp_path / "schedule.json").write_text(text)
    assert Schedule(spec, tmp_path).rounds == []  # a malformed one is paired anew, not a traceback


def test_a_new_run_over_an_earlier_run_needs_overwrite_which_removes_its_checkpoints(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(tiny_model_dir, run, "run.iterations=2") == 0
    before = _digest(run)
    capsys.readouterr()
    assert _train(tiny_model_dir, run) == 2  # (before: accepted, keeping step_000002 for a later --resume to pick)
    line = _one_line(capsys.readouterr().err)
    assert "earlier cogym train run" in line and "--resume" in line and "--overwrite" in line
    assert _digest(run) == before
    (run / "checkpoints" / "keep").mkdir()  # not a checkpoint of cogym's: stays
    assert _train(tiny_model_dir, run, "--overwrite", "run.seed=7") == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["keep", "step_000001"]
    assert [r["iteration"] for r in rundir.read_jsonl(run / "metrics.jsonl") if "rollout_s" in r] == [1]
    capsys.readouterr()
    assert _resume(run, "run.iterations=2") == 0  # continues the new run, not the earlier one
    state = json.loads((run / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert state["seed"] == 7
    assert [r["iteration"] for r in rundir.read_jsonl(run / "metrics.jsonl") if "rollout_s" in r] == [1, 2]


DEEP = "[" * 100_000  # json's reader: RecursionError
HUGE = '{"id": "x", "n": ' + "9" * 5000 + "}"  # int(): ValueError past 4300 digits


def test_parse_json_bounds_depth_and_numbers():
    for text in (DEEP, HUGE, "[" * (rundir.MAX_JSON_DEPTH + 1) + "]" * (rundir.MAX_JSON_DEPTH + 1)):
        with pytest.raises(rundir.JSONLimitError):
            rundir.parse_json(text)
    with pytest.raises(json.JSONDecodeError):
        rundir.parse_json('{"a": ')
    # A cut string full of escaped quotes is scanned once (a scan that restarted at each quote took
    # minutes on this line: quadratic).
    with pytest.raises(ValueError):
        rundir.parse_json("[" * 101 + '"' + '\\"x' * 100_000)
    brackets = '"' + "[{" * 500 + '\\"'  # brackets inside strings do not nest
    assert rundir.parse_json(json.dumps({"text": brackets, "moves": [{"a": [1]}] * 300})) == \
        {"text": brackets, "moves": [{"a": [1]}] * 300}
    nested = "[" * rundir.MAX_JSON_DEPTH + "]" * rundir.MAX_JSON_DEPTH
    assert isinstance(rundir.parse_json(nested), list)


@pytest.mark.parametrize("bad", [DEEP, HUGE])
def test_jsonl_readers_drop_a_bad_last_line_and_refuse_one_elsewhere_without_a_traceback(tmp_path, capsys, bad):
    from cogym.runners.tournament.results import ResultsLog

    good = '{"id": "a", "score": 1.0}\n'
    path = tmp_path / "results.jsonl"
    path.write_text(good + bad)
    assert rundir.read_jsonl(path) == [{"id": "a", "score": 1.0}]
    assert [r["id"] for r in ResultsLog(path).rows] == ["a"]
    assert path.read_text() == good  # cut, so the next row starts a line of its own
    assert "dropped the last line" in capsys.readouterr().err
    path.write_text(bad + "\n" + good)
    with pytest.raises(RunDirError, match="line 1 is not a JSON object"):
        rundir.read_jsonl(path)
    with pytest.raises(RunDirError, match="line 1 is not a JSON object"):
        ResultsLog(path)
    with pytest.raises(RunDirError, match="line 1 is not a JSON object"):
        rundir.drop_torn_tail(path)
    assert path.read_text() == bad + "\n" + good  # a damaged file is left as it is
    (tmp_path / rundir.MARKER).write_text(bad)
    assert rundir.marker_kind(tmp_path) is None


def test_a_tournament_rerun_over_a_damaged_results_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "t"
    argv = ["tournament", "--game", "kuhn_poker-v0", "--players", "scripted:nash", "scripted:random",
            "--games-per-pairing", "2", "--no-progress", "--no-plots", "--bootstrap", "0", "--out", str(out)]
    assert main(argv) == 0
    rows = (out / "results.jsonl").read_text()
    (out / "results.jsonl").write_text(DEEP + "\n" + rows)
    capsys.readouterr()
    assert main(argv) == 2
    assert "results.jsonl: line 1 is not a JSON object" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("bad", [DEEP, HUGE, "[1]"])
def test_a_tournament_json_past_the_readers_bounds_is_written_anew(tmp_path, bad):
    out = tmp_path / "t"
    assert len(run_tournament(_scripted_spec(), out, progress=False)) == 2
    (out / "tournament.json").write_text(bad)
    assert len(run_tournament(_scripted_spec(), out, progress=False)) == 2  # (was a RecursionError traceback)
    assert isinstance(json.loads((out / "tournament.json").read_text()), dict)


@pytest.mark.parametrize("bad", [DEEP, '{"iteration": ' + "9" * 5000 + "}"])
def test_a_trainer_state_past_the_readers_bounds_is_a_run_dir_error(tmp_path, bad):
    from cogym.runners.train.checkpoint import read_trainer_state

    ckpt = tmp_path / "run" / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(bad)
    with pytest.raises(RunDirError, match="is not JSON"):
        read_trainer_state(ckpt)


@pytest.mark.parametrize("state, why", [
    ("[" * 100_000, "not a league state"), ('{"version": 2}', "unsupported league state version 2"),
    ('{"version": 1, "members": ["../../elsewhere"], "iterations": {"../../elsewhere": 1}, "wins": {}, "games": {}, '
     '"ratings": {}}', "wrong shape"),
    ('{"version": 1, "members": ["a"], "iterations": {"a": "x"}, "wins": {}, "games": {}, "ratings": {}}', "wrong shape"),
    ('{"version": 1, "members": ["a"], "iterations": {}, "wins": {}, "games": {}, "ratings": {}}', "wrong shape"),
])
def test_a_checkpoints_league_state_of_the_wrong_shape_is_one_line(tmp_path: Path, state: str, why: str) -> None:
    from cogym.runners.train.league import STATE_FILE, read_league_state

    (tmp_path / STATE_FILE).write_text(state)
    with pytest.raises(RunDirError, match=why) as err:  # member names are paths: none may leave the folder
        read_league_state(tmp_path / STATE_FILE)
    assert "\n" not in str(err.value)
    good = {"version": 1, "members": ["m1"], "iterations": {"m1": 1}, "wins": {"m1": 0.5}, "games": {"m1": 2},
            "ratings": {}}
    (tmp_path / STATE_FILE).write_text(json.dumps(good))
    assert read_league_state(tmp_path / STATE_FILE) == good
