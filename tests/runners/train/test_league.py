"""Leagues: past snapshots of a trained policy play the league seats (kuhn_poker-v0, `first` trains).

The runs use the embedded tiny model (it plays Kuhn poker's numbered moves; a random-init model's
replies are all invalid, so the second seat would never move and nothing would be learned).

Config and build errors; PFSP weights and sampling as pure functions; one 5-iteration run (PFSP, some
plain self-play, a snapshot every 2 iterations, at most 2 kept) checked for what reaches the learner,
the snapshots, the summary's league table, and an exact replay after resuming from a checkpoint;
the same under ``--nproc 2``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from cogym.agents.loading import tiny_model_path
from cogym.core.types import SamplingParams
from cogym.learners.learner import Learner
from cogym.runners.train import execution as execution_mod
from cogym.runners.train.build import build
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError
from cogym.runners.config.schema import LeagueConfig
from cogym.runners.train.league import League, Member, game_score, pfsp_weights
from cogym.runners.train.loop import train

KUHN = str(Path(__file__).resolve().parents[3] / "cogym" / "configs" / "kuhn_poker.yaml")
COGYM = Path(sys.executable).with_name("cogym")
TIMING = ("rollout_s", "update_s", "iteration_s", "tokens_per_s")
LEAGUE = ["seats.second=player", "league.seats=[second]"]


def _overrides(extra: list[str] | None = None) -> list[str]:
    return [*LEAGUE, "league.every=2", "league.size=2", "league.sampling=pfsp",
            "league.latest_prob=0.25", "game.num_games=16", "learners.player.lr=1e-2", "run.iterations=5",
            "run.checkpoint_every=2", "run.tensorboard=false", "run.plot=false", "run.seed=1", *(extra or [])]


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows if "rollout_s" in r]


# ------------------------------------------------------------------------------ config checks

@pytest.mark.parametrize("extra, needle", [
    (["league.sampling=pfsp"], "league.seats is empty"),
    (["league.seats=[second, second]"], "names a seat twice"),
    (LEAGUE + ["league.sampling=fictitious"], "league.sampling must be one of uniform, pfsp"),
    (LEAGUE + ["league.every=0"], "league.every must be >= 1"),
    (LEAGUE + ["league.size=-1"], "league.size must be >= 0"),
    (LEAGUE + ["league.pfsp_power=-1"], "league.pfsp_power must be >= 0"),
    (LEAGUE + ["league.latest_prob=1"], "league.latest_prob must be in [0, 1)"),
    (["league.seats=[second]"], "seats gives them to 'scripted:random'"),
    (LEAGUE + ["league.policy=nobody"], "league.policy names policy 'nobody'"),
    (LEAGUE + ["learners.player.algorithm=frozen"], "is frozen"),
    (LEAGUE + ["policies.player.lora.r=4"], "is a LoRA adapter"),
    (LEAGUE + ["learners.player.engine=deepspeed", "learners.player.zero_stage=3"], "ZeRO-3"),
])
def test_league_config_mistakes_fail_at_load(extra: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(KUHN, extra)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("extra, needle", [
    (LEAGUE[:1] + ["league.seats=[third]"], "kuhn_poker-v0 has no role or seat 'third'"),
    (LEAGUE[:1] + ["league.seats=[first, player_1]"], "cover every seat of policy 'player'"),
    (["league.seats=[second]", "league.policy=player"], "seat 'player_1' is played by 'scripted:random'"),
])
def test_league_seats_are_checked_against_the_game(tiny_model_dir: Path, extra: list[str], needle: str) -> None:
    cfg = load_config(KUHN, [f"policies.player.model={tiny_model_dir}", *extra])
    with pytest.raises(ConfigError) as err:
        build(cfg)
    assert needle in str(err.value)


def test_league_seats_by_seat_name_and_no_league_by_default(tiny_model_dir: Path) -> None:
    run = build(load_config(KUHN, [f"policies.player.model={tiny_model_dir}", "seats.second=player",
                                   "league.seats=[player_1]"]))
    assert run.league.league_seats == ("player_1",) and run.league.learner_seats == ("player_0",)
    assert run.league.policy_id == "player" and run.league.members == []  # added when training starts
    assert build(load_config(KUHN, [f"policies.player.model={tiny_model_dir}"])).league is None


# ------------------------------------------------------------------------------ pure functions

def test_pfsp_weights_favour_the_opponents_the_learner_beats_least() -> None:
    # p_win = (wins + 1) / (games + 2) = 10/12, 6/12, 2/12 -> weights 2/12, 6/12, 10/12 -> 1/9, 3/9, 5/9
    w = pfsp_weights([9, 5, 1], [10, 10, 10])
    assert w == pytest.approx([1 / 9, 3 / 9, 5 / 9])
    assert pfsp_weights([9, 5, 1], [10, 10, 10], power=2) == pytest.approx(np.array([4, 36, 100]) / 140)
    assert pfsp_weights([9, 5, 1], [10, 10, 10], power=0) == pytest.approx([1 / 3] * 3)
    assert pfsp_weights([0, 0], [0, 0]) == pytest.approx([0.5, 0.5])  # no games yet: uniform
    assert pfsp_weights([100, 0.5], [100, 1]).min() > 0  # the prior keeps a beaten-every-time opponent drawable
    with pytest.raises(ValueError):
        pfsp_weights([3], [2])


def test_game_score_is_the_sign_of_the_sides_return_difference() -> None:
    assert game_score({"player_0": 2.0, "player_1": -2.0}, ["player_0"], ["player_1"]) == 1.0
    assert game_score({"player_0": -1.0, "player_1": 1.0}, ["player_0"], ["player_1"]) == 0.0
    assert game_score({"player_0": 0.0, "player_1": 0.0}, ["player_0"], ["player_1"]) == 0.5


def _bare_league(**cfg) -> League:
    league = League(LeagueConfig(seats=["second"], **cfg), "player", None, SamplingParams(), ["player_1"],
                    ["player_0"], seed=7)
    for k, (wins, games) in enumerate([(18, 20), (10, 20), (2, 20)]):
        league._append(Member(f"it{k}", k, agent=None))
        league.wins[f"it{k}"], league.games[f"it{k}"] = wins, games
    return league


def test_pfsp_samples_harder_opponents_more_often_and_replays_by_iteration() -> None:
    pfsp = _bare_league(sampling="pfsp")
    draws = pfsp.sample(iteration=3, groups=6000)
    counts = [draws.count(f"it{k}") for k in range(3)]
    expected = pfsp.probabilities() * 6000
    assert counts[0] < counts[1] < counts[2]
    assert np.allclose(counts, expected, rtol=0.1)
    assert pfsp.sample(3, 50) == pfsp.sample(3, 50) != pfsp.sample(4, 50)  # fixed by (seed, iteration)
    uniform = _bare_league(sampling="uniform").sample(3, 6000)
    assert all(abs(uniform.count(f"it{k}") - 2000) < 200 for k in range(3))
    latest = _bare_league(latest_prob=0.25).sample(3, 6000)
    assert abs(latest.count(None) / 6000 - 0.25) < 0.03


def test_size_keeps_the_most_recent_members() -> None:
    league = _bare_league(size=2)
    assert [m.name for m in league.members] == ["it1", "it2"]
    assert set(league.iterations) == {"it0", "it1", "it2"}  # the dropped member stays on the leaderboard


# ------------------------------------------------------------------------------ a league run

@pytest.fixture(scope="module")
def league_run(tmp_path_factory: pytest.TempPathFactory):
    """5 iterations; records every rollout result and every batch the learner got."""
    rollouts, updates = [], []
    real_rollout, real_update = execution_mod.rollout, Learner.update

    def spy_rollout(games, seat_map, *args, **kwargs):
        res = real_rollout(games, seat_map, *args, **kwargs)
        rollouts.append(res)
        return res

    def spy_update(self, turns):
        updates.append(list(turns))
        return real_update(self, turns)

    path = tmp_path_factory.mktemp("league") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(execution_mod, "rollout", spy_rollout)
        mp.setattr(Learner, "update", spy_update)
        summary = train(load_config(KUHN, _overrides()), run_path=path, progress=False)
    return path, summary, rollouts, updates


def test_league_seats_never_reach_the_learner(league_run) -> None:
    _, _, rollouts, updates = league_run
    assert len(rollouts) == len(updates) == 5
    league_turns = latest_games = 0
    for res, batch in zip(rollouts, updates):
        assert batch == [t for t in res.turns if t.policy_id == "player"]  # everything of player's, nothing else
        by_game: dict[int, set] = {}
        for t in res.turns:
            by_game.setdefault(t.game_index, set()).add((t.seat, t.policy_id))
            if t.policy_id.startswith("league:"):
                league_turns += 1
                assert t.seat == "player_1" and t.role == "second"
        for seats in by_game.values():
            latest_games += ("player_1", "player") in seats  # plain self-play: the current policy in both seats
            assert not (("player_1", "player") in seats and any(p.startswith("league:") for _, p in seats))
    assert league_turns > 0 and latest_games > 0, (league_turns, latest_games)


def test_snapshots_every_n_iterations_bounded_by_size(league_run) -> None:
    path, _, _, _ = league_run
    assert [r["league/size"] for r in _rows(path)] == [1, 1, 2, 2, 2]  # it0; +it2 after 2; +it4 (it0 out) after 4
    ck = path / "checkpoints"
    members = {step: json.loads((ck / step / "league" / "league.json").read_text())["members"]
               for step in ("step_000002", "step_000004", "step_000005")}
    assert members == {"step_000002": ["it0", "it2"], "step_000004": ["it2", "it4"], "step_000005": ["it2", "it4"]}
    assert sorted(p.name for p in (ck / "step_000004" / "league").iterdir()) == ["it2", "it4", "league.json"]
    # it0 is the initial weights; it2 the policy right after iteration 2's update (what step 2 saved).
    w0 = load_file(str(ck / "step_000002" / "league" / "it0" / "model.safetensors"))
    w_init = load_file(str(tiny_model_path() / "model.safetensors"))
    w2 = load_file(str(ck / "step_000002" / "league" / "it2" / "model.safetensors"))
    w_ck2 = load_file(str(ck / "step_000002" / "policies" / "player" / "model.safetensors"))
    assert all(np.array_equal(w0[k].numpy(), w_init[k].numpy()) for k in w_init)
    assert all(np.array_equal(w2[k].numpy(), w_ck2[k].numpy()) for k in w_ck2)
    assert any(not np.array_equal(w0[k].numpy(), w2[k].numpy()) for k in w0)  # training moved the policy


def test_metrics_and_summary_league_table(league_run) -> None:
    path, summary, _, _ = league_run
    rows = _rows(path)
    for r in rows:
        assert {"league/size", "league/games", "league/opponent_entropy", "league/latest_frac"} <= set(r)
        if r["league/games"]:
            assert 0 <= r["league/win_rate"] <= 1 and "league/current_mu" in r
    assert rows[0]["league/opponent_entropy"] == 0.0  # one member
    assert json.loads((path / "summary.json").read_text()) == summary
    table = summary["league"]
    assert {r["member"] for r in table} == {"it0", "it2", "it4", "current"}
    assert [r["mu"] for r in table] == sorted((r["mu"] for r in table), reverse=True)
    assert {r["member"]: r["active"] for r in table} == {"it0": False, "it2": True, "it4": True, "current": True}
    members = [r for r in table if r["member"] != "current"]
    games = sum(r["league/games"] for r in rows)
    assert sum(r["games"] for r in members) == games == next(r for r in table if r["member"] == "current")["games"]
    wins = sum(r["league/win_rate"] * r["league/games"] for r in rows if r["league/games"])
    assert sum((r["learner_win_rate"] or 0) * r["games"] for r in members) == pytest.approx(wins)
    state = json.loads((path / "checkpoints" / "step_000005" / "league" / "league.json").read_text())
    assert state["ratings"]["games"] == games


def test_resume_replays_the_league_exactly(league_run, tmp_path: Path) -> None:
    """Resume from step 2 (steps 4 and 5 removed): iterations 3-5 and the league equal the straight run's."""
    src, summary, _, _ = league_run
    path = tmp_path / "run"
    shutil.copytree(src, path)
    for step in ("step_000004", "step_000005"):
        shutil.rmtree(path / "checkpoints" / step)
    resumed = train(load_config(path / "config.yaml"), run_path=path, resume=True, progress=False)
    assert _rows(path) == _rows(src)  # every metric of every iteration, league's included, exactly
    assert resumed["league"] == summary["league"]
    for step in ("step_000004", "step_000005"):
        a, b = (json.loads((p / "checkpoints" / step / "league" / "league.json").read_text()) for p in (src, path))
        assert a == b


@pytest.mark.slow
@pytest.mark.extended  # four `cogym train` processes; docs/testing.md
def test_nproc_2_plays_the_league_and_resumes_exactly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update(DS_ACCELERATOR="cpu", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")

    def cogym(args: list[str]) -> None:
        proc = subprocess.run([str(COGYM), *args], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]

    run = tmp_path / "run"
    cogym(["train", KUHN, "--nproc", "2", "--run-dir", str(run), "--no-progress",
           *_overrides(["run.iterations=3"])])
    rows = _rows(run)
    assert [r["league/games"] + r["league/latest_frac"] * 16 for r in rows] == [16, 16, 16]  # all games, both ranks'
    shutil.rmtree(run / "checkpoints" / "step_000003")
    cogym(["train", "--resume", str(run), "--nproc", "2", "--no-progress"])
    assert _rows(run) == rows


def test_a_league_reads_the_policies_only_when_it_snapshots() -> None:
    """The loop refreshes the driver's copies of learner-actor policies before a hook that reads them:
    a league reads them every league.every iterations (its snapshots); a hook that says nothing, always."""
    from types import SimpleNamespace

    from cogym.runners.train.hooks import TrainHook
    from cogym.runners.train.league import LeagueHook

    hook = LeagueHook(SimpleNamespace(cfg=SimpleNamespace(every=3)))
    assert [hook.reads_policies(it) for it in range(1, 7)] == [False, False, True, False, False, True]
    assert TrainHook().reads_policies(1)


def test_a_game_skipped_for_raising_is_not_rated() -> None:
    """game.on_error: skip leaves a failed game with no returns: the league must not score it a draw."""
    from cogym.runners.rollout.loop import RolloutResult
    from cogym.runners.train.league import LeagueHook

    league = _bare_league()
    before = dict(league.games)
    res = RolloutResult(turns=[], returns=[{}, {"player_0": 1.0, "player_1": -1.0}], infos=[{}, {}], failed=[0])
    m = LeagueHook(league).after_rollout(res, ["it0", "it1"], iteration=4)
    assert league.games["it0"] == before["it0"] and league.games["it1"] == before["it1"] + 1
    assert m["league/games"] == 1.0 and m["league/win_rate"] == 1.0
