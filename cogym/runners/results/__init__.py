"""What games leave behind, shared by training, evaluation and tournaments.

``scoring`` (a game's score for each side, the cross-play matrix), ``ratings`` (Bradley-Terry with
bootstrap intervals; the fit itself in ``bt_fit``), ``live_ratings`` (openskill ratings updated game
by game, for a training league), ``leaderboard`` (the report: leaderboard, matrix, plots) and
``transcripts`` (the messages of kept games; ``transcript_check`` checks rows read from others' files).

This package sits below :mod:`cogym.runners.train` and :mod:`cogym.runners.tournament` (both import it)
and imports neither.
"""
