"""``proposer_solver-v0``: a proposer writes an arithmetic problem, ``k`` solvers answer it.

The self-play curriculum of Absolute Zero (proposer rewarded for problems of learnable
difficulty) and SeRL (few-shot seeded self-instruction, a novelty filter, difficulty band,
majority-vote labels), on the arithmetic domain of ``cogym.envs.arithmetic``; or, with
``source="dataset"``, plain RL on a problem file; or, with ``source="reasoning_gym"``, reasoning-gym
items: the proposer picks a task family and level from a menu (or, with ``task_choice="random"``, each
reset draws one), solvers are paid their score; ``cogym.envs.reasoning_gym`` documents that mode.

Roles and seats
    ``"proposer"`` (role ``proposer``), then ``"solver_0"`` ... ``"solver_{k-1}"`` (role
    ``solver``). With ``source="dataset"`` there is no proposer seat.

Turn order
    1. The proposer writes a problem (one message). Skipped with ``source="dataset"``: each
       ``reset`` draws a problem from the file with the game's RNG.
    2. All ``k`` solvers answer independently: ``ready_agents()`` lists every solver that has not
       answered, in seat order, and one solver's answer never changes another's observation.
    3. The game ends after the last solver's answer. Max turns: ``k + 1`` (``k`` for a dataset).

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[phase, seat]``; phase 1 = the proposer is writing, 2 = the
    problem is posed, 3 = game over; seat = index in ``possible_agents``.
    ``"text"``: the proposer sees ``PROPOSER_REQUEST`` (``"Propose a problem."``), after a line of
    examples when ``few_shot > 0`` (see Self-instruction); a solver sees
    the problem in canonical form (``"37+45"``: the proposal as parsed, spaces and a trailing
    ``=`` removed), or the dataset question exactly; before a problem exists, ``""``.

Action (``gymnasium.spaces.Text``, one whole message)
    Proposer: a problem ``<a><op><b>``, optionally spaced and followed by ``=``, with operands
    ``0..max_operand`` and ``op`` in ``ops``. Solver: free text; its answer is judged by the
    verifier (``exact``: the last integer in the first 64 characters). Any ``str`` is accepted
    (the space's charset only bounds random sampling); a non-``str`` raises ``TypeError``.

Rewards (given when the game ends; 0 on every earlier turn) -- not zero-sum
    Solver: 1 if correct else 0, plus ``format_bonus`` if its reply is exactly one integer.
    Proposer: from the solvers' success count ``s`` out of ``k`` (with ``verifier="majority"``,
    agreement with the majority answer): ``learnability`` = ``1 - s/k`` if ``0 < s < k`` else 0
    (Absolute Zero, paper form); ``band`` = 1 if ``low <= s/k <= high`` else 0 (SeRL).
    Reward range: ``[min(0, invalid_penalty), 1 + format_bonus]`` (``[0, 1 + format_bonus]``
    for a dataset).

Invalid action
    A proposal that is not a well-formed, in-domain problem (garbage, ``9**9**9**9``, deep
    parentheses, a megabyte of digits: all rejected by a bounded parse in microseconds) gives
    the proposer ``invalid_penalty`` and ends the game at once; solvers get 0 and are removed
    without acting. ``infos["proposer"]["invalid"]`` is True and ``["reason"]`` says why.
    With ``novelty`` set, a well-formed problem too close to an earlier one is invalid the same
    way; its reason names the earlier problem and the similarity.
    Solvers have no invalid action: any text is an answer, right or wrong.

Self-instruction (SeRL; every option off by default, and then the game is exactly as without it)
    Few-shot seeds. ``seeds`` names a file of example problems (``.jsonl``: one
    ``{"question": "12+7"}`` object a line, other keys ignored; any other file: one problem a line,
    ``#`` lines are comments), either a path or the name of a file shipped in ``cogym/envs/data``
    (``"serl_seeds.jsonl"``: 24 problems, none from the held-out set). Each must be a problem of
    this game's domain; they are kept in canonical form, duplicates dropped. With ``few_shot = n >
    0`` every ``reset`` draws ``n`` distinct seeds with the game's RNG (``self.np_random``: the same
    seed gives the same examples) and the proposer reads ``"Example problems: 12+7, 6*8\\n"`` (one:
    ``"Example problem: 12+7\\n"``) before the request. With ``few_shot = 0`` nothing is drawn, so
    the game's RNG stream and the proposer's text are those of a game without seeds.

    Novelty filter (``cogym.envs.novelty``). With ``novelty = t`` a well-formed proposal is compared,
    in canonical form, with a pool of accepted problems: hashed character n-gram vectors (those of
    ``cogym.envs.search.NgramEmbedder``) searched with faiss; if its nearest entry has cosine
    similarity ``>= t`` it is rejected (an invalid action, above), otherwise it is posed and joins
    the pool. For scale: the same problem scores 1.0, one digit changed about 0.5. The seed problems,
    when given, are permanent pool entries, so copying an example is never new. The pool is shared
    by every game of the *process* with the same ``(novelty_pool, novelty, novelty_size)``; it holds
    at most ``novelty_size`` accepted problems (when full, the oldest tenth is forgotten). Its scope
    is one process: each Ray rollout worker and each ``--nproc`` rank dedups its own games, and a
    resumed run starts from the seeds alone; given the order games are stepped in, every verdict is
    deterministic. Games reset with the same seed (a GRPO group) are not judged against each other,
    and an episode replayed with the same seed and proposal gets the verdict of its first play, so
    ``check_game``'s replays hold (details in ``cogym.envs.novelty``).

Infos at the end, every seat: ``"role"``, ``"problem"`` (the problem text, None if the proposal
was invalid), ``"success_rate"`` (``s/k``, None if invalid), ``"invalid"``; solvers also
``"correct"`` and ``"reference"``; all seats get ``"reason"`` when the proposal was invalid.
With ``novelty`` set the proposer also gets ``"metrics"``: ``novelty_rejected`` (True when the
filter rejected the proposal; None when it did not parse) and ``novelty_similarity`` (the cosine
similarity to its nearest pool entry; None when there was none or it did not parse), logged per
iteration as ``proposer/novelty_rejected`` and ``proposer/novelty_similarity``.
With ``verifier="majority"`` each solver also gets ``"metrics"``, the label-free guard, scored against
the hidden true answer and never rewarded: ``majority_correct`` (the group's majority answer is the
true one; the same for every solver of a game) and ``true_correct`` (this solver's answer is), both
None when the true answer is unknown; logged as ``solver/majority_correct`` and
``solver/true_correct``; with ``majority_min`` > 0 also ``label_kept`` (the group's majority passed the
threshold; logged as ``solver/label_kept``; None when the proposal was invalid). A run collapsing into a wrong consensus shows it there while the agreement
reward rises.
Before the end only ``"role"``.
    ``reference``  the correct answer exactly as a perfect solver writes it: the same string the
                   ``oracle`` twin emits (``"82"`` for ``37+45``); a dataset answer that is one
                   integer in canonical form (``" 007 "`` -> ``"7"``), any other answer stripped
                   of surrounding whitespace. None when no answer is known (an invalid proposal,
                   a blank dataset answer). With ``verifier="majority"`` it is reported all the
                   same, though the game scores against the majority, not against it. It is the
                   real response of learners that imitate, e.g. SPIN.

Arguments (all validated at construction; a bad dataset raises ``DatasetError`` there)
    num_solvers=8       number of solver seats k, >= 1.
    source="proposer"   "proposer" (a seat writes problems), "dataset" (drawn from a file) or "reasoning_gym".
    dataset=None        JSONL path of {"question": str, "answer": str}, or the name of a file shipped in
                        cogym/envs/data (``arithmetic_train.jsonl``: 1000 uniform problems of the default
                        domain, none in the held-out set); required for "dataset".
    verifier="exact"    "exact" | "math_verify" | "majority" (label-free; ignores the answer).
    majority_min=0.0    verifier="majority" only, in [0, 1]: SeRL's majority threshold. A group whose
                        majority answer holds fewer than this share of the k votes has no trusted label:
                        no answer in it earns the agreement reward (format_bonus is still paid). The
                        proposer's reward and ``success_rate`` read the vote before the threshold.
                        0 keeps every group.
    proposer_reward="learnability"  "learnability" | "band".
    band=(0.2, 0.8)     inclusive success-rate band for proposer_reward="band", 0<=low<=high<=1.
    format_bonus=0.0    >= 0, added to a solver's reward when it replies with one integer.
    invalid_penalty=-1.0  <= 0, the proposer's reward for an invalid proposal.
    max_operand=99      largest operand a proposal may use (1..999999).
    ops="+-*"           operators a proposal may use.
    seeds=None          seed file of example problems (path, or the name of a shipped file); source="proposer" only.
    few_shot=0          examples shown to the proposer each episode, 0..16 (needs seeds with at least that many problems).
    novelty=None        None (no filter) or a cosine-similarity threshold in (0, 1]; source="proposer" only.
    novelty_pool=None   name of the shared pool ("default" when None); only with novelty.
    novelty_size=None   most accepted problems the pool holds (1024 when None), 1..10**6; only with novelty.
    tasks=None          source="reasoning_gym" only (required): reasoning-gym dataset names.
    levels=None         source="reasoning_gym" only: curriculum levels offered for every task ([0] when None).
    task_choice="proposer"  source="reasoning_gym" only: "proposer" (a seat picks) or "random" (no proposer).
    render_mode=None    None or "ansi" (``render()`` returns a text summary).

Version history
    v0: first version. The self-instruction options (``seeds``, ``few_shot``, ``novelty*``) came
    later with defaults that leave the game unchanged, so the version stays.
"""

from __future__ import annotations

import os
import string
from fractions import Fraction
from typing import Any, Callable, Hashable, Sequence

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.envs.arithmetic import (answer_of, ANY_PROBLEM, Domain, HELDOUT_EVALUATORS, is_strict_answer,
                                   MAX_PROBLEM_CHARS, PROPOSER_REQUEST)
from cogym.envs.base import CogymEnv, finite_arg, GameSpec, int_arg, penalty_arg, seat_names, text_space
from cogym.envs.datasets import check_source, load_problems
from cogym.envs.novelty import NoveltyFilter, shared_pool
from cogym.envs.reasoning_gym import known_answer, MAX_QUESTION_CHARS, QUESTION_CHARS, random_choice, rg_source, SEED_RANGE
from cogym.envs.seeds import load_seeds, shipped_or_path
from cogym.envs.verifiers import MajorityVote, make_verifier, Verifier, VERIFIER_NAMES

GAME_ID = "proposer_solver-v0"
PHASE_PROPOSE, PHASE_SOLVE, PHASE_OVER = 1, 2, 3
MAX_MESSAGE_CHARS = 2048  # bound of the action space (random sampling); replies are read bounded anyway
SOURCES = ("proposer", "dataset", "reasoning_gym")
PROPOSER_REWARDS = ("learnability", "band")
_EDGE_DENOMINATOR = 10**6  # far above any group size, so only float noise is rounded away
MAX_FEW_SHOT = 16  # examples a proposer prompt may show
MAX_NOVELTY_POOL = 1_000_000
DEFAULT_NOVELTY_POOL, DEFAULT_NOVELTY_SIZE = "default", 1024


# ------------------------------------------------------------------------------ pure rules
def _check_counts(successes: int, n: int) -> None:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n={n}], got {successes}")


def learnability_reward(successes: int, n: int) -> float:
    """Absolute Zero proposer reward (paper form, V11): ``1 - s/n`` if ``0 < s < n`` else 0."""
    _check_counts(successes, n)
    # Compare integer counts, not the float rate, so 0 and n are recognised exactly.
    if 0 < successes < n:
        return 1.0 - successes / n
    return 0.0


def band_reward(successes: int, n: int, low: float, high: float) -> float:
    """SeRL difficulty band: 1.0 if ``low <= s/n <= high`` (inclusive) else 0.0.

    Exact integer comparison: each edge becomes the nearest fraction with denominator at most
    10**6 (``0.7`` -> 7/10, ``2/3`` -> 2/3, ``0.1 + 0.2`` -> 3/10), then ``lo_num * n <= s *
    lo_den``. A rate exactly on an edge is inside, which float products such as
    ``0.7 * 10 = 7.000000000000001`` would get wrong.
    """
    _check_counts(successes, n)
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"the band must satisfy 0 <= low <= high <= 1, got ({low}, {high})")
    lo = Fraction(float(low)).limit_denominator(_EDGE_DENOMINATOR)
    hi = Fraction(float(high)).limit_denominator(_EDGE_DENOMINATOR)
    inside = lo.numerator * n <= successes * lo.denominator and successes * hi.denominator <= hi.numerator * n
    return 1.0 if inside else 0.0


def solver_reward(correct: bool, reply: str, format_bonus: float) -> float:
    return (1.0 if correct else 0.0) + (format_bonus if is_strict_answer(reply) else 0.0)


def reference_text(answer: str | int | None) -> str | None:
    """The correct answer as a perfect player writes it (infos ``"reference"``), None if unknown.

    An integer (or a string that is one integer) becomes its canonical decimal form, the string
    the ``oracle`` twins emit; any other answer (``math_verify`` datasets) is stripped.
    """
    if answer is None:
        return None
    if isinstance(answer, int):
        return str(answer)
    if is_strict_answer(answer):
        return str(int(answer))
    return answer.strip() or None


def invalid_reason(proposal: str, domain: Domain) -> str:
    """Why ``proposal`` is not a problem of ``domain`` (called only when ``domain.parse`` failed)."""
    if len(proposal) > MAX_PROBLEM_CHARS:
        return f"proposal has {len(proposal)} characters; a problem has at most {MAX_PROBLEM_CHARS}"
    if ANY_PROBLEM.parse(proposal) is not None:
        return f"proposal {proposal!r} is outside the domain: operands 0..{domain.max_operand}, operators {domain.ops!r}"
    return f"proposal {proposal!r} is not a problem of the form '<a><op><b>' such as '37+45'"


def few_shot_text(examples: Sequence[str]) -> str:
    """The proposer's request with ``examples`` shown first (``PROPOSER_REQUEST`` alone when none)."""
    if not examples:
        return PROPOSER_REQUEST
    label = "Example problem" if len(examples) == 1 else "Example problems"
    return f"{label}: {', '.join(examples)}\n{PROPOSER_REQUEST}"


# ------------------------------------------------------------------------------ scripted twins
_GARBAGE_CHARS = string.ascii_letters + string.digits + string.punctuation + " "


def _random_proposal(observation: str, rng: np.random.Generator) -> str:
    # A reasoning-gym menu: a uniform entry. Else the default domain: with a narrower max_operand/ops some
    # proposals are invalid on purpose.
    return random_choice(observation, rng) or Domain().sample(rng).text


def _garbage_proposal(observation: str, rng: np.random.Generator) -> str:
    body = "".join(rng.choice(list(_GARBAGE_CHARS), size=int(rng.integers(0, 64))))
    return "x" + body  # a letter makes it never a well-formed problem


def _oracle_answer(observation: str, rng: np.random.Generator) -> str:
    if (known := known_answer(observation)) is not None:  # a reasoning-gym item this process posed
        return known
    answer = answer_of(observation)
    return str(answer) if answer is not None else "0"


def _wrong_answer(observation: str, rng: np.random.Generator) -> str:
    return "no answer" if known_answer(observation) is not None else str(int(_oracle_answer(observation, rng)) + 1)


def _random_answer(observation: str, rng: np.random.Generator) -> str:
    return str(int(rng.integers(-10_000, 10_001)))


SCRIPTED: dict[str, dict[str, Callable[[str, np.random.Generator], str]]] = {
    "proposer": {"random": _random_proposal, "garbage": _garbage_proposal},
    "solver": {"oracle": _oracle_answer, "always_wrong": _wrong_answer, "random": _random_answer},
}


# ------------------------------------------------------------------------------ the game
class ProposerSolverEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata = {"name": "proposer_solver_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(
        self,
        num_solvers: int = 8,
        source: str = "proposer",
        dataset: str | os.PathLike[str] | None = None,
        verifier: str = "exact",
        majority_min: float = 0.0,
        proposer_reward: str = "learnability",
        band: Sequence[float] = (0.2, 0.8),
        format_bonus: float = 0.0,
        invalid_penalty: float = -1.0,
        max_operand: int = 99,
        ops: str = "+-*",
        seeds: str | os.PathLike[str] | None = None,
        few_shot: int = 0,
        novelty: float | None = None,
        novelty_pool: str | None = None,
        novelty_size: int | None = None,
        tasks: Sequence[str] | None = None,
        levels: Sequence[int] | None = None,
        task_choice: str = "proposer",
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        num_solvers = int_arg("num_solvers", num_solvers, 1)
        check_source(source, dataset, SOURCES)
        if verifier not in VERIFIER_NAMES:
            raise ValueError(f"verifier must be one of {VERIFIER_NAMES}, got {verifier!r}")
        if proposer_reward not in PROPOSER_REWARDS:
            raise ValueError(f"proposer_reward must be one of {PROPOSER_REWARDS}, got {proposer_reward!r}")
        if isinstance(band, (str, bytes)) or not isinstance(band, Sequence) or len(band) != 2:
            raise ValueError(f"band must be a pair (low, high), got {band!r}")
        low, high = finite_arg("band low", band[0]), finite_arg("band high", band[1])
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"band must satisfy 0 <= low <= high <= 1, got {tuple(band)}")
        self.format_bonus = finite_arg("format_bonus", format_bonus)
        if self.format_bonus < 0:
            raise ValueError(f"format_bonus must be >= 0 (it is a bonus), got {format_bonus}")
        self.invalid_penalty = penalty_arg("invalid_penalty", invalid_penalty)
        self.domain = Domain(max_operand=max_operand, ops=ops)  # validates max_operand and ops
        self.num_solvers, self.source, self.verifier_name = num_solvers, source, verifier
        self.proposer_reward, self.band = proposer_reward, (low, high)
        if dataset is not None:  # a path, or the name of a file shipped in cogym/envs/data (arithmetic_train.jsonl)
            dataset = shipped_or_path(dataset) or dataset
        self._records = load_problems(dataset, integer_answers_for="verifier='exact'" if verifier == "exact" else None) if dataset is not None else []
        majority_min = finite_arg("majority_min", majority_min)
        if not 0.0 <= majority_min <= 1.0:
            raise ValueError(f"majority_min must be in [0, 1], got {majority_min}")
        if majority_min != 0.0 and verifier != "majority":
            raise ValueError(f"majority_min applies to verifier='majority' only, got verifier={verifier!r}")
        # after the file: a bad file fails before a worker starts
        self.verifier = make_verifier(verifier, min_share=majority_min) if verifier == "majority" else make_verifier(verifier)
        # Label-free: the truth is never rewarded, only reported (the guard metrics in infos "metrics").
        self._truth = make_verifier("exact") if verifier == "majority" else None
        self._init_self_instruction(source, seeds, few_shot, novelty, novelty_pool, novelty_size)
        self._rg = rg_source(source, tasks, levels, task_choice, verifier, self.format_bonus)  # None for other sources
        self._item = None  # the posed reasoning-gym item

        self.solvers = list(seat_names("solver", num_solvers))
        has_proposer = source == "proposer" or (self._rg is not None and self._rg.has_proposer)
        self.possible_agents = (["proposer"] if has_proposer else []) + self.solvers
        self._seat_roles = {a: ("proposer" if a == "proposer" else "solver") for a in self.possible_agents}
        self._seat_index = {a: i for i, a in enumerate(self.possible_agents)}
        if self._rg is not None:  # the menu is far shorter than a question
            max_text, extra_chars = MAX_QUESTION_CHARS, QUESTION_CHARS
        elif has_proposer:
            max_text, extra_chars = max(len(PROPOSER_REQUEST), MAX_PROBLEM_CHARS), frozenset()
            if self.few_shot:  # the longest prompt the draws can make
                longest = sorted(self._seeds, key=len)[-self.few_shot:]
                max_text = max(max_text, len(few_shot_text(longest)))
        else:
            max_text = max(len(r.question) for r in self._records)
            extra_chars = frozenset("".join(r.question for r in self._records))
        n_seats = len(self.possible_agents)
        # One space object per seat: api_test wants a stable object per seat, and seeding one
        # seat's space must not shift another's samples.
        self.observation_spaces = {
            a: Dict({
                "observation": Box(low=np.array([PHASE_PROPOSE, 0]), high=np.array([PHASE_OVER, n_seats]), dtype=np.int64),
                "text": text_space(max_text, extra_chars),
            })
            for a in self.possible_agents
        }
        self.action_spaces = {a: text_space(MAX_MESSAGE_CHARS) for a in self.possible_agents}
        lowest = min(0.0, self.invalid_penalty) if has_proposer else 0.0
        solver_outcomes = ("correct", "invalid", "reference") + (("metrics",) if self._truth is not None else ())
        solver_outcomes += ("task", "metrics") if self._rg is not None else ()
        self.spec = GameSpec(
            id=GAME_ID,
            roles=("proposer", "solver") if has_proposer else ("solver",),
            reward_range=(lowest, 1.0 + self.format_bonus),
            zero_sum=False,
            max_turns=n_seats,
            description="A proposer writes an arithmetic problem; k solvers answer it independently." if self._rg is None else
                        "reasoning-gym items (a proposer picks the task and level); k solvers answer, paid their score.",
            outcomes={"proposer": ("invalid", "metrics") if self.novelty is not None or self._rg is not None else ("invalid",),
                      "solver": solver_outcomes} if has_proposer else {"solver": solver_outcomes},
            evaluators=HELDOUT_EVALUATORS if self._rg is None else {})
        self._phase = PHASE_OVER
        self._problem: str | None = None
        self._reference: str | None = None
        self._answers: dict[str, str] = {}
        self._proposer_text = PROPOSER_REQUEST if self._rg is None else self._rg.menu
        self._proposer_metrics: dict[str, Any] | None = None
        self._episode_seed: int | None = None  # the last explicit reset seed, and resets without one since
        self._resets_since_seed = 0

    def _init_self_instruction(self, source: str, seeds: Any, few_shot: Any, novelty: Any, novelty_pool: Any,
                               novelty_size: Any) -> None:
        """Validate and keep the SeRL options: few-shot seeds and the novelty filter."""
        has_proposer = source == "proposer"
        for name, value in (("seeds", seeds), ("novelty", novelty)):
            if value is not None and not has_proposer:
                raise ValueError(f"{name}= is only used with source='proposer' (a dataset game has no proposer), got {value!r}")
        self.few_shot = int_arg("few_shot", few_shot, 0, MAX_FEW_SHOT)
        if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, (str, os.PathLike)) or not str(seeds)):
            raise ValueError(f"seeds must be the path of a seed file (or the name of a shipped one), got {seeds!r}")
        self._seeds: list[str] = load_seeds(seeds, self.domain) if seeds is not None else []
        if self.few_shot and not self._seeds:
            raise ValueError(f"few_shot={self.few_shot} needs seeds= (a file of example problems to draw them from)")
        if self.few_shot > len(self._seeds) and self._seeds:
            raise ValueError(f"few_shot={self.few_shot} exceeds the {len(self._seeds)} distinct problems of the seed file {str(seeds)!r}")
        self.novelty: float | None = None
        if novelty is not None:
            self.novelty = finite_arg("novelty", novelty)
            if not 0.0 < self.novelty <= 1.0:
                raise ValueError(f"novelty must be a cosine similarity in (0, 1] (a proposal at least this close to an "
                                 f"earlier problem is rejected), got {novelty!r}")
        elif novelty_pool is not None or novelty_size is not None:
            raise ValueError("novelty_pool and novelty_size are only used with novelty= (the similarity threshold)")
        if novelty_pool is not None and (not isinstance(novelty_pool, str) or not novelty_pool):
            raise ValueError(f"novelty_pool must be a non-empty name, got {novelty_pool!r}")
        self.novelty_pool = novelty_pool if novelty_pool is not None else DEFAULT_NOVELTY_POOL
        self.novelty_size = int_arg("novelty_size", novelty_size if novelty_size is not None else DEFAULT_NOVELTY_SIZE, 1, MAX_NOVELTY_POOL)

    def novelty_filter(self) -> NoveltyFilter | None:
        """This game's novelty filter (the process's shared pool for its settings, holding its seed
        problems), or None without ``novelty``. Looked up on use: a game copy holds only the settings,
        so it deep-copies and pickles, and an unpickled copy finds its new process's pool."""
        if self.novelty is None:
            return None
        pool = shared_pool(self.novelty_pool, self.novelty, self.novelty_size)
        pool.seed(self._seeds)
        return pool

    def _episode_key(self) -> Hashable:
        """Who this episode is for the novelty filter: (reset seed, unseeded resets since); None unseeded."""
        return None if self._episode_seed is None else (self._episode_seed, self._resets_since_seed)

    @property
    def truth(self) -> Verifier:
        """The verifier that knows the true answers: the game's own, or in label-free play
        (``verifier="majority"``) the exact one that only reports."""
        return self._truth if self._truth is not None else self.verifier

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode; ``options`` is accepted for the PettingZoo API and not used."""
        self._seed(seed)
        if seed is not None:
            self._episode_seed, self._resets_since_seed = int(seed), 0
        else:
            self._resets_since_seed += 1
        self._answers = {}
        self._proposer_metrics = None
        if self.few_shot:  # only then: a default game draws nothing here, as before these options existed
            picks = self.np_random.choice(len(self._seeds), size=self.few_shot, replace=False)
            self._proposer_text = few_shot_text([self._seeds[int(i)] for i in picks])
        if self.source == "dataset":
            record = self._records[int(self.np_random.integers(len(self._records)))]
            self._problem, self._reference, self._phase = record.question, record.answer, PHASE_SOLVE
        elif self._rg is not None and not self._rg.has_proposer:
            self._item = self._rg.draw(self.np_random)
            self._problem, self._reference, self._phase = self._item.question, self._item.answer, PHASE_SOLVE
        else:
            self._problem, self._reference, self._phase = None, None, PHASE_PROPOSE
        self._start_episode({a: {"role": self._seat_roles[a]} for a in self.possible_agents})

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        if agent == "proposer":
            text = self._proposer_text
        else:
            text = self._problem if self._problem is not None else ""
        return {"observation": np.array([self._phase, self._seat_index[agent]], dtype=np.int64), "text": text}

    def ready_agents(self) -> list[str]:
        if self._phase == PHASE_SOLVE:
            return self._yet_to_answer(self.solvers, self._answers)
        return super().ready_agents()

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        if agent == "proposer":
            self._propose(action)
            return
        self._answers[agent] = action
        waiting = self.ready_agents()
        if waiting:
            self.agent_selection = waiting[0]
            self._accumulate_rewards()
        else:
            self._score()

    # ------------------------------------------------------------------ rules
    def _propose(self, proposal: str) -> None:
        if self._rg is not None:
            return self._choose(proposal)
        problem = self.domain.parse(proposal)
        novelty = self.novelty_filter() if problem is not None else None
        if problem is None:
            if self.novelty is not None:
                self._proposer_metrics = {"novelty_rejected": None, "novelty_similarity": None}  # nothing to judge
            self._end_invalid(invalid_reason(proposal, self.domain))
            return
        if novelty is not None:
            verdict = novelty.judge(problem.text, self._episode_key())
            self._proposer_metrics = {"novelty_rejected": not verdict.novel, "novelty_similarity": verdict.similarity}
            if not verdict.novel:
                earlier = "seed problem" if verdict.seed else "earlier problem"
                self._end_invalid(f"proposal {problem.text!r} is a near-duplicate of the {earlier} {verdict.neighbour!r} "
                                  f"(cosine similarity {verdict.similarity:.3f} >= novelty {self.novelty:g}); propose a new problem")
                return
        self._problem, self._reference, self._phase = problem.text, str(problem.answer), PHASE_SOLVE
        self.agent_selection = self.solvers[0]
        self._accumulate_rewards()

    def _choose(self, reply: str) -> None:
        """source="reasoning_gym": the proposer's menu choice poses an item (its seed from the game's RNG)."""
        index, reason = self._rg.parse(reply)
        self._proposer_metrics = {"level": None if index is None else self._rg.entries[index][1]}
        if index is None:
            return self._end_invalid(reason)
        self._item, reason = self._rg.pose(index, int(self.np_random.integers(SEED_RANGE)))
        if self._item is None:  # the item cannot be posed: nobody's fault, every reward 0
            return self._end_invalid(reason, void=True)
        self._problem, self._reference, self._phase = self._item.question, self._item.answer, PHASE_SOLVE
        self.agent_selection = self.solvers[0]
        self._accumulate_rewards()

    def _end_invalid(self, reason: str, void: bool = False) -> None:
        self._phase = PHASE_OVER
        why = f"game over: no item could be posed ({reason})" if void else f"game over: the proposer's move was invalid ({reason})"
        for a in self.agents:
            self.infos[a] = {"role": self._seat_roles[a], "problem": None, "success_rate": None,
                             "invalid": a == "proposer" and not void, "reason": reason if a == "proposer" else why}
            if a != "proposer":
                self.infos[a]["correct"] = None
                self.infos[a]["reference"] = None
                if self._rg is not None:
                    self.infos[a].update(task=None, metrics={"scorer_failed": None})
                if self._truth is not None:
                    self.infos[a]["metrics"] = {"majority_correct": None, "true_correct": None}
                    if isinstance(self.verifier, MajorityVote) and self.verifier.min_share > 0:
                        self.infos[a]["metrics"]["label_kept"] = None
        if self._proposer_metrics is not None:
            self.infos["proposer"]["metrics"] = dict(self._proposer_metrics)
        self._end_game({"proposer": 0.0 if void else self.invalid_penalty})

    def _score(self) -> None:
        assert self._problem is not None
        replies = [self._answers[s] for s in self.solvers]
        if self._rg is not None:  # the dataset's own scores, in [0, 1]; correct is a full score
            scored = self._rg.scores(self._item, replies)
            correct = votes = [s >= 1.0 for s, _ in scored]
        elif isinstance(self.verifier, MajorityVote):
            # Label-free: the proposer is paid by, and success_rate reports, the agreement with the majority
            # before majority_min, which withholds the solvers' label, not the problem's difficulty.
            votes = self.verifier.votes(replies)
            correct = self.verifier.threshold(votes)
        else:
            correct = votes = self.verifier.judge(self._problem, self._reference, replies)
        successes, k = sum(votes), self.num_solvers
        rewards = {s: solver_reward(c, r, self.format_bonus) for s, c, r in zip(self.solvers, correct, replies)}
        if self._rg is not None:
            rewards = {s: score for s, (score, _) in zip(self.solvers, scored)}
        if "proposer" in self.possible_agents:
            if self.proposer_reward == "learnability":
                rewards["proposer"] = learnability_reward(successes, k)
            else:
                rewards["proposer"] = band_reward(successes, k, *self.band)
        self._phase = PHASE_OVER
        for a in self.agents:
            self.infos[a] = {"role": self._seat_roles[a], "problem": self._problem, "success_rate": successes / k, "invalid": False}
        reference = reference_text(self._reference) if self._rg is None else self._reference
        for s, c in zip(self.solvers, correct):
            self.infos[s]["correct"] = bool(c)
            self.infos[s]["reference"] = reference
        for s, (_, error) in zip(self.solvers, scored if self._rg is not None else ()):
            self.infos[s].update(task=self._item.task, metrics={"scorer_failed": error is not None})
        if self._truth is not None:
            self._guard_metrics(replies, votes)
        if self._proposer_metrics is not None:
            self.infos["proposer"]["metrics"] = dict(self._proposer_metrics)
        self._end_game(rewards)

    def _guard_metrics(self, replies: list[str], votes: list[bool]) -> None:
        """Label-free play (``verifier="majority"``): what the hidden truth says, logged and never rewarded.
        ``majority_correct``: the group's majority answer (``votes``, before ``majority_min``) is the true
        one (a collapse into a wrong consensus shows here while the agreement reward rises);
        ``true_correct``: this solver's answer is. Both None when the true answer is unknown (a blank
        dataset answer). With ``majority_min`` > 0 also ``label_kept``: the group passed the threshold."""
        assert self._truth is not None and self._problem is not None
        assert isinstance(self.verifier, MajorityVote)
        if reference_text(self._reference) is None:
            truth = [None] * len(replies)
            majority = None
        else:
            truth = self._truth.judge(self._problem, self._reference, replies)
            majority = any(a and t for a, t in zip(votes, truth))
        for s, t in zip(self.solvers, truth):
            self.infos[s]["metrics"] = {"majority_correct": majority, "true_correct": None if t is None else bool(t)}
            if self.verifier.min_share > 0:
                self.infos[s]["metrics"]["label_kept"] = self.verifier.kept(votes)

    def _render_text(self) -> str:
        phase = {PHASE_PROPOSE: "proposing", PHASE_SOLVE: "solving", PHASE_OVER: "over"}[self._phase]
        answers = ", ".join(f"{s}={self._answers[s][:20]!r}" for s in self.solvers if s in self._answers)
        return f"[{GAME_ID}] phase={phase} problem={self._problem!r} answers: {answers or '-'}"
