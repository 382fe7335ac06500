"""``generator_verifier-v0``: a generator answers a problem, a verifier says whether it is right.

The generator/verifier co-training of PRIME, GenRM and Cooper on the arithmetic domain of
``cogym.envs.arithmetic`` (or, with ``source="dataset"``, a problem file). The ground truth comes
from a verifier object of ``cogym.envs.verifiers``; the verifier seat is rewarded for agreeing
with it, and the generator for the ground truth, for the verifier seat's verdict, or a mix. With
``generator_reward="verifier"`` the generator can hack its reward by pleasing a lenient verifier;
the ``accepted_wrong`` metric measures exactly that.

Roles and seats
    ``"generator"`` (role ``generator``) and ``"verifier"`` (role ``verifier``).

Turn order
    1. ``reset`` draws a problem with the game's RNG (``self.np_random``): from the domain
       (operands ``0..max_operand``, products of times tables, operators ``ops``) or the file.
    2. The generator answers (one message).
    3. The verifier gives its verdict (one message); the game ends. Max turns: 2.

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[phase, seat]``; phase 1 = the generator answers, 2 = the verifier
    judges, 3 = game over; seat = index in ``possible_agents`` (generator 0, verifier 1).
    ``"text"``: the generator sees the problem (canonical ``"37+45"``, or the dataset question
    exactly); the verifier sees ``"<problem>=<answer>"`` (``"37+45=82"``), the answer cut to its
    first 64 characters (what ``exact`` reads) with characters outside printable ASCII shown as
    ``?``. Before its turn the verifier sees ``""``.

Action (``gymnasium.spaces.Text``, one whole message)
    Generator: free text, judged by the ground-truth verifier (``exact``: the last integer in the
    first 64 characters). Verifier: a verdict, case-insensitive, surrounding whitespace and a
    trailing ``.``/``!`` ignored: accept = ``yes``/``correct``/``true``/``1``, reject =
    ``no``/``wrong``/``incorrect``/``false``/``0``. Without ``critique`` the message must be the
    verdict itself (at most 32 characters). With ``critique=True`` (GenRM) it may be a critique
    and the verdict is its last word, read from the last 64 characters (``"... Verdict: no."``).
    Any ``str`` is accepted (the space's charset only bounds random sampling); a non-``str``
    raises ``TypeError``.

Rewards (given when the game ends; 0 on the generator's turn) -- not zero-sum
    Let ``c`` = 1 if the answer is right (ground truth) else 0 and ``a`` = 1 if the verifier
    accepted it else 0 (an invalid verdict accepts nothing).
    Verifier: 1 if its verdict agrees with the ground truth (``a == c``) else 0. With
    ``verifier_balance=p`` an agreeing verdict is weighted by its class: accepting a right answer
    pays ``min(1, (1-p)/p)``, rejecting a wrong one ``min(1, p/(1-p))``, so that when a share ``p``
    of the answers is right, "always accept" and "always reject" earn the same and only a verdict
    that checks the answer earns more.
    Generator: ``ground_truth``: ``c``; ``verifier``: ``a``; ``mix``: ``w*a + (1-w)*c`` with
    ``w = mix_weight``.
    Reward range: ``[min(0, invalid_penalty), 1]``.

Invalid action
    A verifier message that holds no verdict (garbage, a megabyte of digits, ``9**9**9**9``: all
    read in bounded time) gives the verifier ``invalid_penalty`` and counts as no acceptance for
    the generator (``a = 0``). The game ends as usual (it is the last move);
    ``infos["verifier"]["invalid"]`` is True and ``["reason"]`` says why. The generator has no
    invalid action: any text is an answer, right or wrong.

Infos at the end, every seat: ``"role"``, ``"problem"``, ``"invalid"`` (True only for a verifier
whose verdict was unreadable), ``"accepted"`` (True/False, None if invalid), ``"correct"`` (generator: its answer
is right; verifier: its verdict agrees with the ground truth, False if invalid), ``"metrics"``:
    ``answer_correct``  1.0/0.0: the generator's answer is right.
    ``accepted``        1.0/0.0: the verifier accepted; None if its verdict was invalid.
    ``accepted_wrong``  1.0 if the answer is wrong and accepted, 0.0 if wrong and rejected, None
                        if right or the verdict was invalid: its mean is the rate at which the
                        verifier lets wrong answers through (reward hacking's opening).
    ``rejected_right``  the same for right answers that were rejected (None if wrong or invalid).
    ``verifier_agrees`` 1.0/0.0: the verdict agrees with the ground truth (0.0 if invalid).
    ``verdict_invalid`` 1.0/0.0.
The generator also carries ``"reference"``: the correct answer exactly as a perfect generator
writes it, the same string its ``oracle`` twin emits (``"82"`` for ``37+45``); for a dataset, an
answer that is one integer in canonical form (``" 007 "`` -> ``"7"``), any other answer stripped
of surrounding whitespace (None if blank). It is the real response of learners that imitate,
e.g. SPIN. When the verdict is invalid both seats carry ``"reason"`` (the verifier's says what is
wrong with it). Before the end only ``"role"``.

Arguments (all validated at construction; a bad dataset raises ``DatasetError`` there)
    source="domain"     "domain" (problems sampled from the arithmetic domain) or "dataset".
    dataset=None        JSONL path of {"question": str, "answer": str}; required for "dataset".
    verifier="exact"    the ground truth: "exact" | "math_verify".
    generator_reward="ground_truth"  "ground_truth" | "verifier" | "mix".
    mix_weight=None     weight w of the verifier's verdict in "mix", in [0, 1]; None means 0.5;
                        only with generator_reward="mix".
    critique=False      True: the verifier may write a critique ending with its verdict.
    invalid_penalty=-1.0  <= 0, the verifier's reward for a message without a verdict.
    verifier_balance=None  None, or the expected share of right answers in (0, 1): class-weighted
                        verifier rewards (above).
    max_operand=99      largest operand of a sampled problem (1..999999; source="domain").
    ops="+-*"           operators of sampled problems (source="domain").
    render_mode=None    None or "ansi" (``render()`` returns a text summary).

Scripted twins
    generator: ``oracle`` (computes the answer from the problem text, ``0`` if unreadable),
    ``always_wrong`` (oracle + 1), ``random`` (an integer in -10000..10000).
    verifier: ``oracle`` (recomputes the answer from its observation; a problem that is not
    ``<a><op><b>`` is rejected), ``always_yes`` (a hackable verifier), ``always_no``, ``random``,
    ``units_digit`` (weak but checkable: accepts an answer whose last digit and sign are the true
    answer's, so a wrong answer with the right last digit passes).

Version history
    v0: first version.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.envs.arithmetic import MAX_PROBLEM_CHARS, Domain
from cogym.envs.base import CogymEnv, GameSpec, penalty_arg, text_space
from cogym.envs.datasets import check_source, load_problems
from cogym.envs.proposer_solver import MAX_MESSAGE_CHARS
from cogym.envs.proposer_solver import SCRIPTED as _PROPOSER_SOLVER_SCRIPTED
from cogym.envs.proposer_solver import reference_text
from cogym.envs.verdicts import SHOWN_ANSWER_CHARS, oracle_accepts, parse_verdict, show_answer, units_digit_accepts
from cogym.envs.verifiers import make_verifier

GAME_ID = "generator_verifier-v0"
PHASE_GENERATE, PHASE_VERIFY, PHASE_OVER = 1, 2, 3
SOURCES = ("domain", "dataset")
GROUND_TRUTHS = ("exact", "math_verify")  # a single answer has no majority to vote with
GENERATOR_REWARDS = ("ground_truth", "verifier", "mix")
DEFAULT_MIX_WEIGHT = 0.5


# ------------------------------------------------------------------------------ pure rules
def generator_reward(mode: str, correct: bool, accepted: bool | None, mix_weight: float = DEFAULT_MIX_WEIGHT) -> float:
    """The generator's reward; an invalid verdict (``accepted=None``) accepts nothing."""
    c, a = float(correct), float(bool(accepted))
    if mode == "ground_truth":
        return c
    if mode == "verifier":
        return a
    if mode == "mix":
        return mix_weight * a + (1.0 - mix_weight) * c
    raise ValueError(f"generator_reward must be one of {GENERATOR_REWARDS}, got {mode!r}")


def verifier_reward(correct: bool, accepted: bool | None, invalid_penalty: float,
                    balance: float | None = None) -> float:
    """1 if the verdict agrees with the ground truth, 0 if not, ``invalid_penalty`` without one.
    ``balance`` (the expected share ``p`` of right answers): an agreeing verdict is weighted by its
    class, accepting a right answer paying ``min(1, (1-p)/p)`` and rejecting a wrong one
    ``min(1, p/(1-p))``, so that always accepting and always rejecting earn the same (``min(p, 1-p)``
    an episode) and only a verdict that depends on the answer earns more."""
    if accepted is None:
        return invalid_penalty
    if accepted != correct:
        return 0.0
    if balance is None:
        return 1.0
    return min(1.0, (1.0 - balance) / balance) if correct else min(1.0, balance / (1.0 - balance))


def episode_metrics(correct: bool, accepted: bool | None) -> dict[str, float | None]:
    """The per-episode metrics of the module docstring (None: not defined for this episode)."""
    valid = accepted is not None
    return {
        "answer_correct": float(correct),
        "accepted": float(accepted) if valid else None,
        "accepted_wrong": float(accepted) if valid and not correct else None,
        "rejected_right": float(not accepted) if valid and correct else None,
        "verifier_agrees": float(valid and accepted == correct),
        "verdict_invalid": float(not valid),
    }


# ------------------------------------------------------------------------------ scripted twins
def _verifier_oracle(observation: str, rng: np.random.Generator) -> str:
    return "yes" if oracle_accepts(observation) else "no"


def _verifier_random(observation: str, rng: np.random.Generator) -> str:
    return "yes" if rng.random() < 0.5 else "no"


SCRIPTED: dict[str, dict[str, Callable[[str, np.random.Generator], str]]] = {
    # The generator answers a problem exactly like proposer_solver's solver does.
    "generator": dict(_PROPOSER_SOLVER_SCRIPTED["solver"]),
    "verifier": {
        "oracle": _verifier_oracle,
        "always_yes": lambda observation, rng: "yes",
        "always_no": lambda observation, rng: "no",
        "random": _verifier_random,
        "units_digit": lambda observation, rng: "yes" if units_digit_accepts(observation) else "no",
    },
}


# ------------------------------------------------------------------------------ the game
class GeneratorVerifierEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata = {"name": "generator_verifier_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(
        self,
        source: str = "domain",
        dataset: str | os.PathLike[str] | None = None,
        verifier: str = "exact",
        generator_reward: str = "ground_truth",
        mix_weight: float | None = None,
        critique: bool = False,
        invalid_penalty: float = -1.0,
        verifier_balance: float | None = None,
        max_operand: int = 99,
        ops: str = "+-*",
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        check_source(source, dataset, SOURCES)
        if verifier not in GROUND_TRUTHS:
            raise ValueError(f"verifier must be one of {GROUND_TRUTHS} (the ground truth of one answer), got {verifier!r}")
        if generator_reward not in GENERATOR_REWARDS:
            raise ValueError(f"generator_reward must be one of {GENERATOR_REWARDS}, got {generator_reward!r}")
        if mix_weight is not None and generator_reward != "mix":
            raise ValueError(f"mix_weight is only used with generator_reward='mix', got generator_reward={generator_reward!r}; drop mix_weight or use 'mix'")
        weight = DEFAULT_MIX_WEIGHT if mix_weight is None else mix_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0.0 <= weight <= 1.0:
            raise ValueError(f"mix_weight must be a number in [0, 1], got {mix_weight!r}")
        if critique is not True and critique is not False:
            raise ValueError(f"critique must be True or False, got {critique!r}")
        invalid_penalty = penalty_arg("invalid_penalty", invalid_penalty)
        if verifier_balance is not None and (isinstance(verifier_balance, bool) or not isinstance(verifier_balance, (int, float))
                                             or not 0.0 < verifier_balance < 1.0):
            raise ValueError(f"verifier_balance must be None or a number in (0, 1) (the expected share of right "
                             f"answers), got {verifier_balance!r}")
        self.verifier_balance = None if verifier_balance is None else float(verifier_balance)
        self.domain = Domain(max_operand=max_operand, ops=ops)  # validates max_operand and ops
        self.source, self.verifier_name, self.generator_reward = source, verifier, generator_reward
        self.mix_weight, self.critique, self.invalid_penalty = float(weight), critique, float(invalid_penalty)
        self._records = load_problems(dataset, integer_answers_for="verifier='exact'" if verifier == "exact" else None) if dataset is not None else []
        self.verifier = make_verifier(verifier)  # after the file: a bad file fails before a worker starts

        self.possible_agents = ["generator", "verifier"]
        self._seat_roles = {"generator": "generator", "verifier": "verifier"}
        if source == "domain":
            max_question, extra_chars = MAX_PROBLEM_CHARS, frozenset()
        else:
            max_question = max(len(r.question) for r in self._records)
            extra_chars = frozenset("".join(r.question for r in self._records))
        max_text = {"generator": max_question, "verifier": max_question + 1 + SHOWN_ANSWER_CHARS}
        # One space object per seat: api_test wants a stable object per seat, and seeding one
        # seat's space must not shift another's samples.
        self.observation_spaces = {
            a: Dict({
                "observation": Box(low=np.array([PHASE_GENERATE, 0]), high=np.array([PHASE_OVER, 1]), dtype=np.int64),
                "text": text_space(max_text[a], extra_chars),
            })
            for a in self.possible_agents
        }
        self.action_spaces = {a: text_space(MAX_MESSAGE_CHARS) for a in self.possible_agents}
        self.spec = GameSpec(
            id=GAME_ID,
            roles=("generator", "verifier"),
            reward_range=(min(0.0, self.invalid_penalty), 1.0),
            zero_sum=False,
            max_turns=2,
            description="A generator answers a problem; a verifier says whether the answer is right.",
            outcomes={"generator": ("correct", "invalid", "metrics", "reference"), "verifier": ("correct", "invalid", "metrics")},
        )
        self._phase = PHASE_OVER
        self._problem: str = ""
        self._reference: str | None = None
        self._answer: str | None = None
        self._verdict: str | None = None

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode; ``options`` is accepted for the PettingZoo API and not used."""
        self._seed(seed)
        if self.source == "dataset":
            record = self._records[int(self.np_random.integers(len(self._records)))]
            self._problem, self._reference = record.question, record.answer
        else:
            problem = self.domain.sample(self.np_random)
            self._problem, self._reference = problem.text, str(problem.answer)
        self._answer, self._verdict = None, None
        self._phase = PHASE_GENERATE
        self._start_episode({a: {"role": a} for a in self.possible_agents})

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        if agent == "generator":
            text = self._problem
        else:
            text = show_answer(self._problem, self._answer) if self._answer is not None else ""
        return {"observation": np.array([self._phase, self.possible_agents.index(agent)], dtype=np.int64), "text": text}

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        if agent == "generator":
            self._answer, self._phase = action, PHASE_VERIFY
            self.agent_selection = "verifier"
            self._accumulate_rewards()
            return
        self._verdict = action
        self._score(action)

    # ------------------------------------------------------------------ rules
    def _score(self, verdict: str) -> None:
        assert self._answer is not None
        correct = bool(self.verifier.judge(self._problem, self._reference, [self._answer])[0])
        accepted, reason = parse_verdict(verdict, critique=self.critique)
        rewards = {
            "generator": generator_reward(self.generator_reward, correct, accepted, self.mix_weight),
            "verifier": verifier_reward(correct, accepted, self.invalid_penalty, self.verifier_balance),
        }
        metrics = episode_metrics(correct, accepted)
        self._phase = PHASE_OVER
        for a in self.agents:
            self.infos[a] = {"role": a, "problem": self._problem, "invalid": a == "verifier" and accepted is None, "accepted": accepted,
                             "correct": correct if a == "generator" else accepted is not None and accepted == correct,
                             "metrics": dict(metrics)}
        self.infos["generator"]["reference"] = reference_text(self._reference)
        if reason is not None:
            self.infos["verifier"]["reason"] = reason
            self.infos["generator"]["reason"] = f"the verifier's verdict was invalid ({reason})"
        self._end_game(rewards)

    def _render_text(self) -> str:
        phase = {PHASE_GENERATE: "generating", PHASE_VERIFY: "verifying", PHASE_OVER: "over"}[self._phase]
        answer = None if self._answer is None else self._answer[:20]
        verdict = None if self._verdict is None else self._verdict[-20:]
        return f"[{GAME_ID}] phase={phase} problem={self._problem[:40]!r} answer={answer!r} verdict={verdict!r}"
