"""Errors raised by cogym.agents that users are expected to catch."""


class ModelLoadError(ValueError):
    """A model path that does not exist, is not an HF model directory, or fails to load."""
