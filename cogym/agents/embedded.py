"""The models that ship inside cogym, by the name a config gives them (``model: tiny``), and their
directory under ``cogym/agents``. No torch here: the CLI and the tournament read the names cheaply.

- ``tiny``: the char-level arithmetic model (``cogym build-tiny-model``).
- ``tiny-verifier``: a copy of it fine-tuned to judge the tiny model's own sampled answers, a weak learned
  verifier (``cogym build-tiny-model --verifier``; docs/claims.md, reward_hacking).
- ``tiny-reasoner``: a solver of the same size trained from scratch to write out its working along one of
  several routes, slipping now and then as a sampled language model does, so that the majority of its samples
  is right far more often than one sample (``cogym build-tiny-model --reasoner``; docs/claims.md, ttrl).
"""

from __future__ import annotations

EMBEDDED_MODELS: dict[str, str] = {"tiny": "tiny", "tiny-verifier": "tiny_verifier", "tiny-reasoner": "tiny_reasoner"}
