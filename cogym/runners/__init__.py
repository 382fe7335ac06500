"""cogym runners: training, tournaments and what they write.

    from cogym.runners import load_config
    from cogym.runners.train import train
    summary = train(load_config("configs/kuhn_poker.yaml", ["run.iterations=5"]))

    from cogym.runners import read_transcripts, format_transcripts
    print(format_transcripts(read_transcripts("runs/kuhn_poker-20260101-120000")))

The package is split by subsystem: ``rollout`` (the play loop), ``train``, ``evaluation``,
``tournament``, ``ray``, ``config``, ``cli`` and ``research`` (claims, ``cogym reproduce``); each
subpackage's docstring says what is in it (``from cogym.runners.train import train``).

Names are imported on first use: ``import cogym.runners.cli`` (the ``cogym`` command) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "load_config": "config.load", "Config": "config.schema", "RunConfig": "config.schema", "GameConfig": "config.schema",
    "PolicyConfig": "config.schema", "PromptConfig": "config.schema", "EvalConfig": "config.schema", "LeagueConfig": "config.schema",
    "RayConfig": "config.schema", "default_config_path": "config.schema",
    "ConfigError": "cogym.core.errors",
    "Run": "train.build",
    "RolloutResult": "rollout.loop",
    "TrainHook": "train.hooks",
    "register_evaluator": "evaluation.evaluators",
    "import_game_modules": "config.modules",
    "Player": "tournament.players", "TournamentSpec": "tournament.spec", "resolve_players": "tournament.players",
    "run_tournament": "tournament.run", "report": "results.leaderboard",
    "TRANSCRIPTS_FILE": "results.transcripts", "read_transcripts": "results.transcripts", "format_transcripts": "results.transcripts",
    "format_transcript": "results.transcripts", "transcript_row": "results.transcripts",
}

__all__ = ["Config", "ConfigError", "default_config_path", "EvalConfig", "format_transcript", "format_transcripts",
           "GameConfig", "import_game_modules", "LeagueConfig", "load_config", "Player", "PolicyConfig",
           "PromptConfig", "RayConfig", "read_transcripts", "register_evaluator", "report", "resolve_players",
           "RolloutResult", "Run", "run_tournament", "RunConfig", "TournamentSpec", "TrainHook",
           "transcript_row", "TRANSCRIPTS_FILE"]  # every name of _EXPORTS


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module if module.startswith("cogym.") else f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names above load on first use
    from cogym.core.errors import ConfigError

    from .train.build import Run

    from .config.load import load_config
    from .config.schema import (Config, EvalConfig, GameConfig, LeagueConfig, PolicyConfig, PromptConfig, RayConfig,
                                RunConfig, default_config_path)
    from .rollout.loop import RolloutResult
    from .evaluation.evaluators import register_evaluator
    from .train.hooks import TrainHook
    from .config.modules import import_game_modules
    from .tournament.players import Player, resolve_players
    from .results.leaderboard import report
    from .tournament.run import run_tournament
    from .tournament.spec import TournamentSpec
    from .results.transcripts import TRANSCRIPTS_FILE, format_transcript, format_transcripts, read_transcripts, transcript_row
