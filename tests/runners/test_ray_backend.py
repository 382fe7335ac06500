"""Rollouts on Ray (run.backend: ray, runners/ray/) on a local 2-CPU cluster with the tiny model:
the same metrics as the one-process run, a SIGKILLed worker restarted with no episode lost or counted
twice, one-step off-policy with its staleness bound, a cluster started by `ray start`, and the config's
refusals. Every run here is a few iterations of a shrunken config; the full-size figures (the default
config, the benchmark) are measured by hand (benchmarks/ray_overhead.py)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from cogym.core.errors import ConfigError
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train
from tests.rounding import same

ROUNDED = ("/loss", "/grad_norm", "/ppo_kl", "/logprob_drift")  # metrics built on behaviour log-probs

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = pytest.mark.slow

# The default config (proposer and 8 solvers, GRPO), shrunk: 8 games an iteration, 3 iterations.
SMALL = ["run.iterations=3", "game.num_games=8", "run.eval_every=0", "run.checkpoint_every=0",
         "run.tensorboard=false", "run.plot=false", "eval.declared=false", "learners.solver.engine=torch",
         "learners.proposer.engine=torch"]
# Wall-clock figures (rollout_s, update_s, iteration_s, tokens_per_s, ...) and the Ray-only bookkeeping
# (ray/*) differ between backends; everything else must not.


DEFAULT = Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml")))


def _cfg(tmp_path: Path, *extra: str):
    return load_config(DEFAULT, SMALL + [f"run.out_dir={tmp_path}", *extra])


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_s") and not k.startswith("ray/")} for r in rows]


@pytest.fixture(scope="module")
def local_cluster():
    """One local Ray instance for the module (2 CPUs: two rollout workers of 1 CPU each)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    """The one-process run of SMALL (runs before any Ray fixture needs the CPUs)."""
    out = tmp_path_factory.mktemp("local")
    train(_cfg(out), out / "run", progress=False)
    return _rows(out / "run")


def test_the_default_config_on_two_workers_logs_the_metrics_of_one_process(local_cluster, tmp_path: Path) -> None:
    """The shipped default config (32 games, GRPO solver and REINFORCE++ proposer on DeepSpeed, the
    held-out evaluation before and after) for 5 iterations: in-process, then on 2 Ray workers."""
    quiet = ["run.iterations=5", "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=0"]
    runs = {}
    for name, extra in (("local", []), ("ray", ["run.backend=ray", "ray.num_rollout_workers=2"])):
        cfg = load_config(DEFAULT, [*quiet, *extra, f"run.out_dir={tmp_path}"])
        runs[name] = (train(cfg, tmp_path / name, progress=False), _rows(tmp_path / name))
    (local_summary, local), (ray_summary, on_ray) = runs["local"], runs["ray"]
    assert [r["iteration"] for r in on_ray if "turns" in r] == [1, 2, 3, 4, 5]
    assert same(on_ray, local)  # every non-timing metric of every iteration and evaluation row (floats to rounding)
    # Exactly: what was sampled and scored (tokens, rewards, counts, advantages). To rounding only: what is built on
    # the behaviour log-probs, which a worker computes with its own torch threads (docs/ray.md).
    exact = lambda rows: [{k: v for k, v in r.items() if not k.endswith(ROUNDED) and not k.startswith("eval/")}  # noqa: E731
                          for r in rows]
    assert exact(on_ray) == exact(local)
    assert ray_summary["ray_workers"] == 2 and ray_summary["ray_worker_restarts"] == 0
    assert same(ray_summary["heldout_acc_after"], local_summary["heldout_acc_after"])
    raw = [json.loads(line) for line in (tmp_path / "ray" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in raw if "turns" in r]
    assert all(r["ray/staleness"] == 0.0 for r in steps)  # synchronous: every rollout on the newest weights
    # After every update both trained policies' weights went to the object store once (~4.3 MB each).
    assert all(8e6 < r["ray/sync_bytes"] < 9e6 for r in steps)


def test_a_token_level_game_on_two_workers_plays_the_same_games(local_cluster, tmp_path: Path) -> None:
    """Token level (interruptible_verifier, a seat's KV cache kept between steps): the same tokens and
    outcomes as in-process. A worker computes its share's shared prompt prefixes itself, so
    rollout/fed_tokens counts more, and prefill batches differ, so log-probs (and the losses built on
    them) agree to float rounding rather than bitwise."""
    path = Path(str(resources.files("cogym.configs").joinpath("interruptible_verifier.yaml")))
    quiet = ["run.iterations=2", "game.num_games=8", "eval.declared=false", "run.checkpoint_every=0", "run.plot=false",
             "run.tensorboard=false", "learners.solver.engine=torch", f"run.out_dir={tmp_path}"]
    rows = {}
    for name, extra in (("local", []), ("ray", ["run.backend=ray"])):
        train(load_config(path, [*quiet, *extra]), tmp_path / name, progress=False)
        rows[name] = _rows(tmp_path / name)
    for a, b in zip(rows["local"], rows["ray"], strict=True):
        outcome = [k for k in a if "/" in k and k.split("/")[0] in ("solver", "verifier") and
                   k.split("/")[1] in ("reward", "correct", "invalid", "interrupted", "matched_digits", "response_tokens",
                                                    "trained_rows")]
        assert outcome and {k: a[k] for k in outcome} == {k: b[k] for k in outcome}
        assert a["turns"] == b["turns"] and b["rollout/fed_tokens"] >= a["rollout/fed_tokens"]
        assert b["solver/loss"] == pytest.approx(a["solver/loss"], rel=1e-4, abs=1e-6)


def test_a_killed_worker_is_restarted_and_its_games_replayed(reference, local_cluster, tmp_path: Path,
                                                             monkeypatch, capsys) -> None:
    from cogym.runners.ray import rollout as ray_rollout

    submit = ray_rollout.RayRollout.submit
    killed: list[int] = []

    def submit_then_kill(self, *args, **kwargs):
        pending = submit(self, *args, **kwargs)
        if kwargs.get("iteration") == 2 and not killed:  # mid-run, while worker 1 plays its share
            killed.append(self.pids()[1])
            os.kill(killed[0], signal.SIGKILL)
        return pending

    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit_then_kill)
    summary = train(_cfg(tmp_path, "run.backend=ray"), tmp_path / "run", progress=False)
    err = capsys.readouterr().err
    assert killed, "the test never killed a worker"
    assert "weights reach the 2 rollout workers through shared memory" in err  # ray.weight_sync: auto
    assert f"rollout worker 1 (pid {killed[0]}) died during rollout it2; restarting it" in err
    assert "replaying" in err and summary["ray_worker_restarts"] == 1
    rows = _rows(tmp_path / "run")
    assert same(rows, reference)  # no episode lost or counted twice: the same turns, rewards and updates
    assert [r["iteration"] for r in rows] == [1, 2, 3]


def test_a_killed_driver_resumes_on_ray_with_the_metrics_of_an_uninterrupted_run(reference, local_cluster,
                                                                                tmp_path: Path, monkeypatch) -> None:
    """The driver dies in iteration 3 (after the checkpoint of iteration 2); --resume builds fresh
    workers, sends them the checkpoint's weights, and the run ends as the uninterrupted one did."""
    from cogym.runners.ray import rollout as ray_rollout

    submit = ray_rollout.RayRollout.submit

    def die_in_iteration_3(self, *args, **kwargs):
        if kwargs.get("iteration") == 3:
            raise KeyboardInterrupt  # as a kill would, mid-run
        return submit(self, *args, **kwargs)

    cfg = _cfg(tmp_path, "run.backend=ray", "run.checkpoint_every=1")
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", die_in_iteration_3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", progress=False)
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit)
    summary = train(cfg, tmp_path / "run", resume=True, progress=False)
    assert summary["iterations"] == 3 and same(_rows(tmp_path / "run"), reference)


def test_one_step_async_samples_one_version_behind(local_cluster, tmp_path: Path) -> None:
    summary = train(_cfg(tmp_path, "run.backend=ray", "run.async=one_step"), tmp_path / "run", progress=False)
    raw = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in raw] == [1, 2, 3] and summary["iterations"] == 3
    # Iteration 1's rollout started before any update, iteration i's (i > 1) overlapped update i - 1.
    assert [r["ray/staleness"] for r in raw] == [0.0, 1.0, 1.0]
    assert all("solver/loss" in r for r in raw)


def test_weights_through_the_object_store_train_as_through_shared_memory(reference, local_cluster,
                                                                        tmp_path: Path) -> None:
    """ray.weight_sync: object_store (every worker, as for workers on other machines): the one-process
    run's metrics, as the default's shared memory gives them (the tests above)."""
    train(_cfg(tmp_path, "run.backend=ray", "ray.weight_sync=object_store"), tmp_path / "run", progress=False)
    assert same(_rows(tmp_path / "run"), reference)


def test_a_worker_that_cannot_read_shared_memory_loads_from_the_object_store(local_cluster, tmp_path: Path,
                                                                             monkeypatch, capsys) -> None:
    """A worker restarted on another machine cannot read the driver's shared memory: it gets the version
    it lacks from the object store, put then from the shared-memory slot that holds it."""
    import torch

    from cogym.runners.ray import weights as shm_weights
    from cogym.runners.train.build import build
    from cogym.runners.ray.rollout import RayRollout
    from cogym.runners.ray.wire import from_wire

    cfg = _cfg(tmp_path, "run.backend=ray")
    run = build(cfg, rollout_only=True)
    pool = RayRollout(cfg)
    try:
        assert pool.local == {0, 1}
        assert ray.get(pool.workers[0].sees.remote("cogym-no-such-segment", b"x")) is False
        with torch.no_grad():
            for p in run.policies["solver"].model.parameters():
                p.add_(0.01)
        versions = {"proposer": 0, "solver": 1}
        pool.sync(run.policies, versions)
        sent = pool._weights["solver"][1]
        assert sent.shm is not None and sent.ref is None  # both workers read shared memory: nothing put
        assert [h["solver"] for h in pool.held] == [1, 1]
        pool.local.discard(1)
        pool.held[1] = {**pool.held[1], "solver": None}  # as after a restart elsewhere
        pool._load_into(1, versions)
        assert sent.ref is not None and pool.held[1]["solver"] == 1
        put = from_wire(ray.get(sent.ref))
        for name, p in run.policies["solver"].model.named_parameters():
            assert torch.equal(put[name], p.detach()), name
        # Shared memory without room (a container's 64 MiB /dev/shm and a large model): the object store
        monkeypatch.setattr(shm_weights, "free_bytes", lambda: 1000)
        pool.sync(run.policies, {"proposer": 1, "solver": 1})
        assert pool._weights["proposer"][1].shm is None and pool._weights["proposer"][1].ref is not None
        assert pool.local == set() and [h["proposer"] for h in pool.held] == [1, 1]
        assert "go through the object store, not shared memory: shared memory has 0 MiB free" in capsys.readouterr().err
    finally:
        pool.close()
    assert not pool._shm  # the segments are gone with the pool


def test_a_worker_refuses_weights_it_does_not_hold(local_cluster, tmp_path: Path) -> None:
    from cogym.runners.ray.rollout import RayRollout

    cfg = _cfg(tmp_path, "run.backend=ray", "ray.num_rollout_workers=1")
    pool = RayRollout(cfg)
    try:
        with pytest.raises(ray.exceptions.RayTaskError, match="holds weight versions"):
            ray.get(pool.workers[0].rollout.remote([0], [1], "x", 8, 7, 1, {"solver": 5}))
    finally:
        pool.close()
    assert ray.is_initialized()  # a pool on a cluster it did not start leaves it running


# ---------------------------------------------------------------------------- learner actors
# One torch thread in every process: a learner actor runs with its bundle's CPUs as threads, and the
# in-process learner it is compared with must round the same way. Half a CPU per actor: two workers and
# two learner actors fit the module's 2-CPU cluster in either placement.
ONE_THREAD = ["run.threads=1", "ray.num_cpus=0.5", "ray.learner_num_cpus=0.5"]


@pytest.fixture(scope="module")
def one_thread_reference(tmp_path_factory) -> list[dict]:
    """SMALL with one thread, the held-out evaluation every 2 iterations, in-process learners."""
    out = tmp_path_factory.mktemp("one_thread")
    train(_cfg(out, "run.threads=1", "eval.declared=true", "run.eval_every=2"), out / "run", progress=False)
    return _rows(out / "run")


@pytest.mark.parametrize(("where", "bundles"), [("colocated", 2), ("separate", 4)])
def test_learner_actors_train_as_the_driver_would(one_thread_reference, local_cluster, tmp_path: Path, where,
                                                  bundles, monkeypatch, capsys) -> None:
    """ray.learners colocated/separate: each trained policy's learner in an actor of the workers'
    placement group (sharing a worker's bundle, or in one of its own). The same updates, evaluations
    (the driver's copies take the actors' weights) and, after a driver killed in iteration 3 and
    --resume (the actors load the checkpoint's learner state), the same run as in-process learners."""
    from ray.util import placement_group_table

    from cogym.runners.ray import rollout as ray_rollout

    submit = ray_rollout.RayRollout.submit
    seen: dict = {}

    def die_in_iteration_3(self, *args, **kwargs):
        if kwargs.get("iteration") == 3:
            groups = [g for g in placement_group_table().values() if g["state"] == "CREATED"]
            seen.update(bundles=[len(g["bundles"]) for g in groups], learners=dict(self.learners))
            raise KeyboardInterrupt  # as a kill would, mid-run
        return submit(self, *args, **kwargs)

    cfg = _cfg(tmp_path, "run.backend=ray", f"ray.learners={where}", "eval.declared=true", "run.eval_every=2",
               "run.checkpoint_every=1", *ONE_THREAD)
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", die_in_iteration_3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", progress=False)
    assert seen["bundles"] == [bundles]  # the workers and the learner actors in one group
    assert sorted(seen["learners"]) == ["proposer", "solver"]
    assert {lr.info["pid"] for lr in seen["learners"].values()}.isdisjoint({os.getpid()})
    assert f"2 learner actors ({where}) ready" in capsys.readouterr().err
    saved = tmp_path / "run" / "checkpoints" / "step_000002" / "learners" / "solver"
    assert json.loads((saved / "state.json").read_text())["steps"] == 2  # written by the actor
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit)
    summary = train(cfg, tmp_path / "run", resume=True, progress=False)
    assert summary["iterations"] == 3 and summary["engines"] == ["torch"]
    assert _rows(tmp_path / "run") == one_thread_reference


def test_lora_policies_on_ray_sync_only_their_adapters(local_cluster, tmp_path: Path, monkeypatch) -> None:
    """LoRA policies (peft adapters on a shared base): the workers and the learner actors build the same
    fresh adapters, only the adapters travel, and a run with learner actors, killed and resumed from its
    adapter checkpoints, logs the in-process run's metrics."""
    pytest.importorskip("peft", reason="LoRA needs peft (cogym[lora])")
    from cogym.runners.ray import rollout as ray_rollout

    lora = ["policies.proposer.lora.r=4", "policies.solver.lora.r=4", "run.checkpoint_every=1", *ONE_THREAD]
    train(_cfg(tmp_path, *lora), tmp_path / "local", progress=False)
    submit = ray_rollout.RayRollout.submit

    def die_in_iteration_3(self, *args, **kwargs):
        if kwargs.get("iteration") == 3:
            raise KeyboardInterrupt
        return submit(self, *args, **kwargs)

    cfg = _cfg(tmp_path, *lora, "run.backend=ray", "ray.learners=separate")
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", die_in_iteration_3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "ray", progress=False)
    assert (tmp_path / "ray" / "checkpoints" / "step_000002" / "policies" / "solver" / "adapter_config.json").is_file()
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit)
    train(cfg, tmp_path / "ray", resume=True, progress=False)
    assert _rows(tmp_path / "ray") == _rows(tmp_path / "local")
    raw = [json.loads(line) for line in (tmp_path / "ray" / "metrics.jsonl").read_text().splitlines()]
    # Two rank-4 adapters (~32 KB each) a sync, not two whole models (~8.6 MB).
    assert all(r["ray/sync_bytes"] < 1e5 for r in raw)


def test_a_zero3_learner_on_ray_syncs_its_gathered_weights(local_cluster, tmp_path: Path) -> None:
    """A DeepSpeed ZeRO-3 solver (its parameters partitioned, and gathered for each sync), in the driver and in
    a learner actor: the same run as in-process, and whole weights sent."""
    z3 = ["learners.solver.engine=deepspeed", "learners.solver.zero_stage=3", "run.threads=1"]
    train(_cfg(tmp_path, *z3), tmp_path / "local", progress=False)
    for name, extra in (("driver", []), ("actor", ["ray.learners=separate"])):
        train(_cfg(tmp_path, *z3, "run.backend=ray", *ONE_THREAD, *extra), tmp_path / name, progress=False)
        assert _rows(tmp_path / name) == _rows(tmp_path / "local"), name
        raw = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert all(8e6 < r["ray/sync_bytes"] < 9e6 for r in raw)  # both whole policies, not a partition


def test_one_step_with_separate_learner_actors_is_the_one_step_run_of_the_driver(local_cluster, tmp_path) -> None:
    runs = {}
    for name, extra in (("driver", []), ("actors", ["ray.learners=separate"])):
        cfg = _cfg(tmp_path, "run.backend=ray", "run.async=one_step", *ONE_THREAD, *extra)
        train(cfg, tmp_path / name, progress=False)
        runs[name] = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    assert [r["ray/staleness"] for r in runs["actors"]] == [0.0, 1.0, 1.0]
    assert _rows(tmp_path / "actors") == _rows(tmp_path / "driver")
    # The actor put its weights in the object store itself: the same bytes as the driver's put.
    assert [r["ray/sync_bytes"] for r in runs["actors"]] == [r["ray/sync_bytes"] for r in runs["driver"]]


def test_a_dead_learner_actor_stops_the_run_with_a_resume_hint(local_cluster, tmp_path: Path, monkeypatch) -> None:
    from cogym.runners.ray.learners import RemoteLearner

    start_update = RemoteLearner.start_update

    def kill_then_update(self, turns):
        if self.pid == "solver" and self.steps == 1:
            os.kill(self.info["pid"], signal.SIGKILL)
        return start_update(self, turns)

    monkeypatch.setattr(RemoteLearner, "start_update", kill_then_update)
    with pytest.raises(RuntimeError, match=r"learner actor of policy 'solver' \(pid \d+\) died during update 2;.*"
                                           r"cogym train --resume"):
        train(_cfg(tmp_path, "run.backend=ray", "ray.learners=colocated", *ONE_THREAD), tmp_path / "run",
              progress=False)


KUHN = Path(str(resources.files("cogym.configs").joinpath("kuhn_poker.yaml")))
# A league of the player's past selves in the second seat: a snapshot every iteration, at most 2 kept
# (so members leave), PFSP opponents and a quarter of the games plain self-play.
LEAGUE = ["seats.second=player", "league.seats=[second]", "league.every=1", "league.size=2", "league.sampling=pfsp",
          "league.latest_prob=0.25", "run.iterations=4", "game.num_games=16", "run.eval_every=0",
          "run.checkpoint_every=0", "run.plot=false", "run.tensorboard=false", "run.threads=1"]


@pytest.fixture(scope="module")
def league_reference(tmp_path_factory) -> tuple[list[dict], list]:
    out = tmp_path_factory.mktemp("league_local")
    summary = train(load_config(KUHN, [*LEAGUE, f"run.out_dir={out}"]), out / "run", progress=False)
    return _rows(out / "run"), summary["league"]


@pytest.mark.parametrize("learners", ["driver", "separate"])
def test_a_league_on_ray_plays_and_rates_the_games_of_one_process(league_reference, local_cluster, tmp_path, learners,
                                                                  monkeypatch, capsys) -> None:
    """League opponents on Ray: each worker builds its own copies of the members its games meet (their
    weights sent once each), forgets those that left the league, and a worker killed in iteration 3
    gets them again after its restart. The metrics and the league table are the in-process run's."""
    from cogym.runners.ray import rollout as ray_rollout

    submit = ray_rollout.RayRollout.submit
    killed: list[int] = []

    def submit_then_kill(self, *args, **kwargs):
        pending = submit(self, *args, **kwargs)
        if kwargs.get("iteration") == 3 and not killed and learners == "driver":
            assert pending.league is not None and self.members_held[1]
            killed.append(self.pids()[1])
            os.kill(killed[0], signal.SIGKILL)
        return pending

    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit_then_kill)
    cfg = load_config(KUHN, [*LEAGUE, "run.backend=ray", f"ray.learners={learners}", "ray.num_cpus=0.5",
                             "ray.learner_num_cpus=0.5", f"run.out_dir={tmp_path}"])
    summary = train(cfg, tmp_path / "run", progress=False)
    rows, table = league_reference
    assert _rows(tmp_path / "run") == rows and summary["league"] == table
    assert sum(m["games"] for m in table if m["member"] != "current") > 0 and any(not m["active"] for m in table)
    if learners == "driver":
        assert killed and "replaying" in capsys.readouterr().err and summary["ray_worker_restarts"] == 1


def _tournament(out: Path, ray_config=None) -> list[dict]:
    from cogym.runners.tournament.players import resolve_players
    from cogym.runners.tournament.results import RESULTS_FILE
    from cogym.runners.tournament.run import run_tournament
    from cogym.runners.tournament.spec import TournamentSpec

    spec = TournamentSpec(game="kuhn_poker-v0", players=resolve_players(["tiny", "scripted:random", "scripted:nash"]),
                          games_per_pairing=8, batch_games=16, max_new_tokens=4, prompts={"first": "Poker.", "second": "Poker."})
    rows = run_tournament(spec, out, progress=False, ray=ray_config)
    logged = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert sorted(r["id"] for r in logged) == sorted(r["id"] for r in rows)  # each game once
    return sorted(rows, key=lambda r: r["id"])


@pytest.fixture(scope="module")
def tournament_reference(tmp_path_factory) -> list[dict]:
    return _tournament(tmp_path_factory.mktemp("tournament_local"))


def test_a_tournament_on_two_workers_plays_the_games_of_one_process(tournament_reference, local_cluster, tmp_path,
                                                                    monkeypatch, capsys) -> None:
    from cogym.runners.config.schema import RayConfig
    from cogym.runners.ray.pool import ActorPool

    assert len(tournament_reference) == 24 and {r["score"] for r in tournament_reference} > {0.0}
    gather = ActorPool.gather
    killed: list[int] = []

    def kill_then_gather(self, refs, replay, what):
        if what == "tournament batch 1" and not killed:  # the second batch, while worker 1 plays its share
            killed.append(self.pids()[1])
            os.kill(killed[0], signal.SIGKILL)
        return gather(self, refs, replay, what)

    monkeypatch.setattr(ActorPool, "gather", kill_then_gather)
    assert _tournament(tmp_path, RayConfig(num_rollout_workers=2)) == tournament_reference
    err = capsys.readouterr().err
    assert killed and f"tournament worker 1 (pid {killed[0]}) died during tournament batch 1; restarting it" in err


def test_workers_in_a_placement_group_and_a_placement_that_cannot_be_met(local_cluster, tmp_path: Path) -> None:
    from ray.util import placement_group_table

    from cogym.runners.ray.rollout import RayRollout

    pool = RayRollout(_cfg(tmp_path, "run.backend=ray", "ray.placement=STRICT_PACK"))
    try:
        groups = [g for g in placement_group_table().values() if g["state"] == "CREATED"]
        assert len(groups) == 1 and groups[0]["strategy"] == "STRICT_PACK" and len(groups[0]["bundles"]) == 2
        assert len(set(pool.pids())) == 2
    finally:
        pool.close()
    assert not [g for g in placement_group_table().values() if g["state"] == "CREATED"]  # removed with the pool
    # One node cannot hold two STRICT_SPREAD bundles: a one-line error after the timeout, not a hang.
    with pytest.raises(RuntimeError, match=r"could not start within ray.start_timeout_s = 3 s; the cluster has 2 CPUs"):
        RayRollout(_cfg(tmp_path, "run.backend=ray", "ray.placement=STRICT_SPREAD", "ray.start_timeout_s=3"))
    assert not [g for g in placement_group_table().values() if g["state"] in ("CREATED", "PENDING")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_joins_a_cluster_started_with_ray_start(tmp_path: Path) -> None:
    """`ray start --head` in its own process group (stopped by signalling that group, so no other Ray
    on the machine is touched), then `cogym train --ray <address>` as a user runs it. With token
    authentication, as `ray start` turns it on where ~/.ray/auth_token exists (any local run writes
    one): the head and the clients get the mode and a token of their own through the environment,
    so the test does not depend on what earlier runs left in ~/.ray."""
    if ray.is_initialized():
        ray.shutdown()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    env.pop("RAY_ADDRESS", None)
    exe = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    assert exe, "the ray extra installs the `ray` command"
    port = _free_port()
    temp = Path("/tmp") / f"cogym-ray-{os.getpid()}"  # short: Ray's socket paths must fit in 107 bytes
    head = subprocess.Popen([exe, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                             f"--temp-dir={temp}", "--block", "--disable-usage-stats"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while subprocess.run([exe, "status", f"--address={address}"], capture_output=True, env=env).returncode != 0:
            assert head.poll() is None, head.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "ray start did not come up in 120 s"
            time.sleep(1)
        out = tmp_path / "out"
        cmd = [sys.executable, "-m", "cogym.runners.cli", "train", "--ray", address, "--run-dir", str(out / "run"),
               "--no-progress", *SMALL[:1], "run.iterations=2", *SMALL[1:], f"run.out_dir={out}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"cluster at {address}" in done.stderr
        rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
        assert [r["iteration"] for r in rows] == [1, 2] and all("solver/loss" in r for r in rows)
        # The run disconnected; the cluster it joined is still up.
        assert subprocess.run([exe, "status", f"--address={address}"], capture_output=True, env=env).returncode == 0
        # With no ray.address a run starts a private cluster, even where RAY_ADDRESS names this one (a
        # bare ray.init() would join it and then refuse num_cpus).
        probe = ("from types import SimpleNamespace as N; from cogym.runners.ray.pool import connect\n"
                 "ray, _ = connect(N(address=None, num_rollout_workers=1, num_cpus=1, learners='driver'))\n"
                 "print('GCS', ray.get_runtime_context().gcs_address); ray.shutdown()")
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                              env={**env, "RAY_ADDRESS": address})
        assert done.returncode == 0, done.stderr[-3000:]
        gcs = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("GCS ")]
        assert gcs and gcs[0] != address and not gcs[0].endswith(f":{port}")
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


# ---------------------------------------------------------------------------- configuration
def test_an_address_that_takes_no_connection_is_one_line_with_the_token_hint(monkeypatch) -> None:
    from types import SimpleNamespace

    from cogym.runners.ray import pool

    def init(**kwargs):
        raise ConnectionError(f"Failed to connect to Ray cluster at {kwargs['address']}")

    fake = SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setattr(pool, "import_ray", lambda: fake)
    rc = SimpleNamespace(address="10.9.8.7:6379", num_rollout_workers=1, num_cpus=1, learners="driver")
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(ConfigError, match=r"ray.address 10.9.8.7:6379: Failed to connect .*RAY_AUTH_MODE=token") as err:
        pool.connect(rc)
    assert "\n" not in str(err.value)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # set already: the hint would not help
    with pytest.raises(ConfigError) as err:
        pool.connect(rc)
    assert "RAY_AUTH_MODE" not in str(err.value)


def test_async_needs_the_ray_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run.async: one_step .* run.backend: ray"):
        _cfg(tmp_path, "run.async=one_step")


@pytest.mark.parametrize(("extra", "match"), [
    (["run.backend=rey"], "run.backend"),
    (["run.async=two_step"], "run.async"),
    (["run.backend=ray", "ray.num_rollout_workers=9"], "exceeds game.num_games"),
    (["run.backend=ray", "ray.num_rollout_workers=0"], "num_rollout_workers must be >= 1"),
    (["run.backend=ray", "ray.max_staleness=0"], "max_staleness must be >= 1"),
    (["run.backend=ray", "ray.num_workers=2"], "unknown config key 'ray.num_workers'"),
    (["run.backend=ray", "ray.placement=spread"], "ray.placement must be one of PACK, SPREAD"),
    (["run.backend=ray", "ray.learners=remote"], "ray.learners must be one of driver, colocated, separate"),
    (["run.backend=ray", "ray.learner_num_cpus=0"], "ray.learner_num_cpus must be > 0"),
    (["run.backend=ray", "ray.weight_sync=nccl"], "ray.weight_sync must be one of auto, object_store"),
])
def test_bad_ray_settings_are_refused(tmp_path: Path, extra, match) -> None:
    with pytest.raises(ConfigError, match=match):
        _cfg(tmp_path, *extra)


def test_without_ray_installed_the_error_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    import importlib

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    monkeypatch.delitem(sys.modules, "cogym.runners.ray.pool", raising=False)
    with pytest.raises(ConfigError, match=r"pip install 'cogym\[ray\]'"):
        importlib.import_module("cogym.runners.ray.pool")
    done = subprocess.run([sys.executable, "-c", "import sys; sys.modules['ray'] = None\n"
                           "from cogym.runners.cli import main; sys.exit(main(sys.argv[1:]))",
                           "train", "--ray", *SMALL, f"run.out_dir={tmp_path}"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "pip install 'cogym[ray]'" in last and "Traceback" not in done.stderr


def test_the_cli_flag_sets_the_backend_and_address(monkeypatch) -> None:
    from cogym.runners import cli

    seen: list[tuple] = []
    from cogym.runners.cli import train as train_command

    monkeypatch.setattr(train_command, "run", lambda args: seen.append((args.config, list(args.overrides))) or 0)
    assert cli.main(["train", "--ray", "10.0.0.1:6379", "my.yaml"]) == 0
    assert seen[-1] == ("my.yaml", ["run.backend=ray", "ray.address=10.0.0.1:6379"])
    # The address is optional, so a config or an override right after the flag is put back.
    assert cli.main(["train", "--ray", "my.yaml", "run.iterations=1"]) == 0
    assert seen[-1] == ("my.yaml", ["run.iterations=1", "run.backend=ray"])
    assert cli.main(["train", "--ray", "run.iterations=1"]) == 0
    assert seen[-1] == (None, ["run.iterations=1", "run.backend=ray"])
    assert cli.main(["train", "--ray", "run.seed=1", "run.seed=2", "run.seed=3"]) == 0  # the last one wins
    assert seen[-1] == (None, ["run.seed=1", "run.seed=2", "run.seed=3", "run.backend=ray"])


def test_weights_travel_as_numpy_and_come_back_bit_identical() -> None:
    import torch

    from cogym.runners.ray.wire import from_wire, to_wire

    state = {"w": torch.randn(3, 4), "bf": torch.randn(5).to(torch.bfloat16), "h": torch.randn(2).half()}
    wire = to_wire(state)
    assert wire["bf16"] == ["bf"] and all(type(a).__module__ == "numpy" for a in wire["arrays"].values())
    back = from_wire(wire)
    assert all(back[k].dtype == t.dtype and torch.equal(back[k], t) for k, t in state.items())


def test_learner_actors_sharing_a_bundle_update_in_turn() -> None:
    """Colocated learners of one bundle take turns (two updates on the same cores or GPU only slow each
    other down); learners of different bundles start at once."""
    from cogym.runners.ray.learners import RemoteLearner, RemoteUpdates

    events: list[str] = []

    class Fake(RemoteLearner):
        def start_update(self, turns):
            events.append(f"start {self.pid}")
            return self.pid

        def finish_update(self, ref):
            events.append(f"finish {ref}")
            return {"loss": float(len(ref))}

    info = {"steps": 0, "engine": "torch", "pid": 1}
    learners = {pid: Fake(None, None, pid, None, info, bundle=b) for pid, b in (("a", 0), ("bb", 0), ("c", 1))}
    updates = RemoteUpdates(learners, {"a": [], "bb": [], "c": []})
    assert events == ["start a", "start c"] and "bb" in updates and "x" not in updates
    assert [updates.finish(pid) for pid in learners] == [{"loss": 1.0}, {"loss": 2.0}, {"loss": 1.0}]
    assert events == ["start a", "start c", "finish a", "start bb", "finish bb", "finish c"]
