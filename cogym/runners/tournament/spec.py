"""What a tournament plays: the game, the players, the schedule and scoring, seeds and batch sizes.

The tournament's own settings are declared once, as the ``tournament:`` section of the config schema
(:class:`~cogym.runners.config.schema.TournamentSection`: its keys, types, choices and defaults);
:class:`TournamentSpec` is that section with the players resolved, plus the keys of the ``game``,
``sampling`` and ``prompts`` sections a tournament reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from cogym.runners.config.schema import TournamentConfig, TournamentSection
from cogym.runners.tournament.players import Player


@dataclass
class TournamentSpec(TournamentSection):
    """What to play; see :func:`~cogym.runners.tournament.run.run_tournament`. Every ``tournament:`` key
    (``schedule``, ``games_per_pairing``, ``sides``, ``fixed``, ``seed``, ...) is a field, with the
    schema's default; ``players`` are resolved players here (``policy`` and ``role`` were read to
    resolve them; ``out`` and ``backend`` are the caller's)."""

    game: str = ""  # the game id (game.id)
    players: list[Player] = field(default_factory=list)
    game_kwargs: dict = field(default_factory=dict)  # game.kwargs
    max_new_tokens: int = 0  # sampling.max_new_tokens: model players' message limit; 0: each checkpoint's run's, else 8
    temperature: float = 1.0  # sampling.temperature
    prompts: dict[str, str] = field(default_factory=dict)  # role -> system message (over the runs' own)
    modules: list[str] = field(default_factory=list)  # game.modules: imported first (Ray workers import them too)
    fixed_players: dict[str, Player] = field(default_factory=dict)  # fixed model agents, spec -> Player (settle)

    @classmethod
    def of(cls, tc: TournamentConfig, players: list[Player]) -> "TournamentSpec":
        """The spec of a ``cogym tournament`` config: its ``tournament:`` keys as they are, ``players``
        (the section's players, resolved) and the game, sampling and prompts a tournament uses."""
        section = {f.name: getattr(tc.tournament, f.name) for f in dataclasses.fields(TournamentSection)}
        return cls(**{**section, "players": players}, game=tc.game.id, game_kwargs=tc.game.kwargs,
                   modules=tc.game.modules, max_new_tokens=tc.sampling.max_new_tokens,
                   temperature=tc.sampling.temperature, prompts={role: pc.system for role, pc in tc.prompts.items()})
