"""What a tournament plays: the game, the players, the schedule and scoring, seeds and batch sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from cogym.runners.config.schema import SCHEDULES, SCORINGS
from cogym.runners.tournament.players import Player



# --------------------------------------------------------------------------------------- the runner
@dataclass
class TournamentSpec:
    """What to play; see :func:`run_tournament`."""

    game: str
    players: list[Player]
    game_kwargs: dict = field(default_factory=dict)
    sides: list[list[str]] | None = None  # seats of side 0 and side 1; None: the game's default
    fixed: dict[str, str] = field(default_factory=dict)  # seat or role -> scripted:<twin> or model dir
    schedule: str = "round_robin"
    games_per_pairing: int = 100
    pool: list[str] = field(default_factory=list)  # gauntlet: the fixed pool (player names)
    swiss_rounds: int = 0  # swiss: rounds (0: ceil(log2(players)) + 1, at most players - 1)
    anchor: str | None = None  # the player whose rating is fixed at 0 (default: the mean is 0)
    seed: int = 0
    batch_games: int = 256  # games played at once
    max_loaded: int = 0  # model players held in memory at once (0: all); batches then never need more
    max_new_tokens: int = 0  # model players' message limit; 0: each checkpoint's run's, else 8
    temperature: float = 1.0
    prompts: dict[str, str] = field(default_factory=dict)  # role -> system message (over the runs' own)
    modules: list[str] = field(default_factory=list)  # game modules imported first (Ray workers import them too)
    scoring: str | None = None  # competitive | paired; None: paired when players are bound to seats, else the
    # game's tournament_scoring, else competitive (resolved by settle)
    fixed_players: dict[str, Player] = field(default_factory=dict)  # fixed model agents, spec -> Player (settle)
    transcripts: int = 0  # the first N games of each pairing keep their messages in transcripts.jsonl (runners/transcripts.py)
