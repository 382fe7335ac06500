"""Kuhn poker's evaluator (``kuhn_exploitability``, declared by kuhn_poker-v0): the exact
exploitability of the policy's strategy, from its move probabilities at the game's 12 information sets.
It asks the model through :class:`cogym.envs.evaluation.EvalContext` (see there); the best-response
math is :func:`cogym.envs.kuhn_poker.exploitability`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from cogym.envs.evaluation import EvalContext, EvaluatorError, chat, for_game
from cogym.envs.kuhn_poker import (average_strategy, CARDS, exploitability, GAME_ID, INFOSETS, reply_classifier,
                                   ROLES, turn_text)


@dataclass
class KuhnExploitability:
    """Exact exploitability of ``policy`` in kuhn_poker-v0, both seats played by it.

    Its move probabilities at the 12 information sets are computed exactly from the model
    (``Model.reply_distributions``, :func:`cogym.agents.reply_probs.reply_distributions` in the runner:
    every reply path, each seat prompted as in training, with the role's system message), an invalid
    reply counting as a fold as the game scores it (the card written in the game's ``card_style``);
    then :func:`cogym.envs.kuhn_poker.exploitability` of that strategy. Metrics:
    ``eval/<name>/exploitability`` (NashConv / 2; 0 at equilibrium, 1/3 or more for any strategy that
    ignores its card), ``eval/<name>/card_spread`` (mean over the four histories of the largest minus
    the smallest probability of the aggressive move across the three cards: 0 for card-blind play),
    ``eval/<name>/invalid`` (mean probability of an invalid reply) and ``eval/<name>/unresolved`` (the
    largest probability mass left on reply paths below ``min_prob`` or past ``max_branches``, counted
    as invalid: about 1e-4 for the embedded model, more for a model that writes noise).
    With ``average: K``, also ``eval/<name>/avg_exploitability``: the exploitability of the policy
    averaged over its last K evaluations (a hand played by one of those K strategies drawn at random,
    :func:`cogym.envs.kuhn_poker.average_strategy`), the strategy that fictitious play converges
    with; the window counts this run's evaluations since it started (or resumed).
    """

    name: str = "exploitability"
    policy: str = ""
    greedy: bool = False
    min_prob: float = 1e-6  # reply paths less likely than this are not followed
    max_branches: int = 1024  # open reply paths followed at once (a model that writes noise is cut here)
    average: int = 0  # > 0: also the exploitability of the mixture of the last `average` evaluated strategies

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_prob < 1e-2:
            raise ValueError(f"min_prob must be in [0, 0.01), got {self.min_prob}")
        if self.max_branches < 1:
            raise ValueError(f"max_branches must be >= 1, got {self.max_branches}")
        if self.average < 0:
            raise ValueError(f"average must be >= 0, got {self.average}")
        self._history: list = []  # the strategies of this run's evaluations, oldest first (not checkpointed)

    def check(self, ctx: EvalContext) -> None:
        for_game(ctx, self.name, "kuhn_exploitability", GAME_ID)
        sampling = ctx.sampling(ctx.evaluated(self.name, self.policy))
        if sampling.top_p != 1.0 or sampling.top_k:
            raise EvaluatorError(f"exact move probabilities need plain temperature sampling "
                              f"(top_p 1.0, top_k 0), got top_p {sampling.top_p}, top_k {sampling.top_k}")

    def _distributions(self, ctx: EvalContext) -> list:
        """The policy's reply distribution at each of ``INFOSETS``, in order."""
        pid = ctx.evaluated(self.name, self.policy)
        sampling = ctx.sampling(pid)
        if self.greedy:
            sampling = dataclasses.replace(sampling, temperature=0.0)
        style = ctx.game_kwargs.get("card_style", "letters")  # the text the game shows its seats
        chats, classifiers = [], []
        for card, history in INFOSETS:
            moves = tuple(history.split())
            chats.append(chat(ctx.system(ROLES[len(moves) % 2]), turn_text(card, moves, style)))
            classifiers.append(reply_classifier(moves))
        return ctx.model(pid).reply_distributions(chats, classifiers, sampling, min_prob=self.min_prob,
                                                  max_branches=self.max_branches)

    @staticmethod
    def _table(dists: list) -> dict[tuple[str, str], tuple[float, float, float]]:
        return {info: (d.probs.get("aggressive", 0.0), d.probs.get("passive", 0.0),
                       d.probs.get("invalid", 0.0) + d.unresolved) for info, d in zip(INFOSETS, dists)}

    def strategy(self, ctx: EvalContext) -> dict[tuple[str, str], tuple[float, float, float]]:
        """(card, history text) -> (P(aggressive), P(passive), P(invalid or unresolved)) of the policy."""
        return self._table(self._distributions(ctx))

    def evaluate(self, ctx: EvalContext) -> dict[str, float]:
        dists = self._distributions(ctx)
        table = self._table(dists)
        spreads = [max(table[(c, h)][0] for c in CARDS) - min(table[(c, h)][0] for c in CARDS)
                   for h in ("", "check", "bet", "check bet")]
        out = {f"eval/{self.name}/exploitability": exploitability(table),
               f"eval/{self.name}/card_spread": float(np.mean(spreads)),
               f"eval/{self.name}/invalid": float(np.mean([t[2] for t in table.values()])),
               f"eval/{self.name}/unresolved": max(d.unresolved for d in dists)}
        if self.average:
            self._history = [*self._history, table][-self.average:]
            out[f"eval/{self.name}/avg_exploitability"] = exploitability(average_strategy(self._history))
        return out
