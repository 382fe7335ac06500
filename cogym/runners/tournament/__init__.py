"""Tournaments: players x game x seating -> schedule -> batched games -> results -> ratings -> report.

``players`` (who plays: checkpoints, model directories, scripted twins), ``spec`` (what to play),
``settle`` (the settings checked against the game), ``schedule`` (pairings, seeds, batches),
``play`` (one batch of games), ``run`` (playing the batches) and ``results`` (results.jsonl). What the
games leave behind -- scoring, ratings, the leaderboard report, transcripts -- is
:mod:`cogym.runners.results`, which training shares.
"""

from cogym.core.lazy import lazy_exports

__all__ = ["Player", "report", "resolve_players", "run_tournament", "TournamentSpec"]
__getattr__, __dir__ = lazy_exports(__name__, {"Player": "players", "TournamentSpec": "spec", "resolve_players": "players", "run_tournament": "run", "report": "cogym.runners.results.leaderboard"}, __all__)
