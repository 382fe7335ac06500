"""Every golden run (tests/golden/golden.py) logs its recorded non-timing metrics (floats to the
rounding that differs between CPUs, tests.rounding.close; everything else exactly).

A failure lists each metric that moved. If the change was meant to move numbers, regenerate the
files with ``python tests/golden/golden.py [NAME ...]`` in a commit of its own that says why and
by how much; never loosen this comparison to make a refactor pass.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/golden holds scripts, not a package
from golden import HERE, differences, run_golden, runs  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", sorted(runs()))
def test_golden_run_logs_its_recorded_metrics(name: str, tmp_path: Path) -> None:
    expected = json.loads((HERE / f"{name}.json").read_text())
    actual = json.loads(json.dumps(run_golden(name, tmp_path)))  # the same JSON round trip as the record
    diffs = differences(expected, actual, name)
    assert not diffs, f"{len(diffs)} golden values moved:\n" + "\n".join(diffs[:40])


def test_differences_reports_a_moved_metric() -> None:
    """The comparison itself: a changed, missing or new value is reported; NaN equals NaN."""
    base = {"metrics": [{"a": 1.0, "b": float("nan")}], "summary": {"s": 0.5}}
    assert differences(base, json.loads(json.dumps(base))) == []
    moved = {"metrics": [{"a": 1.001, "b": float("nan")}], "summary": {"s": 0.5}}
    assert differences(base, moved) == [".metrics[0].a: expected 1.0, got 1.001"]
    rounded = {"metrics": [{"a": 1.00003, "b": float("nan")}], "summary": {"s": 0.5 + 3e-6}}  # another CPU's rounding
    assert differences(base, rounded) == []
    assert differences({"x": 0.0}, {"x": 2e-5}) == [".x: expected 0.0, got 2e-05"]  # near zero: 1e-5 absolute
    assert differences({"x": float("nan")}, {"x": 1.0}) == [".x: expected nan, got 1.0"]
    assert differences({"n": 3}, {"n": 3.0}) == [".n: expected 3, got 3.0"]  # counts and flags stay exact
    assert differences({"f": True}, {"f": 1}) == [".f: expected True, got 1"]
    assert differences(base, {"metrics": [{"a": 1.0}], "summary": {"s": 0.5, "t": 1}}) == [
        ".metrics[0].b: missing", ".summary.t: new metric"]
    assert differences(base, {"metrics": [], "summary": {"s": 0.5}}) == [".metrics: 1 rows expected, 0 logged"]
