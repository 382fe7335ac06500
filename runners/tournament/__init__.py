"""Tournaments: players x game x seating -> schedule -> batched games -> results -> ratings -> report."""

from cogym.core.lazy import lazy_exports

__all__ = ["Player", "report", "resolve_players", "run_tournament", "TournamentSpec"]
__getattr__, __dir__ = lazy_exports(__name__, {"Player": "run", "TournamentSpec": "run", "resolve_players": "run", "run_tournament": "run", "report": "run"}, __all__)
