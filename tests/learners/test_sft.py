"""SFT (cogym.learners.algorithms.sft): the NLL of demonstrations from a JSONL file, or of the policy's own
turns kept by their reward (rejection sampling)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from cogym.core.types import Turn
from cogym.learners.algorithms.sft import Demonstration, load_demonstrations, selected
from cogym.learners.algorithms.spin import end_of_message_id
from cogym.learners.batch import TokenBatch, response_logp
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner
from cogym.runners.config.load import load_config
from cogym.core.errors import ConfigError


def cfg(**kw) -> LearnerConfig:
    return LearnerConfig.from_flat(**{"algorithm": "sft", "engine": "torch", "lr": 1e-2, **kw})


def write_rows(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def echo_rows(n: int, seed: int) -> list[dict]:
    """Rows whose response repeats the prompt: strings of 2-4 letters of 'abcd'."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcd") for _ in range(rng.randint(2, 4))) for _ in range(n)]
    return [{"system": "Echo.", "prompt": w, "response": w} for w in words]


def nll(learner: Learner, rows: list[Demonstration]) -> float:
    """Token-mean NLL of the rows' responses under the learner's policy."""
    turns = learner.algorithm.demonstration_turns(rows)
    b = TokenBatch.from_turns(turns, learner.policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = response_logp(learner.policy.model, b)
    return float(-(logp * b.mask).sum() / b.mask.sum())


def test_sft_on_a_dataset_lowers_the_held_out_nll(policy, tmp_path):
    train = write_rows(tmp_path / "train.jsonl", echo_rows(64, seed=0))
    held_out = [Demonstration(({"role": "system", "content": "Echo."}, {"role": "user", "content": r["prompt"]}),
                              r["response"]) for r in echo_rows(16, seed=1)]
    learner = Learner(policy, cfg(sft_data=train, sft_batch_size=16))
    before = nll(learner, held_out)
    for _ in range(30):
        metrics = learner.update([_turn(0, 1.0, "g")])  # the game's turns are not trained on: the file's rows are
    after = nll(learner, held_out)
    assert metrics["sft_rows"] == 16 and learner.algorithm.seen == 30 * 16
    assert after < 0.6 * before, f"held-out NLL {before:.3f} -> {after:.3f}"
    assert metrics["sft_nll"] == pytest.approx(metrics["loss"])  # token-mean: the loss is the NLL


def test_a_row_is_the_rendered_prompt_and_the_response_closed_like_a_generated_one(policy, tmp_path):
    data = write_rows(tmp_path / "d.jsonl", [{"prompt": "12+7", "response": "19"},
                                             {"messages": [{"role": "system", "content": "Solve."},
                                                           {"role": "user", "content": "3+4"},
                                                           {"role": "assistant", "content": "7"}]}])
    learner = Learner(policy, cfg(sft_data=data))
    a, b = learner.algorithm.demonstration_turns(learner.algorithm.data)
    end = end_of_message_id(policy)
    assert a.prompt_ids == policy.render([{"role": "user", "content": "12+7"}])
    assert a.response_ids == policy.tokenizer.encode("19", add_special_tokens=False) + [end]
    assert b.prompt_ids == policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": "3+4"}])
    assert b.response_ids[-1] == end and policy.decode(b.response_ids) == "7"


def test_each_pass_over_the_file_is_a_new_shuffle_and_resumes_where_it_stopped(policy, tmp_path):
    data = write_rows(tmp_path / "d.jsonl", echo_rows(5, seed=0))
    learner = Learner(policy, cfg(sft_data=data, sft_batch_size=3))
    alg = learner.algorithm
    first, second = alg.next_rows(), alg.next_rows()
    assert sorted(map(str, first + second[:2])) == sorted(map(str, alg.data))  # the first pass: every row once
    learner.save(tmp_path / "ckpt")
    resumed = Learner(policy, cfg(sft_data=data, sft_batch_size=3))
    resumed.load(tmp_path / "ckpt")
    assert resumed.algorithm.seen == 6 and resumed.algorithm.next_rows() == alg.next_rows()


@pytest.mark.parametrize("line, message", [
    ("{not json", "line 2: not valid JSON"),
    ('{"prompt": "1+1"}', "line 2: each line must be"),
    ('["prompt", "response"]', "line 2: each line must be"),
    ('{"messages": [{"role": "user", "content": "1+1"}]}', "line 2: 'messages' must be a list of at least two"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}', "whose last is the assistant"),
])
def test_a_bad_line_is_a_one_line_error_naming_file_and_line(tmp_path, line, message):
    path = write_rows(tmp_path / "bad.jsonl", [{"prompt": "1+1", "response": "2"}, line])
    with pytest.raises(ValueError) as err:
        load_demonstrations(path)
    assert message in str(err.value) and "bad.jsonl" in str(err.value) and "\n" not in str(err.value)


def test_blank_lines_are_skipped_and_an_empty_or_missing_file_is_refused(tmp_path):
    assert len(load_demonstrations(write_rows(tmp_path / "d.jsonl", ["", '{"prompt": "a", "response": "b"}', " "]))) == 1
    with pytest.raises(ValueError, match="has no rows"):
        load_demonstrations(write_rows(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(ValueError, match="does not exist"):
        load_demonstrations(str(tmp_path / "missing.jsonl"))
    assert load_demonstrations("arithmetic_sft.jsonl")[0] == Demonstration(
        ({"role": "system", "content": "Solve."}, {"role": "user", "content": "35-12"}), "23")  # the shipped file


def _turn(i: int, reward: float, group: str) -> Turn:
    return Turn(0, f"e{i}", f"s{i}", "solver", "p", [1, 2], [3], [-1.0], "x", True, reward=reward, group_key=group)


def test_rejection_sampling_keeps_the_right_turns():
    turns = [_turn(0, 1.0, "g0"), _turn(1, 0.0, "g0"), _turn(2, 1.0, "g0"),  # g0: the two 1s are its best
             _turn(3, 0.0, "g1"), _turn(4, 0.0, "g1"),  # g1: all alike, no best
             _turn(5, 0.2, "g2"), _turn(6, 0.5, "g2"), _turn(7, 0.1, "g2")]  # g2: 0.5 is its best
    ids = lambda ts: [t.episode_id for t in ts]  # noqa: E731
    assert ids(selected(turns, "all", None)) == [f"e{i}" for i in range(8)]
    assert ids(selected(turns, "best_of_group", None)) == ["e0", "e2", "e6"]
    assert ids(selected(turns, "best_of_group", 0.8)) == ["e0", "e2"]  # the floor drops g2's best
    assert ids(selected(turns, "reward_at_least", 0.5)) == ["e0", "e2", "e6"]


def test_the_learner_trains_on_the_selected_turns_only(policy):
    prompt = policy.render([{"role": "user", "content": "a"}])
    end = end_of_message_id(policy)
    good, bad = policy.tokenizer.encode("a", add_special_tokens=False) + [end], policy.tokenizer.encode("b", add_special_tokens=False) + [end]
    turns = [Turn(0, f"e{i}", f"s{i}", "solver", "p", prompt, ids, [-1.0] * len(ids), "", True, reward=float(ids == good),
                  group_key="g") for i, ids in enumerate([good, bad, bad, bad])]
    learner = Learner(policy, cfg(sft_select="best_of_group"))
    b = TokenBatch.from_turns(turns[:2], policy.tokenizer.pad_token_id)
    before = response_logp(policy.model, b).sum(1).detach()
    metrics = learner.update(turns)
    after = response_logp(policy.model, b).sum(1).detach()
    assert metrics["sft_rows"] == 1 and metrics["response_tokens"] == len(good)
    assert after[0] > before[0]  # the best turn became likelier
    assert learner.update(turns[1:]) == {"sft_rows": 0.0}  # a group all alike: nothing to imitate, no step


@pytest.mark.parametrize("keys, message", [
    ({"sft_select": "reward_at_least"}, "reward_at_least needs sft_min_reward"),
    ({"sft_select": "best"}, "sft_select must be one of all, best_of_group, reward_at_least"),
    ({"sft_min_reward": float("nan")}, "sft_min_reward must be a finite number or null"),
    ({"sft_batch_size": 0}, "sft_batch_size must be an int >= 1"),
    ({"sft_data": "no/such/file.jsonl"}, "sft_data must name a JSONL file"),
    ({"sft_data": "arithmetic_sft.jsonl", "sft_select": "best_of_group"}, "sft_select and sft_min_reward choose among"),
    ({"kl_in_loss": "k3"}, "kl_in_loss must be 'off'"),
    ({"role_algorithms": {"solver": "grpo"}}, "role_algorithms must be empty"),
])
def test_config_errors(keys, message):
    with pytest.raises(ValueError, match=message):
        cfg(**keys).validate()


def test_a_config_error_names_the_learner_key():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["learners.solver.algorithm=sft", "learners.solver.sft_select=reward_at_least"])
    assert "learners.solver" in str(err.value) and "sft_min_reward" in str(err.value)


def test_the_loss_is_the_causal_lms_own_cross_entropy_on_the_completion(policy, tmp_path):
    """With token-mean, SFT's loss is what transformers' causal-LM loss gives with the prompt masked out
    (labels -100), the loss TRL's SFTTrainer trains with (completion_only_loss)."""
    data = write_rows(tmp_path / "d.jsonl", echo_rows(4, seed=3))
    learner = Learner(policy, cfg(sft_data=data, sft_batch_size=4, micro_batch_size=2))
    turns = learner.algorithm.demonstration_turns(learner.algorithm.data)
    width = max(len(t.prompt_ids) + len(t.response_ids) for t in turns)
    ids, labels, attn = [], [], []
    for t in turns:
        fill = width - len(t.prompt_ids) - len(t.response_ids)
        ids.append(t.prompt_ids + t.response_ids + [policy.tokenizer.pad_token_id] * fill)
        labels.append([-100] * len(t.prompt_ids) + t.response_ids + [-100] * fill)
        attn.append([1] * (width - fill) + [0] * fill)
    with torch.no_grad():
        expected = policy.model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(attn), labels=torch.tensor(labels)).loss
    learner.algorithm.next_rows = lambda: learner.algorithm.data  # the file's rows in file order
    metrics = learner.update([_turn(0, 1.0, "g")])
    assert metrics["loss"] == pytest.approx(float(expected), rel=1e-5)  # two micro-batches' shares add up
