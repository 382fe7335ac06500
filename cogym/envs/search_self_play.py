"""``search_self_play-v0``: a proposer turns a corpus document into a question, ``k`` solvers search for its answer (SSP).

Search Self-Play: one seat writes search questions grounded in the corpus, others answer them with
the search tool, and the proposer is paid for questions of learnable difficulty. The game checks
that the proposer's answer is really in the document it cites, so a proposer cannot be paid for an
unanswerable question (in the paper a retrieval-augmented solver checks this; here a string check).

Roles and seats
    ``"proposer"`` (role ``proposer``), then ``"solver_0"`` ... ``"solver_{k-1}"`` (role ``solver``,
    ``k = num_solvers``). Not zero-sum. Max turns: ``1 + k * (searches + 1)``.

Turn order
    1. The proposer reads one document of the corpus, drawn with the game's RNG, and writes a
       question, its answer and the id of the document that supports it (one message).
    2. Every solver plays its own game of ``search_qa-v0`` on that question, independently: each of
       its messages is a search, ``<tool name="search">QUERY</tool>`` (the first call of the message
       is run, while searches remain), or else its answer, which ends its play. ``ready_agents()``
       lists every solver that has not answered, in seat order from ``agent_selection``; a solver's
       move never changes another solver's observation. The game ends after the last answer.

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[phase, seat, searches used]``; phase 1 = the proposer is writing,
    2 = solvers are answering, 3 = game over; seat = index in ``possible_agents``; searches used by
    this seat (0 for the proposer). ``"text"``: the proposer sees its document on one line, its id
    in brackets, then ``title: text`` (whitespace collapsed, printable ASCII, cut to ``doc_chars``)::

        [d17] Velorixo: The capital of Velorixo is Toush. Records of Velorixo go back to 1977. ...

    A solver sees, as in ``search_qa-v0``, the question, every search of its own with its results
    and the searches it has left (``""`` before the question exists)::

        Q: What is the capital of Velorixo?
        S: capital of Velorixo
        R: [d17] Velorixo: The capital of Velorixo is Toush. ... | [d5] ...
        searches left: 1

Action (``gymnasium.spaces.Text``, one whole message)
    Proposer: ``Q: <question> A: <answer> D: <document id>``, on one line or several (whitespace is
    collapsed first), e.g. ``Q: What is the capital of Velorixo? A: Toush D: d17``. The message
    must start with ``Q:``; the answer runs from the last `` A:`` before the last `` D:`` to it; the
    id (``[d17]`` and a final period are accepted too) is the rest. Parsed with ``str.find`` on at
    most ``MAX_PROPOSAL`` (512) characters: no regular expression sees an unbounded message.
    Solver: at most 256 characters, a search or an answer, exactly as in ``search_qa-v0``.

Rewards (given when the game ends; 0 on every earlier turn)
    Solver: with ``reward="exact"`` (the default), 1 if its answer, stripped of spaces and a final
    period, equals the proposer's answer (case ignored), else 0; with ``reward="prefix"``, the share
    of the answer's characters it gets right from its start (``metrics["correct"]`` stays exact).
    Proposer: ``learnability_reward(s, k)`` of ``proposer_solver-v0``, ``s`` the solvers that were
    exactly right: ``1 - s/k`` if ``0 < s < k`` else 0. Reward range ``[min(0, invalid_penalty), 1]``.

Invalid actions
    Proposer, checked in this order (the first failure is the ``reason``; the proposer gets
    ``invalid_penalty``, the game ends at once, solvers get 0 and are removed without acting):
    a message over ``MAX_PROPOSAL`` characters; not of the form above; an empty question, or one
    over ``MAX_QUESTION`` (200) characters; an empty answer, one with no letter or digit, or one
    over ``MAX_ANSWER_CHARS`` (48) characters or ``MAX_ANSWER_WORDS`` (5) words; an id that is not
    a document of the corpus; an answer not in the cited document (**unsupported**: the answer,
    normalized, must occur in the document's shown text, case ignored, at word boundaries, e.g.
    ``Toush`` is in ``... is Toush.`` but ``Tou`` is not); an answer that occurs in the question
    the same way (**leakage**). Any corpus document may be cited; the check reads the cited one as
    the proposer would be shown it. Solver: a message over 256 characters, or a search with none
    left: that solver's play ends with reward 0 (it counts as a wrong attempt); the game goes on.

Infos at the end, every seat: ``"role"``, ``"document"`` (the id shown to the proposer),
``"question"`` and ``"answer"`` (the proposal's; None if it was invalid), ``"invalid"``, and
``"reason"`` when a move was invalid (solvers of a game whose proposal was invalid: "game over:
..."). Proposer also: ``"cited"`` (the id it cited, if it parsed), ``"success_rate"`` (``s/k``,
None if invalid), ``"metrics"``: ``valid``, ``solve_rate`` (None if invalid). Solver also:
``"reply"``, ``"searches"``, ``"correct"`` (None if it never played), ``"reference"`` (the
proposer's answer, None if invalid), ``"metrics"``: ``correct``, ``searches`` (None if it never
played). Before the end only ``"role"``.

Arguments
    corpus=None         a JSONL corpus (:mod:`cogym.envs.search`; documents need no question);
                        None: a synthetic corpus of ``docs`` documents from ``corpus_seed``.
    docs=2000, corpus_seed=0
    num_solvers=4       k, 1..64.
    searches=2          searches a solver may make, 0..8.
    k=3                 results a search returns, 1..10.
    snippet_chars=120   characters of each result, 20..2000.
    doc_chars=300       characters of the proposer's document shown (and checked), 40..2000.
    reward="exact"      the solvers' reward, "exact" or "prefix".
    kinds=()            draw only documents with one of these ``kind`` values (e.g. ``[archive]``:
                        the synthetic corpus' year facts); empty: any document.
    invalid_penalty=-1.0  <= 0, the proposer's reward for an invalid proposal.
    context="conversation"  the solvers' context, as in ``search_qa-v0``: ``conversation`` (the
                        question as a user message, each search's results as a tool message, a
                        model's own messages verbatim; trained as one sequence) or ``fresh`` (each
                        move asked the whole solver text above anew).
    render_mode=None    None or "ansi".
The corpus' index is built once per process and arguments and shared by every game on it. A
document is drawn only if its id is at most 64 printable characters without spaces (so that it can
be cited as shown).

Scripted twins
    Proposer ``honest``: finds the synthetic corpus' fact sentence in its document and asks its
    question (``What is the capital of Velorixo? A: Toush``); ``unsupported``: the same question
    with a made-up answer that is not in the document; ``leaky``: a supported answer that is also
    in the question. Solver ``search`` and ``blind``: ``search_qa-v0``'s twins (search the
    question and read the answer from the results; answer a made-up name without searching).

Version history
    v0: first version.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Sequence

import numpy as np
from gymnasium.spaces import Box, Dict

from .base import CogymEnv, GameSpec, int_arg, penalty_arg, seat_names, text_space
from .errors import DatasetError
from .proposer_solver import learnability_reward
from .search import KINDS, SearchIndex, SearchTool, synthetic_corpus
from .search_qa import (CONTEXTS, MAX_QUERY_SHOWN, MAX_REPLY, ascii_only, made_up, search_twin, normalize, prefix_share,
                        run_search, solver_messages, solver_text)
from .tools import parse_calls

GAME_ID = "search_self_play-v0"
PHASE_PROPOSE, PHASE_SOLVE, PHASE_OVER = 1, 2, 3
MAX_PROPOSAL = 512  # characters of a proposal; a longer one is invalid unread
MAX_QUESTION = 200
MAX_ANSWER_CHARS = 48
MAX_ANSWER_WORDS = 5
MAX_ID = 64
FORMAT = "Q: <question> A: <answer> D: <document id>"


# ------------------------------------------------------------------------------ the corpus
@functools.lru_cache(maxsize=8)
def _corpus(corpus: str | None, docs: int, corpus_seed: int) -> tuple[SearchIndex, dict[str, dict]]:
    """The corpus' index and its documents by id (the first of a repeated id), once per process and arguments."""
    index = SearchIndex.build(synthetic_corpus(docs, seed=corpus_seed)) if corpus is None else SearchIndex.open(corpus)
    by_id: dict[str, dict] = {}
    for doc in index.docs:
        by_id.setdefault(str(doc["id"]), doc)
    return index, by_id


def _citable(doc_id: str) -> bool:
    return 0 < len(doc_id) <= MAX_ID and all("!" <= c <= "~" for c in doc_id)


def shown_text(doc: dict, doc_chars: int) -> str:
    """A document as the proposer is shown it and as a citation is checked: ``title: text``, whitespace
    collapsed, printable ASCII, cut to ``doc_chars`` (the text's first ``4 * doc_chars`` read only)."""
    title, text = str(doc.get("title") or ""), str(doc.get("text", ""))
    body = f"{title[:doc_chars]}: {text[:4 * doc_chars]}" if title else text[:4 * doc_chars]
    return ascii_only(" ".join(body.split()), doc_chars)


# ------------------------------------------------------------------------------ pure rules
def parse_proposal(message: str) -> tuple[str, str, str] | None:
    """``(question, answer, document id)`` of a ``Q: ... A: ... D: ...`` message, each stripped, or None
    when the message is not of that form (or over ``MAX_PROPOSAL`` characters). Linear: ``str.find``."""
    if len(message) > MAX_PROPOSAL:
        return None
    text = " ".join(message.split())
    if not text.startswith("Q:"):
        return None
    d = text.rfind(" D:")
    a = text.rfind(" A:", 0, d) if d > 0 else -1
    if a < 1:
        return None
    doc_id = text[d + 3:].strip()
    if doc_id.startswith("[") and doc_id.endswith("]"):
        doc_id = doc_id[1:-1].strip()
    return text[2:a].strip(), text[a + 3:d].strip(), doc_id


def _occurs(needle: str, haystack: str) -> bool:
    """``needle`` in ``haystack`` at word boundaries (both already normalized; both bounded by the caller)."""
    return re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", haystack) is not None


def _norm_text(text: str) -> str:
    return " ".join(normalize(text).split())


def check_proposal(message: str, docs: dict[str, dict], doc_chars: int) -> tuple[tuple[str, str, str] | None, str]:
    """``((question, answer, cited id), "")`` for a valid proposal; ``(parsed or None, reason)`` else.

    ``docs`` maps the corpus' ids to its documents; the answer must occur in the cited document's
    :func:`shown_text` and not in the question (see the module's doc for the order of the checks)."""
    if len(message) > MAX_PROPOSAL:
        return None, f"a proposal of {len(message)} characters, more than {MAX_PROPOSAL}"
    parsed = parse_proposal(message)
    if parsed is None:
        return None, f"{ascii_only(message, 60)!r} is not a proposal of the form '{FORMAT}'"
    question, answer, doc_id = parsed
    if not question:
        return parsed, "the question is empty"
    if len(question) > MAX_QUESTION:
        return parsed, f"the question has {len(question)} characters, more than {MAX_QUESTION}"
    if not answer:
        return parsed, "the answer is empty"
    if len(answer) > MAX_ANSWER_CHARS or len(answer.split()) > MAX_ANSWER_WORDS:
        return parsed, (f"the answer {ascii_only(answer, 60)!r} is too long (at most {MAX_ANSWER_CHARS} characters "
                        f"and {MAX_ANSWER_WORDS} words)")
    want = _norm_text(answer)
    if not any(c.isalnum() for c in want):
        return parsed, f"the answer {ascii_only(answer, 60)!r} has no letter or digit"
    doc = docs.get(doc_id)
    if doc is None and doc_id.endswith("."):
        doc_id = doc_id.rstrip(".")
        doc = docs.get(doc_id)
        parsed = (question, answer, doc_id)
    if doc is None:
        return parsed, f"it cites {ascii_only(doc_id, MAX_ID)!r}, which is not a document of the corpus"
    if not _occurs(want, _norm_text(shown_text(doc, doc_chars))):
        return parsed, f"unsupported: the answer {ascii_only(answer, 60)!r} is not in document {ascii_only(doc_id, MAX_ID)}"
    if _occurs(want, _norm_text(question)):
        return parsed, f"leakage: the answer {ascii_only(answer, 60)!r} is in the question"
    return parsed, ""


# ------------------------------------------------------------------------------ scripted twins
_FACTS = [(re.compile(re.escape(fact).replace(re.escape("{s}"), r"(\w+)").replace(re.escape("{o}"), r"(\w+)")), question)
          for _, _, fact, question in KINDS]


def _document(text: str) -> tuple[str, str]:
    """(id, shown text) of the proposer's observation ``[id] title: text``."""
    end = text.find("] ", 0, MAX_ID + 2)
    return (text[1:end], text[end + 2:]) if text.startswith("[") and end > 0 else ("", text)


def _fact(text: str) -> tuple[str, str] | None:
    """(question, answer) of the first synthetic fact sentence in ``text``, or None."""
    for pattern, question in _FACTS:
        m = pattern.search(text)
        if m:
            return question.format(s=m.group(1)), m.group(2)
    return None


def _honest(text: str, rng: np.random.Generator) -> str:
    doc_id, body = _document(text)
    fact = _fact(body)
    if fact is None:  # not a synthetic document: ask for its last long word
        words = re.findall(r"[A-Za-z]{4,}", body[:400])
        fact = (f"Which word does document {doc_id} end with?", words[-1] if words else "")
    return f"Q: {fact[0]} A: {fact[1]} D: {doc_id}"


def _unsupported(text: str, rng: np.random.Generator) -> str:
    doc_id, body = _document(text)
    fact = _fact(body)
    question = fact[0] if fact else f"What does document {doc_id} name?"
    haystack = _norm_text(body)
    answer = made_up(rng)
    while _occurs(_norm_text(answer), haystack):
        answer += "x"
    return f"Q: {question} A: {answer} D: {doc_id}"


def _leaky(text: str, rng: np.random.Generator) -> str:
    doc_id, body = _document(text)
    fact = _fact(body)
    answer = fact[1] if fact else body.split(" ", 1)[0].rstrip(":")
    return f"Q: Is the answer {answer}? A: {answer} D: {doc_id}"


SCRIPTED = {
    "proposer": {"honest": _honest, "unsupported": _unsupported, "leaky": _leaky},
    "solver": {"search": search_twin, "blind": lambda text, rng: made_up(rng)},
}


# ------------------------------------------------------------------------------ the game
class SearchSelfPlayEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata = {"name": "search_self_play_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, corpus: str | None = None, docs: int = 2000, corpus_seed: int = 0, num_solvers: int = 4,
                 searches: int = 2, k: int = 3, snippet_chars: int = 120, doc_chars: int = 300, reward: str = "exact",
                 kinds: Sequence[str] = (), invalid_penalty: float = -1.0, context: str = "conversation",
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if reward not in ("exact", "prefix"):
            raise ValueError(f"reward must be 'exact' or 'prefix', got {reward!r}")
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
        docs = int_arg("docs", docs, 10, 1_000_000)
        corpus_seed = int_arg("corpus_seed", corpus_seed, 0, 2**31)
        self.num_solvers = int_arg("num_solvers", num_solvers, 1, 64)
        self.searches = int_arg("searches", searches, 0, 8)
        self.k = int_arg("k", k, 1, 10)
        self.snippet_chars = int_arg("snippet_chars", snippet_chars, 20, 2000)
        self.doc_chars = int_arg("doc_chars", doc_chars, 40, 2000)
        self.invalid_penalty = penalty_arg("invalid_penalty", invalid_penalty)
        self.reward = reward
        self.index, self.docs = _corpus(str(corpus) if corpus else None, docs, corpus_seed)
        self.drawable = [i for i, d in self.docs.items() if _citable(i) and (not kinds or d.get("kind") in set(kinds))]
        if not self.drawable:
            why = f"with a kind in {list(kinds)} " if kinds else ""
            raise (ValueError if kinds else DatasetError)(
                f"corpus {corpus!r}: no document {why}has an id of at most {MAX_ID} printable characters without spaces")
        self.tool = SearchTool(self.index, k=self.k, snippet_chars=self.snippet_chars,
                               max_output_chars=self.k * (self.snippet_chars + 60))

        self.solvers = list(seat_names("solver", self.num_solvers))
        self.possible_agents = ["proposer"] + self.solvers
        self._seat_roles = {a: ("proposer" if a == "proposer" else "solver") for a in self.possible_agents}
        self._seat_index = {a: i for i, a in enumerate(self.possible_agents)}
        solver_text = 3 + MAX_QUESTION + self.searches * (MAX_QUERY_SHOWN + self.tool.max_output_chars + 20) + 20
        max_text = max(MAX_ID + 3 + self.doc_chars, solver_text)
        n = len(self.possible_agents)
        self.observation_spaces = {
            a: Dict({"observation": Box(low=np.array([PHASE_PROPOSE, 0, 0]), high=np.array([PHASE_OVER, n, self.searches]),
                                        dtype=np.int64),
                     "text": text_space(max_text, "\n")})
            for a in self.possible_agents}
        self.action_spaces = {a: text_space(MAX_PROPOSAL if a == "proposer" else MAX_REPLY) for a in self.possible_agents}
        self.spec = GameSpec(
            GAME_ID, ("proposer", "solver"), (min(0.0, self.invalid_penalty), 1.0), zero_sum=False,
            max_turns=1 + self.num_solvers * (self.searches + 1),
            description="A proposer asks a question a corpus document answers; k solvers search the corpus for it.",
            outcomes={"proposer": ("invalid", "metrics"), "solver": ("correct", "invalid", "reference", "metrics")},
            conversation=("solver",) if context == "conversation" else ())
        self._phase = PHASE_OVER
        self._doc_id = ""
        self._question: str | None = None
        self._answer: str | None = None
        self._cited = ""
        self._logs: dict[str, list[tuple[str, str]]] = {}
        self._replies: dict[str, str] = {}
        self._invalid: dict[str, str] = {}

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode; ``options`` is accepted for the PettingZoo API and not used."""
        self._seed(seed)
        self._doc_id = self.drawable[int(self.np_random.integers(len(self.drawable)))]
        self._question = self._answer = None
        self._cited = ""
        self._logs = {s: [] for s in self.solvers}
        self._replies, self._invalid = {}, {}
        self._phase = PHASE_PROPOSE
        self._start_episode({a: {"role": self._seat_roles[a]} for a in self.possible_agents})

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        used = len(self._logs.get(agent, ()))
        obs = np.array([self._phase, self._seat_index[agent], used], dtype=np.int64)
        if agent == "proposer":
            text = f"[{self._doc_id}] {shown_text(self.docs[self._doc_id], self.doc_chars)}" if self._doc_id else ""
        elif self._question is None:
            text = ""
        else:
            text = solver_text(ascii_only(self._question, MAX_QUESTION), self._logs[agent], self.searches)
        return {"observation": obs, "text": text}

    def messages(self, agent: str) -> list[dict[str, str]]:
        """A solver's new conversation messages (as in ``search_qa-v0``); the proposer's one message is its document."""
        if agent == "proposer" or self._question is None:
            return [{"role": "user", "content": self.observe(agent)["text"]}]
        return solver_messages(ascii_only(self._question, MAX_QUESTION), self._logs[agent], self.searches)

    def ready_agents(self) -> list[str]:
        if self._phase != PHASE_SOLVE:
            return super().ready_agents()
        waiting = self._yet_to_answer(self.solvers, self._replies)
        if self.agent_selection in waiting:  # in seat order from agent_selection, the seat step takes next
            at = waiting.index(self.agent_selection)
            waiting = waiting[at:] + waiting[:at]
        return waiting

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        if agent == "proposer":
            self._propose(action)
        else:
            self._solve(agent, action)

    # ------------------------------------------------------------------ rules
    def _propose(self, message: str) -> None:
        parsed, reason = check_proposal(message, self.docs, self.doc_chars)
        if reason:
            self._phase = PHASE_OVER
            self.infos["proposer"] = {"role": "proposer", "document": self._doc_id, "question": None, "answer": None,
                                      "cited": parsed[2][:MAX_ID] if parsed else None, "success_rate": None,
                                      "invalid": True, "reason": f"proposer: {reason}",
                                      "metrics": {"valid": False, "solve_rate": None}}
            for s in self.solvers:
                self.infos[s] = {"role": "solver", "document": self._doc_id, "question": None, "answer": None,
                                 "reply": None, "searches": 0, "invalid": False, "correct": None, "reference": None,
                                 "reason": f"game over: the proposer's move was invalid ({reason})",
                                 "metrics": {"correct": None, "searches": None}}
            self._end_game({"proposer": self.invalid_penalty})
            return
        assert parsed is not None
        self._question, self._answer, self._cited = parsed
        self._phase = PHASE_SOLVE
        self.agent_selection = self.solvers[0]
        self._accumulate_rewards()

    def _solve(self, agent: str, message: str) -> None:
        log = self._logs[agent]
        if len(message) > MAX_REPLY:
            self._done(agent, message, f"a message of {len(message)} characters, more than {MAX_REPLY}")
        elif calls := parse_calls(message, max_calls=1):
            call = calls[0]
            if len(log) >= self.searches:
                self._done(agent, message, f"a search with none left ({self.searches} a game); answer instead")
            else:
                log.append(run_search(self.tool, call))
        else:
            self._done(agent, message)
        waiting = self._yet_to_answer(self.solvers, self._replies)
        if not waiting:
            self._score()
            return
        after = [s for s in waiting if self._seat_index[s] > self._seat_index[agent]]
        self.agent_selection = (after or waiting)[0]
        self._accumulate_rewards()

    def _done(self, agent: str, reply: str, invalid: str = "") -> None:
        self._replies[agent] = reply[:MAX_REPLY]
        if invalid:
            self._invalid[agent] = invalid

    def _score(self) -> None:
        assert self._answer is not None
        correct = {s: s not in self._invalid and normalize(self._replies[s]) == normalize(self._answer) for s in self.solvers}
        successes = sum(correct.values())
        rewards: dict[str, float] = {"proposer": learnability_reward(successes, self.num_solvers)}
        common = {"document": self._doc_id, "question": self._question, "answer": self._answer}
        for s in self.solvers:
            if self.reward == "prefix" and s not in self._invalid:
                rewards[s] = prefix_share(self._replies[s], self._answer)
            else:
                rewards[s] = float(correct[s])
            searches = len(self._logs[s])
            self.infos[s] = {"role": "solver", **common, "reply": self._replies[s], "searches": searches,
                             "invalid": s in self._invalid, "correct": correct[s], "reference": self._answer,
                             "metrics": {"correct": float(correct[s]), "searches": float(searches)}}
            if s in self._invalid:
                self.infos[s]["reason"] = f"{s}: {self._invalid[s]}"
        rate = successes / self.num_solvers
        self.infos["proposer"] = {"role": "proposer", **common, "cited": self._cited, "success_rate": rate,
                                  "invalid": False, "metrics": {"valid": True, "solve_rate": rate}}
        self._phase = PHASE_OVER
        self._end_game(rewards)

    def _render_text(self) -> str:
        phase = {PHASE_PROPOSE: "proposing", PHASE_SOLVE: "solving", PHASE_OVER: "over"}[self._phase]
        replies = ", ".join(f"{s}={self._replies[s][:20]!r}" for s in self.solvers if s in self._replies)
        return f"[{GAME_ID}] phase={phase} doc={self._doc_id} Q={self._question!r} A={self._answer!r} replies: {replies or '-'}"
