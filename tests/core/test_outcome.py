"""The game -> learner contract (cogym.core.outcome) and the error hierarchy (cogym.core.errors)."""

from __future__ import annotations

import numpy as np
import pytest

from cogym.core.errors import CogymError, ConfigError, DatasetError, GameError, ModelLoadError
from cogym.core.outcome import SeatOutcome


def test_a_valid_info_becomes_typed_facts_and_keeps_the_games_own_keys() -> None:
    out = SeatOutcome.from_info({"role": "solver", "correct": np.bool_(True), "invalid": False, "reference": "42",
                                 "metrics": {"len": 3, "ok": True, "undefined": None}, "problem": "6*7"})
    assert out.correct is True and type(out.correct) is bool and out.reference == "42"
    assert dict(out.metrics) == {"len": 3.0, "ok": 1.0, "undefined": None}
    assert out.get("problem") == "6*7" and out.get("task", "one task") == "one task" and out.get("role") == "solver"
    assert SeatOutcome.from_info(None) == SeatOutcome()
    # Games written before the contract: 0/1 flags and numpy numbers read as the types they stand for.
    old = SeatOutcome.from_info({"correct": 1, "invalid": np.int64(0), "reference": np.int64(48)})
    assert old.correct is True and old.invalid is False and old.reference == 48


@pytest.mark.parametrize("info, message", [
    ({"correct": 2}, r"\['correct'\] must be True, False \(or 1, 0\) or None, got 2"),
    ({"invalid": "no"}, r"\['invalid'\] must be True or False"),
    ({"reason": 3}, r"\['reason'\] must be a str or None"),
    ({"reference": True}, r"\['reference'\] must be a str, a number or None"),
    ({"task": ["a"]}, r"\['task'\] must be hashable"),
    ({"metrics": {"m": float("nan")}}, r"\['metrics'\]\['m'\] must be a finite number"),
    ({"metrics": {"m": "high"}}, r"\['metrics'\]\['m'\] must be a finite number"),
    ({"role": None}, r"\['role'\] must be a str"),
])
def test_a_mistyped_fact_is_a_game_error_naming_the_key(info: dict, message: str) -> None:
    with pytest.raises(GameError, match=message):
        SeatOutcome.from_info(info, where="infos['s']")


def test_every_user_error_is_a_cogym_error_and_still_a_value_error() -> None:
    for cls in (ConfigError, GameError, ModelLoadError, DatasetError):
        assert issubclass(cls, CogymError) and issubclass(cls, ValueError)
    from cogym.agents.errors import ModelLoadError as FromAgents
    from cogym.envs.errors import DatasetError as FromEnvs
    from cogym.core.errors import ConfigError as FromRunners

    assert (FromAgents, FromEnvs, FromRunners) == (ModelLoadError, DatasetError, ConfigError)
