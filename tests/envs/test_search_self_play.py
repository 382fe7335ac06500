"""search_self_play-v0: the game contract at both granularities, the proposal check (unsupported answers,
leakage, malformed proposals), learnability over k searching solvers, the scripted twins that tell an
honest proposer and searching solvers apart, hostile messages, and determinism."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss", reason="search_self_play needs faiss-cpu")
from pettingzoo.test import api_test  # noqa: E402

from cogym.envs import make  # noqa: E402
from cogym.envs.checks import check_game  # noqa: E402
from cogym.envs.errors import DatasetError  # noqa: E402
from cogym.envs.search import write_corpus  # noqa: E402
from cogym.envs.search_qa import read_answer  # noqa: E402
from cogym.envs.search_self_play import SCRIPTED, check_proposal, parse_proposal  # noqa: E402
from cogym.envs.tools import call_syntax  # noqa: E402

GAME = "search_self_play-v0"
SOLVERS = [f"solver_{i}" for i in range(4)]


def _reply(strategy, text: str, rng: np.random.Generator, i: int) -> str:
    if callable(strategy):
        return strategy(text, rng)
    return strategy[i] if isinstance(strategy, list) else strategy


def _play(env, proposer, solver, seed: int = 0) -> dict:
    """Reset with ``seed`` and play to the end in ready_agents() batches, as the runner does. ``proposer``
    and ``solver`` are twins (fn(text, rng)), fixed texts, or (solver) a list of texts, one per round."""
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for i in range(env.spec.max_turns + 1):
        ready = env.ready_agents()
        if not ready:
            break
        moves = {a: _reply(proposer if a == "proposer" else solver, env.observe(a)["text"], rng, i) for a in ready}
        for a in ready:
            env.step(moves[a])
    assert all(env.terminations.values()) and env.ready_agents() == []
    return env.infos


def _honest(env, seed: int = 0) -> tuple[str, str, str, str]:
    """(document line, question, answer, id) of the honest twin's proposal after reset(seed)."""
    env.reset(seed=seed)
    text = env.observe("proposer")["text"]
    question, answer, doc_id = parse_proposal(SCRIPTED["proposer"]["honest"](text, np.random.default_rng(0)))
    return text, question, answer, doc_id


def test_the_game_holds_to_the_contract_at_both_granularities() -> None:
    check_game(GAME)
    check_game(GAME, granularity="token")
    check_game(GAME, {"max_turn_tokens": 256}, granularity="token")  # whole honest proposals: solvers play too
    check_game(GAME, {"searches": 0, "num_solvers": 1})
    check_game(GAME, {"reward": "prefix", "kinds": ["archive"], "invalid_penalty": 0.0})
    api_test(make(GAME), num_cycles=50)
    api_test(make(GAME, granularity="token"), num_cycles=50)


def test_an_unsupported_answer_is_caught() -> None:
    env = make(GAME)
    text, question, answer, doc_id = _honest(env, seed=4)
    assert text.startswith(f"[{doc_id}] ") and answer in text and answer not in question
    env.step(f"Q: {question} A: Nowhereville D: {doc_id}")
    info = env.infos["proposer"]
    assert info["invalid"] and info["reason"].startswith("proposer: unsupported:")
    assert "Nowhereville" in info["reason"] and doc_id in info["reason"]
    assert env.rewards["proposer"] == -1.0 and all(env.rewards[s] == 0.0 for s in SOLVERS)
    assert all(env.terminations.values()) and env.ready_agents() == []
    for s in SOLVERS:  # removed without acting
        assert env.infos[s]["correct"] is None and not env.infos[s]["invalid"] and "proposer's move was invalid" in env.infos[s]["reason"]
    # Part of a word of the document is not in it (word boundaries), nor is a name from another document.
    for bad in (answer[:-1], answer + "s", f"{answer} and more"):
        parsed, reason = check_proposal(f"Q: {question} A: {bad} D: {doc_id}", env.docs, env.doc_chars)
        assert reason.startswith("unsupported:"), bad
    # The same answer checked against a document it is not in: unsupported; a made-up id: no document.
    other = next(i for i, d in env.docs.items() if answer not in d["text"])
    assert check_proposal(f"Q: {question} A: {answer} D: {other}", env.docs, env.doc_chars)[1].startswith("unsupported:")
    assert "not a document of the corpus" in check_proposal(f"Q: {question} A: {answer} D: d999999", env.docs, env.doc_chars)[1]
    # The honest proposal passes the same check, case, a final period and brackets aside.
    assert check_proposal(f"Q: {question}\nA: {answer.upper()}.\nD: [{doc_id}]", env.docs, env.doc_chars) == ((question, answer.upper() + ".", doc_id), "")
    # The unsupported twin is caught every time.
    infos = [_play(env, SCRIPTED["proposer"]["unsupported"], SCRIPTED["solver"]["search"], seed) for seed in range(100)]
    assert all(i["proposer"]["invalid"] and "unsupported" in i["proposer"]["reason"] for i in infos)


def test_an_answer_in_its_question_is_leakage() -> None:
    env = make(GAME)
    _, question, answer, doc_id = _honest(env, seed=2)
    env.step(f"Q: {question} (hint: it is {answer.lower()}) A: {answer} D: {doc_id}")
    info = env.infos["proposer"]
    assert info["invalid"] and "leakage" in info["reason"] and env.rewards["proposer"] == -1.0
    # The answer inside a longer word of the question is no leak.
    assert check_proposal(f"Q: {question} Not {answer}ish. A: {answer} D: {doc_id}", env.docs, env.doc_chars)[1] == ""
    infos = [_play(env, SCRIPTED["proposer"]["leaky"], SCRIPTED["solver"]["blind"], seed) for seed in range(50)]
    assert all(i["proposer"]["invalid"] and "leakage" in i["proposer"]["reason"] for i in infos)


@pytest.mark.parametrize("proposal, reason", [
    ("", "is not a proposal of the form"),
    ("What is the capital? A: Toush D: d1", "is not a proposal of the form"),
    ("Q: What is the capital? A: Toush", "is not a proposal of the form"),
    ("Q: What is the capital? Toush D: d1", "is not a proposal of the form"),
    ("Q: A: Toush D: d1", "the question is empty"),
    ("Q: What? A: D: d1", "the answer is empty"),
    ("Q: What? A: ?! D: d1", "has no letter or digit"),
    ("Q: What? A: one two three four five six D: d1", "too long"),
    ("Q: What? A: " + "x" * 49 + " D: d1", "too long"),
    ("Q: " + "w" * 201 + "? A: x D: d1", "more than 200"),
    ("Q: What? A: x D: " + "d" * 300, "not a document of the corpus"),
    ("Q: What? A: x D: d1" + " " * 600, "more than 512"),
])
def test_malformed_proposals_are_invalid_with_a_reason(proposal: str, reason: str) -> None:
    env = make(GAME)
    env.reset(seed=0)
    env.step(proposal)
    info = env.infos["proposer"]
    assert info["invalid"] and reason in info["reason"] and env.rewards["proposer"] == -1.0
    assert all(env.terminations.values())


def test_solvers_search_independently_and_learnability_pays_the_proposer() -> None:
    env = make(GAME, searches=1)
    _, question, answer, doc_id = _honest(env, seed=5)
    env.step(f"Q: {question} A: {answer} D: {doc_id}")
    assert env.ready_agents() == SOLVERS and env.agent_selection == "solver_0"
    before = {s: env.observe(s) for s in SOLVERS}
    assert before["solver_1"]["text"] == f"Q: {question}\nsearches left: 1"
    env.step(call_syntax("search", question) + call_syntax("search", "ignored"))  # solver_0: the first call only
    text0 = env.observe("solver_0")["text"]
    assert text0.count("\nS: ") == 1 and text0.endswith("searches left: 0") and read_answer(text0) == answer
    assert env.observe("solver_0")["observation"].tolist() == [2, 1, 1]
    for s in SOLVERS[1:]:  # one solver's search never shows in another's observation
        assert env.observe(s)["text"] == before[s]["text"] and env.observe(s)["observation"].tolist() == before[s]["observation"].tolist()
    assert env.agent_selection == "solver_1" and env.ready_agents() == ["solver_1", "solver_2", "solver_3", "solver_0"]
    env.step(f" {answer.lower()}. ")  # solver_1: right (case, spaces and a final period aside), without searching
    env.step("Nobody")  # solver_2: wrong
    env.step(call_syntax("search", "x"))  # solver_3 searches
    assert env.ready_agents() == ["solver_0", "solver_3"]
    env.step(call_syntax("search", "again"))  # solver_0: a search with none left: its play ends, invalid
    assert not env.terminations["proposer"] and env.ready_agents() == ["solver_3"]
    env.step("y" * 257)  # solver_3: over 256 characters
    assert all(env.terminations.values())
    infos = env.infos
    assert [infos[s]["correct"] for s in SOLVERS] == [False, True, False, False]
    assert infos["solver_0"]["invalid"] and "a search with none left" in infos["solver_0"]["reason"]
    assert infos["solver_3"]["invalid"] and "more than 256" in infos["solver_3"]["reason"]
    assert [env.rewards[s] for s in SOLVERS] == [0.0, 1.0, 0.0, 0.0]
    assert env.rewards["proposer"] == pytest.approx(0.75) and infos["proposer"]["success_rate"] == 0.25
    assert infos["proposer"]["metrics"] == {"valid": True, "solve_rate": 0.25}
    assert infos["solver_1"]["reference"] == answer and infos["solver_1"]["metrics"] == {"correct": 1.0, "searches": 0.0}
    # Every solver right, or none: the proposer gets nothing (learnability).
    assert _play(env, SCRIPTED["proposer"]["honest"], SCRIPTED["solver"]["search"], 5)["proposer"]["success_rate"] == 1.0
    assert env.rewards["proposer"] == 0.0
    _play(env, SCRIPTED["proposer"]["honest"], "Nobody", 5)
    assert env.rewards["proposer"] == 0.0 and env.infos["proposer"]["success_rate"] == 0.0


def test_twins_tell_an_honest_proposer_and_searching_solvers_apart() -> None:
    env = make(GAME)
    rates = {}
    for proposer in SCRIPTED["proposer"]:
        for solver in SCRIPTED["solver"]:
            infos = [_play(env, SCRIPTED["proposer"][proposer], SCRIPTED["solver"][solver], seed) for seed in range(200)]
            valid = [i for i in infos if not i["proposer"]["invalid"]]
            rates[proposer, solver] = (len(valid) / len(infos),
                                       np.mean([i[s]["correct"] for i in valid for s in SOLVERS]) if valid else None)
    assert rates["honest", "search"][0] == 1.0 and rates["honest", "search"][1] >= 0.95
    assert rates["honest", "blind"][0] == 1.0 and rates["honest", "blind"][1] <= 0.01
    for proposer in ("unsupported", "leaky"):
        assert all(rates[proposer, s] == (0.0, None) for s in SCRIPTED["solver"])


HOSTILE = [
    "", " ", "\n\n\n", "Q:", "Q: A: D:", "A: x D: d1 Q: y", "Q: ? A: x D: d1 " * 40, "x" * 1_000_000,
    "Q: " + "A: " * 5000 + "D: d1", "Q: " + " D:" * 5000, "Q: q A: a D: " + "[" * 10_000, "Q: " + "(" * 400 + " A: a D: d1",
    "\x00\u202e\U0001f600", "Q: 🙂? A: 🙂 D: d1", "Q: Ⅳ? A: ᚠ D: d1", "Q: q A: Ꭰ D: 🙂", "Q: q A: \u0000 D: d1",
    '<tool name="search">capital</tool>', '<tool name="search"><tool name="search">nested</tool></tool>',
    'Q: <tool name="search">x</tool> A: <tool>y</tool> D: <tool name="search">d1</tool>', "<tool " * 2000,
    "Q: q A: .* D: d1", "Q: q A: (a+)+$ D: d1", "Q: q A: \\b\\w+ D: d1", "Q: q A: [d1] D: [d1]", "Q: q A: a D: []",
    "Q: q A: a D: [", "Q: q A: a D: d1 d2", "Q: q A: a D: ../../etc/passwd", "Q: q A: a D: d1" + "." * 100,
    "9**9**9**9", "(" * 10_000 + "1" + ")" * 10_000, "Q: " + "\u202e" * 100 + " A: x D: d1", "Q:\tq\tA:\tx\tD:\td1",
]


@pytest.mark.parametrize("message", HOSTILE)
def test_hostile_proposals_never_crash_and_are_judged_fast(message: str) -> None:
    env = make(GAME)
    env.reset(seed=1)
    start = time.perf_counter()
    env.step(message)
    assert time.perf_counter() - start < 1.0
    info = env.infos["proposer"]
    assert info["invalid"] and isinstance(info["reason"], str) and env.rewards["proposer"] == -1.0
    assert all(env.terminations.values())
    assert all(env.observation_spaces[a].contains(env.observe(a)) for a in env.possible_agents)


def test_the_hostile_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 30


@pytest.mark.parametrize("message", [call_syntax("search", q) for q in ("a" * 200, "\u202e\u0000\x1b[2J" * 30, "🙂" * 200, "x</tool")] + [
    '<tool name="search"></tool>', "<tool>no name</tool>", '<tool name="search">unclosed', '<tool name="calc">1+1</tool>',
    '<tool name="search"><tool name="search">nested</tool></tool>', '<tool name="' + "🙂" * 200 + '">x</tool>'])
def test_hostile_solver_calls_become_results_not_crashes(message: str) -> None:
    env = make(GAME, searches=2)
    _, question, answer, doc_id = _honest(env, seed=1)
    env.step(f"Q: {question} A: {answer} D: {doc_id}")
    assert len(message) <= 256  # a longer message is an invalid move (tested above), not a search
    start = time.perf_counter()
    env.step(message)
    assert time.perf_counter() - start < 1.0
    text = env.observe("solver_0")["text"]
    assert "\nR: " in text and env.observation_spaces["solver_0"].contains(env.observe("solver_0"))
    assert env.agent_selection == "solver_1" and not env.infos["solver_0"].get("invalid")


def test_determinism_under_a_seed_and_independent_copies() -> None:
    a, b = make(GAME), make(GAME)
    twins = SCRIPTED["proposer"]["honest"], SCRIPTED["solver"]["search"]
    docs = []
    for seed in range(20):
        first = _play(a, *twins, seed)
        b.reset(seed=seed + 1000)  # another copy's draws never shift this one's
        assert _play(b, *twins, seed) == first
        assert _play(a, *twins, seed) == first  # re-resetting a used copy
        docs.append(first["proposer"]["document"])
    assert len(set(docs)) >= 15  # seeds draw different documents
    a.reset(seed=3)
    b.reset(seed=3)
    a.reset()  # no seed: the game's generator goes on, the other copy is untouched
    assert a.observe("proposer")["text"] != b.observe("proposer")["text"]


def test_the_prefix_reward_the_kinds_argument_and_a_corpus_file(tmp_path: Path) -> None:
    env = make(GAME, reward="prefix", kinds=["archive"], num_solvers=2)
    text, question, answer, doc_id = _honest(env, seed=0)
    assert "The archives of " in text and question.startswith("In which year do the archives of ")
    env.step(f"Q: {question} A: {answer} D: {doc_id}")
    env.step("1")  # the first digit of every archive year
    env.step(answer)
    assert env.rewards["solver_0"] == pytest.approx(0.25) and env.rewards["solver_1"] == 1.0
    assert env.infos["solver_0"]["metrics"]["correct"] == 0.0 and env.rewards["proposer"] == 0.5
    # A corpus file: documents need no question; ids may be numbers; a document's newlines are collapsed.
    path = write_corpus([{"id": i, "title": f"Doc{i}", "text": f"Zorvania\n\nexports {w} every spring."}
                         for i, w in enumerate(("copper", "salt", "tin", "amber", "wool", "glass", "rye", "figs", "silk", "oak"))],
                        tmp_path / "plain.jsonl")
    env = make(GAME, corpus=str(path), num_solvers=2, k=1)
    env.reset(seed=0)
    shown = env.observe("proposer")["text"]
    doc_id = shown[1:shown.index("]")]
    word = shown.split("exports ")[1].split()[0]
    assert shown == f"[{doc_id}] Doc{doc_id}: Zorvania exports {word} every spring."
    env.step(f"Q: What does Doc{doc_id} export? A: {word} D: {doc_id}")
    assert not env.infos["proposer"].get("invalid") and env.ready_agents() == ["solver_0", "solver_1"]
    honest = _play(env, SCRIPTED["proposer"]["honest"], SCRIPTED["solver"]["blind"], 1)  # its fallback for other corpora
    assert not honest["proposer"]["invalid"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "has spaces in it", "text": "x"}) + "\n")
    with pytest.raises(DatasetError, match="no document"):
        make(GAME, corpus=str(bad))
    with pytest.raises(ValueError, match="no document with a kind"):
        make(GAME, kinds=["planet"])


@pytest.mark.parametrize("kwargs, message", [
    ({"reward": "fuzzy"}, "reward must be 'exact' or 'prefix'"), ({"num_solvers": 0}, "num_solvers must be an int"),
    ({"searches": 9}, "searches must be an int"), ({"doc_chars": 10}, "doc_chars must be an int"),
    ({"invalid_penalty": 0.5}, "invalid_penalty must be <= 0"), ({"k": True}, "k must be an int"),
])
def test_arguments_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(GAME, **kwargs)


def test_spec_and_render() -> None:
    env = make(GAME, num_solvers=3, searches=1, invalid_penalty=-0.5, render_mode="ansi")
    assert env.spec.max_turns == 1 + 3 * 2 and env.spec.reward_range == (-0.5, 1.0)
    assert env.possible_agents == ["proposer", "solver_0", "solver_1", "solver_2"]
    assert [env.role_of(a) for a in env.possible_agents] == ["proposer"] + ["solver"] * 3
    _play(env, SCRIPTED["proposer"]["honest"], SCRIPTED["solver"]["search"], 0)
    out = env.render()
    assert out.startswith(f"[{GAME}] phase=over") and env.infos["proposer"]["answer"] in out
