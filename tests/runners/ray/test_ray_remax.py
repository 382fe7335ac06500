"""ReMax's greedy games on Ray (run.backend: ray): a rollout worker plays a round's greedy games as the
one-process run does, scripted seats included (Kuhn poker's scripted:random second seat), so a remax
run logs the same metrics either way. The greedy games themselves: tests/runners/train/test_remax_baseline.py."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train
from tests.runners.ray.ray_runs import ROUNDED, metric_rows

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = pytest.mark.slow

KUHN = Path(str(resources.files("cogym.configs").joinpath("kuhn_poker.yaml")))
SMALL = ["run.iterations=2", "game.num_games=8", "game.group_size=2", "eval.declared=false", "run.tensorboard=false",
         "run.plot=false", "learners.player.algorithm=remax", "run.threads=1", "ray.num_cpus=0.5"]


def test_a_remax_run_on_a_ray_worker_logs_the_metrics_of_one_process(local_cluster, tmp_path: Path) -> None:
    rows = {}
    for name, extra in (("local", []), ("ray", ["run.backend=ray", "ray.num_rollout_workers=1"])):
        train(load_config(KUHN, [*SMALL, *extra, f"run.out_dir={tmp_path}"]), tmp_path / name, progress=False)
        rows[name] = [{k: v for k, v in r.items() if not k.endswith(ROUNDED)} for r in metric_rows(tmp_path / name)]
    steps = [r for r in rows["local"] if "greedy_tokens" in r]
    assert [r["iteration"] for r in steps] == [1, 2] and all(r["player/remax_prompt_mismatch"] == 0 for r in steps)
    assert any("remax_baseline" in k for r in steps for k in r)
    assert rows["ray"] == rows["local"]  # the sampled and greedy games, their rewards, baselines and advantages
