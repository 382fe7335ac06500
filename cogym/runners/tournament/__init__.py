"""Tournaments: players x game x seating -> schedule -> batched games -> results -> ratings -> report.

``players`` (who plays: checkpoints, model directories, scripted twins), ``spec`` (what to play),
``settle`` (the settings checked against the game), ``schedule`` (pairings, seeds, batches),
``run`` (playing the batches), ``results`` (results.jsonl), ``scoring``, ``ratings``
(Bradley-Terry with bootstrap intervals, openskill for leagues), ``leaderboard`` (the report: leaderboard, matrix,
plots) and ``transcripts`` (the messages of kept games).
"""

from cogym.core.lazy import lazy_exports

__all__ = ["Player", "report", "resolve_players", "run_tournament", "TournamentSpec"]
__getattr__, __dir__ = lazy_exports(__name__, {"Player": "players", "TournamentSpec": "spec", "resolve_players": "players", "run_tournament": "run", "report": "leaderboard"}, __all__)
