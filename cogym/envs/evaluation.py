"""What a game's evaluators are given: the interface a runner implements, and the shipped games' kinds.

A game declares what a run of it measures (``GameSpec.evaluators``: name -> ``{kind, ...settings}``);
the code of a kind lives with its game (``arithmetic_eval``, ``kuhn_poker_eval``,
``proposer_solver_eval``), and :data:`GAME_KINDS` names it for the one evaluator registry
(:func:`cogym.runners.evaluation.evaluators.kinds`). A game evaluator is a dataclass (its fields are the
settings a config may set under ``eval.evaluators.<name>``) with::

    name: str                                   # its metrics' name (the declared one)
    def evaluate(self, ctx: EvalContext) -> dict[str, float]
    def check(self, ctx: EvalContext) -> None   # optional: run when the run is built; raise EvaluatorError

Games import no model and no runner: an evaluator reaches the models of a run only through
:class:`EvalContext`, which the runner implements (``cogym.runners.evaluation.context.RunContext``,
for ``cogym train`` and ``cogym eval`` alike):

- ``game_id``, ``game_kwargs``: the game as the config makes it (``cogym.envs.make(id, **kwargs)``);
- ``policy_of(role)``: the model policy whose seats play ``role`` (None: scripted, or no such role);
  ``evaluated(name, policy)``: the policy an evaluator named ``name`` measures (``policy`` if given,
  else the first trained one with a seat); ``sampling(policy)``: its ``SamplingParams`` in training;
  ``system(role)``: the role's system message ("" when none);
- ``model(policy)``: a :class:`Model` for that policy's current weights; ``initial_model(policy)``: a
  new one loaded from the policy's configured model and never trained (load it once, keep it);
- ``play(games, seeds, seed=, label=)``: plays the given game copies to the end, one seed each,
  seated as in training (model seats sampling as configured; scripted seats get agents of their own,
  seeded with ``seed``), and returns ``(returns, infos)``: each game's seat -> return and seat -> last info;
- ``rng(seed)``: a context manager running its block on its own random stream seeded with ``seed``
  (torch, CPU and GPU) and restoring the caller's after, so an evaluation never moves training.

A :class:`Model` answers chats (lists of ``{"role", "content"}`` messages), rendered with the
model's own chat template: ``answer(chats, params, batch_size=None)`` -> one text per chat,
``batch_size`` chats per generate call (None: all at once); ``reply_distributions(chats,
classifiers, params, min_prob=, max_branches=)`` -> for each chat the exact probability of each
class of its reply (objects with ``probs: dict[str, float]`` and ``unresolved: float``;
``cogym.agents.reply_probs`` documents the classifiers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from cogym.core.errors import CogymError
from cogym.core.types import SamplingParams

Chat = Sequence[Mapping[str, str]]
# classify(text, finished) -> the reply's class once ``text`` decides it, else None (keep reading).
Classifier = Callable[[str, bool], "str | None"]


class Model(Protocol):
    """A model an evaluator may ask (the runner's wrapper of a policy)."""

    def answer(self, chats: Sequence[Chat], params: SamplingParams, *, batch_size: int | None = None) -> list[str]:
        ...

    def reply_distributions(self, chats: Sequence[Chat], classifiers: Sequence[Classifier], params: SamplingParams, *,
                            min_prob: float, max_branches: int) -> list[Any]:
        ...


class EvalContext(Protocol):
    """What a runner lends a game's evaluator (see the module docstring)."""

    game_id: str
    game_kwargs: Mapping[str, Any]

    def policy_of(self, role: str) -> str | None: ...

    def evaluated(self, name: str, policy: str = "") -> str: ...

    def sampling(self, policy: str) -> SamplingParams: ...

    def system(self, role: str) -> str: ...

    def model(self, policy: str) -> Model: ...

    def initial_model(self, policy: str) -> Model: ...

    def play(self, games: Sequence[Any], seeds: Sequence[int], *, seed: int, label: str
             ) -> tuple[list[dict[str, float]], list[dict[str, dict]]]: ...

    def rng(self, seed: int) -> AbstractContextManager: ...


def chat(system: str, text: str) -> list[dict[str, str]]:
    """What a seat is asked: the role's system message (when it has one), then the game's text."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


# The kinds the shipped games declare: kind -> "module:class", read by the evaluator registry on its
# first lookup. A user's game registers a kind of its own with register_evaluator (cogym.runners.evaluation).
GAME_KINDS: dict[str, str] = {
    "heldout_arithmetic": "cogym.envs.arithmetic_eval:HeldoutArithmetic",
    "kuhn_exploitability": "cogym.envs.kuhn_poker_eval:KuhnExploitability",
    "proposal_difficulty": "cogym.envs.proposer_solver_eval:ProposalDifficulty",
}


class EvaluatorError(CogymError, ValueError):
    """A setting an evaluator cannot meet in this run (raised by ``check``). The message leaves out the
    config key: the runner prefixes ``eval.evaluators.<name>`` (and ``.<key>`` when given) and raises
    it as the config's error."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


def for_game(ctx: EvalContext, name: str, kind: str, game_id: str) -> None:
    """Refuse, at build time, an evaluator of one game's kind in a run of another game."""
    if ctx.game_id != game_id:
        raise EvaluatorError(f"{kind} is for {game_id}, not {ctx.game_id}")
