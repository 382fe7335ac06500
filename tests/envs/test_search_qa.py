"""search_qa-v0: the game contract at both granularities, the scripted twins that tell searching from
guessing, the search budget, hostile tool calls, the shaped reward and the corpus arguments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss", reason="search_qa needs faiss-cpu")
from pettingzoo.test import api_test  # noqa: E402

from cogym.envs import make  # noqa: E402
from cogym.envs.checks import check_game  # noqa: E402
from cogym.envs.errors import DatasetError  # noqa: E402
from cogym.envs.search import synthetic_corpus, write_corpus  # noqa: E402
from cogym.envs.search_qa import SCRIPTED, prefix_share, read_answer  # noqa: E402
from cogym.envs.tools import call_syntax  # noqa: E402

GAME = "search_qa-v0"


def _play(env, replies, seed: int = 0) -> dict:
    """Reset with ``seed`` and play ``replies`` (a list of texts, or a twin: fn(text, rng)) to the end."""
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for i in range(10):
        if env.terminations["solver"]:
            break
        text = env.observe("solver")["text"]
        env.step(replies(text, rng) if callable(replies) else replies[i])
    assert env.terminations["solver"]
    return env.infos["solver"]


def test_the_game_holds_to_the_contract_at_both_granularities() -> None:
    check_game(GAME)
    check_game(GAME, granularity="token")
    check_game(GAME, {"searches": 0, "k": 1})
    api_test(make(GAME), num_cycles=50)
    api_test(make(GAME, granularity="token"), num_cycles=50)


def test_searching_solves_the_game_and_guessing_does_not() -> None:
    env = make(GAME)
    rates = {twin: np.mean([_play(env, fn, seed)["metrics"]["correct"] for seed in range(200)])
             for twin, fn in SCRIPTED["solver"].items()}
    assert rates["search"] >= 0.95
    # A guess is a made-up name (or, for a year question, never right): exact matches happen by chance only.
    assert rates["blind"] <= 0.01 and rates["bad_search"] <= 0.05


def test_one_search_a_turn_within_the_budget_and_then_an_answer() -> None:
    env = make(GAME, searches=1)
    env.reset(seed=3)
    question = env.observe("solver")["text"].splitlines()[0][3:]
    env.step(call_syntax("search", question) + call_syntax("search", "ignored"))  # the first call only
    text = env.observe("solver")["text"]
    assert text.count("\nS: ") == 1 and text.endswith("searches left: 0")
    assert env.observe("solver")["observation"].tolist() == [1]
    answer = read_answer(text)
    env.step(f" {answer}. ")
    info = env.infos["solver"]
    assert info["metrics"] == {"correct": 1.0, "searches": 1.0} and env.rewards["solver"] == 1.0
    out_of_searches = _play(make(GAME, searches=0), [call_syntax("search", "x")])
    assert out_of_searches["invalid"] and "a search with none left" in out_of_searches["reason"]
    too_long = _play(make(GAME), ["x" * 257])
    assert too_long["invalid"] and "more than 256" in too_long["reason"]


HOSTILE = [call_syntax("search", q) for q in (
    "a" * 999, "\u202e\u0000\x1b[2J" * 40, "🙂" * 300, "<script>alert(1)</script>", "%s%n%x" * 50, "' OR 1=1 --",
    "../../etc/passwd", "\\x00\\xff" * 30, "Zorvania " * 100, "ⅣⅥ Ꭰ ᚠ 𝕏", "\t\t\t\tq", "null", "NaN", "-1e308",
    "{\"query\": [1, 2, 3]}", "x</tool", "<tool", "name=\"search\"")] + [
    '<tool name="search"></tool>', "<tool>no name</tool>", '<tool name="search">unclosed', '<tool name="search"',
    '<tool name="search"><tool name="search">nested</tool></tool>', '<tool name="calc">1+1</tool>',
    '<tool name="">x</tool>', "<tool name='search'>single quotes</tool>", '<tool name="search">' + "q" * 1001 + "</tool>",
    '<tool name="search">' + "y" * 100 + "</tool>" * 50, "<tool " * 2000, '<TOOL name="search">upper</TOOL>',
    '<tool name="search">\n\n</tool>', '<tool name="search">a</tool><tool name="search">b</tool>' * 20]


@pytest.mark.parametrize("message", HOSTILE)
def test_hostile_tool_calls_become_messages_not_crashes(message: str) -> None:
    env = make(GAME, searches=2)
    env.reset(seed=1)
    env.step(message)
    if env.terminations["solver"]:  # read as an answer (no call in it): a wrong one, not a crash
        assert env.infos["solver"]["metrics"]["correct"] == 0.0
        return
    text = env.observe("solver")["text"]
    assert env.observation_spaces["solver"]["text"].contains(text)  # printable, within the space's bound
    assert "\nR: " in text
    info = _play_on(env, ["Nobody"])
    assert info["metrics"]["correct"] == 0.0 and not info["invalid"]


def _play_on(env, replies) -> dict:
    for reply in replies:
        env.step(reply)
    return env.infos["solver"]


def test_the_hostile_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 30


def test_the_prefix_reward_and_the_kinds_argument() -> None:
    assert prefix_share("1977", "1977") == 1.0 and prefix_share("19+3", "1977") == 0.5
    assert prefix_share(" toush. ", "Toush") == 1.0 and prefix_share("", "Toush") == 0.0
    env = make(GAME, reward="prefix", kinds=["archive"])
    env.reset(seed=0)
    assert env.observe("solver")["text"].startswith("Q: In which year do the archives of ")
    env.step("1")  # every archive year is in 1000..1999: the first digit is right
    info = env.infos["solver"]
    assert env.rewards["solver"] == pytest.approx(1 / len(info["answer"])) == 0.25
    assert info["metrics"]["correct"] == 0.0  # exact match, whatever the shaped reward
    with pytest.raises(ValueError, match="reward must be 'exact' or 'prefix'"):
        make(GAME, reward="fuzzy")
    with pytest.raises(ValueError, match="no question of the corpus"):
        make(GAME, kinds=["planet"])


def test_a_corpus_file_with_questions(tmp_path: Path) -> None:
    path = write_corpus(synthetic_corpus(50, seed=9), tmp_path / "qa.jsonl")
    env = make(GAME, corpus=str(path))
    assert _play(env, SCRIPTED["solver"]["search"], seed=2)["metrics"]["correct"] == 1.0
    # Documents full of newlines: results are flattened before they are cut, so the text stays in its space.
    lines = write_corpus([{"id": f"n{i}", "text": "line\n" * 200, "question": f"q{i}?", "answer": "x"} for i in range(20)],
                         tmp_path / "lines.jsonl")
    env = make(GAME, corpus=str(lines), searches=2, k=3)
    env.reset(seed=0)
    env.step(call_syntax("search", "line"))
    env.step(call_syntax("search", "line line"))
    assert env.observation_spaces["solver"]["text"].contains(env.observe("solver")["text"])
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"id": 1, "text": "no question here"}) + "\n")
    with pytest.raises(DatasetError, match="no document has a 'question' and an 'answer'"):
        make(GAME, corpus=str(plain))
