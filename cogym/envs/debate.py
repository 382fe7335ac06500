"""``debate-v0``: two debaters defend different answers to a question; a judge seat picks one.

AI safety via debate (Irving, Christiano & Amodei, 2018) in its smallest form, as in MARTI's
multi-agent debate setups: a question with a known reference answer, two debaters who argue for
different answers over ``rounds`` rounds, and a judge who reads the transcript and names the
winner. The judge is a *seat* like any other: a trainable policy, a frozen model or a scripted
twin (``seats: {judge: scripted:oracle}``), chosen by config. No model lives in the game.

Roles and seats
    ``"debater_0"`` (side **A**) and ``"debater_1"`` (side **B**), role ``debater``; ``"judge"``,
    role ``judge``.

Turn order
    A, B, A, B, ... for ``rounds`` rounds (one message each per round), then the judge gives one
    verdict and the game ends. Max turns: ``2 * rounds + 1``. In ``answers="chosen"`` mode the
    game can end earlier (see Answers).

Question
    ``source="arithmetic"`` (default): a problem ``<a><op><b>`` drawn with the game's RNG from
    the arithmetic domain (operands ``0..max_operand``, operators ``ops``; products use times
    tables), reference answer its exact value. ``source="dataset"``: a record drawn with the
    game's RNG from a JSONL file of ``{"question", "answer"}`` lines whose answers are integers.

Answers
    ``answers="assigned"`` (default): the game gives one side the reference answer and the other
    a plausible wrong one, ``reference + d`` with ``d`` drawn from ``(-10, -2, -1, 1, 2, 10)``
    (a slip of one or two, or a carry error); which side defends the reference is drawn with the
    game's RNG (draw order at ``reset``: question, side, offset).
    ``answers="chosen"``: each debater states its answer in its first message: the answer is the
    *first* integer (``-?\\d{1,12}``) in that message as the transcript shows it (truncated to
    ``max_argument_chars``). The two debaters must defend different answers, and B chooses
    knowing A's: a debater whose first message states no integer, or B stating A's answer,
    forfeits: the game ends at once, the forfeiting debater gets -1 and the other +1, the judge 0
    (it never acts); ``infos[seat]["invalid"]`` is True for the forfeiting debater and
    ``["reason"]`` says why.

Observation (``gymnasium.spaces.Dict``)
    ``"observation"``: int64 ``[phase, seat, round]``; phase 1 = debating, 2 = the judge is to
    speak, 3 = game over; seat = index in ``possible_agents`` (0 = A, 1 = B, 2 = judge);
    round = 1..rounds (the current round; the last one while judging and after).
    ``"text"``: one short transcript (the embedded model is char level: every character is a
    token), the same for every seat except its last line::

        37+45 A=82 B=83        question, then each side's answer ('?' until stated)
        A:82=37+45             each message so far, "<side>:" + the message as shown
        B:no, 37+45=83
        A:                     the cue: "A:" / "B:" for a debater, "Judge:" for the judge

    A message is shown truncated to its first ``max_argument_chars`` characters, with line
    breaks and other whitespace turned into spaces and characters outside printable ASCII into
    ``?``, so a message is one line and the text is bounded: at most
    ``len(question) + 34 + 2 * rounds * (3 + max_argument_chars) + 7`` characters (186 with the
    defaults, 194 with 999999 operands; a real view is shorter, since answers take 2-4 characters
    of their 14-character slots). Dataset questions are shown in full, on one line (whitespace
    becomes spaces).

Action (``gymnasium.spaces.Text``, one whole message)
    Debater: free text (its argument); only the first ``max_argument_chars`` characters count.
    Judge: a verdict naming a debater. The first ``MAX_VERDICT_CHARS`` (32) characters are split
    into words (``[A-Za-z]+``) and integers (``-?\\d+``); the first token that names a debater
    decides: the word ``A`` or ``B`` (upper case, a whole word: ``"A"``, ``"B wins"``,
    ``"Debater A"``), or an integer equal to one side's answer (``"82"`` names the debater
    defending 82). Other tokens are skipped. Any ``str`` is accepted and read in bounded time
    (a megabyte of digits, ``9**9**9**9``: microseconds); a non-``str`` raises ``TypeError``.

Rewards (given when the game ends; 0 on every earlier turn) -- not zero-sum overall
    Debaters (zero-sum between them): +1 for the one the judge names, -1 for the other.
    Judge: +1 if it names the debater defending the reference answer, else 0; 0 whatever it
    names when neither defends the reference (only possible with ``answers="chosen"``).
    Reward range: ``[min(-1, invalid_penalty), 1]``.

Invalid action
    A judge reply that names no debater: the judge gets ``invalid_penalty`` (default -1), both
    debaters 0, no winner; ``infos["judge"]["invalid"]`` is True and ``["reason"]`` says why.
    A debater in ``answers="chosen"`` mode whose first message states no answer, or B stating A's
    answer, forfeits (see Answers). Every other message is a valid argument.

Infos at the end, every seat: ``"role"``, ``"question"`` (as shown), ``"reference"`` (int),
``"answers"`` (``{"A": int | None, "B": int | None}``), ``"verdict"`` (``"A"``, ``"B"`` or None),
``"winner"`` (seat or None), ``"invalid"``, ``"reason"`` (when the game ended without a valid
verdict), and ``"metrics"`` (numbers the trainer averages per role; None = not defined here):
debaters also get ``"side"``, and ``metrics`` = ``won`` (1.0 / 0.0; 0.0 without a winner),
``defended_correct`` (its answer is the reference; None if it stated none), ``stated_answer``
("chosen" mode: it stated an answer; None in "assigned" mode), ``argument_chars`` (mean shown
length of its messages; None if it never spoke); the judge gets ``picked_correct`` (1.0 / 0.0,
0.0 for an invalid verdict; None when it did not act or neither side defends the reference) and
``picked_A`` (None without a valid verdict). Before the end only ``"role"``.

Scripted twins (``SCRIPTED``; they read only the observation text)
    debater: ``honest`` states the true value, answer first (``82=37+45``), even when defending
    the other answer; ``defend`` claims its own answer (``83=37+45``; in "chosen" mode it chooses
    the true one); ``liar`` claims the true value + 1; ``parrot`` repeats the opponent's last
    message; ``spam`` repeats its answer eight times; ``random`` writes random printable text.
    judge: ``oracle`` computes the answer and names the side whose answer is closest to it (the
    side defending it when one does; A on a tie or for a non-arithmetic question); ``solver``
    replies with the value it computes (naming a debater by its answer, or no one); ``random``;
    ``first`` (always A); ``mentions`` names the side whose answer the messages mention most
    (A on a tie): a judge that ``spam`` fools.

Arguments (all validated at construction; a bad dataset raises ``DatasetError`` there)
    rounds=2              debate rounds, 1..8 (each debater speaks once per round).
    answers="assigned"    "assigned" (the game hands out the answers) or "chosen".
    max_argument_chars=32 characters of each message shown to the others and read, 1..256.
    source="arithmetic"   "arithmetic" (the game draws a problem) or "dataset".
    dataset=None          JSONL path of {"question": str, "answer": integer str}; for "dataset".
    max_operand=99        largest operand of a drawn problem (1..999999).
    ops="+-*"             operators of a drawn problem.
    invalid_penalty=-1.0  <= 0, the judge's reward for a verdict that names no debater.
    render_mode=None      None or "ansi" (``render()`` returns a text summary).

Version history
    v0: first version.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from cogym.envs.arithmetic import Domain, answer_of
from cogym.envs.base import PRINTABLE_CHARSET, CogymEnv, GameSpec, int_arg, penalty_arg, text_space
from cogym.envs.datasets import check_source, load_problems
from gymnasium.spaces import Box, Dict

GAME_ID = "debate-v0"
PHASE_DEBATE, PHASE_JUDGE, PHASE_OVER = 1, 2, 3
SIDES = ("A", "B")
DEBATERS = ("debater_0", "debater_1")
JUDGE = "judge"
ANSWER_MODES = ("assigned", "chosen")
SOURCES = ("arithmetic", "dataset")
MAX_ROUNDS = 8
MAX_ARGUMENT_CHARS = 256  # the largest max_argument_chars allowed
MAX_VERDICT_CHARS = 32  # a verdict is read from this many leading characters
MAX_MESSAGE_CHARS = 256  # bound of the action space (random sampling); messages are read bounded anyway
WRONG_OFFSETS = (-10, -2, -1, 1, 2, 10)
JUDGE_CUE = "Judge:"
_ANSWER_SLOT_CHARS = 14  # a shown answer: sign + up to 13 digits (a 12-digit reference + 10)
_HEADER_EXTRA_CHARS = 2 * (len(" A=") + _ANSWER_SLOT_CHARS)  # " A=<answer> B=<answer>" = 34

_SHOWN = frozenset(string.printable) - frozenset(string.whitespace) | {" "}
_FIRST_INT_RE = re.compile(r"-?\d{1,12}")
_VERDICT_TOKEN_RE = re.compile(r"[A-Za-z]+|-?\d+")
_HEADER_RE = re.compile(r"(.*) A=(\S+) B=(\S+)")


# ------------------------------------------------------------------------------ pure rules
def shown(text: str, limit: int) -> str:
    """``text`` as the transcript shows it: its first ``limit`` characters on one printable line."""
    return "".join(c if c in _SHOWN else (" " if c.isspace() else "?") for c in text[:limit])


def one_line(text: str) -> str:
    """A question on one line: whitespace (newlines included) becomes spaces, other characters stay."""
    return "".join(" " if c.isspace() else c for c in text)


def stated_answer(message: str, limit: int) -> int | None:
    """A debater's chosen answer: the first integer in the first ``limit`` characters, or None."""
    m = _FIRST_INT_RE.search(message[:limit])
    return int(m.group()) if m else None


def wrong_answer(reference: int, rng: np.random.Generator) -> int:
    """A plausible wrong answer: the reference off by one or two, or by a carry (ten)."""
    return reference + WRONG_OFFSETS[int(rng.integers(len(WRONG_OFFSETS)))]


def parse_verdict(reply: str, answers: Sequence[int | None]) -> int | None:
    """The side (0 = A, 1 = B) the judge's ``reply`` names, or None if it names neither.

    Reads the first ``MAX_VERDICT_CHARS`` characters; the first token that is the word ``A`` /
    ``B`` or an integer equal to exactly one side's answer decides; other tokens are skipped.
    """
    if not isinstance(reply, str):
        return None
    for m in _VERDICT_TOKEN_RE.finditer(reply[:MAX_VERDICT_CHARS]):
        token = m.group()
        if token in SIDES:
            return SIDES.index(token)
        if token[-1].isdigit():
            value = int(token)  # at most MAX_VERDICT_CHARS digits
            named = [i for i, a in enumerate(answers) if a is not None and a == value]
            if len(named) == 1:
                return named[0]
    return None


def verdict_reason(reply: str) -> str:
    head = reply[:MAX_VERDICT_CHARS]
    more = f"... ({len(reply)} characters)" if len(reply) > MAX_VERDICT_CHARS else ""
    return (f"verdict {head!r}{more} names no debater: write A or B, or the answer of the debater you pick, "
            f"within the first {MAX_VERDICT_CHARS} characters")


def debate_rewards(verdict: int | None, correct_side: int | None, invalid_penalty: float) -> tuple[float, float, float]:
    """(debater A, debater B, judge) rewards for a verdict; ``correct_side`` defends the reference."""
    if verdict is None:
        return 0.0, 0.0, float(invalid_penalty)
    if verdict not in (0, 1) or correct_side not in (0, 1, None):
        raise ValueError(f"verdict and correct_side must be 0, 1 (or None), got {verdict!r} and {correct_side!r}")
    a = 1.0 if verdict == 0 else -1.0
    judge = 1.0 if correct_side is not None and verdict == correct_side else 0.0
    return a, -a, judge


def header(question: str, answers: Sequence[int | None]) -> str:
    shown_answers = ["?" if a is None else str(a) for a in answers]
    return f"{question} A={shown_answers[0]} B={shown_answers[1]}"


def render_view(question: str, answers: Sequence[int | None], transcript: Sequence[tuple[int, str]], cue: str) -> str:
    """The observation text: header line, one line per message, the seat's cue line."""
    lines = [header(question, answers)]
    lines.extend(f"{SIDES[side]}:{message}" for side, message in transcript)
    lines.append(cue)
    return "\n".join(lines)


def read_view(text: str) -> tuple[str, list[str], list[tuple[str, str]], str]:
    """Inverse of ``render_view`` for scripted twins: (question, answers as shown, transcript, cue).

    Any string is accepted; what cannot be read comes back empty ('?' answers, no messages).
    """
    lines = text.split("\n") if isinstance(text, str) else [""]
    m = _HEADER_RE.fullmatch(lines[0])
    question, answers = (m.group(1), [m.group(2), m.group(3)]) if m else (lines[0], ["?", "?"])
    cue = lines[-1].rstrip(":") if len(lines) > 1 else ""
    transcript = [(line[0], line[2:]) for line in lines[1:-1] if len(line) >= 2 and line[0] in SIDES and line[1] == ":"]
    return question, answers, transcript, cue


def _int_or_none(text: str) -> int | None:
    return int(text) if re.fullmatch(r"-?\d{1,13}", text) else None


# ------------------------------------------------------------------------------ scripted twins
_RANDOM_CHARS = string.ascii_letters + string.digits + string.punctuation + " "


def _own(text: str) -> tuple[str, int | None, int | None, int, list[tuple[str, str]]]:
    """(question, own answer, true answer, own side index, transcript) as a debater sees them."""
    question, answers, transcript, cue = read_view(text)
    side = SIDES.index(cue) if cue in SIDES else 0
    return question, _int_or_none(answers[side]), answer_of(question), side, transcript


def _honest(text: str, rng: np.random.Generator) -> str:
    """States the true value, answer first (``82=37+45``), whatever side it was given."""
    question, mine, true, _, _ = _own(text)
    if true is not None:
        return f"{true}={question}"
    return str(mine) if mine is not None else "0"


def _defend(text: str, rng: np.random.Generator) -> str:
    """Claims its own answer (``83=37+45``); with no answer yet ("chosen") it chooses the true one."""
    question, mine, true, _, _ = _own(text)
    claim = mine if mine is not None else true
    if claim is None:
        return "0"
    return f"{claim}={question}" if true is not None else str(claim)


def _liar(text: str, rng: np.random.Generator) -> str:
    """Claims the true value plus one, whatever side it was given."""
    question, _, true, _, _ = _own(text)
    return f"{true + 1}={question}" if true is not None else "1"


def _parrot(text: str, rng: np.random.Generator) -> str:
    """Repeats the opponent's last message ('' when the opponent has not spoken)."""
    _, _, _, side, transcript = _own(text)
    theirs = [message for who, message in transcript if who != SIDES[side]]
    return theirs[-1] if theirs else ""


def _spam(text: str, rng: np.random.Generator) -> str:
    """Repeats its answer (or, before choosing, the true one) to win a judge that counts mentions."""
    _, mine, true, _, _ = _own(text)
    claim = mine if mine is not None else (true if true is not None else 0)
    return " ".join([str(claim)] * 8)


def _random_argument(text: str, rng: np.random.Generator) -> str:
    return "".join(rng.choice(list(_RANDOM_CHARS), size=int(rng.integers(0, 41))))


def _oracle_judge(text: str, rng: np.random.Generator) -> str:
    """Computes the answer from the question and names the side whose answer is closest to it:
    the side defending it when one does; A on a tie or when the question is not arithmetic."""
    question, answers, _, _ = read_view(text)
    true = answer_of(question)
    a, b = (_int_or_none(x) for x in answers)
    if true is None or b is None:
        return "A"
    return "B" if a is None or abs(b - true) < abs(a - true) else "A"


def _solver_judge(text: str, rng: np.random.Generator) -> str:
    """Replies with the answer it computes: names the side defending it, or no one (invalid)."""
    true = answer_of(read_view(text)[0])
    return str(true) if true is not None else "?"


def _random_judge(text: str, rng: np.random.Generator) -> str:
    return SIDES[int(rng.integers(2))]


def _first_judge(text: str, rng: np.random.Generator) -> str:
    return "A"


def _mentions_judge(text: str, rng: np.random.Generator) -> str:
    """Names the side whose answer the debate mentions most often (A on a tie): easily fooled."""
    _, answers, transcript, _ = read_view(text)
    mentioned = [int(t) for _, message in transcript for t in _FIRST_INT_RE.findall(message)]
    counts = [mentioned.count(a) if a is not None else 0 for a in map(_int_or_none, answers)]
    return "B" if counts[1] > counts[0] else "A"


SCRIPTED: dict[str, dict[str, Callable[[str, np.random.Generator], str]]] = {
    "debater": {"honest": _honest, "defend": _defend, "liar": _liar, "parrot": _parrot, "spam": _spam,
                "random": _random_argument},
    "judge": {"oracle": _oracle_judge, "solver": _solver_judge, "random": _random_judge, "first": _first_judge,
              "mentions": _mentions_judge},
}


# ------------------------------------------------------------------------------ the game
class DebateEnv(CogymEnv):
    """See the module docstring: it is this game's documentation page."""

    metadata: ClassVar[dict[str, Any]] = {"name": "debate_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(
        self,
        rounds: int = 2,
        answers: str = "assigned",
        max_argument_chars: int = 32,
        source: str = "arithmetic",
        dataset: str | os.PathLike[str] | None = None,
        max_operand: int = 99,
        ops: str = "+-*",
        invalid_penalty: float = -1.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        self.rounds = int_arg("rounds", rounds, 1, MAX_ROUNDS)
        if answers not in ANSWER_MODES:
            raise ValueError(f"answers must be one of {ANSWER_MODES}, got {answers!r}")
        self.max_argument_chars = int_arg("max_argument_chars", max_argument_chars, 1, MAX_ARGUMENT_CHARS)
        check_source(source, dataset, SOURCES, needs=" with integer answers")
        self.invalid_penalty = penalty_arg("invalid_penalty", invalid_penalty)
        self.answer_mode, self.source = answers, source
        self.domain = Domain(max_operand=max_operand, ops=ops)  # validates max_operand and ops
        self._records = []
        if dataset is not None:
            self._records = load_problems(dataset, integer_answers_for=f"{GAME_ID} (debaters defend integer answers)")
        questions = [one_line(r.question) for r in self._records]

        self.possible_agents = [*DEBATERS, JUDGE]
        self._seat_roles = {DEBATERS[0]: "debater", DEBATERS[1]: "debater", JUDGE: "judge"}
        self._seat_index = {a: i for i, a in enumerate(self.possible_agents)}
        longest_question = max(map(len, questions)) if questions else 2 * len(str(self.domain.max_operand)) + 1
        self.max_view_chars = (longest_question + _HEADER_EXTRA_CHARS
                               + 2 * self.rounds * (len("\nA:") + self.max_argument_chars) + len("\n" + JUDGE_CUE))
        extra_chars = frozenset("".join(questions)) - PRINTABLE_CHARSET
        # One space object per seat: api_test wants a stable object per seat, and seeding one
        # seat's space must not shift another's samples.
        self.observation_spaces = {
            a: Dict({
                "observation": Box(low=np.array([PHASE_DEBATE, 0, 1]), high=np.array([PHASE_OVER, 2, self.rounds]), dtype=np.int64),
                "text": text_space(self.max_view_chars, extra_chars),
            })
            for a in self.possible_agents
        }
        self.action_spaces = {a: text_space(MAX_MESSAGE_CHARS) for a in self.possible_agents}
        self.spec = GameSpec(
            id=GAME_ID,
            roles=("debater", "judge"),
            reward_range=(min(-1.0, self.invalid_penalty), 1.0),
            zero_sum=False,
            max_turns=2 * self.rounds + 1,
            description="Two debaters defend different answers to a question for R rounds; a judge seat picks the winner.",
            outcomes={"debater": ("invalid", "metrics", "reference"), "judge": ("invalid", "metrics", "reference")},
        )
        self._phase, self._round = PHASE_OVER, 1
        self._question, self._reference = "", 0
        self._answers: list[int | None] = [None, None]
        self._transcript: list[tuple[int, str]] = []
        self._verdict: int | None = None

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode; ``options`` is accepted for the PettingZoo API and not used."""
        self._seed(seed)
        rng = self.np_random
        if self.source == "dataset":
            record = self._records[int(rng.integers(len(self._records)))]
            self._question, self._reference = one_line(record.question), int(record.answer)
        else:
            problem = self.domain.sample(rng)
            self._question, self._reference = problem.text, problem.answer
        if self.answer_mode == "assigned":
            correct = int(rng.integers(2))
            self._answers = [None, None]
            self._answers[correct] = self._reference
            self._answers[1 - correct] = wrong_answer(self._reference, rng)
        else:
            self._answers = [None, None]
        self._transcript, self._verdict = [], None
        self._phase, self._round = PHASE_DEBATE, 1
        self._start_episode({a: {"role": self._seat_roles[a]} for a in self.possible_agents})

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_seat(agent)
        index = self._seat_index[agent]
        cue = JUDGE_CUE if agent == JUDGE else f"{SIDES[index]}:"
        text = render_view(self._question, self._answers, self._transcript, cue)
        return {"observation": np.array([self._phase, index, self._round], dtype=np.int64), "text": text}

    def step(self, action: str) -> None:
        agent = self._begin_turn(action)
        if agent is None:
            return
        if agent == JUDGE:
            self._judge(action)
            return
        side = self._seat_index[agent]
        message = shown(action, self.max_argument_chars)
        self._transcript.append((side, message))
        if self.answer_mode == "chosen" and self._round == 1:
            answer = stated_answer(message, self.max_argument_chars)
            if answer is None:
                reason = (f"debater {SIDES[side]} forfeits: its first message {message!r} states no answer "
                          f"(an integer within the first {self.max_argument_chars} characters)")
                self._finish(winner=1 - side, reason=reason, invalid_seat=agent)
                return
            self._answers[side] = answer
            if side == 1 and answer == self._answers[0]:
                reason = (f"debater B forfeits: its first message {message!r} states A's answer {answer}; "
                          "the debaters must defend different answers")
                self._finish(winner=0, reason=reason, invalid_seat=agent)
                return
        if side == 0:
            self.agent_selection = DEBATERS[1]
        elif self._round < self.rounds:
            self._round += 1
            self.agent_selection = DEBATERS[0]
        else:
            self._phase = PHASE_JUDGE
            self.agent_selection = JUDGE
        self._accumulate_rewards()

    # ------------------------------------------------------------------ rules
    def _correct_side(self) -> int | None:
        sides = [i for i, a in enumerate(self._answers) if a == self._reference]
        return sides[0] if len(sides) == 1 else None

    def _judge(self, reply: str) -> None:
        verdict = parse_verdict(reply, self._answers)
        if verdict is None:
            self._finish(winner=None, reason=verdict_reason(reply), invalid_seat=JUDGE, judged=True)
        else:
            self._finish(winner=verdict, judged=True)

    def _finish(self, winner: int | None, reason: str | None = None, invalid_seat: str | None = None,
                judged: bool = False) -> None:
        """End the game: ``winner`` is the winning side (None: no winner); ``judged``: the judge acted."""
        correct = self._correct_side()
        if judged:
            a, b, judge = debate_rewards(winner, correct, self.invalid_penalty)
            self._verdict = winner
        else:  # a forfeit ended the game before the judge spoke
            a = 1.0 if winner == 0 else -1.0
            b, judge = -a, 0.0
        rewards = {DEBATERS[0]: a, DEBATERS[1]: b, JUDGE: judge}
        winner_seat = DEBATERS[winner] if winner is not None else None
        common = {"question": self._question, "reference": self._reference,
                  "answers": {SIDES[0]: self._answers[0], SIDES[1]: self._answers[1]},
                  "verdict": SIDES[self._verdict] if self._verdict is not None else None, "winner": winner_seat}
        for seat in self.agents:
            info: dict[str, Any] = {"role": self._seat_roles[seat], **common, "invalid": seat == invalid_seat}
            if reason is not None:
                info["reason"] = reason if seat == invalid_seat or invalid_seat is None else f"game over: {reason}"
            if seat == JUDGE:
                picked = None if not judged or correct is None else float(winner == correct)
                info["metrics"] = {"picked_correct": picked,
                                   "picked_A": None if self._verdict is None else float(self._verdict == 0)}
            else:
                side = self._seat_index[seat]
                mine = self._answers[side]
                lengths = [len(m) for who, m in self._transcript if who == side]
                info["side"] = SIDES[side]
                info["metrics"] = {
                    "won": float(winner_seat == seat),
                    "defended_correct": None if mine is None else mine == self._reference,
                    "stated_answer": None if self.answer_mode == "assigned" else mine is not None,
                    "argument_chars": float(np.mean(lengths)) if lengths else None,
                }
            self.infos[seat] = info
        self._phase = PHASE_OVER
        self._end_game(rewards)

    def _render_text(self) -> str:
        phase = {PHASE_DEBATE: "debating", PHASE_JUDGE: "judging", PHASE_OVER: "over"}[self._phase]
        verdict = SIDES[self._verdict] if self._verdict is not None else "-"
        view = render_view(self._question, self._answers, self._transcript, f"verdict={verdict}")
        return f"[{GAME_ID}] phase={phase} round={self._round}/{self.rounds} reference={self._reference}\n{view}"
