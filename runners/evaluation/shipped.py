"""The shipped evaluator kinds, registered on import: ``vs_scripted`` (any game with scripted twins,
in :mod:`~cogym.runners.evaluation.evaluators`), ``heldout_arithmetic``, ``kuhn_exploitability`` and
``proposal_difficulty`` (each in the module of the games that declare it)."""

from __future__ import annotations

from cogym.runners.evaluation import arithmetic, kuhn, proposals

KINDS = (arithmetic.HeldoutArithmetic, kuhn.KuhnExploitability, proposals.ProposalDifficulty)
