"""``search_qa-v0``: a solver answers a question about a corpus, searching it first if it likes (SSRL, Search-R1).

Seats (one role): ``solver``. Not zero-sum, rewards in ``[0, 1]``, max turns ``searches + 1``.
Turns: each solver message is a search, ``<tool name="search">QUERY</tool>`` (the first call of the
message is run, while searches remain), or else its answer, which ends the game.
Observation: ``"observation"`` int64 ``[searches used]``; ``"text"``: the question, every search so far
with its results, and the searches left::

    Q: What is the capital of Velorixo?
    S: capital of Velorixo
    R: [d0] Velorixo: The capital of Velorixo is Toush. Records of Velorixo go back to 1977. ...
    searches left: 1

Context (``context``): ``conversation`` (the default, Search-R1's multi-turn rollout): the solver's
context is its conversation (:mod:`cogym.agents.conversation`): the question (``Q: ...`` and the
searches left) as a user message, its own messages verbatim, and each search's results (``R: ...``
and the searches left) as a tool message (a user message for a chat template without a tool role);
a model continues its last prompt and answer ids, so a 3-search game trains as one sequence whose
loss covers only the solver's own tokens. ``fresh``: each move is asked the whole text above anew.
Scripted seats read the text above either way.

Action: a message of at most 256 characters. Results are the ``k`` best documents of the corpus
(:class:`cogym.envs.search.SearchTool`, each cut to ``snippet_chars``); a malformed call, an empty
query or a failed search comes back as an ``error: ...`` result and uses the search.
Rewards (at the end): with ``reward="exact"`` (the default), 1 if the answer, stripped of spaces and
a final period, equals the document's answer (case ignored), else 0; with ``reward="prefix"``, the
share of the answer's characters that the reply gets right from its start (a shaped reward that
gives a model which cannot yet search something to learn from; ``metrics["correct"]`` stays exact).
Invalid action: a message over 256 characters, or a search with none left: reward 0, the game ends
(``infos["solver"]["invalid"]``, ``["reason"]``). End infos: role, question, answer, reply, searches,
invalid, metrics (``correct``, ``searches``).
Arguments: ``corpus`` (a JSONL corpus whose documents carry ``question`` and ``answer``; None: a
synthetic corpus of ``docs`` documents from ``corpus_seed``, :func:`cogym.envs.search.synthetic_corpus`),
``docs=2000``, ``corpus_seed=0``, ``searches=2`` (0..8), ``k=3``, ``snippet_chars=120``, ``reward``
(``exact`` or ``prefix``), ``kinds`` (ask only documents of these ``kind`` values, e.g. ``[archive]``
for the synthetic corpus' year questions; empty: all), ``context`` (``conversation`` or ``fresh``),
``render_mode``.
The index of a corpus is built once per process and shared by every game on it. Versions: v0, the first.

Scripted twins: ``search`` searches the question and reads the answer out of the results with the
synthetic corpus' sentence patterns; ``blind`` answers a made-up name without searching;
``bad_search`` searches made-up words, then reads the results as ``search`` does.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

import numpy as np
from gymnasium.spaces import Box, Dict

from .base import CogymEnv, GameSpec, text_space
from .errors import DatasetError
from .search import KINDS, SYLLABLES, SearchIndex, SearchTool, synthetic_corpus
from .tools import ToolCall, parse_calls, run_tool

GAME_ID = "search_qa-v0"
MAX_REPLY = 256
MAX_QUERY_SHOWN = 100
CONTEXTS = ("conversation", "fresh")


@functools.lru_cache(maxsize=8)
def _index(corpus: str | None, docs: int, corpus_seed: int) -> tuple[SearchIndex, list[dict]]:
    """The corpus' index and its question documents, built once per process and arguments."""
    if corpus is None:
        index = SearchIndex.build(synthetic_corpus(docs, seed=corpus_seed))
    else:
        index = SearchIndex.open(corpus)
    qa = [d for d in index.docs if isinstance(d.get("question"), str) and isinstance(d.get("answer"), str)]
    if not qa:
        raise DatasetError(f"corpus {corpus!r}: no document has a 'question' and an 'answer' to ask")
    return index, qa


def ascii_only(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, every character outside printable ASCII (newlines kept) as '?'."""
    return "".join(c if (" " <= c <= "~" or c == "\n") else "?" for c in text[:limit])


def normalize(answer: str) -> str:
    return answer.strip().rstrip(".").strip().casefold()


def prefix_share(reply: str, answer: str) -> float:
    """The share of ``answer``'s characters that ``reply`` matches from its start (both normalized)."""
    got, want = normalize(reply), normalize(answer)
    n = 0
    while n < min(len(got), len(want)) and got[n] == want[n]:
        n += 1
    return n / max(len(want), 1)


# ------------------------------------------------------------------- a searching solver (shared with SSP)
def run_search(tool: SearchTool, call: ToolCall) -> tuple[str, str]:
    """One parsed call of a solver's message, run: (the query, the result), each flattened to one line of
    printable ASCII and cut (a malformed call, another tool's name or a failed search: an ``error: ...`` result)."""
    if call.error:
        result = f"error: {call.error}"
    elif call.name != "search":
        result = f"error: no tool {ascii_only(call.name, 40)!r} here (tools: search)"
    else:
        result, _ = run_tool(tool, call.args)
    return (ascii_only(" ".join(call.args.split()), MAX_QUERY_SHOWN),
            ascii_only(result.replace("\n", " | "), tool.max_output_chars + 8))


def solver_text(question: str, log: Sequence[tuple[str, str]], searches: int) -> str:
    """A solver's observation: the question, each search and its results, the searches left."""
    lines = [f"Q: {question}"]
    for query, result in log:
        lines += [f"S: {query}", f"R: {result}"]
    lines.append(f"searches left: {searches - len(log)}")
    return "\n".join(lines)


def solver_messages(question: str, log: Sequence[tuple[str, str]], searches: int) -> list[dict[str, str]]:
    """A solver's new conversation messages: the question first, then the last search's results as a tool message."""
    left = f"searches left: {searches - len(log)}"
    if not log:
        return [{"role": "user", "content": f"Q: {question}\n{left}"}]
    return [{"role": "tool", "content": f"R: {log[-1][1]}\n{left}"}]


# ----------------------------------------------------------------------------------- scripted twins
def _patterns() -> list[tuple[re.Pattern, str]]:
    """(question regex capturing the subject, fact sentence with {s} and {o}) of every synthetic kind."""
    out = []
    for _, _, fact, question in KINDS:
        q = re.escape(question).replace(re.escape("{s}"), r"(\w+)")
        out.append((re.compile(q), fact))
    return out


_PATTERNS = _patterns()


def read_answer(text: str) -> str | None:
    """The answer to the observation's question found in its search results, by the synthetic corpus'
    sentence patterns (None when no result states it). Bounded: the observation text is."""
    first = text.split("\n", 1)[0][3:]
    for q, fact in _PATTERNS:
        m = q.fullmatch(first)
        if m:
            subject = m.group(1)
            sentence = re.escape(fact.format(s=subject, o="\x00")).replace("\x00", r"(\w+)")
            found = re.search(sentence, text)
            return found.group(1) if found else None
    return None


def made_up(rng: np.random.Generator) -> str:
    return "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), size=2)).capitalize()


def search_twin(text: str, rng: np.random.Generator) -> str:
    if "\nR: " not in text:
        return f'<tool name="search">{text.split(chr(10), 1)[0][3:]}</tool>'
    return read_answer(text) or made_up(rng)


def _bad_search_twin(text: str, rng: np.random.Generator) -> str:
    if "\nR: " not in text:
        return f'<tool name="search">{made_up(rng)} {made_up(rng)}</tool>'
    return read_answer(text) or made_up(rng)


SCRIPTED = {"solver": {"search": search_twin, "blind": lambda text, rng: made_up(rng), "bad_search": _bad_search_twin}}


class SearchQAEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    def __init__(self, corpus: str | None = None, docs: int = 2000, corpus_seed: int = 0, searches: int = 2, k: int = 3,
                 snippet_chars: int = 120, reward: str = "exact", kinds: Sequence[str] = (),
                 context: str = "conversation", render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if reward not in ("exact", "prefix"):
            raise ValueError(f"reward must be 'exact' or 'prefix', got {reward!r}")
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
        self.reward = reward
        for name, value, low, high in (("docs", docs, 10, 1_000_000), ("searches", searches, 0, 8), ("k", k, 1, 10),
                                       ("snippet_chars", snippet_chars, 20, 2000), ("corpus_seed", corpus_seed, 0, 2**31)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
        self.searches, self.k, self.snippet_chars = searches, k, snippet_chars
        self.index, self.qa = _index(str(corpus) if corpus else None, docs, corpus_seed)
        if kinds:
            self.qa = [d for d in self.qa if d.get("kind") in set(kinds)]
            if not self.qa:
                raise ValueError(f"kinds {list(kinds)}: no question of the corpus has one of these kinds")
        self.tool = SearchTool(self.index, k=k, snippet_chars=snippet_chars,
                               max_output_chars=k * (snippet_chars + 60))
        self.possible_agents = ["solver"]
        self._seat_roles = {"solver": "solver"}
        self._doc: dict = {}
        self._log: list[tuple[str, str]] = []
        max_text = 140 + searches * (MAX_QUERY_SHOWN + self.tool.max_output_chars + 20) + 20
        self.observation_spaces = {"solver": Dict({"observation": Box(0, searches, shape=(1,), dtype=np.int64),
                                                   "text": text_space(max_text, "\n")})}
        self.action_spaces = {"solver": text_space(MAX_REPLY)}
        self.spec = GameSpec(GAME_ID, ("solver",), (0.0, 1.0), zero_sum=False, max_turns=searches + 1,
                             description="A solver answers a question about a corpus, searching it first if it likes.",
                             conversation=("solver",) if context == "conversation" else ())

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)
        self._doc = self.qa[int(self.np_random.integers(len(self.qa)))]
        self._log = []
        self._start_episode({"solver": {"role": "solver"}})

    def observe(self, agent: str) -> dict:
        self._check_seat(agent)
        return {"observation": np.array([len(self._log)], dtype=np.int64),
                "text": solver_text(ascii_only(self._doc["question"], 120), self._log, self.searches)}

    def messages(self, agent: str) -> list[dict[str, str]]:
        """A conversation's new messages: the question first, then each search's results as a tool message."""
        self._check_seat(agent)
        return solver_messages(ascii_only(self._doc["question"], 120), self._log, self.searches)

    def step(self, action: str) -> None:
        if self._begin_turn(action) is None:
            return
        if len(action) > MAX_REPLY:
            return self._finish(action, f"a message of {len(action)} characters, more than {MAX_REPLY}")
        calls = parse_calls(action, max_calls=1)
        if calls:
            if len(self._log) >= self.searches:
                return self._finish(action, f"a search with none left ({self.searches} a game); answer instead")
            self._log.append(run_search(self.tool, calls[0]))
            self._accumulate_rewards()
            return None
        return self._finish(action)

    def _finish(self, reply: str, invalid: str = "") -> None:
        correct = not invalid and normalize(reply) == normalize(self._doc["answer"])
        self.infos["solver"] = {"role": "solver", "question": self._doc["question"], "answer": self._doc["answer"],
                                "reply": reply[:MAX_REPLY], "searches": len(self._log), "invalid": bool(invalid),
                                "metrics": {"correct": float(correct), "searches": float(len(self._log))}}
        if invalid:
            self.infos["solver"]["reason"] = f"solver: {invalid}"
        shaped = prefix_share(reply, self._doc["answer"]) if self.reward == "prefix" and not invalid else float(correct)
        self._end_game({"solver": shaped})

    def _render_text(self) -> str:
        return f"[{GAME_ID}] {self._doc.get('question')} -> {self._doc.get('answer')} searches={len(self._log)}"
