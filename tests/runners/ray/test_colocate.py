"""Learners and vLLM engines sharing GPUs (runners/ray/colocate.py): when the engines sleep, what the
workers start them with, the engine's sleep and wake (vLLM's sleep mode, on CUDA only) and the
driver's calls. The sleep itself needs a GPU: tests/gpu/test_gpu.py (scripts/gpu_check.sh)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from cogym.agents.backends.vllm import Sleeper
from cogym.runners.ray.colocate import engines_sleep, Sleepers, with_sleep_mode
from tests.runners.ray.ray_runs import small_config

GPU_COLOCATED = ("run.backend=ray", "ray.learners=colocated", "ray.num_gpus=0.5", "policies.solver.generation.backend=vllm")


@pytest.mark.parametrize(("extra", "sleeps"), [
    ((), True),
    (("run.async=one_step",), False),  # the rollout overlaps the update: nothing to free
    (("ray.learners=separate",), False),  # the learner has a GPU of its own
    (("ray.num_gpus=0",), False),  # nothing shared to free
    (("policies.solver.generation.backend=hf",), False),  # no engine to sleep
    (("policies.solver.generation.vllm={enable_sleep_mode: false}",), False),  # the user said no
])
def test_engines_sleep_only_where_a_colocated_learner_shares_their_gpu(tmp_path, extra, sleeps) -> None:
    pytest.importorskip("vllm", reason="a vllm backend config needs the vllm extra")
    cfg = small_config(tmp_path, *GPU_COLOCATED, *extra)
    assert engines_sleep(cfg) is sleeps
    if sleeps:
        out = with_sleep_mode(cfg)
        assert out.policies["solver"].generation.vllm == {"enable_sleep_mode": True}
        assert out.policies["proposer"].generation.vllm == {}  # HF: untouched
        assert cfg.policies["solver"].generation.vllm == {}  # a copy: the driver's config is untouched


class FakeLLM:
    def __init__(self) -> None:
        self.calls: list = []

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self) -> None:
        self.calls.append("wake_up")


class Engine(Sleeper):
    def __init__(self, llm) -> None:
        self.llm = llm

    def _sleepy_llm(self):
        return self.llm


def test_an_engine_sleeps_once_at_level_1_and_only_on_cuda(monkeypatch) -> None:
    llm = FakeLLM()
    engine = Engine(llm)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert engine.sleep() is False and llm.calls == []  # vLLM's CPU engine has no sleep mode
    engine.wake()
    assert llm.calls == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert Engine(None).sleep() is False  # not started: nothing to free
    assert engine.sleep() is True and engine.sleep() is False  # asleep already (LoRA adapters share one)
    assert llm.calls == [("sleep", 1)]
    engine.wake()
    engine.wake()
    assert llm.calls == [("sleep", 1), "wake_up"] and not engine.asleep


class FakeActorError(Exception):
    pass


def test_the_driver_puts_every_worker_to_sleep_and_wakes_it_ignoring_a_dead_one() -> None:
    calls: list[str] = []

    def method(r: int, name: str):
        def remote():
            calls.append(f"{name} {r}")
            return (r, name)
        return SimpleNamespace(remote=remote)

    answers = {(0, "sleep"): ["solver"], (1, "sleep"): FakeActorError(), (0, "wake"): None, (1, "wake"): None}

    def get(ref):
        out = answers[ref]
        if isinstance(out, Exception):
            raise out
        return out

    ray = SimpleNamespace(get=get, exceptions=SimpleNamespace(RayActorError=FakeActorError))
    workers = [SimpleNamespace(sleep=method(r, "sleep"), wake=method(r, "wake")) for r in range(2)]
    pool = SimpleNamespace(ray=ray, workers=workers)
    off = Sleepers(pool, on=False)
    off.sleep()
    off.wake()
    assert calls == [] and not off.asleep
    s = Sleepers(pool, on=True)
    s.wake()  # awake already: no call
    s.sleep()
    s.sleep()  # once per rollout
    assert calls == ["sleep 0", "sleep 1"] and s.asleep and s.slept == 1  # worker 1 died: left to its next call
    s.wake()
    assert calls[2:] == ["wake 0", "wake 1"] and not s.asleep
