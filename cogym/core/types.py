"""The types every cogym package shares: what a seat is asked (:class:`Request`) and answers
(:class:`Action`), the agent protocol, how a policy samples (:class:`SamplingParams`) and what it
generated (:class:`Generation`), and a model move as a learner sees it (:class:`Turn`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol, Sequence, runtime_checkable

from cogym.core.config_key import key
from cogym.core.outcome import SeatOutcome


@dataclass
class Request:
    """What a seat is asked: chat messages (the per-role system message, then the game's text), and
    the sampling key of the answer (:mod:`cogym.agents.sampling`; the rollout derives it from the run
    seed, the game and the move, so the answer is the same in any batch; None: a random one).

    A seat of a conversation role (:attr:`cogym.envs.base.GameSpec.conversation`) is also given its
    conversation: ``conversation``, every message of it so far (system, the game's messages, its own
    answers, tool results) ending with ``delta``, the messages new since its last answer; and
    ``prefix_ids``, the exact ids of its last prompt and answer (None before its first model answer).
    A model continues from ``prefix_ids`` with only ``delta`` rendered (:meth:`Policy.prompt_of`), so
    earlier turns are never re-tokenised. ``messages`` stays the fresh view (the system message and
    the game's whole text now), which scripted seats read.
    """

    messages: list[dict]
    role: str
    seat: str
    key: int | None = None
    conversation: list[dict] | None = None
    delta: list[dict] | None = None
    prefix_ids: list[int] | None = None


@dataclass
class Action:
    """An agent's answer. LLM agents also return the exact ids and behaviour log-probabilities."""

    text: str
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finished: bool = True
    version: int = 0  # the weight version of the policy that generated it (0 for scripted agents)
    # Why the agent produced no move (an endpoint that timed out, answered an HTTP error, ...): the rollout
    # steps ``text`` (empty), which the game judges as any move, and records the reason in the move and
    # the seat's outcome (infos: invalid, reason, agent_error). None: a move like any other.
    error: str | None = None


class Agent(Protocol):
    """Answers a batch of requests; a single request is a batch of one."""

    name: str

    def act(self, requests: Sequence[Request]) -> list[Action]: ...


@dataclass
class Token:
    """One step of a streamed message.

    ``id``: the token emitted, or None when the message ends without one (the agent's own length
    limit: the end is not a choice of the model, so it is not trained on). ``end``: the message ends
    with this step (an ``id`` is then the agent's end-of-message token). ``logprob``: the behaviour
    log-probability of ``id`` at the sampling temperature (model agents; None for agents whose moves
    are not training data). ``read``: how many ids the model read to produce it (the prompt at a
    prefill, 1 for a further token of a message whose cache is reused, 0 for no model).
    """

    id: int | None
    end: bool = False
    logprob: float | None = None
    read: int = 0


@dataclass
class Message:
    """A message opened by :meth:`TokenStreaming.begin`: the handle that names it in ``advance`` and
    ``close``, and the prompt ids the model conditions on (None for an agent that is not a model)."""

    handle: Hashable
    prompt_ids: list[int] | None = None


@runtime_checkable
class TokenStreaming(Protocol):
    """The token-level capability of an agent: messages written one token at a time, batched.

    ``begin`` opens one message per request (``encode`` turns text into the game's token ids, for
    agents that think in text); ``advance`` gives the next token of every named open message in one
    batched call; ``close`` frees messages that ended (at their end token, or cut by the game). A
    wrapper delegates all three. Handles are only valid in the agent that made them.
    """

    def begin(self, requests: Sequence[Request], encode: Callable[[str], list[int]]) -> list[Message]: ...

    def advance(self, handles: Sequence[Hashable]) -> list[Token]: ...

    def close(self, handles: Sequence[Hashable]) -> None: ...


@dataclass
class Turn:
    """One move of one seat, as the learner sees it (token-in, token-out).

    ``prompt_ids``/``response_ids`` are exactly the ids the policy was prompted with and
    generated; ``logprobs`` are the behaviour log-probabilities of ``response_ids``; ``reward`` is
    credited when the game ends; ``group_key`` groups samples for group-based estimators;
    ``info`` is the seat's last info and ``outcome`` its typed end-of-game facts (the game -> learner
    contract, :mod:`cogym.core.outcome`), which learners read; ``policy_version`` is the version of
    the weights that generated the response (the learner's step count when it was sampled).

    ``conversation``: the move of a conversation role (its prompt continues the seat's previous
    prompt and response ids). ``mask``: 1 where ``response_ids`` holds an id the model generated, 0
    on ids it did not (the game's messages and tool results inside a multi-turn sequence, see
    :func:`cogym.core.conversation.join_turns`; their ``logprobs`` are 0); None: every id is the model's.
    ``baseline``: the seat's return in its group's greedy game, for an algorithm whose baseline that is
    (``Algorithm.greedy_baseline``, ReMax); None otherwise.
    """

    game_index: int
    episode_id: str
    seat: str
    role: str
    policy_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    finished: bool
    reward: float = 0.0
    group_key: Hashable = None
    info: dict = field(default_factory=dict)
    policy_version: int = 0
    conversation: bool = False
    mask: list[int] | None = None
    baseline: float | None = None

    @property
    def outcome(self) -> SeatOutcome:
        """The typed facts of ``info`` (always in step with it: a Turn's info may be replaced)."""
        return SeatOutcome.from_info(self.info)


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy decoding."""

    max_new_tokens: int = key(8, "the longest message a turn may generate, in tokens")
    temperature: float = key(1.0, "the sampling temperature; 0: greedy decoding")
    top_p: float = key(1.0, "nucleus sampling: draw from the fewest most likely tokens whose probabilities reach top_p "
                       "(1: all; the vllm backend takes only 1)")
    top_k: int = key(0, "draw from the top_k most likely tokens (0: all; the vllm backend takes only 0)")

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Generation:
    """One sampled response.

    ``response_ids`` includes the end-of-message token when the model emitted it
    (``finished``); ``logprobs[t]`` is the behaviour log-probability of ``response_ids[t]``
    under the sampling distribution (logits / temperature; for greedy decoding, temperature 1);
    ``version``: the version of the weights that generated it.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    finished: bool
    version: int = 0
