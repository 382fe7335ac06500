"""A game that raises while it is played: one report a user can act on, a resumable run, or skipped games.

``Fragile`` is a one-seat game that raises on the second move of the episodes whose seed it is told
to break on (standing in for a game that chokes on a model's message).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from gymnasium.spaces import Box, Dict

from cogym.agents.llm import LLMAgent
from cogym.core.types import SamplingParams
from cogym.core.errors import GameStepError
from cogym.envs import make, registry, scripted_strategies
from cogym.envs.base import CogymEnv, GameSpec, text_space
from cogym.envs.kuhn_poker import KuhnPokerEnv
from cogym.runners.cli import main
from cogym.runners.config.load import load_config
from cogym.runners.rollout.turns import rollout
from cogym.runners.train.iteration import iteration_seeds
from cogym.runners.rollout.tokens import ChatCodec, token_rollout
from cogym.runners.train.loop import train

GAME = "fragile-v0"


class Fragile(CogymEnv):
    metadata = {"name": "fragile", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, break_on=(), render_mode=None) -> None:
        super().__init__(render_mode=render_mode)
        self.break_on = set(break_on)
        self.possible_agents = ["talker"]
        self._seat_roles = {"talker": "talker"}
        self.observation_spaces = {"talker": Dict({"observation": Box(0, 2, shape=(1,), dtype=np.int64),
                                                   "text": text_space(20)})}
        self.action_spaces = {"talker": text_space(64)}
        self.spec = GameSpec(GAME, ("talker",), (0.0, 1.0), zero_sum=False, max_turns=2, description="Two moves.")
        self.said: list[str] = []
        self.seed_value = -1

    def reset(self, seed=None, options=None) -> None:
        self._seed(seed)
        self.seed_value = -1 if seed is None else int(seed)
        self.said = []
        self._start_episode({"talker": {"role": "talker"}})

    def observe(self, agent):
        return {"observation": np.array([len(self.said)], dtype=np.int64), "text": f"move {len(self.said)}"}

    def step(self, action) -> None:
        if self._begin_turn(action) is None:
            return
        if self.said and self.seed_value in self.break_on:
            raise ValueError(f"cannot parse {action[:10]!r}")  # the game's own bug
        self.said.append(action)
        if len(self.said) == 2:
            self.infos["talker"] = {"role": "talker"}
            self._end_game({"talker": float(len(action) % 2)})

    def _render_text(self) -> str:
        return repr(self.said)


@pytest.fixture
def fragile(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register(GAME, Fragile, scripted={"talker": {"say": lambda text, rng: "hi there"}})


def _seat_map(policy):
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=5))
    return lambda seat, role: ("talker", agent)


@pytest.mark.parametrize("granularity", ["turn", "token"])
def test_a_raising_game_stops_the_rollout_with_one_block_that_names_everything(fragile, policy, granularity) -> None:
    kwargs = {"break_on": [11]}
    if granularity == "turn":
        games = [make(GAME, **kwargs) for _ in range(3)]
        play = rollout
    else:
        codec = ChatCodec(policy, {})
        games = [make(GAME, granularity="token", codec=codec, max_turn_tokens=5, **kwargs) for _ in range(3)]
        play = token_rollout
    with pytest.raises(GameStepError) as info:
        play(games, _seat_map(policy), {}, seeds=[10, 11, 12], episode_prefix="it4", sampling_key=3)
    text, record = str(info.value), info.value.record
    assert text.startswith("game fragile-v0 raised during play (game 1 of rollout it4, seed 11):")
    assert "seat 'talker' (role 'talker', policy 'talker')" in text
    assert "error: ValueError: cannot parse" in text
    assert f"test_game_errors.py:{_line_of('raise ValueError')} in step" in text  # the line of the game's code
    assert "check_game('fragile-v0', {'break_on': [11]})" in text and "game.on_error=skip" in text
    assert "Traceback" not in text and len(text.splitlines()) <= 10
    assert record["seed"] == 11 and record["seat"] == "talker" and record["game"] == GAME
    assert isinstance(record["action"], str) and len(record["action"]) <= 240


def _line_of(needle: str) -> int:
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if needle in line and "needle" not in line)


def test_skipping_drops_only_the_games_that_raised(fragile, policy) -> None:
    games = [make(GAME, break_on=[1, 3]) for _ in range(4)]
    res = rollout(games, _seat_map(policy), {}, seeds=[0, 1, 2, 3], sampling_key=5, on_error="skip")
    assert [e["seed"] for e in res.errors] == [1, 3] and res.stats["game_errors"] == 2
    assert sorted({t.game_index for t in res.turns}) == [0, 2]  # no turns of a broken game are trained on
    assert res.returns[1] == res.returns[3] == {} and set(res.returns[0]) == {"talker"}
    clean = rollout([make(GAME) for _ in range(4)], _seat_map(policy), {}, seeds=[0, 1, 2, 3], sampling_key=5)
    assert [t.response_ids for t in res.turns] == [t.response_ids for t in clean.turns if t.game_index in (0, 2)]


def _config(tmp_path, model_dir, **game) -> object:
    path = tmp_path / "fragile.yaml"
    path.write_text(yaml.safe_dump({
        "run": {"name": "fragile", "iterations": 3, "checkpoint_every": 0, "tensorboard": False, "plot": False},
        "game": {"id": GAME, "num_games": 4, "group_size": 2, **game},
        "seats": {"talker": "talker"},
        "policies": {"talker": {"model": str(model_dir), "sampling": {"max_new_tokens": 5}}},
        "learners": {"talker": {"algorithm": "grpo", "engine": "torch"}},
        "eval": {"declared": False}}))
    return path


def test_a_game_that_raises_in_training_stops_resumably_and_skipping_goes_on(fragile, tiny_model_dir, tmp_path,
                                                                            capsys) -> None:
    bad = iteration_seeds(0, 2, 2)[:1]  # one seed of iteration 2 breaks: games 0 and 1 (a group of 2) play it
    path = _config(tmp_path, tiny_model_dir, kwargs={"break_on": bad})
    run = tmp_path / "run"
    assert main(["train", str(path), "--run-dir", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cogym train: error: game fragile-v0 raised during play (game 0 of rollout it2")
    assert "Traceback" not in err
    assert f"The run stopped after iteration 1, whose state is checkpointed: `cogym train --resume {run}`" in err
    assert (run / "checkpoints" / "step_000001").is_dir()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "rollout_s" in r] == [1]
    # Resumed with the broken games skipped: iterations 2 and 3 run, the skipped game is logged and counted.
    summary = train(load_config(run / "config.yaml", ["game.on_error=skip"]), run_path=run, resume=True,
                    progress=False)
    assert summary["iterations"] == 3
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    its = [r for r in rows if "rollout_s" in r]
    assert [r["iteration"] for r in its] == [1, 2, 3]
    assert its[1]["rollout/game_errors"] == 2.0 and its[2]["rollout/game_errors"] == 0.0
    logged = [json.loads(line) for line in (run / "game_errors.jsonl").read_text().splitlines()]
    assert [(e["iteration"], e["seed"], e["seat"]) for e in logged] == [(2, bad[0], "talker")] * 2
    assert "skipped 2 game(s) that raised" in capsys.readouterr().err


def test_on_error_is_checked_in_the_config(tmp_path, tiny_model_dir, fragile) -> None:
    from cogym.core.errors import ConfigError

    with pytest.raises(ConfigError, match="game.on_error must be one of stop, skip; got 'skpi'"):
        load_config(_config(tmp_path, tiny_model_dir, on_error="skpi"))


class CrashyKuhn(KuhnPokerEnv):
    """Kuhn poker that raises on any bet in the episodes of odd seeds (a stand-in for a game's parse bug)."""

    def reset(self, seed=None, options=None) -> None:
        self.odd = seed is not None and seed % 2 == 1
        super().reset(seed=seed, options=options)

    def step(self, action) -> None:
        if self.odd and isinstance(action, str) and action.strip() == "bet":
            raise KeyError("bet")
        super().step(action)


def test_a_game_that_raises_in_a_tournament_is_reported_in_one_block(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("crashy_kuhn-v0", CrashyKuhn, scripted=scripted_strategies("kuhn_poker-v0"))
    code = main(["tournament", "--game", "crashy_kuhn-v0", "--players", "scripted:always_bet", "scripted:random",
                 "--games-per-pairing", "8", "--out", str(tmp_path / "t"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("cogym tournament: error: game crashy_kuhn-v0 raised during play")
    assert "move: 'bet'" in err and "error: KeyError: 'bet'" in err and "in step" in err
    assert "check_game('crashy_kuhn-v0', {})" in err and "Traceback" not in err


def test_the_error_pickles_whole_and_gathers_across_ranks(fragile, policy) -> None:
    """A Ray worker's or another rank's GameStepError reaches the driver as itself, with its record; the
    gathered result of several shares keeps every share's skipped games."""
    import pickle

    from cogym.runners.train.iteration import gather_rollouts

    err = GameStepError("game x raised", {"seed": 3})
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, GameStepError) and str(back) == "game x raised" and back.record == {"seed": 3}
    parts = [rollout([make(GAME, break_on=[1, 3]) for _ in range(2)], _seat_map(policy), {}, seeds=seeds,
                     sampling_key=5, on_error="skip", game_indices=ix) for seeds, ix in (([0, 2], [0, 2]), ([1, 3], [1, 3]))]
    whole = gather_rollouts(parts, [[0, 2], [1, 3]])
    assert whole.failed == [1, 3] and [e["seed"] for e in whole.errors] == [1, 3]


def test_an_agent_s_bad_move_is_not_blamed_on_the_game(fragile) -> None:
    class Broken:
        name = "broken"

        def act(self, requests):
            from cogym.core.types import Action
            return [Action(text=None) for _ in requests]

    agent = Broken()
    with pytest.raises(TypeError, match="agent 'broken' .* gave seat 'talker' the move None, not a str"):
        rollout([make(GAME)], lambda seat, role: ("talker", agent), {}, seeds=[0], on_error="skip")


class DeadStepBug(Fragile):
    """Raises when a finished seat is stepped with None (its step reads the action first)."""

    def step(self, action) -> None:
        action.strip()
        super().step(action)


def test_a_game_that_fails_stepping_a_finished_seat_is_skipped_too(monkeypatch, policy) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("dead_step-v0", DeadStepBug, scripted={"talker": {"say": lambda text, rng: "hi"}})
    res = rollout([make("dead_step-v0") for _ in range(2)], _seat_map(policy), {}, seeds=[0, 1], on_error="skip")
    assert res.failed == [0, 1] and all("AttributeError" in e["error"] for e in res.errors)


def test_an_evaluation_that_raises_keeps_the_updated_iteration_s_row(fragile, tiny_model_dir, tmp_path, monkeypatch) -> None:
    """A game error in a held-out evaluation comes after the iteration's update: that iteration is
    checkpointed, so its metrics row must be written before the run stops (a resume starts after it)."""
    from cogym.runners.train import loop as train_module

    def evaluate(*args, **kwargs):
        raise GameStepError("game fragile-v0 raised during play (evaluation)", {"seed": 0})

    monkeypatch.setattr(train_module, "evaluate", evaluate)
    cfg = load_config(_config(tmp_path, tiny_model_dir), ["run.eval_every=1"])
    with pytest.raises(GameStepError, match="The run stopped after iteration 1, whose state is checkpointed"):
        train(cfg, run_path=tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "rollout_s" in r] == [1]
    assert (tmp_path / "run" / "checkpoints" / "step_000001").is_dir()
