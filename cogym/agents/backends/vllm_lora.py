"""Several LoRA policies on one vLLM engine: vLLM's multi-LoRA serving for cogym's shared-base adapters.

Policies that are LoRA adapters on one base model (:class:`~cogym.agents.lora.LoraBase`) and say
``generation.backend: vllm`` share ONE engine (:class:`LoraEngine`), started from the base model's
directory with ``enable_lora``; each policy's :class:`VLLMLoraBackend` names its adapter in every
request (a ``LoRARequest``). So three co-trained roles hold one copy of the base weights and three
small adapters, not three models.

Weights: an update sends only the adapter. The backend writes the policy's adapter as a peft adapter
directory (a few MB for a 7B model's rank-8 q/v adapter) and registers it under a new adapter id;
the old id is removed from the engine. A new id per version means the engine's prefix cache, keyed by
adapter id, never serves KV entries of an older adapter. The base model is frozen, so it never travels.

Everything else (sampling, behaviour log-probs, stop tokens) is the contract of
:mod:`cogym.agents.backends.vllm`. One engine per base model per process: on Ray, each rollout
worker holds one per base.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from cogym.agents.backends.checks import check_update
from cogym.agents.backends.vllm import LLM, cpu_threads_bound, engine_arguments, load_into, require_vllm, sample, shutdown, \
    Sleeper
from cogym.agents.backends.policy_view import PolicyView
from cogym.agents.loading import resolve_model_dir
from cogym.core.types import Generation, SamplingParams

try:  # the vllm extra (require_vllm names it)
    from vllm.lora.request import LoRARequest
except ImportError:
    LoRARequest = None

# vLLM's accepted max_lora_rank values (vllm.config.lora.MaxLoRARanks).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts as ``max_lora_rank`` that holds an adapter of rank ``rank``."""
    for r in LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"a LoRA rank of {rank} is above vLLM's largest max_lora_rank ({LORA_RANKS[-1]})")


class LoraEngine(Sleeper):
    """One vLLM engine serving every registered adapter of one base model (see the module docstring).

    Adapters are registered (:meth:`register`) as their backends are made; the engine starts at the
    first request, sized for all of them (``max_loras``: their number, ``max_lora_rank``: the largest
    rank). ``engine_args``: the policies' ``generation.vllm`` (they must agree: one engine)."""

    def __init__(self, base_dir: str | Path, engine_args: Mapping[str, Any] | None = None) -> None:
        require_vllm()
        self.base_dir = str(resolve_model_dir(base_dir))
        self.engine_args = dict(engine_args or {})
        self.adapters: dict[str, PolicyView] = {}
        self.ranks: dict[str, int] = {}
        self.current: dict[str, Any] = {}  # adapter name -> its LoRARequest on the engine now
        self._ids = itertools.count(1)
        self._llm = None
        self._dir: str | None = None  # adapter directories live here

    def register(self, policy: PolicyView) -> None:
        name = policy.name
        if self._llm is not None:
            raise RuntimeError(f"adapter {name!r} came after the shared vLLM engine of {self.base_dir!r} started; "
                               "every adapter of a base model is registered before the first generate")
        if name in self.adapters:
            raise ValueError(f"the shared vLLM engine of {self.base_dir!r} already serves an adapter {name!r}")
        config = policy.model.peft.peft_config[policy.model.adapter]
        self.adapters[name], self.ranks[name] = policy, int(config.r)

    @property
    def started(self) -> bool:
        return self._llm is not None

    @property
    def llm(self):
        if self._llm is None:
            first = next(iter(self.adapters.values()))
            lora = dict(enable_lora=True, max_loras=len(self.adapters), max_lora_rank=lora_rank(max(self.ranks.values())))
            self._dir = tempfile.mkdtemp(prefix="cogym-vllm-lora-")
            with cpu_threads_bound():  # on a small CPU machine the engine computes on every core
                self._llm = LLM(model=self.base_dir, **engine_arguments(first, self.engine_args, **lora))
        return self._llm

    def publish(self, name: str) -> Any:
        """Write adapter ``name`` as its policy's model holds it now, give it a new id on the engine (the
        previous one removed) and return its ``LoRARequest``."""
        self.wake()
        llm = self.llm
        policy = self.adapters[name]
        lora_id = next(self._ids)
        path = Path(self._dir) / f"{name}-{lora_id}"
        with policy.gather():
            policy.model.save_adapter(path, base=self.base_dir)
        request = LoRARequest(lora_name=f"{name}-{lora_id}", lora_int_id=lora_id, lora_path=str(path))
        if not llm.llm_engine.add_lora(request):
            raise RuntimeError(f"the shared vLLM engine of {self.base_dir!r} did not load adapter {name!r} from {path}")
        old = self.current.get(name)
        if old is not None:
            llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self.current[name] = request
        return request

    def request(self, name: str) -> Any:
        """Adapter ``name``'s ``LoRARequest`` (published now if it has none yet)."""
        self.wake()
        return self.current.get(name) or self.publish(name)

    def _sleepy_llm(self):
        return self._llm

    def close(self) -> None:
        if self._llm is not None:
            shutdown(self._llm)
            self._llm = None
        self.current = {}
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down what close() needs
            pass


class VLLMLoraBackend:
    """One LoRA policy's generation on its base model's shared :class:`LoraEngine`."""

    name = "vllm"

    def __init__(self, policy: PolicyView, engine: LoraEngine) -> None:
        require_vllm()
        if not getattr(policy, "lora", False):
            raise ValueError(f"policy {policy.name!r} is a full model, not a LoRA adapter; use VLLMBackend")
        self.policy, self.shared = policy, engine
        engine.register(policy)
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    @property
    def engine(self) -> LoraEngine:
        return self.shared

    def sleep(self) -> bool:
        """The shared engine's :meth:`~cogym.agents.backends.vllm.Sleeper.sleep` (once for all its adapters)."""
        return self.shared.sleep()

    def wake(self) -> None:
        self.shared.wake()

    def load_weights(self, weights: Mapping[str, torch.Tensor] | None, version: int) -> None:
        """Take the adapter's new weights (a state dict of its parameters, or None: the policy's model as
        the learner left it) and serve them from the next request on."""
        check_update(self.policy, self._version, version, weights)
        if weights is not None:
            load_into(self.policy, weights)
        if self.shared.started:
            self.shared.publish(self.policy.name)
        self._version = version

    def generate(self, prompts: Sequence[Sequence[int]], sampling: "SamplingParams",
                 keys: Sequence[int] | None = None) -> list["Generation"]:
        if not prompts:
            return []
        request = self.shared.request(self.policy.name)
        return sample(self.shared.llm, self.policy, prompts, sampling, keys, self._version, lora_request=request)

    def close(self) -> None:
        """Closes the shared engine (every adapter's backend on it)."""
        self.shared.close()
