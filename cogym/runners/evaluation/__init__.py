"""Evaluators: what a run measures before and after training, declared by games and configs."""

from cogym.core.lazy import lazy_exports

__all__ = ["register_evaluator"]
__getattr__, __dir__ = lazy_exports(__name__, {"register_evaluator": "evaluators"}, __all__)
