"""The execution seam (cogym/runners/train/execution.py): the training loop calls its Execution in the
order the module promises, whichever it is, and ``run.backend`` picks the implementation without the
loop importing Ray's modules."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from cogym.runners.config.load import load_config
from cogym.runners.train import loop as train_mod
from cogym.runners.train.execution import InProcess, Trained, Updates

DEFAULT = Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml")))
SMALL = ["run.iterations=2", "game.num_games=2", "run.eval_every=0", "run.checkpoint_every=0", "run.tensorboard=false",
         "run.plot=false", "eval.declared=false", "learners.solver.engine=torch", "learners.proposer.engine=torch"]


class Recording(InProcess):
    """An execution that plays and updates in process, as InProcess does, and records every call."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.calls: list[str] = []

    def open(self, checkpoint) -> None:
        self.calls.append("open")

    @property
    def learners(self) -> dict:
        self.calls.append("learners")
        return {}

    def attach(self, trained) -> None:
        # what an execution sees of the run is its policies and learners, never the whole config
        assert isinstance(trained, Trained) and not hasattr(trained, "cfg")
        assert set(trained.learners) <= set(trained.policies) and trained.learners
        self.calls.append("attach")

    def rollouts(self):
        self.calls.append("rollouts")
        inner, calls = super().rollouts(), self.calls

        class Rollouts:
            play = inner.play

            def submit(self, *args, iteration: int = 0, **kwargs):
                calls.append(f"submit {iteration}")
                return inner.submit(*args, iteration=iteration, **kwargs)

            def collect(self, started):
                calls.append("collect")
                return inner.collect(started)

        return Rollouts()

    def batch_metrics(self, trained, batches) -> dict[str, float]:
        self.calls.append("batch_metrics")
        return {"seam/batch": 1.0}

    def updates(self, trained, batches) -> Updates:
        self.calls.append("updates")
        calls = self.calls

        class Recorded(Updates):
            def finish(self, pid: str) -> dict[str, float]:
                calls.append(f"finish {pid}")
                return super().finish(pid)

        return Recorded(trained, batches)

    def after_update(self, trained) -> dict[str, float]:
        self.calls.append("after_update")
        return {"seam/after": 2.0}

    def refresh(self, trained) -> None:
        self.calls.append("refresh")

    def summary(self) -> dict:
        self.calls.append("summary")
        return {"seam_summary": 3}

    def close(self) -> None:
        self.calls.append("close")


def _run(monkeypatch, tmp_path: Path, *extra: str) -> tuple[list[str], dict, list[dict]]:
    made: list[Recording] = []

    def execution_for(cfg):
        made.append(Recording(cfg))
        return made[-1]

    monkeypatch.setattr(train_mod, "execution_for", execution_for)
    cfg = load_config(DEFAULT, [*SMALL, f"run.out_dir={tmp_path}", *extra])
    summary = train_mod.train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return made[-1].calls, summary, rows


def _iteration() -> list[str]:
    return ["batch_metrics", "updates", "finish proposer", "finish solver", "after_update"]


def test_the_loop_calls_its_execution_in_the_promised_order(monkeypatch, tmp_path: Path) -> None:
    calls, summary, rows = _run(monkeypatch, tmp_path)
    assert calls[:4] == ["open", "learners", "attach", "rollouts"]
    assert calls[-2:] == ["summary", "close"]
    body = [c for c in calls[4:-2] if c != "refresh"]
    step = ["submit {}", "collect", *_iteration()]
    assert body == [c.format(1) for c in step] + [c.format(2) for c in step]
    last_update = len(calls) - calls[::-1].index("after_update")
    assert "refresh" in calls[last_update:]  # the final evaluation reads the driver's policies
    assert summary["seam_summary"] == 3
    steps = [r for r in rows if "rollout_s" in r]
    assert [(r["seam/batch"], r["seam/after"]) for r in steps] == [(1.0, 2.0), (1.0, 2.0)]


def test_one_step_ahead_submits_the_next_rollout_before_the_update(monkeypatch, tmp_path: Path) -> None:
    """``run.async: one_step`` (a Ray setting; the fake execution plays in process): iteration 2's rollout
    is submitted right after iteration 1's is collected, before iteration 1's update; none after the last."""
    calls, _, _ = _run(monkeypatch, tmp_path, "run.backend=ray", "run.async=one_step", "ray.num_rollout_workers=1")
    body = [c for c in calls[4:-2] if c != "refresh"]
    assert body == ["submit 1", "collect", "submit 2", *_iteration(), "collect", *_iteration()]


def test_run_backend_picks_the_execution_and_the_loop_imports_no_ray_module() -> None:
    pytest.importorskip("ray")
    script = f"""
import sys
from pathlib import Path
import cogym.runners.train.loop
from cogym.runners.config.load import load_config
from cogym.runners.train.backends import execution_for
assert not [m for m in sys.modules if m.startswith("cogym.runners.ray")], "the loop imported Ray's modules"
local = execution_for(load_config(Path({str(DEFAULT)!r}), []))
assert type(local).__name__ == "InProcess" and "ray" not in sys.modules
ray = execution_for(load_config(Path({str(DEFAULT)!r}), ["run.backend=ray", "ray.learner_workers=2",
                                                          "ray.learners=separate"]))
print(type(ray).__module__, type(ray).__name__, ray.learner_world, "ray" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["cogym.runners.ray.execution", "RayExecution", "2", "True"]
