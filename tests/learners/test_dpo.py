"""DPO (learners/algorithms/dpo.py, trained by the common Learner): pairs formed from a batch's groups by
reward (learners/pairs.py), the first step against a reference equal to the policy, the chosen-over-rejected
margin rising on the trained pairs and on held-out ones, the reference given on resume, offline pairs from a
preference file (dpo_data), and config errors."""

from __future__ import annotations

import json
import math

import pytest
import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams, Turn
from cogym.learners.batch import response_logp
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner
from cogym.learners.pairs import pair_rows, reward_pairs
from cogym.learners.preference import load_preferences, read_jsonl

LOG2 = math.log(2.0)
TRAIN_PROMPTS = ["37+45", "12*9", "50-61", "3+4"]
HELD_OUT_PROMPTS = ["8*8", "21-5", "6+70"]


def cfg(**kw) -> LearnerConfig:
    return LearnerConfig.from_flat(**{"algorithm": "dpo", "engine": "torch", "lr": 3e-3, **kw})


def turn(reward, prompt=(1, 2), group="g", role="solver", response=(5,)) -> Turn:
    return Turn(0, "e", "s", role, "p", list(prompt), list(response), [0.0] * len(response), "x", True, reward=reward,
                group_key=group)


def even_first(t: Turn) -> float:
    """The preference the tests teach: a response whose first token id is even is the better one."""
    return float(t.response_ids[0] % 2 == 0)


def sampled_turns(policy: Policy, prompts, per_prompt: int = 4, seed: int = 0) -> list[Turn]:
    """``per_prompt`` samples of each prompt (one group per prompt), rewarded by :func:`even_first`."""
    torch.manual_seed(seed)
    rendered = [policy.render([{"role": "user", "content": q}]) for q in prompts for _ in range(per_prompt)]
    gens = policy.generate(rendered, SamplingParams(max_new_tokens=3, temperature=1.0))
    turns = [Turn(i, f"e{i}", "solver_0", "solver", "p", g.prompt_ids, g.response_ids, g.logprobs, g.text, g.finished,
                  group_key=(f"g{i // per_prompt}", "solver")) for i, g in enumerate(gens)]
    for t in turns:
        t.reward = even_first(t)
    return turns


@torch.no_grad()
def margin(learner: Learner, turns: list[Turn]) -> float:
    """Mean of (log pi - log pi_ref)(chosen) - (log pi - log pi_ref)(rejected) over the pairs of ``turns``."""
    chosen, rejected = learner.algorithm.pairs(turns)
    c = learner.cfg
    b, _, ref = pair_rows(chosen, rejected, learner.algorithm.reference, c, "cpu", learner.policy.tokenizer.pad_token_id)
    lp = response_logp(learner.policy.model, b, 1.0, c.packing).sum(1)
    n = len(chosen)
    return float(((lp[:n] - ref[:n]) - (lp[n:] - ref[n:])).mean())


# ----------------------------------------------------------------------------- pairs
def test_reward_pairs_rank_two_samples_of_one_prompt() -> None:
    turns = [turn(0.0), turn(1.0), turn(1.0), turn(0.5),  # one prompt: best is the first 1.0, worst the 0.0
             turn(2.0, prompt=(3,)), turn(2.0, prompt=(3,)),  # a tie: no pair
             turn(0.0, group="h"), turn(1.0, group="h"), turn(float("nan"), group="h"),  # nan left out
             turn(5.0, role="other")]  # alone in its role
    assert reward_pairs(turns) == [(1, 0), (7, 6)]
    assert reward_pairs(turns, "all") == [(1, 0), (2, 0), (3, 0), (1, 3), (2, 3), (7, 6)]
    assert reward_pairs([turn(1.0, prompt=(1,)), turn(0.0, prompt=(2,))]) == []  # different prompts
    with pytest.raises(ValueError, match="pairing must be one of best_worst, all"):
        reward_pairs(turns, "best")


# ----------------------------------------------------------------------------- the learner
def test_first_step_against_itself_is_log2_and_margin_zero(policy) -> None:
    turns = sampled_turns(policy, TRAIN_PROMPTS)
    learner = Learner(policy, cfg())
    pairs = reward_pairs(turns)
    m = learner.update(turns)
    assert m["dpo_pairs"] == len(pairs) > 0
    assert m["loss"] == pytest.approx(LOG2, abs=1e-6)
    assert m["dpo_margin"] == pytest.approx(0.0, abs=1e-6) and m["dpo_reward_chosen"] == pytest.approx(0.0, abs=1e-6)
    assert m["grad_norm"] > 0 and learner.steps == 1


def test_margin_rises_on_trained_and_held_out_pairs(policy) -> None:
    train = sampled_turns(policy, TRAIN_PROMPTS, per_prompt=8)
    held_out = sampled_turns(policy, HELD_OUT_PROMPTS, per_prompt=8, seed=1)
    learner = Learner(policy, cfg(dpo_beta=0.5))
    assert reward_pairs(held_out) and margin(learner, held_out) == pytest.approx(0.0, abs=1e-6)
    history, held = [], []
    for _ in range(10):
        history.append(learner.update(train))
        held.append(margin(learner, held_out))
    margins = [m["dpo_margin"] for m in history]
    assert margins[0] == pytest.approx(0.0, abs=1e-6)
    assert all(b > a for a, b in zip(margins, margins[1:])), margins
    assert history[-1]["loss"] < LOG2 and history[-1]["dpo_accuracy"] == 1.0
    assert history[-1]["dpo_reward_chosen"] > history[-1]["dpo_reward_rejected"]
    # the preference (an even first token) carries to other prompts: measured 0.25 after 6 updates, 0.45 after 10
    assert held[-1] > max(0.3, held[4] + 0.1), held


@pytest.mark.parametrize("loss_type, extra", [("ipo", {}), ("hinge", {}), ("robust", {"dpo_label_smoothing": 0.1}),
                                              ("sigmoid", {"dpo_label_smoothing": 0.1, "dpo_pairs": "all"})])
def test_every_loss_raises_the_margin(policy, loss_type, extra) -> None:
    turns = sampled_turns(policy, TRAIN_PROMPTS)
    learner = Learner(policy, cfg(dpo_loss=loss_type, dpo_beta=0.5, **extra))
    first = learner.update(turns)
    for _ in range(3):
        last = learner.update(turns)
    assert last["dpo_margin"] > first["dpo_margin"] + 0.5, (first, last)


def test_batches_without_pairs_take_no_step(policy) -> None:
    turns = sampled_turns(policy, TRAIN_PROMPTS)
    for t in turns:
        t.reward = 1.0  # every sample ties
    learner = Learner(policy, cfg())
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    assert learner.update(turns) == {"dpo_pairs": 0.0}
    assert learner.steps == 0 and all(torch.equal(v, policy.model.state_dict()[k]) for k, v in before.items())


def test_the_reference_given_on_resume_is_the_anchor(policy, tiny_model_dir, tmp_path) -> None:
    turns = sampled_turns(policy, TRAIN_PROMPTS)
    learner = Learner(policy, cfg(dpo_beta=0.5))
    learner.update(turns)
    policy.save(tmp_path / "policy")
    trained = Policy.from_pretrained(tmp_path / "policy")
    initial = Policy.from_pretrained(tiny_model_dir).model
    resumed = Learner(trained, cfg(dpo_beta=0.5), reference=initial)
    assert resumed.algorithm.reference is initial
    assert margin(resumed, turns) == pytest.approx(margin(learner, turns), abs=1e-5) and margin(resumed, turns) > 0
    assert margin(Learner(trained, cfg(dpo_beta=0.5)), turns) == pytest.approx(0.0, abs=1e-6)  # no reference: itself


@pytest.mark.parametrize("kwargs, message", [
    ({"role_algorithms": {"solver": "grpo"}}, "role_algorithms must be empty"),
    ({"kl_in_loss": "k3"}, "kl_in_reward and kl_in_loss must be 'off'"),
    ({"entropy_coef": 0.01}, "DPO has its own objective; entropy_coef must be 0"),
    ({"dynamic_sampling": "std_gt_0"}, "dynamic_sampling must be 'off'"),
    ({"dpo_beta": 0.0}, "dpo_beta must be a finite number > 0"),
    ({"dpo_beta": float("nan")}, "dpo_beta must be a finite number > 0"),
    ({"dpo_loss": "sigmod"}, "dpo_loss must be one of sigmoid, hinge, ipo, robust"),
    ({"dpo_label_smoothing": 0.5}, r"dpo_label_smoothing must be a number in \[0, 0.5\)"),
    ({"dpo_loss": "ipo", "dpo_label_smoothing": 0.1}, "dpo_label_smoothing applies to the sigmoid and robust losses"),
    ({"dpo_pairs": "pairs"}, "dpo_pairs must be one of best_worst, all"),
    ({"dpo_data": "no_such_file.jsonl"}, "dpo_data must name a JSONL file of preference pairs"),
    ({"dpo_data": "arithmetic_sft.jsonl", "dpo_pairs": "all"}, "dpo_pairs forms pairs from the game's turns"),
    ({"dpo_batch_size": 0}, "dpo_batch_size must be an int >= 1"),
])
def test_config_errors(policy, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        Learner(policy, cfg(**kwargs))


# ----------------------------------------------------------------------------- offline pairs (dpo_data)
PREFERENCES = [{"prompt": "3+4", "chosen": "7", "rejected": "8"}, {"prompt": "9-2", "chosen": "7", "rejected": "11"},
               {"prompt": "2*5", "chosen": "10", "rejected": "25", "system": "Solve."}]


def write_jsonl(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_offline_pairs_train_in_file_order_and_resume(policy, tiny_model_dir, tmp_path) -> None:
    data = write_jsonl(tmp_path / "prefs.jsonl", PREFERENCES)
    learner = Learner(policy, cfg(dpo_data=data, dpo_batch_size=2, dpo_beta=0.5))
    game = sampled_turns(policy, TRAIN_PROMPTS)  # played and logged, not trained on
    chosen, rejected = learner.algorithm.file_pairs()
    assert [t.text for t in chosen] == ["7", "7"] and [t.text for t in rejected] == ["8", "11"]
    assert chosen[0].prompt_ids == rejected[0].prompt_ids == policy.render([{"role": "user", "content": "3+4"}])
    assert chosen[0].response_ids[-1] == policy.tokenizer.eos_token_id  # closed as a finished response is
    learner.algorithm.seen = 0
    history = [learner.update(game) for _ in range(5)]
    assert all(m["dpo_pairs"] == 2 for m in history) and learner.algorithm.seen == 10
    assert history[0]["loss"] == pytest.approx(LOG2, abs=1e-6)
    assert history[-1]["dpo_margin"] > 0.5 and history[-1]["dpo_accuracy"] == 1.0  # measured 0.96
    learner.save(tmp_path / "learner")
    resumed = Learner(Policy.from_pretrained(tiny_model_dir), cfg(dpo_data=data, dpo_batch_size=2))
    resumed.load(tmp_path / "learner")
    assert resumed.algorithm.seen == 10  # rows 10 % 3 = 1 and 2 come next
    assert [t.text for t in resumed.algorithm.file_pairs()[1]] == ["11", "25"]


@pytest.mark.parametrize("rows, message", [
    ([PREFERENCES[0], "{not json"], r"prefs.jsonl' line 2: not valid JSON"),
    ([{"prompt": "3+4", "chosen": "7"}], r"line 1: each line must be \{\"prompt\": \"...\", \"chosen\""),
    ([{"prompt": "3+4", "chosen": 7, "rejected": "8"}], "line 1: each line must be"),
    (["", {"prompt": "3+4", "chosen": "7", "rejected": "7"}], "line 2: chosen and rejected are the same text"),
    (["", "  "], "has no rows"),
])
def test_a_bad_preference_file_is_a_one_line_error(policy, tmp_path, rows, message) -> None:
    data = write_jsonl(tmp_path / "prefs.jsonl", rows)
    with pytest.raises(ValueError, match=message) as err:
        Learner(policy, cfg(dpo_data=data))
    assert "\n" not in str(err.value)


def test_preference_files_are_read_bounded(tmp_path) -> None:
    data = write_jsonl(tmp_path / "prefs.jsonl", PREFERENCES)
    assert len(load_preferences(data)) == 3
    with pytest.raises(ValueError, match="holds more than 2 rows"):
        list(read_jsonl(data, "dpo_data", max_rows=2))
    with pytest.raises(ValueError, match="is larger than 0 MiB"):
        list(read_jsonl(data, "dpo_data", max_bytes=10))


# ----------------------------------------------------------------------------- dpo_shuffle and ref_sync_every
MANY = [{"prompt": f"{i}+1", "chosen": str(i + 1), "rejected": str(i + 2)} for i in range(8)]


def shuffled_passes(policy, data: str, seed: int) -> list[list[str]]:
    """The chosen texts of two passes over ``data``, one update's batch a pass."""
    learner = Learner(policy, cfg(dpo_data=data, dpo_batch_size=len(MANY), dpo_shuffle=True), seed=seed)
    return [[t.text for t in learner.algorithm.file_pairs()[0]] for _ in range(2)]


def test_dpo_shuffle_changes_the_order_of_each_pass_not_its_pairs(policy, tmp_path) -> None:
    data = write_jsonl(tmp_path / "prefs.jsonl", MANY)
    in_file = [row["chosen"] for row in MANY]
    first, second = shuffled_passes(policy, data, seed=0)
    assert sorted(first) == sorted(second) == sorted(in_file)  # every pair once a pass
    assert first != in_file and second != first  # a shuffle of its own each pass
    assert shuffled_passes(policy, data, seed=0) == [first, second]
    assert shuffled_passes(policy, data, seed=1)[0] != first
    pairs = Learner(policy, cfg(dpo_data=data, dpo_batch_size=len(MANY)), seed=1).algorithm.file_pairs()
    assert [t.text for t in pairs[0]] == in_file  # the default: the file's order, whatever the seed
    with pytest.raises(ValueError, match="dpo_shuffle shuffles the pairs of dpo_data, but dpo_data is null"):
        Learner(policy, cfg(dpo_shuffle=True))
    with pytest.raises(ValueError, match="dpo_shuffle must be true or false, got 'yes'"):
        Learner(policy, cfg(dpo_data=data, dpo_shuffle="yes"))


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_ref_sync_every_copies_the_policy_into_the_reference_at_the_sync_steps(policy, tiny_model_dir,
                                                                                 tmp_path) -> None:
    """TR-DPO (TRL's sync_ref_model): with ref_sync_every 2 the reference becomes the policy after updates
    2 and 4 and stays as it was after 1 and 3; the moved reference is saved and resumed."""
    data = write_jsonl(tmp_path / "prefs.jsonl", PREFERENCES)
    learner = Learner(policy, cfg(dpo_data=data, dpo_batch_size=2, ref_sync_every=2))
    reference = learner.algorithm.reference
    assert learner.ref_model is reference and reference is not policy.model
    before, game = weights(reference), sampled_turns(policy, TRAIN_PROMPTS[:1])
    for step in range(1, 5):
        learner.update(game)  # the game's turns, played and logged only: the file's pairs train
        now, trained = weights(reference), weights(policy.model)
        if step % 2:
            assert all(torch.equal(now[n], before[n]) for n in now) and any(
                not torch.equal(trained[n], now[n]) for n in now), f"update {step}: the reference moved"
        else:
            assert all(torch.equal(now[n], trained[n]) for n in now), f"update {step}: the reference is not the policy"
        before = now
    learner.save(tmp_path / "learner")
    resumed = Learner(Policy.from_pretrained(tiny_model_dir), cfg(dpo_data=data, dpo_batch_size=2, ref_sync_every=2))
    resumed.load(tmp_path / "learner")
    assert all(torch.equal(p, before[n]) for n, p in weights(resumed.algorithm.reference).items())
    assert Learner(policy, cfg()).ref_model is None  # off by default: the initial model, as it was
