"""The shipped evaluator kinds, registered on import: ``vs_scripted`` (any game with scripted twins,
in :mod:`~cogym.runners.evaluation.evaluators`) and every kind a shipped game declares (registered by
:mod:`cogym.envs` with its games, each in a module beside the game that declares it)."""

from __future__ import annotations

from cogym.runners.evaluation.evaluators import kinds

KINDS = tuple(kinds().values())
