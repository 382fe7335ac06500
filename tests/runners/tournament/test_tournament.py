"""Tournaments: players, schedules, paired seeds, the append-only log (kill and rerun), fixed seats,
ratings of scripted players of known strength, the report files and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cogym.core.errors import ConfigError
from cogym.runners.rundir import RunDirError
from cogym.runners.tournament.players import Player, resolve_players
from cogym.runners.results.leaderboard import RatingError, report
from cogym.runners.tournament.results import RESULTS_FILE, ResultsLog
from cogym.runners.tournament.run import run_tournament
from cogym.runners.tournament.schedule import gauntlet, round_robin, swiss_round
from cogym.runners.tournament.spec import TournamentSpec


def _scripted(*twins: str) -> list[Player]:
    return resolve_players([f"scripted:{t}" for t in twins])


def test_scripted_players_of_known_strength_come_out_in_order_with_separate_intervals(tmp_path):
    # Kuhn poker, hand by hand: always betting wins most hands (opponents fold), a random player
    # beats one who never bets, and a player who always checks can only win showdowns.
    players = _scripted("always_check", "random", "always_bet")
    spec = TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=200, seed=3)
    rows = run_tournament(spec, tmp_path, progress=False)
    assert len(rows) == 3 * 200
    board = report(rows, [p.name for p in players], tmp_path, n_boot=500, plots=False)
    assert [r["name"] for r in board] == ["scripted:always_bet", "scripted:random", "scripted:always_check"]
    for upper, lower in zip(board, board[1:]):
        assert upper["lo"] > lower["hi"], f"intervals overlap: {upper} vs {lower}"
    assert all(r["games"] == 400 for r in board)


def test_both_seat_orders_of_a_pairing_see_the_same_seeds(tmp_path):
    spec = TournamentSpec(game="kuhn_poker-v0", players=_scripted("nash", "random", "always_bet"),
                          games_per_pairing=10)
    rows = run_tournament(spec, tmp_path, progress=False)
    by_pair: dict = {}
    for r in rows:
        by_pair.setdefault((r["a"], r["b"]), {}).setdefault(r["order"], []).append(r["seed"])
    seeds = None
    for orders in by_pair.values():
        assert sorted(orders[0]) == sorted(orders[1]) and len(orders[0]) == 5
        seeds = seeds or sorted(orders[0])
        assert sorted(orders[0]) == seeds  # every pairing plays the same seeds too
    # deterministic symmetric strategies on the same deal in both orders split the pair exactly
    cc = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=_scripted("always_check", "calling_station"),
                                       games_per_pairing=20), tmp_path / "cc", progress=False)
    assert np.mean([r["score"] for r in cc]) == 0.5


def test_a_killed_tournament_loses_no_finished_game_and_repeats_none(tmp_path):
    spec = TournamentSpec(game="kuhn_poker-v0", players=_scripted("nash", "random", "always_bet", "always_check"),
                          games_per_pairing=20, batch_games=16)

    class Killed(Exception):
        pass

    def kill_after(batch: int) -> None:
        if batch == 2:
            raise Killed

    with pytest.raises(Killed):
        run_tournament(spec, tmp_path, progress=False, on_batch=kill_after)
    first = [json.loads(line) for line in (tmp_path / RESULTS_FILE).read_text().splitlines()]
    assert len(first) == 3 * 16  # three batches finished and written before the "kill"
    # a kill in the middle of a write leaves a cut last line: that game is simply played again
    with open(tmp_path / RESULTS_FILE, "a") as f:
        f.write('{"id": "[\\"scripted:nash\\", \\"scr')
    rows = run_tournament(spec, tmp_path, progress=False)
    lines = (tmp_path / RESULTS_FILE).read_text().splitlines()
    parsed = [json.loads(line) for line in lines]  # every line whole: the cut one was dropped
    ids = [r["id"] for r in parsed]
    assert len(ids) == len(set(ids)) == 6 * 20  # every scheduled game exactly once
    assert parsed[: len(first)] == first  # the finished games were kept as they were, not replayed
    assert len(rows) == 6 * 20
    again = run_tournament(spec, tmp_path, progress=False)  # nothing left to play
    assert len(again) == 6 * 20 and len((tmp_path / RESULTS_FILE).read_text().splitlines()) == len(lines)


def test_fixed_seats_and_sides(tmp_path):
    players = _scripted("honest", "liar")
    with pytest.raises(ConfigError, match="judge.*has no fixed agent"):
        run_tournament(TournamentSpec(game="debate-v0", players=players, games_per_pairing=2), tmp_path, progress=False)
    # each debater chooses its answer: the honest twin the true one, the liar a wrong one
    spec = TournamentSpec(game="debate-v0", players=players, games_per_pairing=20, fixed={"judge": "scripted:oracle"},
                          game_kwargs={"answers": "chosen"})
    rows = run_tournament(spec, tmp_path, progress=False)
    honest_wins = [r["score"] if r["a"] == "scripted:honest" else 1 - r["score"] for r in rows]
    assert np.mean(honest_wins) == 1.0  # the oracle judge always sides with the reference answer
    with pytest.raises(ConfigError, match="two disjoint"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=_scripted("nash", "random"), sides=[["player_0"],
                                      ["player_0"]]), tmp_path / "x", progress=False)
    with pytest.raises(ConfigError, match="even"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=_scripted("nash", "random"), games_per_pairing=3),
                       tmp_path / "y", progress=False)


def test_several_seats_per_side_split_the_role(tmp_path):
    # proposer_solver: 8 solver seats split 4/4 between the players; the proposer is fixed.
    spec = TournamentSpec(game="proposer_solver-v0", players=_scripted("oracle", "always_wrong"), games_per_pairing=6,
                          fixed={"proposer": "scripted:random"})
    rows = run_tournament(spec, tmp_path, progress=False)
    oracle = [r["score"] if r["a"] == "scripted:oracle" else 1 - r["score"] for r in rows]
    assert np.mean(oracle) == 1.0
    assert json.loads((tmp_path / "tournament.json").read_text())["settings"]["sides"] == [
        [f"solver_{i}" for i in range(4)], [f"solver_{i}" for i in range(4, 8)]]


def test_schedules():
    names = ["a", "b", "c", "d"]
    assert round_robin(names) == [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
    assert gauntlet(["new1", "new2"], ["a", "b"]) == [("new1", "a"), ("new1", "b"), ("new2", "a"), ("new2", "b")]
    rng = np.random.default_rng(0)
    first = swiss_round(names, {}, set(), rng)
    assert len(first) == 2 and sorted(sum(first, ())) == names
    met = {frozenset(p) for p in first}
    points = {"a": 2.0, "b": 1.0, "c": 1.0, "d": 0.0}
    second = swiss_round(names, points, met, rng)
    assert not ({frozenset(p) for p in second} & met)  # no rematch while a new opponent exists
    assert swiss_round(["a", "b", "c"], {}, set(), rng).__len__() == 1  # one player sits out


def test_swiss_and_gauntlet_run(tmp_path):
    players = _scripted("nash", "random", "always_bet", "always_check")
    sw = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, schedule="swiss", swiss_rounds=2,
                                       games_per_pairing=4), tmp_path / "sw", progress=False)
    assert len(sw) == 2 * 2 * 4  # 2 rounds x 2 pairings x 4 games
    pairs = {frozenset((r["a"], r["b"])) for r in sw}
    assert len(pairs) == 4  # round 2 paired players who had not met
    ga = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, schedule="gauntlet",
                                       pool=["scripted:nash", "scripted:random"], games_per_pairing=4),
                        tmp_path / "ga", progress=False)
    assert {(r["a"], r["b"]) for r in ga} == {(n, p) for n in ("scripted:always_bet", "scripted:always_check")
                                              for p in ("scripted:nash", "scripted:random")}
    with pytest.raises(ConfigError, match="gauntlet needs --pool"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, schedule="gauntlet", pool=["nobody"],
                                      games_per_pairing=2), tmp_path / "gb", progress=False)


def _fake_run(root: Path, name: str, steps: list[int], policies: list[str], model_dir: Path) -> Path:
    import shutil

    run = root / name
    for s in steps:
        step = run / "checkpoints" / f"step_{s:06d}"
        for pid in policies:
            shutil.copytree(model_dir, step / "policies" / pid)
        (step / "trainer_state.json").write_text(json.dumps({"iteration": s}))
    (run / "checkpoints" / ".tmp_step_000099").mkdir()  # a half-written checkpoint is not a player
    (run / "config.yaml").write_text("prompts:\n  first: {system: Poker.}\n  second: {system: Poker.}\n")
    return run


def test_players_from_runs_checkpoints_models_and_twins(tmp_path, tiny_model_dir):
    run = _fake_run(tmp_path, "exp1", [10, 20], ["player"], tiny_model_dir)
    assert [p.name for p in resolve_players([str(run), "scripted:nash"])] == ["exp1/step_000010", "exp1/step_000020",
                                                                              "scripted:nash"]
    assert resolve_players([str(run / "checkpoints" / "step_000020"), "scripted:nash"])[0].name == "exp1/step_000020"
    with pytest.raises(ConfigError, match="named twice"):
        resolve_players([str(run), str(run / "checkpoints" / "step_000010")])
    two = _fake_run(tmp_path, "exp2", [5], ["proposer", "solver"], tiny_model_dir)
    with pytest.raises(ConfigError, match="pick one with --policy"):
        resolve_players([str(two), "scripted:random"])
    picked = resolve_players([str(two), "scripted:random"], policy="solver")[0]
    assert picked.path.name == "solver" and picked.name == "exp2/step_000005/solver"  # several: named by policy
    both = resolve_players([f"{two}:proposer", f"{two}:solver"])
    assert [p.name for p in both] == ["exp2/step_000005/proposer", "exp2/step_000005/solver"]
    mixed = resolve_players([str(run), str(two)], policy="solver")  # exp1 has one policy: it plays
    assert [p.name for p in mixed] == ["exp1/step_000010", "exp1/step_000020", "exp2/step_000005/solver"]
    assert resolve_players([str(tiny_model_dir), "tiny"])[0].name == tiny_model_dir.name
    with pytest.raises(ConfigError, match="at least 2 players"):
        resolve_players(["scripted:nash"])
    with pytest.raises(ConfigError, match="is not scripted"):
        resolve_players([str(tmp_path / "nothing"), "scripted:nash"])


def test_checkpoints_play_with_their_run_prompts_and_share_generate_calls(tmp_path, tiny_model_dir, monkeypatch):
    from cogym.agents.llm import LLMAgent

    run = _fake_run(tmp_path, "exp1", [10, 20], ["player"], tiny_model_dir)
    other = _fake_run(tmp_path, "exp2", [5], ["player"], tiny_model_dir)
    (other / "config.yaml").write_text("prompts:\n  first: {system: Cards!}\n  second: {system: Cards!}\n"
                                       "policies:\n  player: {sampling: {max_new_tokens: 3}}\n")
    players = resolve_players([str(run), str(other), "scripted:random"])
    assert players[0].prompts == {"first": "Poker.", "second": "Poker."} and players[2].prompts == {
        "first": "Cards!", "second": "Cards!"} and players[2].max_new_tokens == 3
    calls: list[tuple[str, int, set]] = []
    original = LLMAgent.act

    def spy(self, requests):
        calls.append((self.name, len(requests), {r.messages[0]["content"] for r in requests}))
        return original(self, requests)

    monkeypatch.setattr(LLMAgent, "act", spy)
    spec = TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=8)
    rows = run_tournament(spec, tmp_path / "t", progress=False)
    assert len(rows) == 6 * 8
    for name, _, systems in calls:  # every checkpoint plays with its own run's prompts
        assert systems == ({"Cards!"} if name.startswith("exp2") else {"Poker."}), (name, systems)
    # 48 games in one batch: at each step of play, each checkpoint answers all of its seats in one call
    # (Kuhn poker has at most 3 moves a game: at most 3 checkpoints x 3 steps calls, each of many requests)
    assert len(calls) <= 3 * 3 and max(n for _, n, _ in calls) >= 8
    with pytest.raises(RunDirError, match="other settings \\(prompts differ\\)"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=8,
                                      prompts={"first": "Hi."}), tmp_path / "t", progress=False)


def test_report_files_and_cli(tmp_path):
    from cogym.runners.cli import main

    out = tmp_path / "out"
    code = main(["tournament", "--game", "kuhn_poker-v0", "--players", "scripted:nash", "scripted:random",
                 "scripted:always_bet", "--games-per-pairing", "20", "--out", str(out), "--no-progress",
                 "--bootstrap", "50"])
    assert code == 0
    for name in ("results.jsonl", "results.csv", "leaderboard.csv", "leaderboard.json", "matrix.csv", "heatmap.png",
                 "ratings.png", "tournament.json"):
        assert (out / name).is_file(), name
    board = json.loads((out / "leaderboard.json").read_text())
    assert len(board) == 3 and all(row["lo"] <= row["rating"] <= row["hi"] for row in board)
    matrix = (out / "matrix.csv").read_text().splitlines()
    assert len(matrix) == 4 and matrix[1].split(",")[1] == ""  # no score against oneself
    assert len((out / "results.csv").read_text().splitlines()) == 1 + 3 * 20
    # rerunning the same command plays nothing new
    assert main(["tournament", "--game", "kuhn_poker-v0", "--players", "scripted:nash", "scripted:random",
                 "scripted:always_bet", "--games-per-pairing", "20", "--out", str(out), "--no-progress",
                 "--bootstrap", "0", "--no-plots"]) == 0
    assert len((out / RESULTS_FILE).read_text().splitlines()) == 3 * 20
    assert main(["tournament", "--players", "scripted:nash", "scripted:random"]) == 2  # no --game


def test_results_log_skips_duplicates(tmp_path):
    log = ResultsLog(tmp_path / "r.jsonl")
    log.append([{"id": "x", "a": "p", "b": "q", "score": 1.0}])
    log.append([{"id": "x", "a": "p", "b": "q", "score": 0.0}, {"id": "y", "a": "p", "b": "q", "score": 0.5}])
    assert [r["id"] for r in ResultsLog(tmp_path / "r.jsonl").rows] == ["x", "y"]


@pytest.mark.slow
def test_a_training_runs_checkpoints_rank_the_latest_above_the_first(tmp_path):
    """The issue's end-to-end case at small scale: 4 checkpoints of a Kuhn poker run of the embedded
    model, round-robin, 100 games per pairing."""
    from cogym.runners.config.load import load_config
    from cogym.runners.train.loop import train

    cfg = load_config(Path(__file__).parents[3] / "cogym" / "configs" / "kuhn_poker.yaml",
                      ["run.checkpoint_every=10", "run.tensorboard=false", "run.plot=false"])
    train(cfg, tmp_path / "run", progress=False)
    players = resolve_players([str(tmp_path / "run")])
    assert [p.name for p in players] == [f"run/step_{s:06d}" for s in (10, 20, 30, 40)]
    rows = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=100), tmp_path / "t",
                          progress=False)  # each checkpoint with its run's prompts and message limit
    assert len(rows) == 6 * 100
    board = report(rows, [p.name for p in players], tmp_path / "t", n_boot=200, plots=False)
    rank = [row["name"] for row in board]
    assert rank.index("run/step_000040") < rank.index("run/step_000010"), rank


@pytest.mark.slow
def test_kill_9_mid_run_then_rerun_loses_and_repeats_no_game(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "cogym.runners.cli", "tournament", "--game", "kuhn_poker-v0", "--players",
           "scripted:nash", "scripted:random", "scripted:always_bet", "scripted:always_check",
           "--games-per-pairing", "1000", "--batch-games", "32", "--out", str(out), "--no-progress",
           "--bootstrap", "0", "--no-plots"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = out / RESULTS_FILE
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not log.is_file() or log.stat().st_size < 20_000):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = log.read_text().splitlines()
    whole = [line for line in before if line.endswith("}")]
    assert 0 < len(whole) < 6 * 1000, "the kill should land mid-run"
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    after = [json.loads(line) for line in log.read_text().splitlines()]
    ids = [r["id"] for r in after]
    assert len(ids) == len(set(ids)) == 6 * 1000
    assert [json.dumps(r) for r in after[: len(whole)]] == whole  # finished games kept, not replayed


def test_a_yaml_config_gives_the_options_and_the_command_line_wins(tmp_path):
    from cogym.runners.cli import main

    config = tmp_path / "t.yaml"
    config.write_text("game: {id: debate-v0, kwargs: {answers: chosen}}\n"
                      "tournament:\n  players: [scripted:honest, scripted:liar]\n  games_per_pairing: 4\n"
                      f"  fixed: {{judge: scripted:oracle}}\n  out: {tmp_path / 'from_yaml'}\n")
    assert main(["tournament", "--config", str(config), "--no-progress", "--bootstrap", "0", "--no-plots"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "from_yaml" / RESULTS_FILE).read_text().splitlines()]
    assert len(rows) == 4 and json.loads((tmp_path / "from_yaml" / "tournament.json").read_text())["settings"]["fixed"] == {
        "judge": "scripted:oracle"}
    assert main(["tournament", "--config", str(config), "--games-per-pairing", "6", "--out", str(tmp_path / "cli"),
                 "--no-progress", "--bootstrap", "0", "--no-plots"]) == 0
    assert len((tmp_path / "cli" / RESULTS_FILE).read_text().splitlines()) == 6
    config.write_text("game: {id: debate-v0}\ntournament: {playerz: [a]}\n")
    assert main(["tournament", "--config", str(config)]) == 2


def test_a_rerun_swiss_tournament_replays_its_pairings(tmp_path):
    players = _scripted("nash", "random", "always_bet", "always_check", "calling_station", "invalid")
    spec = TournamentSpec(game="kuhn_poker-v0", players=players, schedule="swiss", swiss_rounds=3, games_per_pairing=4,
                          batch_games=8)

    def kill_after(batch: int) -> None:
        if batch == 2:  # the first batch of round 2 (round 1: 12 games = batches 0 and 1)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_tournament(spec, tmp_path, progress=False, on_batch=kill_after)
    planned = json.loads((tmp_path / "schedule.json").read_text())["rounds"]
    assert len(planned) == 2  # round 2 was paired (from round 1's results) before it started
    rows = run_tournament(spec, tmp_path, progress=False)
    played = {frozenset((r["a"], r["b"])) for r in rows}
    # round 2 is replayed with its recorded pairings, though a rerun knows more results than it did then
    assert {frozenset(p) for p in planned[1]} <= played
    assert len(json.loads((tmp_path / "schedule.json").read_text())["rounds"]) == 3
    assert len(rows) == len({r["id"] for r in rows}) == 3 * 3 * 4
    # the same directory with other players: the old games stay in the log, out of this result
    other = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=_scripted("nash", "random"),
                                          games_per_pairing=2), tmp_path, progress=False)
    assert {frozenset((r["a"], r["b"])) for r in other} == {frozenset(("scripted:nash", "scripted:random"))}


def test_max_loaded_bounds_the_models_in_memory(tmp_path, tiny_model_dir, monkeypatch):
    from cogym.agents.scripted import ScriptedAgent
    from cogym.runners.tournament import run as tournament

    run = _fake_run(tmp_path, "exp1", [1, 2, 3, 4], ["player"], tiny_model_dir)
    players = resolve_players([str(run)])
    peak, original = [0], tournament.Agents.get

    def spy(self, who, role):
        agent = original(self, who, role)
        peak[0] = max(peak[0], sum(not isinstance(a, ScriptedAgent) for a in self.cache.values()))
        return agent

    monkeypatch.setattr(tournament.Agents, "get", spy)
    spec = TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4, max_new_tokens=2, max_loaded=2)
    rows = run_tournament(spec, tmp_path / "t", progress=False)
    assert len(rows) == 6 * 4 and peak[0] == 2
    peak[0] = 0
    rows = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4, max_new_tokens=2),
                          tmp_path / "all", progress=False)
    assert len(rows) == 6 * 4 and peak[0] == 4  # no limit: one batch, every model loaded
    with pytest.raises(ConfigError, match="max_loaded"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, max_loaded=1), tmp_path / "x",
                       progress=False)


def test_reruns_refuse_changed_settings_and_bad_options_fail_before_playing(tmp_path):
    players = _scripted("nash", "random", "always_bet")
    run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4), tmp_path, progress=False)
    with pytest.raises(RunDirError, match="seed differ"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4, seed=7), tmp_path,
                       progress=False)
    fewer = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=2), tmp_path,
                           progress=False)
    assert len(fewer) == 3 * 2  # the games asked for, though the directory holds more
    (tmp_path / "schedule.json").write_text('{"players": [')  # cut by a kill while written
    assert len(run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4), tmp_path,
                              progress=False)) == 3 * 4
    with pytest.raises(ConfigError, match="--anchor 'nobody' is not a player"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, anchor="nobody"), tmp_path / "a",
                       progress=False)
    with pytest.raises(ConfigError, match="some, not all"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, schedule="gauntlet",
                                      pool=[p.name for p in players]), tmp_path / "g", progress=False)
    assert not (tmp_path / "a" / RESULTS_FILE).exists() and not (tmp_path / "g" / RESULTS_FILE).exists()


def test_swiss_rematches_are_new_games(tmp_path):
    players = _scripted("nash", "random")
    rows = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, schedule="swiss", swiss_rounds=3,
                                         games_per_pairing=4), tmp_path, progress=False)
    assert len(rows) == len({r["id"] for r in rows}) == 3 * 4 and {r["round"] for r in rows} == {0, 1, 2}
    default = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, schedule="swiss",
                                            games_per_pairing=4), tmp_path / "d", progress=False)
    assert len(default) == 4  # two players: one round (no rematch by default)


def test_a_rating_that_cannot_be_made_is_a_one_line_error(tmp_path):
    rows = [{"a": "x", "b": "y", "score": 1.0}, {"a": "z", "b": "w", "score": 0.0}]  # two groups that never met
    with pytest.raises(RatingError, match="cannot rate these results: .*disconnected"):
        report(rows, ["x", "y", "z", "w"], tmp_path, n_boot=0, plots=False)


def test_report_flags_a_player_without_a_finite_rating_and_still_writes_everything(tmp_path, capsys):
    # All games are played: a rating that cannot be made finite (prior=0, a player who never won) is a
    # flagged row with a note under the printed leaderboard, not an error losing the table.
    from cogym.runners.results.leaderboard import print_leaderboard

    def game(a: str, b: str, score: float) -> dict:
        return {"a": a, "b": b, "score": score}

    rows = ([game("p", "q", 1.0)] * 6 + [game("p", "q", 0.0)] * 4 + [game("p", "loser", 1.0)] * 5
            + [game("q", "loser", 1.0)] * 5)
    board = report(rows, ["p", "q", "loser"], tmp_path, n_boot=100, prior=0.0)
    assert [r["name"] for r in board] == ["p", "q", "loser"]
    assert board[2]["rating"] == board[2]["lo"] == board[2]["hi"] == float("-inf")
    assert board[2]["note"].startswith("never won a game")
    assert json.loads((tmp_path / "leaderboard.json").read_text())[2]["rating"] == float("-inf")
    for name in ("leaderboard.csv", "matrix.csv", "heatmap.png", "ratings.png"):
        assert (tmp_path / name).is_file(), name
    print_leaderboard(board, title="t")
    out = capsys.readouterr().out
    assert "-inf" in out and "note: loser: never won a game: rating -inf without a prior (prior=0)" in out


def test_tournament_help_prints_the_interval_level_and_the_bootstrap_default(capsys):
    from cogym.runners.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["tournament", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "%%" not in text and "leaderboard with 95% bootstrap intervals" in text
    assert "--bootstrap BOOTSTRAP bootstrap resamples for the 95% intervals (default 1000; 0: none)" in text


def test_checkpoints_load_in_their_runs_dtype_and_attention_kernel(tmp_path, tiny_model_dir):
    # A bf16 run's checkpoint plays in bf16 (as it trained), with its run's attention kernel; a bare
    # model directory has no run config and loads with the defaults (float32, transformers' choice).
    import torch

    from cogym.runners.tournament.play import Agents

    run = _fake_run(tmp_path, "bf16run", [5], ["player"], tiny_model_dir)
    (run / "config.yaml").write_text("prompts:\n  first: {system: Poker.}\n  second: {system: Poker.}\n"
                                     "policies:\n  player: {model: tiny, dtype: bfloat16, attn_implementation: eager}\n")
    plain = _fake_run(tmp_path, "plain", [5], ["player"], tiny_model_dir)  # its config names no dtype
    players = resolve_players([str(run), str(plain), str(tiny_model_dir)])
    assert [(p.dtype, p.attn_implementation) for p in players] == [("bfloat16", "eager"), (None, None), (None, None)]
    agents = Agents(TournamentSpec(game="kuhn_poker-v0", players=players))
    loaded = [agents.get(p, "first") for p in players]
    models = [getattr(a, "agent", a).policy.model for a in loaded]  # a checkpoint's agent wears its run's prompts
    assert {prm.dtype for prm in models[0].parameters()} == {torch.bfloat16}
    assert models[0].config._attn_implementation == "eager"
    for model in models[1:]:
        assert {prm.dtype for prm in model.parameters()} == {torch.float32}
