"""The learner plug-ins wired into Learner and the trainer: RAE, TRR++, DAPO overlong shaping,
truncation masking and dynamic sampling (the formulas themselves are tested against docs/algorithms.md's
vectors in tests/learners; here: that the Learner feeds them the right rows and keeps their state)."""

from __future__ import annotations

import types

import pytest
import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.core.types import Turn
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner, TokenBatch
from cogym.runners.rollout.loop import RolloutResult
from cogym.runners.train.iteration import dynamic_sampling, grouped


def _turn(policy: Policy, gen, episode: str, seat: str, reward: float, role: str = "player", info=None,
          group=None) -> Turn:
    return Turn(game_index=0, episode_id=episode, seat=seat, role=role, policy_id="p", prompt_ids=gen.prompt_ids,
                response_ids=gen.response_ids, logprobs=gen.logprobs, text=gen.text, finished=gen.finished,
                reward=reward, group_key=group or (episode, role), info=info or {})


def _gens(policy: Policy, n: int, max_new_tokens: int = 4, seed: int = 0):
    torch.manual_seed(seed)
    prompt = policy.render([{"role": "user", "content": "12+3"}])
    return policy.generate([prompt] * n, SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0))


# ------------------------------------------------------------------------------------------ RAE
def _rae_turns(policy: Policy, outcomes: list[tuple[str, str, float]]) -> list[Turn]:
    gens = _gens(policy, len(outcomes))
    return [_turn(policy, g, ep, seat, r) for g, (ep, seat, r) in zip(gens, outcomes)]


def test_rae_subtracts_a_per_seat_baseline_and_keeps_it_across_updates_and_checkpoints(policy, tmp_path):
    cfg = LearnerConfig.from_flat(algorithm="rae", engine="torch", lr=1e-3, rae_decay=0.5)
    learner = Learner(policy, cfg, game_id="g")
    # Two games, seats s0 (wins both) and s1 (loses both); each seat's first outcome meets a 0 baseline.
    turns = _rae_turns(policy, [("e0", "s0", 1.0), ("e0", "s1", -1.0), ("e1", "s0", 1.0), ("e1", "s1", -1.0)])
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    adv, keep, metrics = learner.advantages(b, None)
    # pre order, decay 0.5: s0: A = 1 - 0 = 1, b = 0.5; then A = 1 - 0.5 = 0.5, b = 0.75 (s1 mirrored)
    per_row = [float(adv[i][b.mask[i] > 0].unique().item()) for i in range(4)]
    assert per_row == [1.0, -1.0, 0.5, -0.5]
    assert torch.equal(adv, adv * b.mask)  # nothing on padding
    assert keep.all()
    assert metrics["player/rae_baseline/s0"] == 0.75 and metrics["player/rae_baseline/s1"] == -0.75
    learner.save(tmp_path)
    fresh = Learner(policy, cfg, game_id="g")
    fresh.load(tmp_path)
    assert fresh.algorithms["rae"].baselines.values == learner.algorithms["rae"].baselines.values == {("g", "s0"): 0.75, ("g", "s1"): -0.75}
    # The next outcome is measured against the restored baseline: 1 - 0.75.
    nxt = _rae_turns(policy, [("e2", "s0", 1.0)])
    adv2, _, _ = fresh.advantages(TokenBatch.from_turns(nxt, policy.tokenizer.pad_token_id), None)
    assert float(adv2[0][adv2[0] != 0].unique()) == pytest.approx(0.25)


def test_rae_drops_turns_whose_advantage_is_zero(policy):
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="rae", engine="torch", lr=1e-3), game_id="g")
    # A draw against a 0 baseline: A = 0, the turn is dropped from the step.
    turns = _rae_turns(policy, [("e0", "s0", 0.0), ("e0", "s1", 0.0), ("e1", "s0", 1.0), ("e1", "s1", -1.0)])
    metrics = learner.update(turns)
    assert metrics["trained_rows"] == 2.0 and metrics["player/rae_dropped"] == 2.0
    kept = Learner(policy, LearnerConfig.from_flat(algorithm="rae", engine="torch", lr=1e-3, rae_filter_zero_adv=False))
    assert kept.update(turns)["trained_rows"] == 4.0


def test_rae_discounts_earlier_turns_of_a_seat(policy):
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="rae", engine="torch", lr=1e-3, gamma=0.5), game_id="g")
    turns = _rae_turns(policy, [("e0", "s0", 1.0), ("e0", "s0", 1.0), ("e0", "s0", 1.0)])  # three turns, one game
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    adv, _, _ = learner.advantages(b, None)
    assert [float(adv[i][b.mask[i] > 0].unique()) for i in range(3)] == [0.25, 0.5, 1.0]
    # one outcome per (episode, seat): the baseline moved once, not three times
    assert learner.algorithms["rae"].baselines.values == {("g", "s0"): pytest.approx(0.05)}


# ------------------------------------------------------------------------------------------ TRR++
def test_trr_pp_whitens_within_each_task(policy):
    learner = Learner(policy, LearnerConfig.from_flat(algorithm="trr_pp", engine="torch", lr=1e-3, trr_task_key="task"))
    gens = _gens(policy, 8)
    # Task "easy" pays 10 or 11, task "hard" 0 or 1: whitened together, every easy turn would look good.
    rewards = [10, 11, 10, 11, 0, 1, 0, 1]
    turns = [_turn(policy, g, f"e{i}", "s", float(r), info={"task": "easy" if i < 4 else "hard"})
             for i, (g, r) in enumerate(zip(gens, rewards))]
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    adv, _, metrics = learner.advantages(b, None)
    assert metrics["player/trr_tasks"] == 2.0
    for rows in (slice(0, 4), slice(4, 8)):
        m = b.mask[rows]
        assert float((adv[rows] * m).sum() / m.sum()) == pytest.approx(0.0, abs=1e-5)
    seq = [float(adv[i][b.mask[i] > 0][0]) for i in range(8)]
    assert seq[0] < 0 < seq[1] and seq[4] < 0 < seq[5]
    one_task = Learner(policy, LearnerConfig.from_flat(algorithm="trr_pp", engine="torch", lr=1e-3))
    adv1, _, _ = one_task.advantages(b, None)
    assert all(float(adv1[i][b.mask[i] > 0][0]) > 0 for i in range(4))  # one task: easy rows all look good


# ------------------------------------------------------------------------------------------ DAPO
def test_overlong_shaping_and_truncation_masking(policy):
    gens = _gens(policy, 6, max_new_tokens=6)
    turns = [_turn(policy, g, "e0", f"s{i}", 1.0) for i, g in enumerate(gens)]
    lengths = [2, 3, 4, 5, 6, 6]
    for t, n in zip(turns, lengths):  # varied lengths; those cut at max_new_tokens = 6 count as truncated
        t.response_ids, t.logprobs, t.finished = t.response_ids[:n], t.logprobs[:n], n < 6
    cfg = LearnerConfig.from_flat(algorithm="reinforce_pp", engine="torch", lr=1e-3, overlong_buffer=2, overlong_penalty=1.0)
    m = Learner(policy, cfg, max_new_tokens=6).update(turns)
    expected = [min(-(n - 4) / 2, 0.0) for n in lengths]  # 0 up to 4 tokens, -1 at 6
    assert m["overlong_penalty"] == pytest.approx(sum(expected) / len(expected))
    truncated = 2
    masked = Learner(policy, LearnerConfig.from_flat(algorithm="reinforce_pp", engine="torch", lr=1e-3, mask_truncated=True))
    mm = masked.update(turns)
    assert mm["trained_rows"] == len(turns) - truncated
    assert mm["truncated_frac"] == pytest.approx(truncated / len(turns))
    with pytest.raises(ValueError, match="max_new_tokens"):
        Learner(policy, cfg)


def _fake_run(num_games: int, learner) -> types.SimpleNamespace:
    cfg = types.SimpleNamespace(run=types.SimpleNamespace(seed=0), game=types.SimpleNamespace(group_size=1, group_by="seed"),
                                learners={"p": learner.cfg})
    return types.SimpleNamespace(cfg=cfg, games=[None] * num_games, seat_map=None, learners={"p": learner}, league=None)


def _ds_learner(predicate: str = "std_gt_0", max_rounds: int = 10):
    cfg = LearnerConfig.from_flat(dynamic_sampling=predicate, max_sampling_rounds=max_rounds)
    stub = types.SimpleNamespace(cfg=cfg, max_new_tokens=8)
    stub.group_decisions = lambda turns: Learner.group_decisions(stub, turns)
    stub.shaped = lambda scores, lengths: Learner.shaped(stub, scores, lengths)
    return stub


def _round(prefix: str, rewards_per_group: list[list[float]]) -> RolloutResult:
    turns = []
    for g, rewards in enumerate(rewards_per_group):
        for k, r in enumerate(rewards):
            turns.append(Turn(game_index=g, episode_id=f"{prefix}-{g}", seat=f"s{k}", role="solver", policy_id="p",
                              prompt_ids=[1], response_ids=[2], logprobs=[0.0], text="x", finished=True, reward=r,
                              group_key=(f"{prefix}-{g}", "solver")))
    return RolloutResult(turns=turns, returns=[{} for _ in rewards_per_group], infos=[{} for _ in rewards_per_group],
                         generated_tokens=0, generate_seconds=0.0, seconds=0.0)


def test_dynamic_sampling_refills_until_enough_groups_pass_then_trims():
    calls = []

    def play(games, seat_map, system, seeds, episode_prefix, group_size=1, sampling_key=None):
        calls.append((episode_prefix, list(seeds)))
        return _round(episode_prefix, [[0, 1], [1, 1], [1, 0], [0, 1]])  # 3 of 4 groups informative

    first = _round("it1", [[1, 1], [0, 1], [0, 0], [1, 1]])  # 1 of 4 passes std > 0
    batches = {"p": list(first.turns)}
    m = dynamic_sampling(_fake_run(4, _ds_learner()), play, {}, 1, first, batches)
    assert [c[0] for c in calls] == ["it1r1"]  # 1 + 3 = 4 passing groups after one refill
    assert len(calls[0][1]) == 4 and calls[0][1] != [int(s) for s in calls[0][1][:1]] * 4  # 4 fresh seeds
    groups = [t.group_key for t in batches["p"]]
    assert len(groups) == 8  # 4 groups of 2, the first round's batch size
    assert set(groups) == {("it1-1", "solver"), ("it1r1-0", "solver"), ("it1r1-2", "solver"), ("it1r1-3", "solver")}
    assert m == {"p/ds_rounds": 2.0, "p/ds_pass_rate": 4 / 8, "p/ds_groups": 4.0, "p/ds_short": 0.0}


def test_dynamic_sampling_trims_the_surplus_in_order_of_play():
    def play(games, seat_map, system, seeds, episode_prefix, group_size=1, sampling_key=None):
        return _round(episode_prefix, [[0, 1], [1, 0], [0, 1], [1, 0]])  # all 4 pass: 1 + 4 > 4

    first = _round("it1", [[0, 1], [0, 0], [1, 1], [0, 0]])
    batches = {"p": list(first.turns)}
    m = dynamic_sampling(_fake_run(4, _ds_learner()), play, {}, 1, first, batches)
    assert [t.group_key[0] for t in batches["p"]][::2] == ["it1-0", "it1r1-0", "it1r1-1", "it1r1-2"]
    assert m["p/ds_groups"] == 4.0 and m["p/ds_pass_rate"] == 5 / 8


def test_dynamic_sampling_stops_after_max_rounds_and_reports_the_shortfall():
    def play(games, seat_map, system, seeds, episode_prefix, group_size=1, sampling_key=None):
        return _round(episode_prefix, [[1, 1], [0, 0]])  # nothing ever passes

    first = _round("it1", [[1, 0], [1, 1]])
    batches = {"p": list(first.turns)}
    m = dynamic_sampling(_fake_run(2, _ds_learner(max_rounds=3)), play, {}, 1, first, batches)
    assert m["p/ds_rounds"] == 3.0 and m["p/ds_short"] == 1.0 and m["p/ds_groups"] == 1.0
    assert {t.group_key for t in batches["p"]} == {("it1-0", "solver")}


def test_grouped_seeds_repeat_each_seed():
    assert grouped([5, 7], 3) == [5, 5, 5, 7, 7, 7]
    assert grouped([5, 7], 1) == [5, 7]


def test_rae_outcome_includes_overlong_shaping(policy):
    gens = _gens(policy, 2, max_new_tokens=4)
    turns = [_turn(policy, g, "e0", f"s{i}", 1.0) for i, g in enumerate(gens)]
    for t, n in zip(turns, (2, 4)):
        t.response_ids, t.logprobs, t.finished = t.response_ids[:n], t.logprobs[:n], n < 4
    cfg = LearnerConfig.from_flat(algorithm="rae", engine="torch", lr=1e-3, overlong_buffer=2, overlong_penalty=1.0)
    learner = Learner(policy, cfg, game_id="g", max_new_tokens=4)
    learner.update(turns)
    # s0 (2 tokens) keeps its 1; s1 (4 tokens = L_max) loses the full penalty: outcome 0, baseline stays 0
    assert learner.algorithms["rae"].baselines.values == {("g", "s0"): pytest.approx(0.05), ("g", "s1"): pytest.approx(0.0)}


def test_dynamic_sampling_ignores_rows_the_loss_will_not_see():
    first = _round("it1", [[1, 0, 0], [1, 0, 1]])
    first.turns[0].finished = False  # group 0 varies only through a truncated response
    on = _ds_learner()
    on.cfg.mask_truncated = True
    assert on.group_decisions(first.turns) == {("it1-0", "solver"): False, ("it1-1", "solver"): True}
    assert _ds_learner().group_decisions(first.turns) == {("it1-0", "solver"): True, ("it1-1", "solver"): True}


def test_mean_predicates_use_their_own_default_bounds():
    turns = _round("it1", [[1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]]).turns  # means 0.8, 0.2, 0.6
    closed = _ds_learner("mean_in_closed")
    assert list(closed.group_decisions(turns).values()) == [True, True, True]  # [0.2, 0.8] inclusive
    closed.cfg.dynamic_sampling_high = 0.7  # one bound given: the other stays the predicate's 0.2
    assert list(closed.group_decisions(turns).values()) == [False, True, True]
    assert list(_ds_learner("mean_in_open").group_decisions(turns).values()) == [True, True, True]  # (0, 1)
