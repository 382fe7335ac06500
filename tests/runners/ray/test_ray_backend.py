"""Rollouts on Ray (run.backend: ray, runners/ray/) on a local 2-CPU cluster with the tiny model:
the same metrics as the one-process run (workers killed at every kind of moment: test_ray_faults.py),
one-step off-policy with its staleness bound, weights through shared memory or the object store,
and the config's refusals. Learner actors: test_ray_learners.py; leagues, tournaments, placement groups
and a cluster started by `ray start`: test_ray_cluster.py. Every run here is a few iterations of a
shrunken config; the full-size figures are measured by hand (benchmarks/ray_overhead.py)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from cogym.core.errors import CogymError, ConfigError
from cogym.runners.config.load import load_config
from cogym.runners.train.loop import train
from tests.rounding import same
from tests.runners.ray.ray_runs import DEFAULT, ROUNDED, SMALL, metric_rows, raw_rows, small_config

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    """The one-process run of SMALL (runs before any Ray fixture needs the CPUs)."""
    out = tmp_path_factory.mktemp("local")
    train(small_config(out), out / "run", progress=False)
    return metric_rows(out / "run")


def test_the_default_config_on_two_workers_logs_the_metrics_of_one_process(local_cluster, tmp_path: Path) -> None:
    """The shipped default config (32 games, GRPO solver and REINFORCE++ proposer on DeepSpeed, the
    held-out evaluation before and after) for 3 iterations: in-process, then on 2 Ray workers."""
    quiet = ["run.iterations=3", "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=0"]
    runs = {}
    for name, extra in (("local", []), ("ray", ["run.backend=ray", "ray.num_rollout_workers=2"])):
        cfg = load_config(DEFAULT, [*quiet, *extra, f"run.out_dir={tmp_path}"])
        runs[name] = (train(cfg, tmp_path / name, progress=False), metric_rows(tmp_path / name))
    (local_summary, local), (ray_summary, on_ray) = runs["local"], runs["ray"]
    assert [r["iteration"] for r in on_ray if "turns" in r] == [1, 2, 3]
    assert same(on_ray, local)  # every non-timing metric of every iteration and evaluation row (floats to rounding)
    # Exactly: what was sampled and scored (tokens, rewards, counts, advantages). To rounding only: what is built on
    # the behaviour log-probs, which a worker computes with its own torch threads (docs/ray.md).
    exact = lambda rows: [{k: v for k, v in r.items() if not k.endswith(ROUNDED) and not k.startswith("eval/")}  # noqa: E731
                          for r in rows]
    assert exact(on_ray) == exact(local)
    assert ray_summary["ray_workers"] == 2 and ray_summary["ray_worker_restarts"] == 0
    assert same(ray_summary["heldout_acc_after"], local_summary["heldout_acc_after"])
    raw = raw_rows(tmp_path / "ray")
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
        rows[name] = metric_rows(tmp_path / name)
    for a, b in zip(rows["local"], rows["ray"], strict=True):
        outcome = [k for k in a if "/" in k and k.split("/")[0] in ("solver", "verifier") and
                   k.split("/")[1] in ("reward", "correct", "invalid", "interrupted", "matched_digits", "response_tokens",
                                                    "trained_rows")]
        assert outcome and {k: a[k] for k in outcome} == {k: b[k] for k in outcome}
        assert a["turns"] == b["turns"] and b["rollout/fed_tokens"] >= a["rollout/fed_tokens"]
        assert b["solver/loss"] == pytest.approx(a["solver/loss"], rel=1e-4, abs=1e-6)


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

    cfg = small_config(tmp_path, "run.backend=ray", "run.checkpoint_every=1")
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", die_in_iteration_3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", progress=False)
    monkeypatch.setattr(ray_rollout.RayRollout, "submit", submit)
    summary = train(cfg, tmp_path / "run", resume=True, progress=False)
    assert summary["iterations"] == 3 and same(metric_rows(tmp_path / "run"), reference)


def test_one_step_async_samples_one_version_behind(local_cluster, tmp_path: Path) -> None:
    summary = train(small_config(tmp_path, "run.backend=ray", "run.async=one_step"), tmp_path / "run", progress=False)
    raw = raw_rows(tmp_path / "run")
    assert [r["iteration"] for r in raw] == [1, 2, 3] and summary["iterations"] == 3
    # Iteration 1's rollout started before any update, iteration i's (i > 1) overlapped update i - 1.
    assert [r["ray/staleness"] for r in raw] == [0.0, 1.0, 1.0]
    assert all("solver/loss" in r for r in raw)


@pytest.mark.parametrize("via", ["object_store", "collective"])
def test_weights_through_the_object_store_train_as_through_shared_memory(reference, local_cluster, tmp_path: Path,
                                                                        via) -> None:
    """ray.weight_sync: object_store (every worker, as for workers on other machines) and collective (a
    gloo broadcast from the driver): the one-process run's metrics, as the default's shared memory gives
    them (the tests above)."""
    train(small_config(tmp_path, "run.backend=ray", f"ray.weight_sync={via}"), tmp_path / "run", progress=False)
    rows = raw_rows(tmp_path / "run")
    assert same(metric_rows(tmp_path / "run"), reference)
    assert all(r["ray/sync_bytes"] > 0 for r in rows[:-1])  # every update's weights went out


def test_a_worker_that_cannot_read_shared_memory_loads_from_the_object_store(local_cluster, tmp_path: Path,
                                                                             monkeypatch, capsys) -> None:
    """A worker restarted on another machine cannot read the driver's shared memory: it gets the version
    it lacks from the object store, put then from the shared-memory slot that holds it."""
    import torch

    from cogym.runners.ray import weights as shm_weights
    from cogym.runners.train.build import build
    from cogym.runners.ray.rollout import RayRollout
    from cogym.runners.ray.wire import from_wire

    cfg = small_config(tmp_path, "run.backend=ray")
    run = build(cfg, rollout_only=True)
    pool = RayRollout(cfg)
    try:
        assert pool.weights.local == {0, 1}
        assert ray.get(pool.workers[0].sees.remote("cogym-no-such-segment", b"x")) is False
        with torch.no_grad():
            for p in run.policies["solver"].model.parameters():
                p.add_(0.01)
        versions = {"proposer": 0, "solver": 1}
        pool.sync(run.policies, versions)
        sent = pool.weights.kept["solver"][1]
        assert sent.shm is not None and sent.ref is None  # both workers read shared memory: nothing put
        assert [h["solver"] for h in pool.held] == [1, 1]
        pool.weights.local.discard(1)
        pool.held[1] = {**pool.held[1], "solver": None}  # as after a restart elsewhere
        pool._load_into(1, versions)
        assert sent.ref is not None and pool.held[1]["solver"] == 1
        put = from_wire(ray.get(sent.ref))
        for name, p in run.policies["solver"].model.named_parameters():
            assert torch.equal(put[name], p.detach()), name
        # Shared memory without room (a container's 64 MiB /dev/shm and a large model): the object store
        monkeypatch.setattr(shm_weights, "free_bytes", lambda: 1000)
        pool.sync(run.policies, {"proposer": 1, "solver": 1})
        assert pool.weights.kept["proposer"][1].shm is None and pool.weights.kept["proposer"][1].ref is not None
        assert pool.weights.local == set() and [h["proposer"] for h in pool.held] == [1, 1]
        assert "go through the object store, not shared memory: shared memory has 0 MiB free" in capsys.readouterr().err
    finally:
        pool.close()
    assert not pool.weights.slots  # the segments are gone with the pool


def test_a_worker_refuses_weights_it_does_not_hold(local_cluster, tmp_path: Path) -> None:
    from cogym.runners.ray.rollout import RayRollout

    cfg = small_config(tmp_path, "run.backend=ray", "ray.num_rollout_workers=1")
    pool = RayRollout(cfg)
    try:
        with pytest.raises(ray.exceptions.RayTaskError, match="holds weight versions"):
            ray.get(pool.workers[0].rollout.remote([0], [1], "x", 8, 7, 1, {"solver": 5}))
    finally:
        pool.close()
    assert ray.is_initialized()  # a pool on a cluster it did not start leaves it running


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
    with pytest.raises(pool.RayError, match=r"ray.address 10.9.8.7:6379: Failed to connect .*RAY_AUTH_MODE=token") as err:
        pool.connect(rc)
    assert "\n" not in str(err.value)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # set already: the hint would not help
    with pytest.raises(pool.RayError) as err:
        pool.connect(rc)
    assert "RAY_AUTH_MODE" not in str(err.value)


def test_async_needs_the_ray_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run.async: one_step .* run.backend: ray"):
        small_config(tmp_path, "run.async=one_step")


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
    (["run.backend=ray", "ray.weight_sync=nccl"], "ray.weight_sync must be one of auto, object_store, collective"),
    (["run.backend=ray", "ray.weight_sync=collective", "run.async=one_step"], "sends each policy's newest weights only"),
    (["run.backend=ray", "ray.learner_workers=0"], "ray.learner_workers must be an integer >= 1"),
    (["run.backend=ray", "ray.learner_workers=2"], "set ray.learners to colocated or separate"),
    (["run.backend=ray", "ray.learners=separate", "ray.learner_workers=2", "learners.solver.algorithm=spin"],
     "learners.solver uses algorithm spin, which trains in one process only; set ray.learner_workers: 1"),
])
def test_bad_ray_settings_are_refused(tmp_path: Path, extra, match) -> None:
    with pytest.raises(ConfigError, match=match):
        small_config(tmp_path, *extra)


def test_without_ray_installed_the_error_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    import importlib

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    monkeypatch.delitem(sys.modules, "cogym.runners.ray.pool", raising=False)
    with pytest.raises(CogymError, match=r"pip install 'cogym\[ray\]'"):  # pool's RayError (pool did not import)
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
    assert type(wire["buffer"]).__module__ == "numpy" and wire["buffer"].dtype.name == "uint8"  # one flat buffer
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
    learners = {pid: Fake(None, [None], pid, None, [info], bundles=b) for pid, b in (("a", [0]), ("bb", [0]), ("c", [1]))}
    updates = RemoteUpdates(learners, {"a": [], "bb": [], "c": []})
    assert events == ["start a", "start c"] and "bb" in updates and "x" not in updates
    assert [updates.finish(pid) for pid in learners] == [{"loss": 1.0}, {"loss": 2.0}, {"loss": 1.0}]
    assert events == ["start a", "start c", "finish a", "start bb", "finish bb", "finish c"]
    # Learner groups (ray.learner_workers): a learner whose actors span bundles 1 and 2 joins both queues
    # into one, in the learners' order; a learner on a bundle of its own starts at once.
    events.clear()
    spans = (("a", [0]), ("b", [1]), ("c", [3]), ("d", [1, 2]), ("e", [2, 0]))
    learners = {pid: Fake(None, [None] * len(b), pid, None, [info] * len(b), bundles=b) for pid, b in spans}
    updates = RemoteUpdates(learners, dict.fromkeys(learners, []))
    assert events == ["start a", "start c"] or events == ["start c", "start a"]
    assert [updates.finish(pid) for pid in learners] == [{"loss": 1.0}] * 5
    assert events[2:] == ["finish a", "start b", "finish b", "start d", "finish c", "finish d", "start e", "finish e"]
