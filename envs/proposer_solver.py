"""``proposer_solver-v0``: a proposer writes an arithmetic problem, ``k`` solvers answer it.

The self-play curriculum of Absolute Zero (proposer rewarded for problems of learnable
difficulty) and SeRL (difficulty band, majority-vote labels), on the arithmetic domain of
``cogym.envs.arithmetic``; or, with ``source="dataset"``, plain RL on a problem file.

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
    ``"text"``: the proposer sees ``PROPOSER_REQUEST`` (``"Propose a problem."``); a solver sees
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
    Solvers have no invalid action: any text is an answer, right or wrong.

Infos at the end, every seat: ``"role"``, ``"problem"`` (the problem text, None if the proposal
was invalid), ``"success_rate"`` (``s/k``, None if invalid), ``"invalid"``; solvers also
``"correct"`` and ``"reference"``; all seats get ``"reason"`` when the proposal was invalid.
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
    source="proposer"   "proposer" (a seat writes problems) or "dataset" (drawn from a file).
    dataset=None        JSONL path of {"question": str, "answer": str}; required for "dataset".
    verifier="exact"    "exact" | "math_verify" | "majority" (label-free; ignores the answer).
    proposer_reward="learnability"  "learnability" | "band".
    band=(0.2, 0.8)     inclusive success-rate band for proposer_reward="band", 0<=low<=high<=1.
    format_bonus=0.0    >= 0, added to a solver's reward when it replies with one integer.
    invalid_penalty=-1.0  <= 0, the proposer's reward for an invalid proposal.
    max_operand=99      largest operand a proposal may use (1..999999).
    ops="+-*"           operators a proposal may use.
    render_mode=None    None or "ansi" (``render()`` returns a text summary).

Version history
    v0: first version.
"""

from __future__ import annotations

import os
import string
from fractions import Fraction
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.envs.arithmetic import ANY_PROBLEM, MAX_PROBLEM_CHARS, PROPOSER_REQUEST, Domain, answer_of, is_strict_answer
from cogym.envs.base import CogymEnv, GameSpec, finite_arg, int_arg, penalty_arg, seat_names, text_space
from cogym.envs.datasets import check_source, load_problems
from cogym.envs.verifiers import VERIFIER_NAMES, make_verifier

GAME_ID = "proposer_solver-v0"
PHASE_PROPOSE, PHASE_SOLVE, PHASE_OVER = 1, 2, 3
MAX_MESSAGE_CHARS = 2048  # bound of the action space (random sampling); replies are read bounded anyway
SOURCES = ("proposer", "dataset")
PROPOSER_REWARDS = ("learnability", "band")
_EDGE_DENOMINATOR = 10**6  # far above any group size, so only float noise is rounded away


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


# ------------------------------------------------------------------------------ scripted twins
_GARBAGE_CHARS = string.ascii_letters + string.digits + string.punctuation + " "


def _random_proposal(observation: str, rng: np.random.Generator) -> str:
    # The default domain: with a narrower max_operand/ops some proposals are invalid on purpose.
    return Domain().sample(rng).text


def _garbage_proposal(observation: str, rng: np.random.Generator) -> str:
    body = "".join(rng.choice(list(_GARBAGE_CHARS), size=int(rng.integers(0, 64))))
    return "x" + body  # a letter makes it never a well-formed problem


def _oracle_answer(observation: str, rng: np.random.Generator) -> str:
    answer = answer_of(observation)
    return str(answer) if answer is not None else "0"


def _wrong_answer(observation: str, rng: np.random.Generator) -> str:
    return str(int(_oracle_answer(observation, rng)) + 1)


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
        proposer_reward: str = "learnability",
        band: Sequence[float] = (0.2, 0.8),
        format_bonus: float = 0.0,
        invalid_penalty: float = -1.0,
        max_operand: int = 99,
        ops: str = "+-*",
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
        self._records = load_problems(dataset, integer_answers_for="verifier='exact'" if verifier == "exact" else None) if dataset is not None else []
        self.verifier = make_verifier(verifier)  # after the file: a bad file fails before a worker starts

        self.solvers = list(seat_names("solver", num_solvers))
        has_proposer = source == "proposer"
        self.possible_agents = (["proposer"] if has_proposer else []) + self.solvers
        self._seat_roles = {a: ("proposer" if a == "proposer" else "solver") for a in self.possible_agents}
        self._seat_index = {a: i for i, a in enumerate(self.possible_agents)}
        if has_proposer:
            max_text, extra_chars = max(len(PROPOSER_REQUEST), MAX_PROBLEM_CHARS), frozenset()
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
        self.spec = GameSpec(
            id=GAME_ID,
            roles=("proposer", "solver") if has_proposer else ("solver",),
            reward_range=(lowest, 1.0 + self.format_bonus),
            zero_sum=False,
            max_turns=n_seats,
            description="A proposer writes an arithmetic problem; k solvers answer it independently.",
            outcomes={"proposer": ("invalid",), "solver": ("correct", "invalid", "reference")} if has_proposer
            else {"solver": ("correct", "invalid", "reference")},
        )
        self._phase = PHASE_OVER
        self._problem: str | None = None
        self._reference: str | None = None
        self._answers: dict[str, str] = {}

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode; ``options`` is accepted for the PettingZoo API and not used."""
        self._seed(seed)
        self._answers = {}
        if self.source == "dataset":
            record = self._records[int(self.np_random.integers(len(self._records)))]
            self._problem, self._reference, self._phase = record.question, record.answer, PHASE_SOLVE
        else:
            self._problem, self._reference, self._phase = None, None, PHASE_PROPOSE
        self._start_episode({a: {"role": self._seat_roles[a]} for a in self.possible_agents})

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        if agent == "proposer":
            text = PROPOSER_REQUEST
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
        problem = self.domain.parse(proposal)
        if problem is None:
            reason = invalid_reason(proposal, self.domain)
            self._phase = PHASE_OVER
            for a in self.agents:
                self.infos[a] = {"role": self._seat_roles[a], "problem": None, "success_rate": None,
                                 "invalid": a == "proposer", "reason": reason if a == "proposer" else f"game over: the proposer's move was invalid ({reason})"}
                if a != "proposer":
                    self.infos[a]["correct"] = None
                    self.infos[a]["reference"] = None
            self._end_game({"proposer": self.invalid_penalty})
            return
        self._problem, self._reference, self._phase = problem.text, str(problem.answer), PHASE_SOLVE
        self.agent_selection = self.solvers[0]
        self._accumulate_rewards()

    def _score(self) -> None:
        assert self._problem is not None
        replies = [self._answers[s] for s in self.solvers]
        correct = self.verifier.judge(self._problem, self._reference, replies)
        successes, k = sum(correct), self.num_solvers
        rewards = {s: solver_reward(c, r, self.format_bonus) for s, c, r in zip(self.solvers, correct, replies)}
        if "proposer" in self.possible_agents:
            if self.proposer_reward == "learnability":
                rewards["proposer"] = learnability_reward(successes, k)
            else:
                rewards["proposer"] = band_reward(successes, k, *self.band)
        self._phase = PHASE_OVER
        for a in self.agents:
            self.infos[a] = {"role": self._seat_roles[a], "problem": self._problem, "success_rate": successes / k, "invalid": False}
        reference = reference_text(self._reference)
        for s, c in zip(self.solvers, correct):
            self.infos[s]["correct"] = bool(c)
            self.infos[s]["reference"] = reference
        self._end_game(rewards)

    def _render_text(self) -> str:
        phase = {PHASE_PROPOSE: "proposing", PHASE_SOLVE: "solving", PHASE_OVER: "over"}[self._phase]
        answers = ", ".join(f"{s}={self._answers[s][:20]!r}" for s in self.solvers if s in self._answers)
        return f"[{GAME_ID}] phase={phase} problem={self._problem!r} answers: {answers or '-'}"
