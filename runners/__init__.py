"""cogym runners: training, tournaments and what they write.

    from cogym.runners import load_config
    from cogym.runners.train import train
    summary = train(load_config("configs/kuhn_poker.yaml", ["run.iterations=5"]))

    from cogym.runners import read_transcripts, format_transcripts
    print(format_transcripts(read_transcripts("runs/kuhn_poker-20260101-120000")))

``train``, ``rollout``, ``token_rollout``, ``build`` and ``evaluate`` are modules of this package:
import their functions from them (``from cogym.runners.train import train``).

Names are imported on first use: ``import cogym.runners.cli`` (the ``cogym`` command) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "load_config": "config", "Config": "config", "RunConfig": "config", "GameConfig": "config",
    "PolicyConfig": "config", "PromptConfig": "config", "EvalConfig": "config", "LeagueConfig": "config",
    "RayConfig": "config", "default_config_path": "config",
    "ConfigError": "cogym.core.errors",
    "Run": "build",
    "RolloutResult": "core",
    "TrainHook": "hooks",
    "register_evaluator": "evaluation",
    "import_game_modules": "modules",
    "Player": "tournament", "TournamentSpec": "tournament", "resolve_players": "tournament",
    "run_tournament": "tournament", "report": "tournament",
    "TRANSCRIPTS_FILE": "transcripts", "read_transcripts": "transcripts", "format_transcripts": "transcripts",
    "format_transcript": "transcripts", "transcript_row": "transcripts",
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

    from .build import Run

    from .config import (Config, EvalConfig, GameConfig, LeagueConfig, PolicyConfig, PromptConfig,
                         RayConfig, RunConfig, default_config_path, load_config)
    from .core import RolloutResult
    from .evaluation import register_evaluator
    from .hooks import TrainHook
    from .modules import import_game_modules
    from .tournament import Player, TournamentSpec, report, resolve_players, run_tournament
    from .transcripts import TRANSCRIPTS_FILE, format_transcript, format_transcripts, read_transcripts, transcript_row
