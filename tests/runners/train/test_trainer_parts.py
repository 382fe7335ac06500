"""The trainer's small parts on their own: hooks, metric sinks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cogym.runners.train.hooks import TrainHook, after_rollout, seat_maps
from cogym.runners.train.sinks import JsonlSink, Sinks


class _Seater(TrainHook):
    def __init__(self, tag: str) -> None:
        self.tag, self.seen = tag, []

    def seat_maps(self, seat_map, iteration, n_games, group_size, round_=0):
        return [f"{self.tag}:{g}" for g in range(n_games)], f"ctx-{self.tag}-{iteration}-{round_}"

    def after_rollout(self, result, context, iteration):
        self.seen.append(context)
        return {f"{self.tag}/played": float(iteration)}


def test_hooks_seat_players_and_get_their_context_back() -> None:
    quiet, seater = TrainHook(), _Seater("l")
    maps, contexts = seat_maps([quiet, seater], "config-map", 3, 2, 1, round_=1)
    assert maps == ["l:0", "l:1"] and contexts == [None, "ctx-l-3-1"]
    assert seat_maps([quiet], "config-map", 3, 2, 1) == ("config-map", [None])
    assert after_rollout([quiet, seater], None, contexts, 3) == {"l/played": 3.0}
    assert seater.seen == ["ctx-l-3-1"]


def test_two_hooks_that_both_seat_players_are_refused() -> None:
    with pytest.raises(ValueError, match="at most one"):
        seat_maps([_Seater("a"), _Seater("b")], "config-map", 1, 2, 1)


def test_jsonl_sink_drops_rows_after_the_resumed_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for it in range(4):
        sink.log({"iteration": it, "x": it * 1.5})
    sink.close()
    resumed = JsonlSink(path, start_iteration=2)  # the checkpoint was iteration 1
    assert [r["iteration"] for r in resumed.rows()] == [0, 1]
    resumed.log({"iteration": 2, "x": 9.0})
    sinks = Sinks([resumed], resumed)
    assert sinks.logged(0) == {"iteration": 0, "x": 0.0} and sinks.logged(7) == {}
    sinks.close()
    assert [json.loads(line)["x"] for line in path.read_text().splitlines()] == [0.0, 1.5, 9.0]
