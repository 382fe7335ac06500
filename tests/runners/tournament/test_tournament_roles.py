"""Tournaments of role-bound players with paired scoring, on the cooperative example game
``examples/hint_guess.py``: the game itself, players bound to a role (``--role``, ``PLAYER@ROLE``),
paired per-seed comparisons, every check made before the first game (fixed-seat conflicts, missing
twins, unknown roles, prompts and limits), the players' recorded settings, and the example config
trained and its checkpoints rated per role."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from cogym.envs import make, registry, scripted_strategies
from cogym.envs.checks import PATHOLOGICAL, check_game
from cogym.runners.rollout.seating import SeatingError
from cogym.runners.rundir import RunDirError
from cogym.runners.train.build import import_game_modules
from cogym.core.errors import ConfigError
from cogym.runners.tournament.players import resolve_players
from cogym.runners.results.leaderboard import report
from cogym.runners.tournament.results import RESULTS_FILE
from cogym.runners.tournament.run import run_tournament
from cogym.runners.tournament.schedule import game_seeds
from cogym.runners.results.scoring import paired_rows
from cogym.runners.tournament.spec import TournamentSpec
from pettingzoo.test import api_test

ROOT = Path(__file__).resolve().parents[3]
GAME_FILE = ROOT / "examples" / "hint_guess.py"
CONFIG = ROOT / "examples" / "hint_guess.yaml"
GAME = "hint_guess-v0"


def _unload() -> None:
    for name in [n for n, m in list(sys.modules.items()) if getattr(m, "__file__", None) == str(GAME_FILE)]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def game():
    """The example module, imported as ``--module`` / ``game.modules`` import it, in a private copy of the
    registry (other tests assert what the registry holds); unloaded afterwards, and before, in case an
    earlier test imported it into a registry that is gone now."""
    saved = registry._REGISTRY
    registry._REGISTRY = dict(saved)
    _unload()
    try:
        import_game_modules([str(GAME_FILE)])
        (module,) = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(GAME_FILE)]
        yield module
    finally:
        registry._REGISTRY = saved
        _unload()


@pytest.fixture
def no_games(monkeypatch):
    """Fails the test if any game is played (the rollout is never called)."""
    from cogym.runners.rollout import turns as rollout

    def refuse(*args, **kwargs):
        raise AssertionError("a game was played before the tournament was refused")

    monkeypatch.setattr(rollout, "rollout", refuse)


def _players(*specs: str, role: str | None = None):
    return resolve_players(list(specs), role=role)


def _run(tmp_path, players, name="t", **kw):
    spec = TournamentSpec(game=GAME, players=players, modules=[str(GAME_FILE)], **kw)
    return run_tournament(spec, tmp_path / name, progress=False)


# ------------------------------------------------------------------------------------------ the game
@pytest.mark.parametrize("granularity", ["turn", "token"])
def test_the_example_passes_check_game_and_api_test(game, granularity):
    check_game(GAME, episodes=20, granularity=granularity)
    check_game(GAME, {"high": 999}, episodes=8, granularity=granularity)
    api_test(make(GAME, granularity=granularity), num_cycles=50)


def test_the_example_is_cooperative_with_twins_for_every_role(game):
    env = make(GAME)
    assert env.spec.roles == ("hinter", "guesser") and not env.spec.zero_sum and env.spec.reward_range == (0.0, 1.0)
    assert type(env).tournament_scoring == "paired"
    twins = scripted_strategies(GAME)
    assert set(twins["hinter"]) == {"exact", "parity", "useless"} and set(twins["guesser"]) == {"read", "random"}
    with pytest.raises(ValueError, match="high must be an int"):
        make(GAME, high=0)


def _play(env, hint: str, guess: str) -> tuple[dict, dict]:
    """One game on seed 0: the hint, then (unless the hint ended it) the guess; the rewards and infos."""
    env.reset(seed=0)
    env.step(hint)
    if not env.terminations["guesser"]:
        env.step(guess)
    return dict(env.rewards), {a: dict(env.infos[a]) for a in env.possible_agents}


def test_both_seats_get_the_same_reward_and_invalid_moves_say_why(game):
    env = make(GAME)
    env.reset(seed=0)
    secret = int(env.observe("hinter")["text"].split()[-1])
    assert env.observe("hinter")["text"] == f"0-9 secret {secret}"
    env.step("a\nb\x00")
    assert env.observe("guesser")["text"] == "0-9 hint a?b?"  # the guesser reads only the hint
    right = str(secret)
    rewards, infos = _play(env, "x", right)
    assert rewards == {"hinter": 1.0, "guesser": 1.0} and infos["guesser"]["metrics"] == {"right": True}
    rewards, infos = _play(env, "x", str((secret + 1) % 10))
    assert rewards == {"hinter": 0.0, "guesser": 0.0} and not infos["guesser"]["invalid"]
    rewards, infos = _play(env, "x" * 13, right)  # the hint is too long: the game ends before the guess
    assert rewards == {"hinter": 0.0, "guesser": 0.0} and infos["hinter"]["invalid"]
    assert "13 characters" in infos["hinter"]["reason"] and not infos["guesser"]["invalid"]
    rewards, infos = _play(env, "a", "10")  # 10 is out of 0-9
    assert infos["guesser"]["invalid"] and "not a number in 0-9" in infos["guesser"]["reason"]
    assert game.shown("a\nb\x00\U0001f600") == "a?b??"
    assert [game.parse_guess(s, 9) for s in ("7", " 0 ", "10", "x", "", "7" * 17)] == [7, 0, None, None, None, None]
    assert all(game.parse_guess(s, 999) is None for s in PATHOLOGICAL)


def test_the_twins_do_what_their_names_say(game):
    twins, rng = scripted_strategies(GAME), np.random.default_rng(0)
    assert twins["hinter"]["exact"]("0-9 secret 7", rng) == "7"
    assert twins["hinter"]["parity"]("0-9 secret 7", rng) == "odd"
    assert twins["guesser"]["read"]("0-9 hint 4", rng) == "4"
    assert {int(twins["guesser"]["read"]("0-9 hint even", rng)) % 2 for _ in range(50)} == {0}
    assert len({twins["guesser"]["read"]("0-9 hint hi", rng) for _ in range(200)}) == 10


# --------------------------------------------------------------------------------- paired scoring
def test_scripted_twins_of_known_strength_rank_in_order_per_role_with_separate_intervals(game, tmp_path):
    # With the reading guesser fixed, `exact` is always right, `parity` one time in 5, `useless` one in 10.
    hinters = _players("scripted:exact", "scripted:parity", "scripted:useless", role="hinter")
    rows = _run(tmp_path, hinters, "h", fixed={"guesser": "scripted:read"}, games_per_pairing=400, seed=1)
    assert len(rows) == 3 * 200  # one comparison per seed and pairing
    board = report(rows, [p.name for p in hinters], tmp_path / "h", n_boot=500, plots=False)
    assert [r["name"] for r in board] == ["scripted:exact", "scripted:parity", "scripted:useless"]
    for upper, lower in zip(board, board[1:]):
        assert upper["lo"] > lower["hi"], f"intervals overlap: {upper} vs {lower}"
    assert board[0]["losses"] == 0  # exact never does worse than anyone on a seed
    # With the exact hinter fixed, the reading guesser is always right, a random one one time in 10.
    guessers = _players("scripted:random@guesser", "scripted:read@guesser")
    rows = _run(tmp_path, guessers, "g", fixed={"hinter": "scripted:exact"}, games_per_pairing=100)
    board = report(rows, [p.name for p in guessers], tmp_path / "g", n_boot=500, plots=False)
    assert [r["name"] for r in board] == ["scripted:read", "scripted:random"] and board[0]["lo"] > board[1]["hi"]
    info = json.loads((tmp_path / "g" / "tournament.json").read_text())
    assert info["settings"]["scoring"] == "paired" and info["settings"]["rated"] == ["guesser"]
    assert info["settings"]["fixed"] == {"hinter": "scripted:exact"} and info["players"]["scripted:read"]["seats"] == ["guesser"]


def test_each_player_plays_each_seed_once_and_pairings_compare_own_returns_seed_by_seed(game, tmp_path):
    players = _players("scripted:exact", "scripted:parity", "scripted:useless", role="hinter")
    rows = _run(tmp_path, players, fixed={"guesser": "scripted:read"}, games_per_pairing=20)
    games = [json.loads(line) for line in (tmp_path / "t" / RESULTS_FILE).read_text().splitlines()]
    # 3 players x 10 seeds: each player's game on a seed is shared by its two pairings
    assert sorted((g["player"], g["k"]) for g in games) == sorted((p.name, k) for p in players for k in range(10))
    seeds = game_seeds(0, 10)
    assert all(g["seed"] == seeds[g["k"]] for g in games)
    by = {(g["player"], g["k"]): g for g in games}
    assert all(g["return"] == g["returns"]["hinter"] for g in games)  # the player's own seat
    assert len(rows) == 3 * 10
    for r in rows:
        ra, rb = by[(r["a"], r["k"])]["return"], by[(r["b"], r["k"])]["return"]
        assert (r["return_a"], r["return_b"]) == (ra, rb)
        assert r["score"] == (1.0 if ra > rb else 0.0 if ra < rb else 0.5)
    # a pairing whose second player has not played a seed yet has no result on it
    assert paired_rows(games[:1], [[(games[0]["player"], "nobody")]], 10, False) == []


def test_an_unbound_player_takes_the_seats_fixed_leaves_the_game_default_is_paired(game, tmp_path):
    # The issue's --fixed hinter=...: the players play the guesser; the fixed hinter writes every hint.
    rows = _run(tmp_path, _players("scripted:read", "scripted:random"), fixed={"hinter": "scripted:exact"},
                games_per_pairing=40)
    settings = json.loads((tmp_path / "t" / "tournament.json").read_text())["settings"]
    assert settings["scoring"] == "paired" and settings["rated"] == ["guesser"] and settings["sides"] is None
    read = [r["score"] if r["a"] == "scripted:read" else 1 - r["score"] for r in rows]
    assert min(read) >= 0.5 and np.mean(read) > 0.8  # read is right on every seed


def test_a_killed_paired_tournament_loses_and_repeats_no_game(game, tmp_path):
    players = _players("scripted:exact", "scripted:parity", "scripted:useless", role="hinter")
    spec = TournamentSpec(game=GAME, players=players, fixed={"guesser": "scripted:read"}, games_per_pairing=20,
                          batch_games=8)
    whole = run_tournament(spec, tmp_path / "whole", progress=False)

    def kill(batch: int) -> None:
        if batch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_tournament(spec, tmp_path / "killed", progress=False, on_batch=kill)
    assert len((tmp_path / "killed" / RESULTS_FILE).read_text().splitlines()) == 16
    again = run_tournament(spec, tmp_path / "killed", progress=False)
    ids = [json.loads(line)["id"] for line in (tmp_path / "killed" / RESULTS_FILE).read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 3 * 10
    assert sorted(again, key=lambda r: r["id"]) == sorted(whole, key=lambda r: r["id"])


def test_paired_swiss_and_gauntlet(game, tmp_path):
    players = _players("scripted:exact", "scripted:parity", "scripted:useless", role="hinter")
    sw = _run(tmp_path, players, "sw", fixed={"guesser": "scripted:read"}, schedule="swiss", swiss_rounds=2,
              games_per_pairing=8)
    assert len(sw) == 2 * 4 and {r["round"] for r in sw} == {0, 1}  # one pairing a round (3 players), 4 seeds
    games = (tmp_path / "sw" / RESULTS_FILE).read_text().splitlines()
    assert len(games) == 2 * 2 * 4  # each round: its two players' games only
    ga = _run(tmp_path, players, "ga", fixed={"guesser": "scripted:read"}, schedule="gauntlet",
              pool=["scripted:useless"], games_per_pairing=8)
    assert {(r["a"], r["b"]) for r in ga} == {("scripted:exact", "scripted:useless"), ("scripted:parity", "scripted:useless")}


def test_binding_players_rates_one_seat_of_any_game(tmp_path):
    # Kuhn poker declares nothing: players bound to `first` make the tournament paired, the second seat fixed.
    players = _players("scripted:always_check", "scripted:always_bet", role="first")
    rows = run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, fixed={"second": "scripted:random"},
                                         games_per_pairing=200), tmp_path, progress=False)
    assert json.loads((tmp_path / "tournament.json").read_text())["settings"]["rated"] == ["player_0"]
    board = report(rows, [p.name for p in players], tmp_path, n_boot=300, plots=False)
    assert board[0]["name"] == "scripted:always_bet" and board[0]["lo"] > board[1]["hi"]  # betting makes random fold


# ------------------------------------------------------------------- refused before any game
def test_fixed_conflicts_are_errors_before_any_game(game, tmp_path, no_games):
    twins = _players("scripted:read", "scripted:random")
    cases = [  # (spec changes, what the error says)
        # the case: competitive sides take the hinter seat, so the --fixed could only be ignored
        (dict(scoring="competitive", fixed={"hinter": "scripted:exact"}),
         r"--fixed hinter=scripted:exact: hinter is on a side \(sides: hinter vs guesser\).*--scoring paired"),
        (dict(players=_players("scripted:read", "scripted:random", role="guesser"), fixed={"guesser": "scripted:read",
                                                                                             "hinter": "scripted:exact"}),
         r"--fixed guesser=scripted:read: guesser is rated"),
        (dict(fixed={"hinter": "scripted:exact", "judge": "scripted:oracle"}), r"--fixed judge=scripted:oracle: .*no role or seat 'judge'"),
        (dict(fixed={}, players=_players("scripted:read", "scripted:random", role="guesser")),
         r"seat 'hinter' \(role 'hinter'\) is not a rated seat and has no fixed agent; give --fixed hinter="),
        (dict(fixed={"hinter": "scripted:exact", "guesser": "scripted:read"}), r"no seat is left for the players"),
        (dict(fixed={"hinter": "scripted:exact"}, sides=[["hinter"], ["guesser"]]), r"--sides is for competitive scoring"),
        (dict(scoring="competitive", players=_players("scripted:read", "scripted:random", role="guesser")),
         r"bound to guesser, but competitive scoring seats each player on a whole side"),
        (dict(fixed={"hinter": "scripted:read"}), r"--fixed hinter=scripted:read .*no scripted twin 'read' for role 'hinter'"),
        (dict(fixed={"hinter": str(tmp_path / "nothing")}), r"is not scripted:<twin>, a model directory"),
    ]
    for changes, message in cases:
        out = tmp_path / "out"
        with pytest.raises((ConfigError, SeatingError), match=message):
            run_tournament(TournamentSpec(**{"game": GAME, "players": twins, "games_per_pairing": 4, **changes}), out,
                           progress=False)
        assert not out.exists(), changes  # refused before anything was written, let alone played
    # kuhn poker, competitive: a --fixed for a seat on a side was silently ignored before
    with pytest.raises(ConfigError, match="--fixed first=scripted:nash: player_0 is on a side"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=_players("scripted:nash", "scripted:random"),
                                      fixed={"first": "scripted:nash"}), tmp_path / "k", progress=False)
    with pytest.raises(ConfigError, match="a zero-sum game: their returns always sum to 0"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=_players("scripted:nash", "scripted:random"),
                                      scoring="paired"), tmp_path / "k", progress=False)


def test_bad_players_are_refused_before_any_game(game, tmp_path, no_games, tiny_model_dir):
    def refused(players, message, **kw):
        out = tmp_path / "out"
        with pytest.raises((ConfigError, SeatingError), match=message):
            run_tournament(TournamentSpec(game=GAME, players=players, games_per_pairing=512, batch_games=8, **kw), out,
                           progress=False)
        assert not out.exists()

    fixed = {"guesser": "scripted:read"}
    # the case: the missing twin is the last player's; its pairings would come after hundreds of games
    refused(_players("scripted:exact", "scripted:parity", "scripted:useless", "scripted:read", role="hinter"),
            r"player 'scripted:read': hint_guess-v0 has no scripted twin 'read' for role 'hinter'.*twins of hinter: "
            r"exact, parity, useless", fixed=fixed)
    refused(_players("scripted:exact", "scripted:parity@hintr"), r"player 'scripted:parity' \(bound to hintr\): "
            r"hint_guess-v0 has no role or seat 'hintr' \(roles: hinter, guesser; seats: hinter, guesser\)", fixed=fixed)
    refused(_players("scripted:exact@hinter", "scripted:read@guesser"),
            r"bound to different ones \(scripted:exact in hinter; scripted:read in guesser\); rate each role")
    # unbound in a cooperative game with nothing fixed: a twin must play both roles
    refused(_players("scripted:exact", "scripted:useless"), r"no scripted twin 'exact' for role 'guesser'")
    refused(_players("scripted:exact", "scripted:useless", role="hinter"), r"--system judge=\.\.\.: hint_guess-v0 has no "
            r"role 'judge' \(roles: hinter, guesser\)", fixed=fixed, prompts={"judge": "Judge."})
    # a model with no run config, and nothing that says its prompt or its limit
    refused(resolve_players(["tiny", "scripted:exact"], role="hinter"), r"player 'tiny' has no run config .* role "
            r"'hinter'.*give --system hinter=TEXT", fixed=fixed)
    refused(resolve_players(["tiny", "scripted:exact"], role="hinter"), r"nothing says its message limit: give "
            r"--max-new-tokens N", fixed=fixed, prompts={"hinter": "Hint."})
    refused(resolve_players([str(tiny_model_dir), "scripted:exact"], role="hinter"), r"no run config", fixed=fixed)
    with pytest.raises(ConfigError, match="write PLAYER@ROLE"):
        resolve_players(["scripted:exact@", "scripted:useless"])
    with pytest.raises(ConfigError, match="name a role or seats"):
        resolve_players(["scripted:exact", "scripted:useless"], role=",")


# ------------------------------------------------------------------------------ model players
def _two_policy_run(root: Path, name: str, steps: list[int], model_dir: Path, prompts=("Hint.", "Guess."),
                    limits=(4, 3)) -> Path:
    """A fake run of the example config: a hinter and a guesser policy per checkpoint, and its config."""
    run = root / name
    for s in steps:
        step = run / "checkpoints" / f"step_{s:06d}"
        for pid in ("hinter", "guesser"):
            shutil.copytree(model_dir, step / "policies" / pid)
        (step / "trainer_state.json").write_text(json.dumps({"iteration": s}))
    (run / "config.yaml").write_text(
        "seats: {hinter: hinter, guesser: guesser}\n"
        f"prompts: {{hinter: {{system: {prompts[0]}}}, guesser: {{system: {prompts[1]}}}}}\n"
        f"policies: {{hinter: {{sampling: {{max_new_tokens: {limits[0]}}}}}, "
        f"guesser: {{sampling: {{max_new_tokens: {limits[1]}}}}}}}\n")
    return run


def test_a_player_bound_to_a_role_plays_its_runs_policy_for_that_role_and_no_other_seat(game, tmp_path, tiny_model_dir,
                                                                                       monkeypatch):
    from cogym.agents.llm import LLMAgent

    run = _two_policy_run(tmp_path, "hg", [1, 2], tiny_model_dir)
    hinters = resolve_players([str(run), "scripted:exact"], role="hinter")
    assert [(p.name, p.path.name, p.bind) for p in hinters[:2]] == [("hg/step_000001/hinter", "hinter", ("hinter",)),
                                                                      ("hg/step_000002/hinter", "hinter", ("hinter",))]
    assert resolve_players([f"{run}@guesser", "scripted:read"])[0].path.name == "guesser"
    assert resolve_players([f"{run}:hinter@guesser", "scripted:read"])[0].path.name == "hinter"  # :POLICY wins
    with pytest.raises(ConfigError, match="bind it to a role its run seats one of them in"):
        resolve_players([str(run), "scripted:read"])
    asked: list[tuple[str, str, str]] = []
    original = LLMAgent.act

    def spy(self, requests):
        asked.extend((self.name, r.role, r.messages[0]["content"]) for r in requests)
        return original(self, requests)

    monkeypatch.setattr(LLMAgent, "act", spy)
    rows = _run(tmp_path, hinters, fixed={"guesser": "scripted:read"}, games_per_pairing=8)
    assert len(rows) == 3 * 4
    # every model request was a hinter's, with the run's hinter prompt: no model wrote a guess
    assert asked and {(role, system) for _, role, system in asked} == {("hinter", "Hint.")}
    assert {name for name, _, _ in asked} == {"hg/step_000001/hinter", "hg/step_000002/hinter"}
    info = json.loads((tmp_path / "t" / "tournament.json").read_text())["players"]["hg/step_000002/hinter"]
    assert info == {"kind": "checkpoint", "path": str(run / "checkpoints" / "step_000002" / "policies" / "hinter"),
                    "seats": ["hinter"], "prompts": {"hinter": "Hint."}, "max_new_tokens": 4,
                    "sources": {"prompts": {"hinter": "run config"}, "max_new_tokens": "run config"}}


def test_a_model_without_run_config_shares_the_checkpoints_settings_or_needs_them_given(game, tmp_path, tiny_model_dir,
                                                                                      monkeypatch, capsys):
    from cogym.agents.llm import LLMAgent
    from cogym.runners.cli import main

    run = _two_policy_run(tmp_path, "hg", [1], tiny_model_dir)
    other = _two_policy_run(tmp_path, "hg2", [1], tiny_model_dir, prompts=("Hint!", "Guess."), limits=(4, 3))
    limits: dict[str, int] = {}
    original = LLMAgent.act

    def spy(self, requests):
        limits[self.name] = self.sampling.max_new_tokens
        return original(self, requests)

    monkeypatch.setattr(LLMAgent, "act", spy)
    monkeypatch.setenv("COLUMNS", "80")
    base = ["tournament", "--module", str(GAME_FILE), "--game", GAME, "--fixed", "guesser=scripted:read",
            "--role", "hinter", "--games-per-pairing", "4", "--no-progress", "--bootstrap", "20", "--no-plots"]
    # tiny with one run's checkpoint: it plays with that run's hinter prompt and limit, and is marked
    assert main([*base, "--players", str(run), "tiny", "scripted:exact", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    info = json.loads((tmp_path / "a" / "tournament.json").read_text())["players"]["tiny"]
    assert info["kind"] == "model (no run config)" and info["prompts"] == {"hinter": "Hint."} and info["max_new_tokens"] == 4
    assert info["sources"] == {"prompts": {"hinter": "checkpoints"}, "max_new_tokens": "checkpoints"}
    assert limits["tiny"] == 4
    assert "  tiny *\n" in out and "* tiny: a model with no run config; plays hinter with 'Hint.' (the" in out
    assert "paired, 6 per-seed comparisons" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    board = json.loads((tmp_path / "a" / "leaderboard.json").read_text())
    assert {r["name"]: r["kind"] for r in board}["tiny"] == "model (no run config)"
    # two runs with different hinter prompts: tiny's is not implied, so it must be given
    assert main([*base, "--players", str(run), str(other), "tiny", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "player 'tiny' has no run config" in err and "checkpoints differ" in err and "give --system hinter=TEXT" in err
    assert not (tmp_path / "b").exists()
    # checkpoints of two runs with different hinter prompts: each plays with its own, and the output says so
    assert main([*base, "--players", f"{run}/checkpoints/step_*@hinter", str(other), "scripted:exact", "--out",
                 str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "players see different system prompts for role hinter: 'Hint.' (hg/step_000001/hinter); 'Hint!' " \
           "(hg2/step_000001/hinter)" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80
    # given on the command line: the model plays with those, and tournament.json says where they came from
    assert main([*base, "--players", "tiny", "scripted:exact", "--system", "hinter=Say.", "--max-new-tokens", "2",
                 "--out", str(tmp_path / "d")]) == 0
    info = json.loads((tmp_path / "d" / "tournament.json").read_text())["players"]["tiny"]
    assert info["prompts"] == {"hinter": "Say."} and info["max_new_tokens"] == 2 == limits["tiny"]
    assert info["sources"] == {"prompts": {"hinter": "--system"}, "max_new_tokens": "--max-new-tokens"}


def test_a_fixed_model_without_run_config_takes_what_the_runs_gave_its_role(game, tmp_path, tiny_model_dir,
                                                                           monkeypatch):
    from cogym.agents.llm import LLMAgent

    run = _two_policy_run(tmp_path, "hg", [1], tiny_model_dir, limits=(4, 3))
    seen: dict[str, set] = {}
    original = LLMAgent.act

    def spy(self, requests):
        seen.setdefault(self.name, set()).update((r.role, r.messages[0]["content"], self.sampling.max_new_tokens)
                                                 for r in requests)
        return original(self, requests)

    monkeypatch.setattr(LLMAgent, "act", spy)
    _run(tmp_path, resolve_players([str(run), "scripted:exact"], role="hinter"), fixed={"guesser": "tiny"},
         games_per_pairing=4)
    # the run seated its guesser policy (limit 3, prompt Guess.) in the role tiny plays; the hinters keep their own
    assert seen == {"hg/step_000001/hinter": {("hinter", "Hint.", 4)}, "tiny": {("guesser", "Guess.", 3)}}
    info = json.loads((tmp_path / "t" / "tournament.json").read_text())["fixed_models"]["tiny"]
    assert info["seats"] == ["guesser"] and info["sources"] == {"prompts": {"guesser": "checkpoints"},
                                                                "max_new_tokens": "checkpoints"}


def test_model_players_draw_the_same_tokens_in_any_batch(game, tmp_path, tiny_model_dir, monkeypatch):
    """A model player's requests keep their sampling keys through its own prompts, so each answer is
    the same in a batch of 64 games and in batches of 3."""
    from cogym.agents.llm import LLMAgent

    run = _two_policy_run(tmp_path, "hg", [1, 2], tiny_model_dir)
    players = resolve_players([str(run), "scripted:useless"], role="hinter")
    answers: dict[str, dict] = {}
    original = LLMAgent.act

    def spy(self, requests):
        acts = original(self, requests)
        answers[current].update({(self.name, r.key): a.text for r, a in zip(requests, acts)})
        return acts

    monkeypatch.setattr(LLMAgent, "act", spy)
    results = {}
    for current in ("big", "small"):
        answers[current] = {}
        results[current] = _run(tmp_path, players, current, batch_games=64 if current == "big" else 3,
                                fixed={"guesser": "scripted:read"}, games_per_pairing=16)
    assert len(answers["big"]) == 2 * 8 and None not in {key for _, key in answers["big"]}  # every answer keyed
    assert answers["big"] == answers["small"] and len({*answers["big"].values()}) > 1
    assert results["big"] == results["small"]


def test_directories_made_before_scoring_existed_still_resume(tmp_path):
    players = _players("scripted:nash", "scripted:random")
    run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4), tmp_path, progress=False)
    info = json.loads((tmp_path / "tournament.json").read_text())
    assert info["settings"]["scoring"] == "competitive" and info["settings"]["rated"] is None
    for key in ("scoring", "rated"):
        del info["settings"][key]
    (tmp_path / "tournament.json").write_text(json.dumps(info))
    assert len(run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4), tmp_path,
                              progress=False)) == 4
    with pytest.raises(RunDirError, match=r"other settings \(.*scoring.*differ\)"):
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=_players("scripted:nash@first", "scripted:random@first"),
                                      fixed={"second": "scripted:nash"}, games_per_pairing=4), tmp_path, progress=False)


# ------------------------------------------------------------------------- the example, trained
def test_the_example_config_trains_and_its_checkpoints_are_rated_per_role(game, tmp_path, tiny_model_dir, monkeypatch):
    """Acceptance at small scale: two policies with two algorithms, two checkpoints, each role rated
    with role-bound players and paired scoring; the scripted twin of known strength is on top with an
    interval apart from every other player's."""
    from cogym.runners.config.load import load_config
    from cogym.runners.train.loop import train

    monkeypatch.chdir(tmp_path)
    cfg = load_config(CONFIG, ["run.iterations=2", "run.checkpoint_every=1", "game.num_games=8", "run.tensorboard=false",
                               "run.plot=false", f"policies.hinter.model={tiny_model_dir}",
                               f"policies.guesser.model={tiny_model_dir}"])
    assert {pid: cfg.learners[pid].algorithm for pid in ("hinter", "guesser")} == {"hinter": "reinforce_pp",
                                                                                    "guesser": "rae"}
    train(cfg, tmp_path / "run", progress=False)
    for role, top, fixed in (("hinter", "scripted:exact", {"guesser": "scripted:read"}),
                             ("guesser", "scripted:read", {"hinter": "scripted:exact"})):
        players = resolve_players([str(tmp_path / "run"), top, "tiny"], role=role)
        assert [p.name for p in players[:2]] == [f"run/step_00000{s}/{role}" for s in (1, 2)]
        rows = _run(tmp_path, players, role, fixed=fixed, games_per_pairing=60)
        board = report(rows, [p.name for p in players], tmp_path / role, n_boot=300, plots=False)
        assert board[0]["name"] == top, board
        assert all(board[0]["lo"] > other["hi"] for other in board[1:]), board
        info = json.loads((tmp_path / role / "tournament.json").read_text())["players"]
        assert info["tiny"]["prompts"] == {role: cfg.prompts[role].system}  # the run's prompt, shared


def test_paired_games_of_one_seed_draw_alike_for_every_player() -> None:
    """The fixed partners of a paired game (a random twin, a sampled model) draw from the game's number,
    which leaves the rated player out: each player meets the same partner moves on a seed."""
    from cogym.runners.tournament.schedule import SoloKey, game_index

    assert game_index(SoloKey("a", 3)) == game_index(SoloKey("b", 3)) != game_index(SoloKey("a", 4))
    assert game_index(SoloKey("a", 3, round=1)) != game_index(SoloKey("a", 3, round=2))
    assert SoloKey("a", 3).id != SoloKey("b", 3).id  # results stay the player's own
