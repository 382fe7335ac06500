"""Conversations keep exact token continuity (cogym.agents.conversation).

A seat of a conversation role is prompted, at each move, with its last prompt ids, its last answer's
ids verbatim, and only the game's new messages rendered. The search_qa tests play 3 searches and
an answer with a model whose answers are tokenised one character at a time (ids a model may sample
but that re-encoding the text would merge), on the char-level tiny model and on Qwen2.5's real BPE
tokenizer (ChatML, with a tool role), so re-rendering the conversation would drift where it can.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml
from gymnasium.spaces import Box, Dict

from cogym.agents.conversation import continuity_breaks, continues, join_turns, longest_message
from cogym.agents.llm import LLMAgent
from cogym.core.types import Generation, SamplingParams
from cogym.envs import registry
from cogym.envs.base import CogymEnv, GameSpec, text_space
from cogym.envs.checks import check_game
from cogym.envs.search_qa import SearchQAEnv, read_answer
from cogym.learners.batch import TokenBatch
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner
from cogym.runners.config.load import load_config
from cogym.runners.rollout.turns import rollout
from cogym.runners.rollout.tokens import token_rollout
from cogym.runners.train.loop import train

SYSTEM = "Answer."
SEARCHES = 3


class ScriptBackend:
    """A generation backend that answers by a script: three searches for the question, then the
    answer read from the results, each answer's ids one character at a time and ended by ``end``."""

    name = "script"

    def __init__(self, policy, end: int) -> None:
        self.policy, self.end, self.version = policy, end, 0

    def load_weights(self, weights, version: int) -> None:
        self.version = version

    def generate(self, prompts, sampling, keys=None) -> list[Generation]:
        out = []
        for prompt in prompts:
            seen = self.policy.decode(prompt)
            question = re.search(r"Q: (.*?)\n", seen).group(1)
            if seen.count("R: ") < SEARCHES:
                text = f'<tool name="search">{question}</tool>'
            else:
                text = read_answer(seen[seen.index("Q: "):]) or "unknown"
            ids = [i for c in text for i in self.policy.tokenizer.encode(c, add_special_tokens=False)] + [self.end]
            out.append(Generation(list(prompt), ids, [-0.5] * len(ids), text, True, self.version))
        return out


def _chat_text(policy, conversation: list[dict]) -> str:
    """The template's text of a whole conversation, with the generation prompt (tool messages as user
    messages for a template without a tool role, as cogym renders them)."""
    tool = "raise_exception" not in policy.tokenizer.chat_template  # the tiny model's template refuses unknown roles
    msgs = [m if tool or m["role"] != "tool" else {**m, "role": "user"} for m in conversation]
    return policy.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)


def _play_search_qa(policy, games: int = 3):
    end = policy.tokenizer.convert_tokens_to_ids(policy.tokenizer.eos_token)
    policy.backend = ScriptBackend(policy, end)
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=200))
    envs = [SearchQAEnv(docs=200, searches=SEARCHES) for _ in range(games)]
    return rollout(envs, lambda seat, role: ("solver", agent), {"solver": SYSTEM}, seeds=list(range(games)))


def test_every_prompt_is_the_last_prompt_plus_its_answer_plus_the_new_messages(new_policy, model_name) -> None:
    policy = new_policy()
    res = _play_search_qa(policy)
    assert [i["solver"]["searches"] for i in res.infos] == [SEARCHES] * 3
    assert [i["solver"]["metrics"]["correct"] for i in res.infos] == [1.0] * 3  # read from the third results
    for g in range(3):
        moves = [t for t in res.turns if t.game_index == g]
        assert len(moves) == SEARCHES + 1 and all(t.conversation for t in moves)
        first_user = f"Q: {res.infos[g]['solver']['question']}\nsearches left: {SEARCHES}"
        conversation = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first_user}]
        assert moves[0].prompt_ids == policy.tokenizer.apply_chat_template(
            conversation, add_generation_prompt=True, tokenize=True, return_dict=False)
        for a, b in zip(moves, moves[1:]):
            n = len(a.prompt_ids) + len(a.response_ids)
            assert b.prompt_ids[:n] == a.prompt_ids + a.response_ids  # verbatim: never re-tokenised
            # The delta holds the close of the answer and the game's one new (tool) message, nothing earlier.
            delta = policy.decode(b.prompt_ids[n:])
            assert delta.count("R: ") == 1 and "Q: " not in delta
            conversation += [{"role": "assistant", "content": a.text}, {"role": "tool", "content": _tool_content(delta)}]
            assert policy.tokenizer.decode(b.prompt_ids, skip_special_tokens=False) == _chat_text(policy, conversation)
            assert _chat_text(policy, conversation).endswith(policy.tokenizer.decode(b.prompt_ids[n:], skip_special_tokens=False))
        # Re-rendering the whole conversation re-tokenises the answers: the char-level model gets the same ids
        # back, the BPE model merges the characters the model wrote one by one (the drift this avoids).
        whole = policy.tokenizer.encode(_chat_text(policy, conversation), add_special_tokens=False)
        assert (whole == moves[-1].prompt_ids) == (model_name == "tiny")
    assert continuity_breaks(res.turns) == (0, 3 * SEARCHES)


def _tool_content(delta_text: str) -> str:
    """The tool message's content in a decoded delta: ``R: ...`` through ``searches left: n``."""
    return re.search(r"R: .*?searches left: \d", delta_text, re.S).group(0)


def test_a_joined_trajectory_masks_exactly_the_model_s_own_ids(new_policy) -> None:
    policy = new_policy()
    res = _play_search_qa(policy, games=2)
    joined = join_turns(res.turns)
    assert len(joined) == 2 and len(res.turns) == 2 * (SEARCHES + 1)
    for j in joined:
        moves = [t for t in res.turns if t.episode_id == j.episode_id]
        assert j.prompt_ids == moves[0].prompt_ids
        assert j.prompt_ids + j.response_ids == moves[-1].prompt_ids + moves[-1].response_ids
        own = [i for i, keep in zip(j.response_ids, j.mask) if keep]
        assert own == [i for t in moves for i in t.response_ids]  # the model's ids, and nothing else
        assert sum(j.mask) == sum(len(t.response_ids) for t in moves) < len(j.response_ids)
        assert all(lp == 0.0 for lp, keep in zip(j.logprobs, j.mask) if not keep)
        assert [lp for lp, keep in zip(j.logprobs, j.mask) if keep] == [lp for t in moves for lp in t.logprobs]
        assert longest_message(j) == max(len(t.response_ids) for t in moves)
        assert j.reward == moves[-1].reward and j.info is moves[-1].info and j.text == moves[-1].text
    batch = TokenBatch.from_turns(joined, pad_id=0)
    for row, j in enumerate(joined):
        assert batch.mask[row, : len(j.mask)].tolist() == [float(k) for k in j.mask]
        assert batch.mask[row, len(j.mask):].sum() == 0


def test_moves_that_do_not_continue_each_other_are_not_joined(policy) -> None:
    res = _play_search_qa(policy, games=1)
    broken = list(res.turns)
    broken[2] = type(broken[2])(**{**broken[2].__dict__, "prompt_ids": [0] + broken[2].prompt_ids[1:]})
    assert continuity_breaks(broken) == (2, SEARCHES)  # move 2 continues nothing, and move 3 does not continue it
    assert not continues(broken[1], broken[2])
    # Moves 0 and 1 join; 2 and 3 each stand alone (neither continues the move before it).
    assert [t.prompt_ids for t in join_turns(broken)] == [broken[0].prompt_ids, broken[2].prompt_ids, broken[3].prompt_ids]


# ------------------------------------------------------------------ a real model, both granularities
class ThreeMoves(CogymEnv):
    """A one-seat game of three moves whatever is said (reward: the share of moves that end with its
    end token), so a model seat plays a conversation of three turns."""

    metadata = {"name": "three_moves", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, context: str = "conversation", render_mode=None) -> None:
        super().__init__(render_mode=render_mode)
        self.possible_agents = ["talker"]
        self._seat_roles = {"talker": "talker"}
        self.observation_spaces = {"talker": Dict({"observation": Box(0, 3, shape=(1,), dtype=np.int64),
                                                   "text": text_space(200, "\n")})}
        self.action_spaces = {"talker": text_space(64)}
        self.spec = GameSpec("three_moves-v0", ("talker",), (0.0, 1.0), zero_sum=False, max_turns=3,
                             description="Three moves.", conversation=("talker",) if context == "conversation" else ())
        self.said: list[str] = []

    def reset(self, seed=None, options=None) -> None:
        self._seed(seed)
        self.said = []
        self._start_episode({"talker": {"role": "talker"}})

    def observe(self, agent):
        return {"observation": np.array([len(self.said)], dtype=np.int64),
                "text": "\n".join([f"move {i}: {s[:40]!r}" for i, s in enumerate(self.said)] + [f"move {len(self.said)}?"])}

    def messages(self, agent):
        return [{"role": "user", "content": f"move {len(self.said)}?"}]

    def step(self, action) -> None:
        if self._begin_turn(action) is None:
            return
        self.said.append(action)
        if len(self.said) == 3:
            self.infos["talker"] = {"role": "talker", "metrics": {"chars": float(sum(map(len, self.said)))}}
            self._end_game({"talker": float(len(self.said[-1]) % 2)})

    def _render_text(self) -> str:
        return repr(self.said)


def _three_moves(policy, granularity: str, games: int = 4):
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=6, temperature=1.0))
    seat_map = lambda seat, role: ("talker", agent)  # noqa: E731
    if granularity == "turn":
        return rollout([ThreeMoves() for _ in range(games)], seat_map, {"talker": "Talk."}, list(range(games)),
                       sampling_key=7)
    from cogym.envs.token_level import TokenLevelEnv
    from cogym.runners.rollout.tokens import ChatCodec

    codec = ChatCodec(policy, {"talker": "Talk."})
    envs = [TokenLevelEnv(ThreeMoves(), codec=codec, max_turn_tokens=6) for _ in range(games)]
    return token_rollout(envs, seat_map, {"talker": "Talk."}, list(range(games)), sampling_key=7)


@pytest.mark.parametrize("granularity", ["turn", "token"])
def test_a_model_s_sampled_conversation_trains_as_one_sequence_on_the_ids_it_read(policy, granularity) -> None:
    res = _three_moves(policy, granularity)
    assert len(res.turns) == 12 and continuity_breaks(res.turns) == (0, 8)
    joined = join_turns(res.turns)
    assert len(joined) == 4 and all(j.mask is not None and 0 < sum(j.mask) < len(j.mask) for j in joined)
    # The joined rows' masked log-probs are the ones the model sampled with: the learner recomputes the
    # same numbers over the whole sequence (on-policy), which holds only if every id is where the model saw it.
    learner = Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-9))
    assert learner.sequences(res.turns) == joined
    assert learner.update(res.turns)["logprob_drift"] < 1e-4
    # Without the mask the game's messages (behaviour log-prob 0) would be trained on as the model's: the check bites.
    unmasked = [type(j)(**{**j.__dict__, "mask": None}) for j in joined]
    assert Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-9)).update(unmasked)["logprob_drift"] > 1e-2
    per_move = Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-9, multi_turn="turns"))
    assert len(per_move.sequences(res.turns)) == 12 and per_move.update(res.turns)["logprob_drift"] < 1e-4


def test_a_fresh_context_role_is_asked_anew_each_move(policy) -> None:
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=4))
    res = rollout([ThreeMoves(context="fresh")], lambda s, r: ("talker", agent), {"talker": "Talk."}, [0], sampling_key=1)
    assert len(res.turns) == 3 and not any(t.conversation for t in res.turns)
    assert continuity_breaks(res.turns) == (0, 0) and len(join_turns(res.turns)) == 3
    assert res.turns[1].prompt_ids == policy.render([{"role": "system", "content": "Talk."},
                                                     {"role": "user", "content": _after_one_move(res.turns[0].text)}])


def _after_one_move(first: str) -> str:
    """ThreeMoves' whole observation text after one move: what a fresh-context seat is asked."""
    return f"move 0: {first[:40]!r}\nmove 1?"


def test_training_reports_zero_context_drift_on_a_conversation_game(tiny_model_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("three_moves-v0", ThreeMoves, scripted={"talker": {"say": lambda text, rng: "hi"}})
    (tmp_path / "conv.yaml").write_text(yaml.safe_dump({
        "run": {"name": "conv", "out_dir": str(tmp_path), "iterations": 1, "checkpoint_every": 0, "tensorboard": False,
                "plot": False},
        "game": {"id": "three_moves-v0", "num_games": 4, "group_size": 2},
        "seats": {"talker": "talker"},
        "policies": {"talker": {"model": str(tiny_model_dir), "sampling": {"max_new_tokens": 6}}},
        "learners": {"talker": {"algorithm": "grpo", "engine": "torch"}},
        "eval": {"declared": False}}))
    train(load_config(tmp_path / "conv.yaml"), run_path=tmp_path / "run", progress=False)
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if "rollout_s" in line]
    assert row["turns"] == 12.0 and row["talker/context_drift"] == 0.0 and "talker/loss" in row


def test_check_game_holds_a_conversation_game_to_its_messages() -> None:
    for context in ("conversation", "fresh"):
        for granularity in ("turn", "token"):
            check_game("search_qa-v0", {"docs": 200, "context": context}, episodes=4, granularity=granularity)


def test_a_tool_message_goes_to_a_template_without_a_tool_role_as_a_user_message(new_policy, model_name) -> None:
    policy = new_policy()
    ids = policy.render([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                         {"role": "tool", "content": "r"}])
    text = policy.tokenizer.decode(ids, skip_special_tokens=False)
    # The tiny model's template has no tool role (it raises on one); the fixture's ChatML writes any role.
    assert ("<|im_start|>tool\nr<|im_end|>" in text) == (model_name == "qwen")
    assert text.count("<|user|>") == (2 if model_name == "tiny" else 0)


def test_bad_settings_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="multi_turn must be one of joined, turns"):
        LearnerConfig.from_flat(multi_turn="joint").validate()
    with pytest.raises(ValueError, match="conversation names"):
        GameSpec("x-v0", ("a",), (0.0, 1.0), zero_sum=False, max_turns=1, description="", conversation=("b",))
    with pytest.raises(ValueError, match="context must be one of"):
        SearchQAEnv(docs=200, context="chat")


# ------------------------------------------------------------------ templates and ends the review found
SKIPPING = ("{% for m in messages %}{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}<|end|>"
            "{% elif m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}<|end|>"
            "{% elif m['role'] == 'system' %}<|system|>{{ m['content'] }}<|end|>{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
ALTERNATING = ("{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
               "{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}{% endfor %}"
               "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.mark.parametrize("template", [SKIPPING, ALTERNATING], ids=["drops-unknown-roles", "alternation"])
def test_a_tool_result_reaches_the_model_whatever_the_template(policy, template) -> None:
    """A template that silently drops a tool role, or one that wants user/assistant to alternate, still
    gets the tool's result (as a user message) in the continuation."""
    policy.tokenizer.chat_template = template
    prefix = policy.render([{"role": "user", "content": "Q"}]) + policy.tokenizer.encode("ans", add_special_tokens=False)
    ids = policy.continue_ids(prefix + [policy.eos_ids[0]], [{"role": "tool", "content": "R: Toush"},
                                                             {"role": "user", "content": "searches left: 0"}])
    text = policy.tokenizer.decode(ids, skip_special_tokens=False)
    assert text.endswith("ans<|end|><|user|>R: Toush\n\nsearches left: 0<|end|><|assistant|>")
    assert text.count("<|end|>") == 3  # the model's own end is not written twice


def test_a_template_that_loses_a_message_is_refused(policy) -> None:
    policy.tokenizer.chat_template = SKIPPING.replace("{% if m['role'] == 'user' %}", "{% if m['role'] == 'nobody' %}")
    with pytest.raises(ValueError, match="leaves out a 'user' message of a conversation"):
        policy.continue_ids([1, 2], [{"role": "user", "content": "R: Toush"}])


def test_an_answer_cut_or_ended_by_another_end_token_is_closed_once(qwen_policy) -> None:
    tok = qwen_policy.tokenizer
    im_end, endoftext = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    prompt = qwen_policy.render([{"role": "user", "content": "Q"}])
    answer = tok.encode("ans", add_special_tokens=False)
    delta = [{"role": "user", "content": "more"}]
    close = tok.encode("<|im_end|>\n", add_special_tokens=False)
    rest = tok.encode("<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    n = len(prompt) + len(answer)
    assert qwen_policy.continue_ids(prompt + answer, delta)[n:] == close + rest  # cut: the whole close is added
    assert qwen_policy.continue_ids(prompt + answer + [im_end], delta)[n + 1:] == close[1:] + rest
    assert qwen_policy.continue_ids(prompt + answer + [endoftext], delta)[n + 1:] == close[1:] + rest


def test_per_move_algorithms_train_on_single_moves(new_policy) -> None:
    from cogym.learners.learner import sequences

    res = _play_search_qa(new_policy(), games=1)
    assert len(sequences(LearnerConfig.from_flat(algorithm="grpo"), res.turns)) == 1
    assert len(sequences(LearnerConfig.from_flat(algorithm="rae"), res.turns)) == SEARCHES + 1  # a discount per move
    per_role = LearnerConfig.from_flat(algorithm="grpo", role_algorithms={"solver": "rae"})
    assert len(sequences(per_role, res.turns)) == SEARCHES + 1
