"""Errors raised by cogym.agents that users are expected to catch (:mod:`cogym.core.errors`)."""

from cogym.core.errors import ModelLoadError

__all__ = ["ModelLoadError"]
