"""The play loop: many live games, one batched call per agent per step.

``loop`` is the core shared by both levels (episodes, credit, contract checks); ``turns`` plays
whole messages, ``tokens`` plays token by token; ``seating`` maps seats to agents; ``agents``
makes the agent for a seat from a policy or a scripted twin."""

from cogym.core.lazy import lazy_exports

__all__ = ["rollout", "RolloutResult", "token_rollout"]
__getattr__, __dir__ = lazy_exports(__name__, {"rollout": "turns", "token_rollout": "tokens", "RolloutResult": "loop"}, __all__)
