"""``proposer_solver_judge-v0``: a proposer writes a problem, a solver answers, a judge scores it.

Multi-Agent Evolve (MAE) on the arithmetic domain of ``cogym.envs.arithmetic``: three roles,
played by one shared policy or several (the config decides), co-evolve with no ground truth in
any reward. The judge's score is the solver's reward and the proposer's difficulty signal; the
judge itself is rewarded only for well-formed, self-consistent scores. The true answer is
computed for metrics only (``infos[...]["metrics"]``), so a run can watch the judge drift from
the truth.

Roles and seats
    ``"proposer"``, ``"solver"``, ``"judge"`` (each seat's role is its name).

Turn order
    1. The proposer writes a problem (one message).
    2. The solver answers it (one message).
    3. The judge scores the answer (one message); the game ends. Max turns: 3.

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[phase, seat]``; phase 1 = proposing, 2 = solving, 3 = judging,
    4 = game over; seat = index in ``possible_agents`` (proposer 0, solver 1, judge 2).
    ``"text"`` (short: every character is a token of the embedded char-level model):
    proposer: ``PROPOSER_REQUEST`` (``"Propose a problem."``); solver: the problem in canonical
    form (``"37+45"``); judge: ``"<problem>=<answer>"`` (``"37+45=82"``), the answer cut to its
    first 64 characters, characters outside printable ASCII shown as ``?``. A seat whose input
    does not exist yet sees ``""``.

Action (``gymnasium.spaces.Text``, one whole message)
    Proposer: ``<a><op><b>`` with operands ``0..max_operand`` and ``op`` in ``ops``, optionally
    spaced and followed by ``=`` (the parse and invalid reasons of ``proposer_solver-v0``).
    Solver: free text. Judge: a score, at most 32 characters, case-insensitive, surrounding
    whitespace and a trailing ``.``/``!`` ignored: an integer ``0``..``10`` (``7`` or ``7/10``), or
    a verdict word, ``yes``/``correct``/``true`` = 10 and ``no``/``wrong``/``incorrect``/``false`` =
    0. Digits are scores, never verdicts (``1`` is 1/10). Any ``str`` is accepted (the space's
    charset only bounds random sampling); a non-``str`` raises ``TypeError``.

Rewards (given when the game ends; 0 on earlier turns) -- not zero-sum, no ground truth
    Let ``s`` = judge score / 10 in ``[0, 1]``.
    Solver: ``s`` (0 if the judge's score is invalid).
    Proposer: ``band`` (default): 1 if ``low <= s <= high`` (inclusive, exact: the judge found the
    answer neither clearly right, a trivial problem, nor clearly wrong, an impossible one) else 0;
    ``difficulty``: ``1 - s`` (MAE's difficulty reward; it also pays for impossible problems).
    0 if the judge's score is invalid.
    Judge (format + consistency, no ground truth): 1 for a well-formed score, except 0 when it
    gives a positive score to a reply that holds no integer at all (no answer can be right, which
    the judge can see without knowing the answer); ``invalid_penalty`` for a malformed score.
    Reward range: ``[min(0, invalid_penalty), 1]``.

Invalid action
    Proposer: a proposal that is not a well-formed, in-domain problem (garbage, ``9**9**9**9``,
    deep parentheses, a megabyte of digits: all rejected by a bounded parse in microseconds)
    gives the proposer ``invalid_penalty`` and ends the game at once; solver and judge get 0 and
    are removed without acting. Judge: a message that is not a score gives the judge
    ``invalid_penalty``, the solver and proposer 0; the game ends as usual (it is the last move).
    The offending seat's ``infos[...]["invalid"]`` is True and every seat's ``["reason"]`` says
    why. The solver has no invalid action: any text is an answer.

Infos at the end, every seat: ``"role"``, ``"problem"`` (None if the proposal was invalid),
``"invalid"`` (True only for the offending seat), ``"metrics"``; the solver also ``"correct"``
(ground truth, None if it never played); the judge ``"score"`` (0..10, None if invalid or it never
played) and ``"correct"`` (its score agrees with the truth, i.e. ``s >= 0.5`` exactly when the
answer is right; False if invalid, None if it never played). Before the end only ``"role"``.
Metrics (same on every seat; None = not defined for this episode; ground truth is used here only):
    ``proposal_invalid``  1.0/0.0.
    ``solver_correct``    the solver's answer is right (exact arithmetic); None if no problem.
    ``judge_invalid``     1.0/0.0; None if the judge never played.
    ``judge_score``       ``s``; None without a valid score.
    ``judge_agrees_with_truth``  1.0 if ``(s >= 0.5) == solver_correct`` else 0.0; None without a score.
    ``judge_accepted_wrong``     1.0 if the answer is wrong and ``s >= 0.5``, 0.0 if wrong and
                          ``s < 0.5``; None if right or without a score.

Arguments (all validated at construction)
    proposer_reward="band"  "band" | "difficulty".
    band=None           inclusive (low, high) for "band", 0 <= low <= high <= 1; None means
                        (0.2, 0.8); only with proposer_reward="band".
    invalid_penalty=-1.0  <= 0, the reward of an invalid proposal or judge score.
    max_operand=99      largest operand a proposal may use (1..999999).
    ops="+-*"           operators a proposal may use.
    render_mode=None    None or "ansi" (``render()`` returns a text summary).

Scripted twins
    proposer: ``random`` (a problem of the default domain), ``garbage``; solver: ``oracle``,
    ``always_wrong``, ``random`` (those of ``proposer_solver-v0``); judge: ``oracle`` (recomputes
    the answer from its observation, ``10`` or ``0``), ``always_yes``, ``random`` (0..10).

Version history
    v0: first version.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.envs.arithmetic import HELDOUT_EVALUATORS, MAX_PROBLEM_CHARS, PROPOSER_REQUEST, Domain, extract_answer
from cogym.envs.base import CogymEnv, GameSpec, penalty_arg, text_space
from cogym.envs.proposer_solver import MAX_MESSAGE_CHARS, band_reward, invalid_reason
from cogym.envs.proposer_solver import SCRIPTED as _PROPOSER_SOLVER_SCRIPTED
from cogym.envs.verdicts import MAX_SCORE, SHOWN_ANSWER_CHARS, oracle_accepts, parse_score, show_answer
from cogym.envs.verifiers import ExactArithmetic

GAME_ID = "proposer_solver_judge-v0"
PHASE_PROPOSE, PHASE_SOLVE, PHASE_JUDGE, PHASE_OVER = 1, 2, 3, 4
PROPOSER_REWARDS = ("band", "difficulty")
DEFAULT_BAND = (0.2, 0.8)
ACCEPT_SCORE = MAX_SCORE // 2  # a score of at least 5/10 counts as accepting (metrics only)


# ------------------------------------------------------------------------------ pure rules
def proposer_reward(mode: str, score: int | None, band: tuple[float, float] = DEFAULT_BAND) -> float:
    """From the judge's score (0..10); 0 without a valid score."""
    if score is None:
        return 0.0
    if mode == "band":
        return band_reward(score, MAX_SCORE, *band)  # exact: 0.2 -> 2/10, no float edge errors
    if mode == "difficulty":
        return 1.0 - score / MAX_SCORE
    raise ValueError(f"proposer_reward must be one of {PROPOSER_REWARDS}, got {mode!r}")


def solver_reward(score: int | None) -> float:
    return 0.0 if score is None else score / MAX_SCORE


def judge_reward(score: int | None, reply: str, invalid_penalty: float) -> float:
    """Format + consistency, no ground truth: a positive score for a reply without any integer is
    inconsistent (no answer there can be right)."""
    if score is None:
        return invalid_penalty
    return 0.0 if score > 0 and extract_answer(reply) is None else 1.0


def episode_metrics(proposal_valid: bool, correct: bool | None, score: int | None) -> dict[str, float | None]:
    """The per-episode metrics of the module docstring (ground truth for logging only)."""
    if not proposal_valid:
        return {"proposal_invalid": 1.0, "solver_correct": None, "judge_invalid": None, "judge_score": None,
                "judge_agrees_with_truth": None, "judge_accepted_wrong": None}
    assert correct is not None
    accepts = None if score is None else score >= ACCEPT_SCORE
    return {
        "proposal_invalid": 0.0,
        "solver_correct": float(correct),
        "judge_invalid": float(score is None),
        "judge_score": None if score is None else score / MAX_SCORE,
        "judge_agrees_with_truth": None if accepts is None else float(accepts == correct),
        "judge_accepted_wrong": float(accepts) if accepts is not None and not correct else None,
    }


# ------------------------------------------------------------------------------ scripted twins
def _judge_oracle(observation: str, rng: np.random.Generator) -> str:
    return str(MAX_SCORE) if oracle_accepts(observation) else "0"


def _judge_random(observation: str, rng: np.random.Generator) -> str:
    return str(int(rng.integers(MAX_SCORE + 1)))


SCRIPTED: dict[str, dict[str, Callable[[str, np.random.Generator], str]]] = {
    "proposer": dict(_PROPOSER_SOLVER_SCRIPTED["proposer"]),
    "solver": dict(_PROPOSER_SOLVER_SCRIPTED["solver"]),
    "judge": {"oracle": _judge_oracle, "always_yes": lambda observation, rng: "yes", "random": _judge_random},
}


# ------------------------------------------------------------------------------ the game
class ProposerSolverJudgeEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata = {"name": "proposer_solver_judge_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(
        self,
        proposer_reward: str = "band",
        band: Sequence[float] | None = None,
        invalid_penalty: float = -1.0,
        max_operand: int = 99,
        ops: str = "+-*",
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if proposer_reward not in PROPOSER_REWARDS:
            raise ValueError(f"proposer_reward must be one of {PROPOSER_REWARDS}, got {proposer_reward!r}")
        if band is not None and proposer_reward != "band":
            raise ValueError(f"band is only used with proposer_reward='band', got proposer_reward={proposer_reward!r}; drop band or use 'band'")
        band = DEFAULT_BAND if band is None else band
        if isinstance(band, (str, bytes)) or not isinstance(band, Sequence) or len(band) != 2:
            raise ValueError(f"band must be a pair (low, high), got {band!r}")
        if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) for x in band):
            raise ValueError(f"band must hold two finite numbers, got {tuple(band)!r}")
        low, high = float(band[0]), float(band[1])
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"band must satisfy 0 <= low <= high <= 1, got {tuple(band)}")
        invalid_penalty = penalty_arg("invalid_penalty", invalid_penalty)
        self.domain = Domain(max_operand=max_operand, ops=ops)  # validates max_operand and ops
        self.proposer_reward, self.band, self.invalid_penalty = proposer_reward, (low, high), float(invalid_penalty)
        self._truth = ExactArithmetic()  # metrics only, never a reward

        self.possible_agents = ["proposer", "solver", "judge"]
        self._seat_roles = {a: a for a in self.possible_agents}
        max_text = {"proposer": len(PROPOSER_REQUEST), "solver": MAX_PROBLEM_CHARS, "judge": MAX_PROBLEM_CHARS + 1 + SHOWN_ANSWER_CHARS}
        # One space object per seat: api_test wants a stable object per seat, and seeding one
        # seat's space must not shift another's samples.
        self.observation_spaces = {
            a: Dict({
                "observation": Box(low=np.array([PHASE_PROPOSE, 0]), high=np.array([PHASE_OVER, 2]), dtype=np.int64),
                "text": text_space(max_text[a]),
            })
            for a in self.possible_agents
        }
        self.action_spaces = {a: text_space(MAX_MESSAGE_CHARS) for a in self.possible_agents}
        self.spec = GameSpec(
            id=GAME_ID,
            roles=("proposer", "solver", "judge"),
            reward_range=(min(0.0, self.invalid_penalty), 1.0),
            zero_sum=False,
            max_turns=3,
            description="A proposer writes a problem, a solver answers, a judge scores the answer without ground truth.",
            outcomes={"proposer": ("invalid", "metrics"), "solver": ("correct", "invalid", "metrics"), "judge": ("correct", "invalid", "metrics")},
            evaluators=HELDOUT_EVALUATORS,
        )
        self._phase = PHASE_OVER
        self._problem: str | None = None
        self._answer: str | None = None
        self._judgement: str | None = None

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode; ``options`` is accepted for the PettingZoo API and not used.

        No draw happens here (the proposer writes the problem), but the seed still reseeds the
        game's RNG and the spaces, as in every cogym game."""
        self._seed(seed)
        self._problem, self._answer, self._judgement, self._phase = None, None, None, PHASE_PROPOSE
        self._start_episode({a: {"role": a} for a in self.possible_agents})

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        if agent == "proposer":
            text = PROPOSER_REQUEST
        elif agent == "solver":
            text = self._problem or ""
        else:
            text = show_answer(self._problem, self._answer) if self._problem is not None and self._answer is not None else ""
        return {"observation": np.array([self._phase, self.possible_agents.index(agent)], dtype=np.int64), "text": text}

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        if agent == "proposer":
            self._propose(action)
        elif agent == "solver":
            self._answer, self._phase = action, PHASE_JUDGE
            self.agent_selection = "judge"
            self._accumulate_rewards()
        else:
            self._judgement = action
            self._score(action)

    # ------------------------------------------------------------------ rules
    def _propose(self, proposal: str) -> None:
        problem = self.domain.parse(proposal)
        if problem is None:
            reason = invalid_reason(proposal, self.domain)
            metrics = episode_metrics(False, None, None)
            self._phase = PHASE_OVER
            for a in self.agents:
                self.infos[a] = {"role": a, "problem": None, "invalid": a == "proposer", "metrics": dict(metrics),
                                 "reason": reason if a == "proposer" else f"game over: the proposer's move was invalid ({reason})"}
            self.infos["solver"]["correct"] = None
            self.infos["judge"].update(score=None, correct=None)
            self._end_game({"proposer": self.invalid_penalty})
            return
        self._problem, self._phase = problem.text, PHASE_SOLVE
        self.agent_selection = "solver"
        self._accumulate_rewards()

    def _score(self, judgement: str) -> None:
        assert self._problem is not None and self._answer is not None
        correct = bool(self._truth.judge(self._problem, None, [self._answer])[0])
        score, reason = parse_score(judgement)
        rewards = {
            "proposer": proposer_reward(self.proposer_reward, score, self.band),
            "solver": solver_reward(score),
            "judge": judge_reward(score, self._answer, self.invalid_penalty),
        }
        metrics = episode_metrics(True, correct, score)
        self._phase = PHASE_OVER
        for a in self.agents:
            self.infos[a] = {"role": a, "problem": self._problem, "invalid": a == "judge" and score is None, "metrics": dict(metrics)}
            if reason is not None:
                self.infos[a]["reason"] = reason if a == "judge" else f"the judge's score was invalid ({reason})"
        self.infos["solver"]["correct"] = correct
        self.infos["judge"].update(score=score, correct=score is not None and (score >= ACCEPT_SCORE) == correct)
        self._end_game(rewards)

    def _render_text(self) -> str:
        phase = {PHASE_PROPOSE: "proposing", PHASE_SOLVE: "solving", PHASE_JUDGE: "judging", PHASE_OVER: "over"}[self._phase]
        answer = None if self._answer is None else self._answer[:20]
        judgement = None if self._judgement is None else self._judgement[:20]
        return f"[{GAME_ID}] phase={phase} problem={self._problem!r} answer={answer!r} judgement={judgement!r}"
