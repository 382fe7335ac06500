"""ReMax's greedy baseline (cogym/learners/algorithms/remax.py; cogym/runners/train/iteration.py
``submit_greedy``): each group's first game is played once more with the ReMax policy's seats decoding
greedily (the other seats drawing what they drew there), that game is never trained on, and its return
for each seat reaches the algorithm as the group's turns' ``Turn.baseline``. A run whose algorithms take
no such baseline plays no extra game.

The game is Kuhn poker (cogym/configs/kuhn_poker.yaml): the tiny model plays ``first`` against a
scripted ``second``, in groups of 2 hands dealt from one seed; and proposer_solver-v0, where the
solver's problem is the proposer's sampled text."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cogym.core.errors import ConfigError
from cogym.runners.config.load import load_config
from cogym.runners.ray.worker import RolloutWorker
from cogym.runners.rollout.turns import rollout
from cogym.runners.train.build import build
from cogym.runners.train.execution import InProcess
from cogym.runners.train.iteration import Played, Sampler, attach_baselines
from cogym.runners.train.loop import train

PATH = Path(str(resources.files("cogym.configs").joinpath("kuhn_poker.yaml")))
PROPOSER_SOLVER = Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml")))
K = 2  # hands per group
SMALL = ["game.num_games=8", f"game.group_size={K}", "eval.declared=false", "run.tensorboard=false",
         "run.plot=false", "learners.player.algorithm=remax"]


def _sampler(tmp_path: Path, *overrides: str, path: Path = PATH, small: tuple[str, ...] = tuple(SMALL)):
    """The run, its sampler, and every rollout the sampler plays: (kwargs, result)."""
    run = build(load_config(path, [*small, f"run.out_dir={tmp_path}", *overrides]))
    play = InProcess(run.cfg).rollouts().play
    calls: list[tuple[dict, object]] = []

    def spy(*args, **kwargs):
        res = play(*args, **kwargs)
        calls.append((kwargs, res))
        return res

    return run, Sampler(run, Played(spy)), calls


def test_each_group_plays_one_greedy_game_whose_moves_are_a_temperature_0_decode(tmp_path):
    run, sampler, calls = _sampler(tmp_path)
    res, batches, metrics = sampler.sample(1)
    assert [c[0].get("greedy", ()) for c in calls] == [(), ("player",)]
    # the greedy game j replays group j's first game: its place in the list and the round's key
    assert calls[1][0]["game_indices"] == [j * K for j in range(run.cfg.game.num_games // K)]
    assert calls[1][0]["sampling_key"] == calls[0][0]["sampling_key"]
    greedy = calls[1][1]
    assert metrics["greedy_tokens"] == greedy.generated_tokens > 0 and metrics["greedy_s"] > 0
    assert len(greedy.returns) == run.cfg.game.num_games // K and greedy.turns
    policy = run.policies["player"]
    sampling = dataclasses.replace(run.cfg.policies["player"].sampling, temperature=0.0)
    for t in greedy.turns:
        assert t.response_ids == policy.generate([t.prompt_ids], sampling)[0].response_ids
    # each greedy game starts where its group did: the first prompt of seat `first` is the group's
    first_prompt = {}
    for t in res.turns:
        first_prompt.setdefault(t.game_index, t.prompt_ids)
    opening = {}
    for t in greedy.turns:
        opening.setdefault(t.game_index, t.prompt_ids)
    assert opening and all(opening[g] == first_prompt[g] == first_prompt[g + 1] for g in opening)
    # sampled at temperature 1, the group's own moves are not all the greedy ones
    assert any(t.response_ids != policy.generate([t.prompt_ids], sampling)[0].response_ids for t in res.turns)


def test_the_greedy_games_are_not_trained_on_and_their_returns_reach_the_algorithm(tmp_path):
    run, sampler, calls = _sampler(tmp_path)
    res, batches, metrics = sampler.sample(1)
    greedy = calls[1][1]
    turns = batches["player"]
    assert turns == [t for t in res.turns if t.policy_id == "player"]
    assert not {t.episode_id for t in turns} & {t.episode_id for t in greedy.turns}
    assert all("greedy" in t.episode_id for t in greedy.turns)
    for t in turns:
        assert t.baseline == greedy.returns[t.game_index // K][t.seat]
    assert metrics["player/remax_prompt_mismatch"] == 0
    assert len({t.baseline for t in turns}) > 1 or len({t.reward for t in turns}) > 1  # the check can tell them apart
    learner = run.learners["player"]
    data = learner.algorithm.train_batch(learner, turns)
    b = data.batch
    adv, mask = data.rows["adv"], b.mask > 0
    for i, t in enumerate(b.turns):
        assert torch.allclose(adv[i][mask[i]], torch.full_like(adv[i][mask[i]], t.reward - t.baseline))
    assert data.metrics["first/remax_baseline"] == pytest.approx(sum(t.baseline for t in b.turns) / len(b.turns))


def test_a_run_without_remax_plays_no_greedy_game(tmp_path):
    _, sampler, calls = _sampler(tmp_path, "learners.player.algorithm=reinforce_pp")
    res, batches, metrics = sampler.sample(1)
    assert len(calls) == 1 and "greedy" not in calls[0][0]
    assert all(t.baseline is None for t in batches["player"])
    assert not any("greedy" in key or "remax" in key for key in metrics)


def test_a_remax_run_repeats_bit_for_bit(tmp_path):
    runs = []
    for name in ("a", "b"):
        cfg = load_config(PATH, [*SMALL, f"run.out_dir={tmp_path}", "run.iterations=3", "run.checkpoint_every=3"])
        train(cfg, tmp_path / name, progress=False)
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        metrics = [{k: v for k, v in r.items() if k.startswith("player/")} for r in rows]
        weights = load_file(str(tmp_path / name / "checkpoints" / "step_000003" / "policies" / "player" / "model.safetensors"))
        runs.append((metrics, weights))
    (m_a, w_a), (m_b, w_b) = runs
    assert any("player/first/remax_baseline" in r or "player/remax_baseline" in r for r in m_a)
    assert m_a == m_b
    assert all(torch.equal(w_a[k], w_b[k]) for k in w_a)


def test_a_ray_rollout_worker_plays_the_greedy_game_as_this_process_does(tmp_path, monkeypatch):
    """The worker's rollout takes the greedy policies and plays them as the one-process rollout does (the
    Ray driver sends them with every share: RayRollout.submit)."""
    monkeypatch.setattr("cogym.runners.ray.worker.enter", lambda *args: None)  # no chdir or thread change here
    cfg = load_config(PATH, [*SMALL, f"run.out_dir={tmp_path}"])
    worker = RolloutWorker(cfg, 0, str(tmp_path), {}, 1)
    seeds, key = [11, 12, 13], 99
    places = [0, K, 2 * K]  # each greedy game keyed by its group's first game's place
    there = worker.rollout([0, 1, 2], seeds, "it1-greedy", 1, key, 1, worker.versions(), None, ("player",), places)
    run = build(cfg)
    here = rollout(run.games[:3], run.seat_map, {r: p.system for r, p in cfg.prompts.items()}, seeds,
                   episode_prefix="it1-greedy", sampling_key=key, greedy=("player",), game_indices=places)
    assert [t.game_index for t in there.turns] == [t.game_index for t in here.turns] and places[-1] in {
        t.game_index for t in there.turns}
    assert [t.response_ids for t in there.turns] == [t.response_ids for t in here.turns]
    assert there.returns == here.returns
    policy = run.policies["player"]
    sampling = dataclasses.replace(cfg.policies["player"].sampling, temperature=0.0)
    assert all(t.response_ids == policy.generate([t.prompt_ids], sampling)[0].response_ids for t in there.turns)


@pytest.mark.parametrize("override, match", [
    ("learners.player.overlong_buffer=2", "greedy baseline is not length-shaped"),
    ("learners.player.reward_from=x", "reward_from: x pays this policy with a reward model"),
])
def test_remax_refuses_what_its_greedy_baseline_cannot_match(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(PATH, [*SMALL, override])


def test_a_token_level_greedy_game_decodes_as_the_turn_level_one(tmp_path):
    """Token by token (TokenStreaming), the greedy twin answers with the ids of a temperature-0 decode too."""
    run, sampler, calls = _sampler(tmp_path, "game.granularity=token")
    sampler.sample(1)
    greedy = calls[1][1]
    policy = run.policies["player"]
    sampling = dataclasses.replace(run.cfg.policies["player"].sampling, temperature=0.0)
    assert greedy.turns
    for t in greedy.turns:
        assert t.response_ids == policy.generate([t.prompt_ids], sampling)[0].response_ids


def test_a_greedy_game_whose_opening_differs_from_the_row_gives_it_no_baseline(tmp_path):
    """attach_baselines checks the seat's first prompt in the greedy game against the row's own game's."""
    run, sampler, calls = _sampler(tmp_path)
    res, batches, _ = sampler.sample(1)
    greedy = calls[1][1]
    turns = batches["player"]
    moved = next(t for t in greedy.turns if t.game_index == 0)
    greedy.turns[greedy.turns.index(moved)] = dataclasses.replace(moved, prompt_ids=[*moved.prompt_ids, 0])
    lost = [t for t in turns if t.game_index // K == 0]
    assert attach_baselines(turns, greedy, K, "player") == len(lost) > 0
    assert all(t.baseline is None for t in lost)
    assert all(t.baseline == greedy.returns[t.game_index // K][t.seat] for t in turns if t.game_index >= K)


PS = ("game.num_games=3", "game.kwargs.num_solvers=2", "eval.declared=false", "run.tensorboard=false",
      "run.plot=false", "learners.solver.engine=torch", "learners.proposer.engine=torch",
      "learners.solver.algorithm=remax")


def _openings(turns, role: str) -> dict[tuple[int, str], tuple]:
    """(game, seat) -> (first prompt ids, first text) of ``role``'s seats."""
    out: dict = {}
    for t in turns:
        if t.role == role:
            out.setdefault((t.game_index, t.seat), (tuple(t.prompt_ids), t.text))
    return out


def test_the_greedy_solver_meets_the_problem_the_sampled_proposer_set_its_group(tmp_path):
    """proposer_solver-v0: the solver's problem is the proposer's sampled text. The greedy game samples the
    proposer with the group's first game's draws, so it proposes the same problem and the greedy solvers'
    baseline answers the question the group's solvers were asked."""
    run, sampler, calls = _sampler(tmp_path, path=PROPOSER_SOLVER, small=PS)
    res, batches, metrics = sampler.sample(1)
    assert [c[0].get("greedy", ()) for c in calls] == [(), ("solver",)]
    greedy = calls[1][1]
    played, again = _openings(res.turns, "proposer"), _openings(greedy.turns, "proposer")
    assert again and again == {key: played[key] for key in again}  # the same proposals, to the token
    solvers, greedy_solvers = _openings(res.turns, "solver"), _openings(greedy.turns, "solver")
    assert greedy_solvers and {k: p for k, (p, _) in greedy_solvers.items()} == {k: p for k, (p, _) in solvers.items()}
    assert metrics["solver/remax_prompt_mismatch"] == 0
    assert batches["solver"] and all(t.baseline is not None for t in batches["solver"])
    assert all(t.baseline is None for t in batches["proposer"])


def test_two_remax_policies_each_play_their_own_greedy_games(tmp_path):
    """Both seats on remax: one greedy game per group and policy, only that policy greedy, so each policy's
    baseline is on its own rows' prompts; each game's baselines go to its own policy's turns."""
    run, sampler, calls = _sampler(tmp_path, "learners.proposer.algorithm=remax", path=PROPOSER_SOLVER, small=PS)
    res, batches, metrics = sampler.sample(1)
    assert [c[0].get("greedy", ()) for c in calls] == [(), ("proposer",), ("solver",)]
    for pid, (_, greedy) in zip(("proposer", "solver"), calls[1:]):
        assert metrics[f"{pid}/remax_prompt_mismatch"] == 0
        assert batches[pid] and all(t.baseline == greedy.returns[t.game_index][t.seat] for t in batches[pid])
    # the solver's greedy games saw the sampled proposals; the proposer's a greedy one, answered by sampled solvers
    assert _openings(calls[2][1].turns, "proposer") == _openings(res.turns, "proposer")
    assert metrics["greedy_tokens"] == calls[1][1].generated_tokens + calls[2][1].generated_tokens


def test_dynamic_sampling_rounds_play_greedy_games_of_their_own(tmp_path):
    """Each extra round (DAPO's refill) replays its own groups' first games greedily, with its own key, and
    the iteration's greedy_tokens add up every round's greedy games."""
    run, sampler, calls = _sampler(tmp_path, "learners.player.dynamic_sampling=std_gt_0",
                                   "learners.player.max_sampling_rounds=2")
    res, batches, metrics = sampler.sample(1)
    assert [c[0]["episode_prefix"] for c in calls] == ["it1", "it1-greedy-player", "it1r1", "it1r1-greedy-player"]
    assert calls[3][0]["sampling_key"] == calls[2][0]["sampling_key"] != calls[0][0]["sampling_key"]
    assert metrics["greedy_tokens"] == calls[1][1].generated_tokens + calls[3][1].generated_tokens
    refill = calls[2][1].turns  # the round's turns, as dynamic sampling pools them
    assert refill and all(t.episode_id.startswith("it1r1") for t in refill)
    for t in refill:
        assert t.baseline == calls[3][1].returns[t.game_index // K][t.seat]
