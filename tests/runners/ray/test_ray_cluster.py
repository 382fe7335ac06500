"""Ray beyond one training run's rollouts: a league of past selves played on workers, a tournament on
workers (a killed worker's batch replayed), placement groups and a placement that cannot be met, and a
cluster started by `ray start` that `cogym train --ray <address>` joins. On a local 2-CPU cluster with the
tiny model."""

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

from cogym.core.processes import free_port
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train
from tests.runners.ray.ray_runs import SMALL, metric_rows, raw_rows, small_config

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = pytest.mark.slow


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
    return metric_rows(out / "run"), summary["league"]


# separate learner actors: the league members are snapshots of the actors' weights (extended: docs/testing.md)
@pytest.mark.parametrize("learners", ["driver", pytest.param("separate", marks=pytest.mark.extended)])
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
    assert metric_rows(tmp_path / "run") == rows and summary["league"] == table
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

    pool = RayRollout(small_config(tmp_path, "run.backend=ray", "ray.placement=STRICT_PACK"))
    try:
        groups = [g for g in placement_group_table().values() if g["state"] == "CREATED"]
        assert len(groups) == 1 and groups[0]["strategy"] == "STRICT_PACK" and len(groups[0]["bundles"]) == 2
        assert len(set(pool.pids())) == 2
    finally:
        pool.close()
    assert not [g for g in placement_group_table().values() if g["state"] == "CREATED"]  # removed with the pool
    # One node cannot hold two STRICT_SPREAD bundles: a one-line error after the timeout, not a hang.
    with pytest.raises(RuntimeError, match=r"could not start within ray.start_timeout_s = 3 s; the cluster has 2 CPUs"):
        RayRollout(small_config(tmp_path, "run.backend=ray", "ray.placement=STRICT_SPREAD", "ray.start_timeout_s=3"))
    assert not [g for g in placement_group_table().values() if g["state"] in ("CREATED", "PENDING")]


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
    port = free_port()
    temp = Path("/tmp") / f"cogym-ray-{os.getpid()}"  # short: Ray's socket paths must fit in 107 bytes
    head = subprocess.Popen([exe, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                             f"--temp-dir={temp}", "--block", "--disable-usage-stats"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:  # the head's port takes connections (a socket, not `ray status`: each call is a Python start)
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None, head.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "ray start did not come up in 120 s"
            time.sleep(0.5)
        while subprocess.run([exe, "status", f"--address={address}"], capture_output=True, env=env).returncode != 0:
            assert head.poll() is None, head.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "ray start did not come up in 120 s"
            time.sleep(1)
        out = tmp_path / "out"
        cmd = [sys.executable, "-m", "cogym.runners.cli", "train", "--ray", address, "--run-dir", str(out / "run"),
               "--no-progress", *SMALL[:1], "run.iterations=2", *SMALL[1:], "ray.num_rollout_workers=1",
               f"run.out_dir={out}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"cluster at {address}" in done.stderr
        rows = raw_rows(out / "run")
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

