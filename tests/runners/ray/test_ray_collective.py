"""Weight sync through a collective group (ray.weight_sync: collective, agents/backends/broadcast.py).

* The flat buffer (every transport's layout, tests/agents/test_flat_weights.py) through a broadcast.
* A gloo broadcast among three groups in one process (threads) delivers the sender's state exactly.
* On Ray (2 workers): after a sync every worker holds exactly the driver's weights, for full weights
  and for LoRA adapters; a worker killed between syncs is restarted and given the next version in a
  group of its own. Whole training runs through collective sync: tests/runners/ray/test_ray_backend.py
  (from the driver) and tests/runners/ray/test_ray_learner_groups.py (from a learner group's rank 0).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path

import pytest
import torch

from cogym.agents.backends.broadcast import Groups, Meet, spec
from cogym.agents.flat_weights import ALIGN, Layout
from tests.runners.ray.ray_runs import small_config


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(3, 5, generator=g), "b": torch.randn(7, generator=g).to(torch.bfloat16),
            "h": torch.randn(2, 2, generator=g).half(), "i": torch.arange(4), "e": torch.zeros(0)}


def test_a_gloo_broadcast_gives_every_receiver_the_senders_state() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    meet = Meet("test/0", "127.0.0.1", port, 3, "gloo", 30.0)
    state, got, errors = _state(), {}, []

    def receive(rank: int) -> None:
        try:
            got[rank] = Groups().receive(meet, rank, spec(state))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=receive, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    sent = Groups().send(meet, state)
    for t in threads:
        t.join(60)
    assert not errors and sent == Layout.of(state).size
    for rank in (1, 2):
        assert all(torch.equal(got[rank][k], t) for k, t in state.items())


def _perturb(policy, scale: float) -> None:
    with torch.no_grad():
        for p in policy.model.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn_like(p))


def _held_exactly(ray, pool, pid: str, policy) -> None:
    from cogym.runners.ray.wire import from_wire, state_of

    want = state_of(policy)
    for r, worker in enumerate(pool.workers):
        have = from_wire(ray.get(worker.state.remote(pid)))
        assert list(have) == list(want), f"worker {r}"
        for name, t in want.items():
            assert torch.equal(have[name], t), f"worker {r}: {name}"


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_after_a_collective_sync_every_worker_holds_the_drivers_weights(local_cluster, tmp_path: Path, lora: bool,
                                                                       monkeypatch, capsys) -> None:
    ray = pytest.importorskip("ray")
    from cogym.runners.ray import rollout as ray_rollout
    from cogym.runners.ray import sync as ray_sync
    from cogym.runners.train.build import build

    if lora:
        pytest.importorskip("peft", reason="LoRA needs peft (cogym[lora])")
    extra = ["policies.solver.lora.r=4"] if lora else []
    cfg = small_config(tmp_path, "run.backend=ray", "ray.weight_sync=collective", *extra)
    run = build(cfg, rollout_only=True)
    policy = run.policies["solver"]
    monkeypatch.setattr(ray_sync, "COLLECTIVE_TIMEOUT_S", 10.0)  # a group missing a dead member gives up soon
    pool = ray_rollout.RayRollout(cfg)
    try:
        torch.manual_seed(1)
        for version in (1, 2):
            _perturb(policy, 0.01)
            policy.backend.load_weights(None, version)
            m = pool.sync(run.policies, {"proposer": 0, "solver": version})
            assert [h["solver"] for h in pool.held] == [version, version]
            raw = sum(p.numel() * p.element_size() for p in policy.model.parameters() if p.requires_grad)
            size = Layout.from_spec(pool.weights.layouts["solver"]).size
            assert raw <= m["ray/sync_bytes"] == size < raw + ALIGN * len(pool.weights.layouts["solver"])
            _held_exactly(ray, pool, "solver", policy)
        if lora:  # only the adapters travel
            assert all("lora_" in name for name, _, _ in pool.weights.layouts["solver"])
            return
        assert len(pool.weights.meets) == 1  # the same two workers: the group of the first sync again
        killed = pool.info[1]["pid"]
        os.kill(killed, signal.SIGKILL)  # idle, between two syncs
        _perturb(policy, 0.01)
        policy.backend.load_weights(None, 3)
        pool.sync(run.policies, {"proposer": 0, "solver": 3})
        assert pool.restarts[1] == 1 and pool.info[1]["pid"] != killed
        assert [h["solver"] for h in pool.held] == [3, 3]
        _held_exactly(ray, pool, "solver", policy)
    finally:
        pool.close()
    assert "rollout worker 1" in capsys.readouterr().err
