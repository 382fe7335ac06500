"""Live ratings with openskill, updated one game at a time, as a league needs (the learner against each
snapshot), where a batch Bradley-Terry fit would refit everything after every game."""

from __future__ import annotations

from typing import Any, Sequence

import openskill.models as models

from cogym.runners.results.ratings import check_results, Result

STREAMING_MODELS = {
    "plackett_luce": "PlackettLuce",
    "bradley_terry_full": "BradleyTerryFull",
    "bradley_terry_part": "BradleyTerryPart",
    "thurstone_mosteller_full": "ThurstoneMostellerFull",
    "thurstone_mosteller_part": "ThurstoneMostellerPart",
}
_ALIASES = {"thurstone": "thurstone_mosteller_full", "thurstone_mosteller": "thurstone_mosteller_full",
            "bradley_terry": "bradley_terry_full"}


class StreamingRatings:
    """Online ratings, one game at a time, with openskill's Weng–Lin Bayesian models.

    Each player has a Gaussian skill belief ``(mu, sigma)``, created at ``(mu, sigma)`` on first
    appearance. ``model`` is one of :data:`STREAMING_MODELS` (``"plackett_luce"`` default;
    ``"thurstone"`` = ``"thurstone_mosteller_full"``, the TrueSkill-like Gaussian model;
    ``"bradley_terry"`` = ``"bradley_terry_full"``; for two-player games "full" and "part" agree).
    A draw is a tie (equal ranks). Unlike :func:`bradley_terry` the result depends on game order:
    use it for live tables and checkpoints, the batch functions for the final ranking.
    """

    def __init__(self, model: str = "plackett_luce", *, mu: float = 25.0, sigma: float = 25.0 / 3.0,
                 beta: float = 25.0 / 6.0, kappa: float = 1e-4, tau: float = 25.0 / 300.0) -> None:
        key = _ALIASES.get(model, model)
        if key not in STREAMING_MODELS:
            raise ValueError(f"model must be one of {sorted(STREAMING_MODELS) + sorted(_ALIASES)}, got {model!r}")
        for name, value in (("sigma", sigma), ("beta", beta), ("kappa", kappa)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if not tau >= 0:
            raise ValueError(f"tau must be >= 0, got {tau!r}")
        self.model_name = key
        self.params = dict(mu=float(mu), sigma=float(sigma), beta=float(beta), kappa=float(kappa), tau=float(tau))
        self._model = getattr(models, STREAMING_MODELS[key])(**self.params)
        self._ratings: dict[str, Any] = {}
        self.games = 0

    def _get(self, name: str):
        if name not in self._ratings:
            self._ratings[name] = self._model.rating(name=name)
        return self._ratings[name]

    def update(self, result: Result) -> None:
        """Rate one game (a draw as a tie)."""
        if not isinstance(result, Result):
            raise TypeError(f"update takes a Result(a, b, score), got {type(result).__name__}: {result!r}")
        # openskill ranks: lower is better, equal is a tie.
        ranks = {1.0: [0, 1], 0.0: [1, 0], 0.5: [0, 0]}[result.score]
        [[a], [b]] = self._model.rate([[self._get(result.a)], [self._get(result.b)]], ranks=ranks)
        self._ratings[result.a], self._ratings[result.b] = a, b
        self.games += 1

    def update_many(self, results: Sequence[Result]) -> None:
        """Rate games in order."""
        for r in check_results(results):
            self.update(r)

    def ratings(self) -> dict[str, tuple[float, float]]:
        """``{name: (mu, sigma)}`` in order of first appearance."""
        return {name: (float(r.mu), float(r.sigma)) for name, r in self._ratings.items()}

    def ordinal(self, name: str, z: float = 3.0) -> float:
        """Conservative skill ``mu - z * sigma`` (openskill's ordinal); KeyError for an unseen player."""
        if name not in self._ratings:
            raise KeyError(f"no games rated for player {name!r}; known: {list(self._ratings)}")
        r = self._ratings[name]
        return float(r.mu - z * r.sigma)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state; :meth:`from_state_dict` restores it exactly."""
        return {"version": 1, "model": self.model_name, "params": dict(self.params), "games": self.games,
                "players": {name: [mu, sigma] for name, (mu, sigma) in self.ratings().items()}}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "StreamingRatings":
        if state.get("version") != 1:
            raise ValueError(f"unsupported StreamingRatings state version {state.get('version')!r} (expected 1)")
        out = cls(state["model"], **state["params"])
        out.games = int(state["games"])
        for name, (mu, sigma) in state["players"].items():
            out._ratings[name] = out._model.rating(mu=float(mu), sigma=float(sigma), name=name)
        return out
