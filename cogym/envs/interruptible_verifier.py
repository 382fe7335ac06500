"""``interruptible_verifier-v0``: k solvers answer an arithmetic problem under a verifier that may
stop an answer at any token.

A game in which token-level play matters. The verifier is a process check (a small rule object,
no model): as soon as an answer can no longer become the right one, it is wrong from that
character on. At token level (``make("interruptible_verifier-v0", granularity="token")``) the
game interrupts the message at that token (``CogymEnv.interrupt``): the solver stops generating
mid-turn, no tokens are spent after its first mistake, and the last token of the trained response
is the one that went wrong. At turn level the same rule scores the whole message after the fact.
Rewards are the same at both granularities.

Roles and seats
    ``"solver_0"`` ... ``"solver_{k-1}"``, all of role ``solver``.

Turn order
    The problem is drawn at ``reset`` with the game's RNG. All ``k`` solvers answer independently
    (``ready_agents()`` lists every solver that has not answered, in seat order); the game ends
    after the last answer. Max turns: ``k``.

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[phase, seat]`` (phase 2 = answering, 3 = over). ``"text"``: the
    problem in canonical form (``"37+45"``), the prompt the embedded tiny model was trained on.

Action (``gymnasium.spaces.Text``, one whole message)
    The answer: the integer, optionally surrounded by whitespace. Any ``str`` is accepted.

The verifier's rule (``first_error``)
    Reading the message left to right, leading whitespace is skipped; the answer stays viable
    while the characters read so far are a prefix of the reference integer, and trailing
    whitespace is viable only after the complete integer. The first character that breaks this is
    the error; only the first ``MAX_SCAN_CHARS`` characters are ever read (a longer message is in
    error there), so a megabyte of digits costs microseconds.

Rewards (given when the game ends; 0 before) -- not zero-sum, range ``[0, 1]``
    A solver gets 1 if its message is exactly the answer (up to whitespace). Otherwise
    ``partial_credit * matched / len(answer)``, where ``matched`` is how many digits of the answer
    it wrote before its first error (a process reward: a right first digit is worth something).

Invalid action
    None: any text is an answer, right or wrong. A wrong answer is an outcome, not an invalid move
    (``infos["invalid"]`` is always False).

Infos at the end, every seat: ``"role"``, ``"problem"``, ``"invalid"`` (False), ``"correct"``,
``"error_at"`` (character index of the first error, None if correct), ``"interrupted"`` (True
when the verifier cut the message at token level; always False at turn level) and ``"metrics"``
``{"correct", "interrupted", "matched_digits"}``. Before the end only ``"role"``.

Arguments
    num_solvers=8        k, >= 1.
    partial_credit=0.0   in [0, 1): reward share for the digits matched before the first error.
    max_operand=99       largest operand of a problem (1..999999).
    ops="+-*"            operators problems use.
    render_mode=None     None or "ansi".

Version history
    v0: first version.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from gymnasium.spaces import Box, Dict

from cogym.envs.arithmetic import HELDOUT_EVALUATORS, MAX_PROBLEM_CHARS, Domain
from cogym.envs.base import CogymEnv, GameSpec, finite_arg, int_arg, seat_names, text_space
from cogym.envs.proposer_solver import SCRIPTED as _PROPOSER_SOLVER_SCRIPTED

GAME_ID = "interruptible_verifier-v0"
PHASE_SOLVE, PHASE_OVER = 2, 3
MAX_MESSAGE_CHARS = 256  # bound of the action space (random sampling)
MAX_SCAN_CHARS = 64  # the verifier never reads further: no answer of this domain is that long


# ------------------------------------------------------------------------------ pure rules
def first_error(message: str, reference: str) -> int | None:
    """Index of the first character at which ``message`` stops being a viable answer ``reference``.

    None if the message (read up to ``MAX_SCAN_CHARS``) is still viable: a prefix of the answer
    after optional leading whitespace, or the whole answer followed by whitespace only. A complete
    message is correct iff it is viable and holds every character of the answer (see ``is_correct``).
    """
    i, n = 0, min(len(message), MAX_SCAN_CHARS)
    while i < n and message[i].isspace():
        i += 1
    matched = 0
    while i < n and matched < len(reference) and message[i] == reference[matched]:
        i, matched = i + 1, matched + 1
    if i < n and matched < len(reference):
        return i  # a wrong character before the answer was complete
    while i < n and message[i].isspace():
        i += 1
    if i < n:
        return i  # something other than whitespace after the complete answer
    if len(message) > MAX_SCAN_CHARS:
        return MAX_SCAN_CHARS  # longer than any answer: in error where reading stops
    return None


def matched_digits(message: str, reference: str) -> int:
    """How many characters of ``reference`` the message wrote (after leading whitespace) before its first error."""
    error = first_error(message, reference)
    text = message[: MAX_SCAN_CHARS if error is None else error].lstrip()
    k = 0
    while k < min(len(text), len(reference)) and text[k] == reference[k]:
        k += 1
    return k


def is_correct(message: str, reference: str) -> bool:
    return first_error(message, reference) is None and matched_digits(message, reference) == len(reference)


def solver_reward(message: str, reference: str, partial_credit: float) -> float:
    if is_correct(message, reference):
        return 1.0
    return partial_credit * matched_digits(message, reference) / len(reference)


# ------------------------------------------------------------------------------ scripted twins
_oracle = _PROPOSER_SOLVER_SCRIPTED["solver"]["oracle"]


def _last_digit_wrong(text: str, rng: np.random.Generator) -> str:
    """Right up to the last digit: the verifier stops it there, with all but one digit matched."""
    ans = _oracle(text, rng)
    return ans[:-1] + str((int(ans[-1]) + 1) % 10) + " because I checked twice"


def _rambler(text: str, rng: np.random.Generator) -> str:
    """The right answer followed by chatter: in error at the first character of the chatter."""
    return _oracle(text, rng) + " is what I think"


SCRIPTED: dict[str, dict[str, Callable[[str, np.random.Generator], str]]] = {
    "solver": {"oracle": _oracle, "last_digit_wrong": _last_digit_wrong, "rambler": _rambler,
               "random": _PROPOSER_SOLVER_SCRIPTED["solver"]["random"]},
}


# ------------------------------------------------------------------------------ the game
class InterruptibleVerifierEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata = {"name": "interruptible_verifier_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, num_solvers: int = 8, partial_credit: float = 0.0, max_operand: int = 99, ops: str = "+-*",
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        num_solvers = int_arg("num_solvers", num_solvers, 1)
        partial_credit = finite_arg("partial_credit", partial_credit)
        if not 0.0 <= partial_credit < 1.0:
            raise ValueError(f"partial_credit must be in [0, 1) (a right answer gets 1), got {partial_credit}")
        self.domain = Domain(max_operand=max_operand, ops=ops)  # validates max_operand and ops
        self.num_solvers, self.partial_credit = num_solvers, partial_credit
        self.possible_agents = list(seat_names("solver", num_solvers))
        self._seat_roles = {a: "solver" for a in self.possible_agents}
        self._seat_index = {a: i for i, a in enumerate(self.possible_agents)}
        self.observation_spaces = {
            a: Dict({"observation": Box(low=np.array([PHASE_SOLVE, 0]), high=np.array([PHASE_OVER, num_solvers]), dtype=np.int64),
                     "text": text_space(MAX_PROBLEM_CHARS)})
            for a in self.possible_agents
        }
        self.action_spaces = {a: text_space(MAX_MESSAGE_CHARS) for a in self.possible_agents}
        self.spec = GameSpec(id=GAME_ID, roles=("solver",), reward_range=(0.0, 1.0), zero_sum=False, max_turns=num_solvers,
                             description="k solvers answer an arithmetic problem; a verifier stops an answer at its first wrong token.",
                             outcomes={"solver": ("correct", "invalid", "metrics")}, evaluators=HELDOUT_EVALUATORS)
        self._phase, self._problem, self._reference = PHASE_OVER, "", "0"
        self._answers: dict[str, str] = {}
        self._interrupted: set[str] = set()  # seats whose message the verifier cut (token level)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode; ``options`` is accepted for the PettingZoo API and not used."""
        self._seed(seed)
        problem = self.domain.sample(self.np_random)
        self._problem, self._reference, self._phase = problem.text, str(problem.answer), PHASE_SOLVE
        self._answers, self._interrupted = {}, set()
        self._start_episode({a: {"role": "solver"} for a in self.possible_agents})

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        return {"observation": np.array([self._phase, self._seat_index[agent]], dtype=np.int64), "text": self._problem}

    def ready_agents(self) -> list[str]:
        if self._phase == PHASE_SOLVE:
            return self._yet_to_answer(self.possible_agents, self._answers)
        return super().ready_agents()

    def interrupt(self, agent: str, partial: str) -> bool:
        """Stop the message at its first error (token level)."""
        self._check_seat(agent)
        cut = first_error(partial, self._reference) is not None
        if cut:
            self._interrupted.add(agent)
        return cut

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        self._answers[agent] = action
        waiting = self.ready_agents()
        if waiting:
            self.agent_selection = waiting[0]
            self._accumulate_rewards()
            return
        self._phase = PHASE_OVER
        rewards = {}
        for s in self.possible_agents:
            message = self._answers[s]
            error, correct = first_error(message, self._reference), is_correct(message, self._reference)
            interrupted = s in self._interrupted
            matched = matched_digits(message, self._reference)
            rewards[s] = solver_reward(message, self._reference, self.partial_credit)
            self.infos[s] = {"role": "solver", "problem": self._problem, "invalid": False, "correct": correct,
                             "error_at": error, "interrupted": interrupted,
                             "metrics": {"correct": correct, "interrupted": interrupted, "matched_digits": float(matched)}}
        self._end_game(rewards)

    def _render_text(self) -> str:
        answers = ", ".join(f"{s}={self._answers[s][:20]!r}" for s in self.possible_agents if s in self._answers)
        return f"[{GAME_ID}] problem={self._problem!r} answers: {answers or '-'}"
