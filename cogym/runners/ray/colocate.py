"""Learners and vLLM engines on the same GPUs (``ray.learners: colocated`` with ``ray.num_gpus`` > 0):
the engines sleep during the update and wake for the next rollout.

In a sync run a rollout worker's engines are idle while the learner actor beside it (the same
placement bundle, the same GPU) updates. vLLM's sleep mode (level 1) moves an engine's weights to CPU
memory and drops its KV cache, which frees most of the GPU memory the engine holds (vLLM's
documentation: "up to 90%+"); waking copies the weights back and allocates the KV cache again. So the
driver asks every worker to :meth:`~cogym.runners.ray.worker.RolloutWorker.sleep` its engines once
a rollout is gathered and wakes them before the new weights load. Only where vLLM supports it: on
CUDA, engines started with ``enable_sleep_mode`` (:func:`with_sleep_mode` adds it to the workers'
config); a CPU engine ignores both calls. One-step runs overlap the rollout with the update, so their engines never sleep."""

from __future__ import annotations

import copy

from cogym.runners.config.schema import Config


def engines_sleep(cfg: Config) -> bool:
    """Whether the workers' vLLM engines sleep during updates: learner actors colocated on the workers'
    GPUs, a sync run, some policy generating with vLLM, and no ``enable_sleep_mode: false`` for it."""
    rc = cfg.ray
    vllm = [pc for pc in cfg.policies.values() if pc.generation.backend == "vllm"]
    return (cfg.run.backend == "ray" and rc.learners == "colocated" and rc.num_gpus > 0 and cfg.run.async_ == "off"
            and bool(vllm) and all(pc.generation.vllm.get("enable_sleep_mode", True) for pc in vllm))


def with_sleep_mode(cfg: Config) -> Config:
    """A copy of ``cfg`` whose vLLM policies start their engines with ``enable_sleep_mode``."""
    out = copy.deepcopy(cfg)
    for pc in out.policies.values():
        if pc.generation.backend == "vllm":
            pc.generation.vllm = {**pc.generation.vllm, "enable_sleep_mode": True}
    return out


def sleep_all(policies: dict) -> list[str]:
    """A worker's side: every policy whose engine released its GPU memory now."""
    return [pid for pid, p in policies.items() if hasattr(p.backend, "sleep") and p.backend.sleep()]


def wake_all(policies: dict) -> None:
    for p in policies.values():
        if hasattr(p.backend, "wake"):
            p.backend.wake()


class Sleepers:
    """The driver's side: the workers' engines asleep after a rollout, awake before a weight sync or
    rollout. A worker that died in between is left to the call that needs it next (it restarts awake)."""

    def __init__(self, pool, on: bool) -> None:
        self.pool, self.on, self.asleep, self.slept = pool, on, False, 0

    def sleep(self) -> None:
        if not self.on or self.asleep:
            return
        self.slept += sum(len(x) for x in self._each("sleep"))
        self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self._each("wake")
            self.asleep = False

    def _each(self, method: str) -> list:
        ray, out = self.pool.ray, []
        for ref in [getattr(w, method).remote() for w in self.pool.workers]:
            try:
                out.append(ray.get(ref) or [])
            except ray.exceptions.RayActorError:
                pass
        return out
