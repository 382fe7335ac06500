"""What game.group_size's groups are: the probe that finds roles whose prompts depend on other seats'
moves, the mixed_prompt_groups metric, and game.group_by: prompt."""

from __future__ import annotations

import json
import warnings

import pytest

from cogym.core.types import Turn
from cogym.envs.checks import prompts_that_depend_on_play
from cogym.runners.train.build import build
from cogym.runners.config.load import load_config
from cogym.runners.train.iteration import mixed_prompt_groups, regroup_by_prompt
from cogym.runners.train.loop import train


def test_the_probe_finds_roles_asked_about_other_seats_moves() -> None:
    assert set(prompts_that_depend_on_play("proposer_solver-v0")) == {"solver"}  # the proposer's problem
    assert set(prompts_that_depend_on_play("generator_verifier-v0")) == {"verifier"}  # the generator's answer
    assert prompts_that_depend_on_play("search_qa-v0", {"docs": 200}) == {}  # the question comes from the seed
    a, b = prompts_that_depend_on_play("proposer_solver-v0")["solver"]
    assert a != b


def _turn(episode: str, seat: str, prompt: list[int], group: str) -> Turn:
    return Turn(game_index=0, episode_id=episode, seat=seat, role="solver", policy_id="p", prompt_ids=prompt,
                response_ids=[9], logprobs=[0.0], text="", finished=True, group_key=(group, "solver"))


def test_mixed_groups_are_counted_and_grouping_by_prompt_unmixes_them() -> None:
    turns = [_turn("it1-0", "s0", [1, 2], "it1-0"), _turn("it1-1", "s0", [1, 3], "it1-0"),  # one seed, two prompts
             _turn("it1-2", "s0", [1, 2], "it1-1"), _turn("it1-3", "s0", [1, 2], "it1-1"),  # one seed, one prompt
             _turn("it1-3", "s0", [1, 2, 9, 5], "it1-1")]  # a later move of a seat: its first prompt counts
    assert mixed_prompt_groups(turns) == (1, 2)
    regroup_by_prompt(turns)
    assert mixed_prompt_groups(turns) == (0, 2)
    keys = [t.group_key for t in turns]
    assert keys[0] == keys[2] == keys[3] == keys[4] != keys[1]  # same first prompt: one group, across seeds
    assert all(k[0].startswith("it1-p") and k[1] == "solver" for k in keys)


def _overrides(model_dir, *extra: str) -> list[str]:
    return [f"policies.solver.model={model_dir}", "seats.proposer=scripted:random", "learners.solver.engine=torch",
            "game.num_games=4", "game.group_size=2", "game.kwargs.num_solvers=2", "run.iterations=1",
            "run.checkpoint_every=0", "run.tensorboard=false", "run.plot=false", "eval.declared=false", *extra]


def test_a_seed_grouped_role_whose_prompts_depend_on_play_is_warned_about(tiny_model_dir) -> None:
    with pytest.warns(UserWarning, match=r"groups the 'solver' turns .* set game.group_by: prompt"):
        build(load_config(None, _overrides(tiny_model_dir)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(load_config(None, _overrides(tiny_model_dir, "game.group_by=prompt")))


@pytest.mark.parametrize("group_by", ["seed", "prompt"])
def test_training_reports_mixed_groups_and_grouping_by_prompt_removes_them(tiny_model_dir, tmp_path, group_by) -> None:
    cfg = load_config(None, _overrides(tiny_model_dir, f"game.group_by={group_by}"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train(cfg, run_path=tmp_path / "run", progress=False)
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if "rollout_s" in line]
    # The scripted proposer writes another problem in each game of a seed: seed groups mix them.
    assert (row["solver/mixed_prompt_groups"] > 0) == (group_by == "seed")


def test_group_by_is_checked(tiny_model_dir) -> None:
    from cogym.core.errors import ConfigError

    with pytest.raises(ConfigError, match="game.group_by must be one of seed, prompt"):
        load_config(None, _overrides(tiny_model_dir, "game.group_by=promt"))
