"""Engines own a model's training state: optimizer, gradient steps, optimizer checkpoints.

The learner calls ``backward(loss)`` once per micro-batch and ``step()`` once per optimizer
step, and never knows which engine it has. ``TorchEngine`` is plain AdamW; ``DeepSpeedEngine``
wraps the same model with ``deepspeed.initialize`` (ZeRO stage and CPU offload from config; gloo
on CPU, nccl on GPU). The loss passed to ``backward`` is already normalised over the whole
optimizer step, so neither engine rescales it. In a data-parallel run (W ranks, see
:mod:`distributed`) both engines average the gradients over the ranks before clipping.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import save_file

from cogym.core.processes import free_port
from cogym.learners import torch_dist as dist
from cogym.learners.config import LearnerConfig


class Engine(Protocol):
    name: str
    model: torch.nn.Module  # the bare HF module (generation, saving)
    train_module: torch.nn.Module  # what the training forward calls (the engine's own wrapper)

    def backward(self, loss: torch.Tensor, last: bool = True) -> None: ...

    def step(self) -> dict[str, float]: ...

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...

    def gathered_params(self) -> contextlib.AbstractContextManager: ...


OPTIM_FILE = "optimizer.pt"
MASTER_FILE = "master_weights.pt"  # the torch engine's float32 weights of a bfloat16/float16 model
ZERO_FILE = "zero_optimizer.rank{rank}.pt"


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_available() and torch.distributed.is_initialized() else 0


def _zero_safe_globals() -> list:
    """The DeepSpeed value classes a ZeRO optimizer state dict holds (its loss scaler, its stage, and
    the fragment addresses of flattened parameters); nothing else may be rebuilt on load."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype of the model's trainable weights (float32 when it has none)."""
    return next((p.dtype for p in model.parameters() if p.requires_grad), torch.float32)


class LossScaler:
    """Dynamic loss scaling for float16 gradients: start at 2**16, halve on an overflow (and skip that
    step), double after ``window`` clean steps."""

    def __init__(self, scale: float = 2.0 ** 16, window: int = 1000, min_scale: float = 1.0) -> None:
        self.scale, self.window, self.min_scale, self.clean = scale, window, min_scale, 0

    def update(self, overflow: bool) -> None:
        if overflow:
            self.scale, self.clean = max(self.min_scale, self.scale / 2), 0
        else:
            self.clean += 1
            if self.clean % self.window == 0:
                self.scale *= 2


class TorchEngine:
    """AdamW with gradient clipping on the model as it is. Data parallel (W > 1 ranks), the
    gradients are averaged over the ranks before clipping, as DeepSpeed does.

    A model held in bfloat16 or float16 trains in mixed precision: the optimizer steps float32
    master copies of the weights (a step of lr * 1e-3 would vanish in a bfloat16 weight's 8 bits),
    which are copied back into the model after each step; float16 gradients get dynamic loss scaling."""

    name = "torch"

    def __init__(self, model: torch.nn.Module, cfg: LearnerConfig) -> None:
        self.model = self.train_module = model
        self.cfg = cfg
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.master = None
        if model_dtype(model) != torch.float32:
            self.master = [p.detach().float().clone() for p in self.params]
        self.scaler = LossScaler() if model_dtype(model) == torch.float16 else None
        self.optimizer = torch.optim.AdamW(self.master or self.params, lr=cfg.lr,
                                           weight_decay=cfg.weight_decay, betas=(0.9, 0.999))

    def backward(self, loss: torch.Tensor, last: bool = True) -> None:
        (loss * self.scaler.scale if self.scaler else loss).backward()

    def step(self) -> dict[str, float]:
        if dist.world_size() > 1:
            average_gradients(self.params)
        if self.master is None:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            return {"grad_norm": float(norm)}
        unscale = 1.0 / self.scaler.scale if self.scaler else 1.0
        for m, p in zip(self.master, self.params):
            m.grad = None if p.grad is None else p.grad.float() * unscale
            p.grad = None
        norm = torch.nn.utils.clip_grad_norm_(self.master, self.cfg.max_grad_norm)
        metrics = {"grad_norm": float(norm)}
        overflow = not torch.isfinite(norm)
        if self.scaler:
            self.scaler.update(overflow)
            metrics["loss_scale"] = self.scaler.scale
        if overflow and self.scaler:
            metrics["skipped_step"] = 1.0
        else:
            self.optimizer.step()
            with torch.no_grad():
                for m, p in zip(self.master, self.params):
                    p.copy_(m)
        self.optimizer.zero_grad(set_to_none=True)
        return metrics

    def save(self, directory: Path) -> None:
        torch.save(self.optimizer.state_dict(), Path(directory) / OPTIM_FILE)
        if self.master is not None:  # the weights at full precision: the model's own are rounded
            state = {"master": self.master, "scale": self.scaler.scale if self.scaler else None}
            torch.save(state, Path(directory) / MASTER_FILE)

    def load(self, directory: Path) -> None:
        self.optimizer.load_state_dict(torch.load(Path(directory) / OPTIM_FILE, weights_only=True))
        path = Path(directory) / MASTER_FILE
        if self.master is not None and path.is_file():
            state = torch.load(path, weights_only=True)
            with torch.no_grad():
                for m, saved in zip(self.master, state["master"]):
                    m.copy_(saved)
            if self.scaler and state["scale"] is not None:
                self.scaler.scale = float(state["scale"])

    def gathered_params(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


def average_gradients(params: list[torch.nn.Parameter]) -> None:
    """Data parallel: replace every gradient by its mean over the ranks (one flat all-reduce). A
    parameter gets a gradient if any rank gave it one (zeros stand in on the others)."""
    world = dist.world_size()
    if world == 1 or not params:
        return
    ref = params[0]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).float()
                      for p in params] + [torch.tensor([float(p.grad is not None) for p in params], device=ref.device)])
    flat = dist.all_reduce_sum(flat)
    has_grad = (flat[-len(params):] > 0).tolist()
    offset = 0
    for p, has in zip(params, has_grad):
        n = p.numel()
        if has:
            p.grad = (flat[offset: offset + n] / world).view_as(p).to(p.dtype)
        offset += n


def init_single_process_distributed() -> None:
    """Start a one-rank process group (gloo on CPU) unless a launcher already did."""
    import deepspeed

    if os.environ.get("WORLD_SIZE", "1") == "1" or not torch.cuda.is_available():
        # DeepSpeed compiles a shared-memory all-reduce op (about a minute on 2 cores) when its
        # CPU backend starts. Only its inference all-reduce uses it (training collectives go
        # through torch.distributed), and one rank never all-reduces, so skip the build.
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    if dist.initialized():
        return  # a data-parallel launcher started the group (distributed.init_from_env): DeepSpeed wraps it
    defaults = {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": None}
    added = [key for key in defaults if key not in os.environ]
    for key in added:
        os.environ[key] = defaults[key] or str(free_port())
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    try:
        deepspeed.init_distributed(dist_backend=backend, verbose=False)
    finally:
        # The group is up; the rendezvous port we picked must not leak into processes this one starts
        # (a child `cogym train` would try to bind the port our group still holds). DeepSpeed still
        # reads RANK / LOCAL_RANK / WORLD_SIZE later, so those stay.
        if "MASTER_PORT" in added:
            os.environ.pop("MASTER_PORT", None)


# DeepSpeed's default size of a ZeRO gradient bucket, in elements (its reduce_bucket_size).
DEEPSPEED_BUCKET = 500_000_000


def deepspeed_config(cfg: LearnerConfig, micro_batch_size: int = 1, dtype: torch.dtype = torch.float32,
                     trainable: int | None = None) -> dict:
    """DeepSpeed's config for a learner; a bfloat16 or float16 model trains in DeepSpeed's mixed precision
    (float32 master weights; dynamic loss scaling for float16).

    ``trainable``: the number of trainable parameters. ZeRO allocates its gradient buckets at their
    full size when the engine starts (500M elements by default: 2 GB of address space at ZeRO-3,
    whatever the model); no bucket needs to be larger than the model, so they are capped at it, rounded
    up to a multiple of 1024 (a model of 500M parameters or more keeps DeepSpeed's default)."""
    zero: dict = {"stage": cfg.zero_stage}
    if trainable is not None and cfg.zero_stage > 0:
        # a whole number of KiB-elements: ZeRO-1/2 want the size a multiple of their alignment factor (2)
        bucket = int(min(DEEPSPEED_BUCKET, -(-max(trainable, 1) // 1024) * 1024))
        zero["reduce_bucket_size"] = bucket
        zero["allgather_bucket_size"] = bucket
    if cfg.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if cfg.offload_params:
        zero["offload_param"] = {"device": "cpu"}
    return {
        # The learner normalises the loss over the whole step itself and marks the accumulation
        # boundary by hand, so DeepSpeed's own accumulation bookkeeping is kept at 1.
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": cfg.max_grad_norm,
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "bf16": {"enabled": dtype == torch.bfloat16},
        "fp16": {"enabled": dtype == torch.float16, "loss_scale": 0, "initial_scale_power": 16},
    }


class DeepSpeedEngine:
    """The model wrapped by ``deepspeed.initialize``; ``model`` stays the bare HF module."""

    name = "deepspeed"

    def __init__(self, model: torch.nn.Module, cfg: LearnerConfig) -> None:
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
        import deepspeed

        init_single_process_distributed()
        self.cfg = cfg
        self.dtype = model_dtype(model)
        params = [p for p in model.parameters() if p.requires_grad]
        ds_cfg = deepspeed_config(cfg, dtype=self.dtype, trainable=sum(p.numel() for p in params))
        if cfg.offload_optimizer:
            # ZeRO-Offload needs DeepSpeed's own CPU Adam, so the optimizer comes from the config.
            ds_cfg["optimizer"] = {"type": "AdamW", "params": {"lr": cfg.lr, "weight_decay": cfg.weight_decay}}
            optimizer = None
        else:
            optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999))
        self.ds, self.optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=params,
                                                             optimizer=optimizer, config=ds_cfg)
        self.model = self.ds.module
        # The forward must run through the DeepSpeed engine: ZeRO-3 hooks and micro-step
        # bookkeeping live there (a bare-module forward makes ZeRO-3 keep only the last
        # micro-batch's gradient).
        self.train_module = self.ds
        self._pending = 0

    def backward(self, loss: torch.Tensor, last: bool = True) -> None:
        # Gradients accumulate locally across micro-batches; ZeRO reduces and partitions them in
        # the backward of the last one, which must therefore be marked as the boundary.
        self.ds.set_gradient_accumulation_boundary(last)
        self.ds.backward(loss, scale_wrt_gas=False)
        self._pending += 1

    def step(self) -> dict[str, float]:
        if self._pending == 0:
            return {}
        manual = None
        if self.cfg.zero_stage == 0 and self.dtype == torch.float32:
            # Stage 0 with a client optimizer does not record the norm; measure it before the step.
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            manual = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0
        self.ds.step()
        self._pending = 0
        norm = self.ds.get_global_grad_norm()
        norm = manual if norm is None else float(norm)
        metrics = {"grad_norm": norm} if norm is not None else {}
        if self.dtype == torch.float16:
            opt = self.ds.optimizer
            scale = getattr(opt, "cur_scale", None) or getattr(getattr(opt, "loss_scaler", None), "cur_scale", None)
            if scale is not None:
                metrics["loss_scale"] = float(scale)
        return metrics

    def save(self, directory: Path) -> None:
        """Optimizer state as plain tensors and a few DeepSpeed value classes, one file per rank.

        Model weights are saved apart (safetensors, by the caller). At ZeRO stages 1-3 the ZeRO
        optimizer's state dict holds its fp32 partitions and moments; with stage 3 the restored
        partitions are the master weights. Nothing here needs unrestricted pickle to load.
        """
        if self.cfg.zero_stage == 0:
            torch.save(self.optimizer.state_dict(), Path(directory) / OPTIM_FILE)
            return
        state = {"optimizer": self.ds.optimizer.state_dict(), "global_steps": self.ds.global_steps,
                 "global_samples": self.ds.global_samples, "skipped_steps": self.ds.skipped_steps}
        torch.save(state, Path(directory) / ZERO_FILE.format(rank=_rank()))

    def load(self, directory: Path) -> None:
        """Restore what :meth:`save` wrote, with ``torch.load(weights_only=True)``: only tensors,
        containers and the allow-listed DeepSpeed value classes can be rebuilt, never arbitrary code."""
        if self.cfg.zero_stage == 0:
            self.optimizer.load_state_dict(torch.load(Path(directory) / OPTIM_FILE, weights_only=True))
            return
        path = Path(directory) / ZERO_FILE.format(rank=_rank())
        if not path.is_file():
            raise FileNotFoundError(f"no ZeRO optimizer state {path.name} under {directory}")
        with torch.serialization.safe_globals(_zero_safe_globals()):
            state = torch.load(path, weights_only=True)
        # DeepSpeed takes the list of every rank's state and reads entry [rank] (a rigid checkpoint, the
        # default, needs only that one): this rank's file fills its place.
        states: list = [None] * dist.world_size()
        states[_rank()] = state["optimizer"]
        self.ds.optimizer.load_state_dict(states)
        self.ds.global_steps, self.ds.global_samples = state["global_steps"], state["global_samples"]
        self.ds.skipped_steps = state["skipped_steps"]

    def gathered_params(self) -> contextlib.AbstractContextManager:
        if self.cfg.zero_stage == 3:
            import deepspeed

            return deepspeed.zero.GatheredParameters(list(self.model.parameters()))
        return contextlib.nullcontext()


ENGINES = {"torch": TorchEngine, "deepspeed": DeepSpeedEngine}


def save_weights(model: torch.nn.Module, path: Path, engine: "Engine | None" = None) -> None:
    """``model``'s state dict as one safetensors file, gathered from ZeRO-3 partitions when an engine
    is given. Tensors are copied: tied weights become two entries and ZeRO's flat-buffer views plain
    tensors, which safetensors requires."""
    with engine.gathered_params() if engine is not None else contextlib.nullcontext():
        save_file({k: v.detach().clone().contiguous().cpu() for k, v in model.state_dict().items()}, str(path))


def make_engine(model: torch.nn.Module, cfg: LearnerConfig) -> Engine:
    try:
        cls = ENGINES[cfg.engine]
    except KeyError:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {cfg.engine!r}") from None
    return cls(model, cfg)
