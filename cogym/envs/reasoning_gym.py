"""reasoning-gym tasks as the problem source of ``proposer_solver-v0`` (``source="reasoning_gym"``).

With the ``reasoning-gym`` extra (``pip install 'cogym[reasoning-gym]'``, reasoning-gym 0.1.25) the
solvers of ``proposer_solver-v0`` answer procedurally generated reasoning-gym items, each scored by its
dataset's own ``score_answer``::

    make("proposer_solver-v0", source="reasoning_gym", tasks=["basic_arithmetic", "chain_sum"], levels=[0, 1])

The game (see ``cogym.envs.proposer_solver``)
    ``task_choice="proposer"`` (the default): the proposer seat reads a numbered menu of every
    ``(task, level)`` pair, ``"Choose a task and level: 1=basic_arithmetic@0 2=basic_arithmetic@1
    3=chain_sum@0 4=chain_sum@1"``, and replies with a number or a listed ``name@level`` (only the first
    line of its first 256 characters is read; any other reply is an invalid move: ``invalid_penalty``, the
    game ends). ``task_choice="random"``: no proposer seat; every ``reset`` picks a menu entry uniformly.
    Either way the item is drawn with the game's RNG (a seed in ``[0, 2**31)``), so ``reset(seed)`` fixes
    it. Each solver's reward is its score in ``[0, 1]`` (1 is correct; some datasets give partial
    credit); ``correct`` is a score of 1, and the proposer's learnability or band reward counts those.
    Infos carry ``task`` (``"chain_sum@1"``; TRR++ whitens per task) and ``reference`` (the item's
    answer); the proposer's ``metrics`` hold the ``level`` it chose (``proposer/level``).

Levels
    A level is a reasoning-gym curriculum level: every attribute of the dataset's curriculum at that
    level (capped at its highest), ranges inclusive of the easier levels (reasoning-gym's default). A
    dataset without a curriculum has level 0 only, its default configuration. ``catalog()`` lists every
    usable dataset with its levels; ``EXCLUDED`` and ``EXCLUDED_LEVELS`` say why the others are left out,
    and naming one is a ``ValueError`` that quotes the reason.

Answers (model output is adversarial: bounded in size and time)
    A reply holding ``<answer>...</answer>`` is scored on the text of its last such block (the
    convention reasoning-gym's prompts ask for); any other reply is scored whole, stripped. Only the
    last ``MAX_SCAN_CHARS`` characters of a reply are searched, and the answer keeps its last
    ``MAX_ANSWER_CHARS`` (16 384) characters: every reference answer of the catalog at its usable levels
    is shorter (an item whose answer is not is not posed, below). Scoring runs only in the sandbox
    (``cogym.core.sandbox``; the handler is ``_reasoning_gym_worker.py``): each answer in a fresh fork of a
    warm worker, with no network, read-only files but a private tmpfs, a scrubbed environment and rlimits
    where the machine allows namespaces (``cogym.core.sandbox.isolation()`` says), under a
    ``ANSWER_TIMEOUT_S`` (0.5 s) interval timer; the worker kills a fork that has not answered 0.1 s later
    (score 0), and the parent kills and replaces the worker if it has not replied 0.25 s after the timer,
    so one answer costs at most 0.75 s (the next call then waits for a fresh worker, about 3 s of imports).
    A scorer that raises, times out or returns a non-number scores 0; the solver's info
    ``metrics["scorer_failed"]`` says so. Items are generated in the warm worker (``GENERATE_TIMEOUT_S``,
    10 s), so a generator that hangs or touches global ``random``/``numpy.random`` state (``pool_matrix``
    does) never reaches the game: the worker seeds both from the item seed around each generation.

Void episodes
    An item that cannot be posed (its generator raised or timed out, or its question is longer than
    ``MAX_QUESTION_CHARS`` or its answer longer than ``MAX_ANSWER_CHARS``) ends the game after the
    proposer's move with every reward 0 and no invalid move; every seat's ``reason`` says why. With
    ``task_choice="random"`` ``reset`` draws again (up to 4 draws) instead.

Observation text
    Questions are shown as generated, except characters outside printable ASCII and ``QUESTION_CHARS``
    (Latin-1, arrows, math operators, box drawing and the few symbols the datasets use), which are
    written as Python escapes (``\\U0001f600``), so the text always lies inside the observation space.
"""

from __future__ import annotations

import atexit
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cogym.core.names import did_you_mean
from cogym.core.sandbox import Sandbox
from cogym.envs._reasoning_gym_worker import generate_item, level_count  # noqa: F401 - re-exported

TASK_CHOICES = ("proposer", "random")
MAX_ANSWER_CHARS = 16_384
MAX_SCAN_CHARS = 65_536
MAX_QUESTION_CHARS = 16_384
MAX_ERROR_CHARS = 300  # of a scorer's error (the call that wrote it ran the answer)
MAX_MENU = 32  # (task, level) entries a menu may list
ANSWER_TIMEOUT_S = 0.5
GENERATE_TIMEOUT_S = 10.0
_KILL_MARGIN_S = 0.25
_RANDOM_DRAWS = 4
SEED_RANGE = 2**31
MENU_PREFIX = "Choose a task and level:"
QUESTION_CHARS = frozenset(
    [chr(c) for c in range(0xA0, 0x100)] + [chr(c) for c in range(0x2010, 0x2028)]
    + [chr(c) for c in range(0x2190, 0x2200)] + [chr(c) for c in range(0x2200, 0x2300)]
    + [chr(c) for c in range(0x2500, 0x25A0)] + ["\u2122", "\u2705", "\u274c", "\u2754", "\u20ac", "\n", "\t"])

# Whole datasets left out, measured on reasoning-gym 0.1.25 (tests/envs/test_reasoning_gym.py checks the
# scorer hacks). A "constant answer" is one unrelated to the item; a dataset is left out when one earns a
# mean score >= 0.45 over 48 items (0.5 expected, less a margin for the sample).
EXCLUDED: dict[str, str] = {
    "game_of_life_halting": "its scorer pays 1.0 for any non-empty answer ('False', 'x', '0' alike: it tests bool(answer))",
    "puzzle24": "its scorer pays 1.0 for any expression of four numbers equal to 24, whichever numbers the item gave "
                "(another item's answer scores 1.0)",
    "game_of_life": "its scorer gives partial credit per cell and most cells are dead: another item's answer scores 0.93 on average",
    "coin_flip": "the constant answer '0' scores 0.75-0.92 on average (its scorer accepts a small probability as 0)",
    "circuit_logic": "answers are 0 or 1: the constant '0' scores 0.58 on average",
    "course_schedule": "answers are True or False: the constant 'False' scores 0.75 on average at levels 0-1",
    "isomorphic_strings": "answers are True or False: the constant 'False' scores 0.58 on average",
    "ransom_note": "answers are True or False: a constant scores 0.5-0.58 on average",
    "syllogism": "answers are Yes or No: the constant 'Yes' scores 0.75-1.0 on average",
    "polynomial_equations": "the constant answer '0' scores 0.46-0.63 on average (0 is a root of most items)",
    "boxnet": "items have no reference answer (answer None; the scorer simulates a plan), so no oracle and no reference",
    "graph_color": "items have no reference answer (answer None; the scorer checks a colouring)",
    "propositional_logic": "items have no reference answer (answer None); 10 000 nested parentheses recurse past the limit",
    "rubiks_cube": "items have no reference answer (answer None; the scorer simulates the moves)",
    "rush_hour": "items have no reference answer (answer None; the scorer simulates the moves)",
    "composite": "needs a list of datasets to mix; it does not generate with its defaults",
    "knight_swap": "every curriculum level fails to generate (AssertionError: min_nodes must be >= 6), and its default "
                   "configuration takes seconds to minutes per item",
    "sokoban": "generation searches for puzzles: 10 s and more per item at several levels (level 0 among them)",
    "emoji_mystery": "its questions hide the message in Unicode variation selectors, which the observation would show "
                     "escaped (a different task)",
}
# Single levels left out: generation fails, hangs or takes seconds, a constant answer pays (the rule above), or
# questions or answers exceed the caps; measured on 12 to 48 items a level (generation times are heavy-tailed,
# so a usable level may still time out now and then: that episode is void, see above).
EXCLUDED_LEVELS: dict[str, dict[int, str]] = {}


def _excluded_levels() -> None:
    too_long = "questions or answers exceed the caps (16 384 characters)"
    for name, levels, reason in [
        ("caesar_cipher", (2, 3), "fails to generate (AssertionError: rotation must be in range [1,25])"),
        ("survo", (2, 3), "fails to generate (AssertionError: max_empty must be <= 9)"),
        ("modulo_grid", (1,), "fails to generate (AssertionError: max_target must be greater than 0)"),
        ("jugs", (1,), "some items' own answer scores 0"),
        ("jugs", (2, 3), "generation does not end within 10 s"),
        ("sudoku", (3, 4), "generation does not end within 10 s"),
        ("arc_1d", (3,), "generation does not end within 10 s"),
        ("number_sequence", (2, 3), "generation does not end within 10 s"),
        ("n_queens", (4,), "generation takes about 7 s per item"),
        ("futoshiki", (3,), "generation takes up to 6 s per item"),
        ("zebra_puzzles", (4, 5), "generation takes 3 s to more than 20 s per item"),
        ("bf", (2,), "generation takes up to 4 s per item"),
        ("gcd", (2, 3), "the constant answer '1' scores 0.48 on average"),
        ("letter_counting", (0,), "the constant answer '1' scores 0.46 on average"),
        ("rotten_oranges", (2, 3), "the constant answer '-1' scores 0.46-0.67 on average"),
        ("rectangle_count", (0,), "the constant answer '2' scores 0.59 on average"),
        ("n_queens", (0,), "another item's answer scores 0.46 on average (few distinct solutions)"),
        ("tower_of_hanoi", (3,), too_long), ("binary_matrix", (3,), too_long), ("rotate_matrix", (3, 4), too_long),
        ("spiral_matrix", (3,), too_long), ("manipulate_matrix", (3, 4), too_long), ("mahjong_puzzle", (3,), too_long),
        ("needle_haystack", (1, 2, 3), too_long), ("largest_island", (3,), too_long),
        ("pool_matrix", (3,), too_long), ("shortest_path", (3,), too_long), ("number_sorting", (2, 3, 4, 5, 6, 7), too_long),
        ("codeio", (0, 3), too_long),
    ]:
        for level in levels:
            EXCLUDED_LEVELS.setdefault(name, {}).setdefault(level, reason)


_excluded_levels()


@dataclass(frozen=True)
class TaskInfo:
    """One dataset of the catalog: whether it has a curriculum, its level count, and the usable levels."""

    name: str
    curriculum: bool
    levels: int
    usable: tuple[int, ...]


@dataclass(frozen=True)
class Item:
    """A posed item: what names it in the worker, and what the game shows and reports."""

    name: str
    level: int
    seed: int
    question: str
    answer: str

    @property
    def task(self) -> str:
        return f"{self.name}@{self.level}"


class ItemError(RuntimeError):
    """An item could not be posed (its generator failed, or its texts exceed the caps)."""


# ------------------------------------------------------------------------------ the sandboxed worker
_WORKER = Sandbox(Path(__file__).with_name("_reasoning_gym_worker.py"), "reasoning_gym",
                  "is reasoning-gym installed (pip install 'cogym[reasoning-gym]')?",
                  env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
atexit.register(_WORKER.close)
_CATALOG: dict[str, TaskInfo] | None = None
_KNOWN: OrderedDict[str, str] = OrderedDict()  # question -> reference answer, for the oracle twin
_KNOWN_SIZE = 4096


def worker() -> Sandbox:
    """The process's sandboxed reasoning-gym worker (started on first use)."""
    return _WORKER


def catalog() -> dict[str, TaskInfo]:
    """Every usable reasoning-gym dataset (registered, not ``EXCLUDED``), by name, with its levels."""
    global _CATALOG
    if _CATALOG is None:
        reply = _WORKER.request({"op": "catalog", "timeout_s": GENERATE_TIMEOUT_S}, GENERATE_TIMEOUT_S + _KILL_MARGIN_S)
        if reply is None or "datasets" not in reply:
            raise RuntimeError(f"the reasoning_gym worker could not list its datasets: {reply}")
        _CATALOG = {}
        for name, (has_curriculum, levels) in sorted(reply["datasets"].items()):
            if name in EXCLUDED:
                continue
            usable = tuple(lv for lv in range(levels) if lv not in EXCLUDED_LEVELS.get(name, {}))
            if usable:
                _CATALOG[name] = TaskInfo(name, bool(has_curriculum), int(levels), usable)
    return dict(_CATALOG)


def menu_entries(tasks: Any, levels: Any) -> list[tuple[str, int]]:
    """The ``(task, level)`` pairs of a game's menu, validated: every task a catalog name, every level usable."""
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"tasks must be a non-empty list of reasoning-gym dataset names, got {tasks!r}")
    if isinstance(levels, str) or not isinstance(levels, Sequence) or not levels or not all(
            isinstance(lv, (int, np.integer)) and not isinstance(lv, bool) for lv in levels):
        raise ValueError(f"levels must be a non-empty list of curriculum levels (ints), got {levels!r}")
    if len(set(tasks)) != len(tasks) or len(set(levels)) != len(levels):
        raise ValueError(f"tasks and levels must not repeat, got tasks={list(tasks)} levels={list(levels)}")
    known = catalog()
    for name in tasks:
        if name in EXCLUDED:
            raise ValueError(f"reasoning-gym dataset {name!r} is excluded: {EXCLUDED[name]}")
        if name not in known:
            hint = did_you_mean(name, known, n=3, form="; did you mean {}?")
            raise ValueError(f"unknown reasoning-gym dataset {name!r}{hint} (cogym.envs.reasoning_gym.catalog() lists them)")
        for level in levels:
            if int(level) not in known[name].usable:
                why = EXCLUDED_LEVELS.get(name, {}).get(int(level), f"it has levels 0..{known[name].levels - 1}")
                raise ValueError(f"{name} level {level} is not offered: {why}; usable levels: {list(known[name].usable)}")
    entries = [(name, int(level)) for name in tasks for level in levels]
    if len(entries) > MAX_MENU:
        raise ValueError(f"{len(tasks)} tasks x {len(levels)} levels make {len(entries)} menu entries, more than {MAX_MENU}")
    return entries


def menu_text(entries: Sequence[tuple[str, int]]) -> str:
    """The proposer's observation: ``"Choose a task and level: 1=basic_arithmetic@0 2=chain_sum@0"``."""
    return MENU_PREFIX + "".join(f" {i}={name}@{level}" for i, (name, level) in enumerate(entries, start=1))


def parse_choice(reply: str, entries: Sequence[tuple[str, int]]) -> tuple[int | None, str | None]:
    """``(index into entries, None)`` for a reply naming a menu entry by number or ``name@level``, else
    ``(None, reason)``. Reads only the first line of the first 256 characters."""
    head = reply[:256].split("\n", 1)[0].strip().rstrip(".)").strip()
    if re.fullmatch(r"\d{1,3}", head) and 1 <= int(head) <= len(entries):
        return int(head) - 1, None
    names = [f"{n}@{lv}" for n, lv in entries]
    if head.lower() in names:
        return names.index(head.lower()), None
    return None, f"reply {head[:40]!r} is not a menu number 1..{len(entries)} or a listed choice such as {names[0]!r}"


def random_choice(observation: str, rng: np.random.Generator) -> str | None:
    """The ``random`` proposer twin on a menu: a uniform entry's number; None when ``observation`` is no menu."""
    if not observation.startswith(MENU_PREFIX):
        return None
    count = len(re.findall(r" \d+=", observation[len(MENU_PREFIX):]))
    return str(int(rng.integers(1, count + 1))) if count else None


def known_answer(question: str) -> str | None:
    """The reference answer of a question this process posed recently (the ``oracle`` twin reads it), else None."""
    return _KNOWN.get(question)


def observation_text(question: str) -> str:
    """``question`` with every character outside printable ASCII and ``QUESTION_CHARS`` escaped."""
    return "".join(ch if (" " <= ch <= "~" or ch in QUESTION_CHARS) else ascii(ch)[1:-1] for ch in question)


def answer_text(reply: str) -> str:
    """What is scored of ``reply``: its last ``<answer>`` block's text, else the whole reply, stripped, cut to
    its last ``MAX_ANSWER_CHARS`` characters."""
    tail = reply[-MAX_SCAN_CHARS:]
    end = tail.rfind("</answer>")
    start = tail.rfind("<answer>", 0, end) if end >= 0 else -1
    text = tail[start + len("<answer>"):end] if start >= 0 else tail
    return text.strip()[-MAX_ANSWER_CHARS:]


def _generate(name: str, level: int, seed: int) -> dict | None:
    """The worker's reply to generating ``(name, level, seed)``; it keeps the item for scoring."""
    return _WORKER.request({"op": "generate", "name": name, "level": level, "seed": seed, "timeout_s": GENERATE_TIMEOUT_S},
                           GENERATE_TIMEOUT_S + _KILL_MARGIN_S)


def generate(name: str, level: int, seed: int) -> Item:
    """The item ``(name, level, seed)``, generated in the sandboxed worker; ``ItemError`` when it cannot be posed."""
    reply = _generate(name, level, seed)
    where = f"{name}@{level} seed {seed}"
    if reply is None:
        raise ItemError(f"generating {where} did not finish within {GENERATE_TIMEOUT_S:g} s (the worker was restarted)")
    if "question" not in reply:
        raise ItemError(f"generating {where} failed: {reply.get('error', reply)}")
    question, answer = observation_text(reply["question"]), reply["answer"]
    if answer is None or not answer.strip():
        raise ItemError(f"{where} has no reference answer")
    if len(question) > MAX_QUESTION_CHARS or len(answer) > MAX_ANSWER_CHARS:
        raise ItemError(f"{where}: question of {len(question)} or answer of {len(answer)} characters exceeds the caps "
                        f"({MAX_QUESTION_CHARS}, {MAX_ANSWER_CHARS})")
    _KNOWN[question] = answer
    _KNOWN.move_to_end(question)
    while len(_KNOWN) > _KNOWN_SIZE:
        _KNOWN.popitem(last=False)
    return Item(name, level, seed, question, answer)


def score(item: Item, reply: str, timeout_s: float = ANSWER_TIMEOUT_S) -> tuple[float, str | None]:
    """``item``'s dataset's score of ``reply`` (``answer_text`` of it) in [0, 1], and why it is 0 if the scorer
    failed (raised, timed out, was killed, or its call broke the sandbox's rules); never raises on any
    ``reply``. Returns within ``timeout_s + 0.25`` s, plus a regeneration when the worker lost the item (it
    was restarted)."""
    request = {"op": "score", "name": item.name, "level": item.level, "seed": item.seed,
               "answer": answer_text(reply), "timeout_s": timeout_s}
    for _ in range(2):
        reply_ = _WORKER.request(request, timeout_s + _KILL_MARGIN_S)
        if reply_ is None:
            return 0.0, f"the scorer did not return within {timeout_s + _KILL_MARGIN_S:g} s; its process was replaced"
        if reply_.get("missing") is not True:
            return checked_reply(reply_)
        _generate(item.name, item.level, item.seed)  # the worker was restarted since: make the item again
    return 0.0, "the scorer lost the item twice"


def checked_reply(reply: dict) -> tuple[float, str | None]:
    """A scorer's reply as ``(score, error)``, checked: the call that wrote it ran the answer being scored, so
    it may say anything (NaN, 7.5, no score, a megabyte of error). Anything but a finite number in [0, 1]
    and an optional string is scored 0 as a failed scorer."""
    value, error = reply.get("score"), reply.get("error")
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0
            or not (error is None or isinstance(error, str))):  # NaN fails the range check
        return 0.0, "the scorer's reply was malformed"
    return float(value), None if error is None else error[:MAX_ERROR_CHARS]


def rg_source(source: str, tasks: Any, levels: Any, task_choice: Any, verifier: str, format_bonus: float) -> ReasoningGymSource | None:
    """``proposer_solver-v0``'s reasoning-gym settings, validated; None for another source (which takes none of them)."""
    if source != "reasoning_gym":
        for name, value, default in (("tasks", tasks, None), ("levels", levels, None), ("task_choice", task_choice, "proposer")):
            if value != default:
                raise ValueError(f"{name}={value!r} is only used with source='reasoning_gym', got source={source!r}")
        return None
    if tasks is None:
        raise ValueError("source='reasoning_gym' needs tasks=[...] (reasoning-gym dataset names; "
                         "cogym.envs.reasoning_gym.catalog() lists them)")
    if verifier != "exact" or format_bonus:
        raise ValueError(f"source='reasoning_gym' scores with each dataset's own scorer: leave verifier ('exact') and "
                         f"format_bonus (0) at their defaults, got verifier={verifier!r}, format_bonus={format_bonus!r}")
    return ReasoningGymSource(tasks, levels, task_choice)


class ReasoningGymSource:
    """What ``proposer_solver-v0`` keeps for ``source="reasoning_gym"``: the menu, and how to pose and score."""

    def __init__(self, tasks: Any, levels: Any, task_choice: Any) -> None:
        if task_choice not in TASK_CHOICES:
            raise ValueError(f"task_choice must be one of {TASK_CHOICES}, got {task_choice!r}")
        self.entries = menu_entries(tasks, [0] if levels is None else levels)
        self.task_choice = task_choice
        self.menu = menu_text(self.entries)

    @property
    def has_proposer(self) -> bool:
        return self.task_choice == "proposer"

    def parse(self, reply: str) -> tuple[int | None, str | None]:
        """The menu entry a proposer's reply names (``parse_choice``)."""
        return parse_choice(reply, self.entries)

    def pose(self, index: int, seed: int) -> tuple[Item | None, str | None]:
        """Menu entry ``index``'s item with ``seed``, or ``(None, why it cannot be posed)``."""
        name, level = self.entries[index]
        try:
            return generate(name, level, seed), None
        except ItemError as exc:
            return None, str(exc)

    def draw(self, rng: np.random.Generator) -> Item:
        """``task_choice="random"``: a uniform menu entry and seed from ``rng`` (draws again when an item cannot be posed)."""
        reasons = []
        for _ in range(_RANDOM_DRAWS):
            index = int(rng.integers(len(self.entries)))
            item, reason = self.pose(index, int(rng.integers(SEED_RANGE)))
            if item is not None:
                return item
            reasons.append(reason)
        raise ItemError(f"no item could be posed in {_RANDOM_DRAWS} draws: {'; '.join(map(str, reasons))}")

    def scores(self, item: Item, replies: Sequence[str]) -> list[tuple[float, str | None]]:
        """Each reply's score and scorer failure (``score``)."""
        return [score(item, r) for r in replies]
