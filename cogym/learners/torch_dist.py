"""Data-parallel helpers over ``torch.distributed``; each is the identity (or a no-op) in one process.

A data-parallel run has W processes ("ranks"), started by ``cogym train --nproc W``
(:mod:`cogym.runners.train.launch`) or by ``torchrun``, which set the torchrun environment variables
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``). :func:`init_from_env`
starts the process group from them (gloo on CPU, nccl on GPU); everything else here asks the
group that is up, so the same code runs unchanged when no group exists or W is 1.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch

ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def world_size() -> int:
    return torch.distributed.get_world_size() if initialized() else 1


def rank() -> int:
    return torch.distributed.get_rank() if initialized() else 0


def is_main() -> bool:
    """Rank 0: the process that writes metrics, plots and the shared parts of checkpoints."""
    return rank() == 0


def barrier() -> None:
    if world_size() > 1:
        torch.distributed.barrier()


def all_gather_objects(obj: Any) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (pickled); ``[obj]`` in one process."""
    if world_size() == 1:
        return [obj]
    out: list = [None] * world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    return all_gather_objects(obj)[0]


def all_reduce_sum(value: float | torch.Tensor) -> float | torch.Tensor:
    """The sum over ranks: a float for a float (reduced in float64), a new tensor for a tensor."""
    if world_size() == 1:
        return value
    if isinstance(value, torch.Tensor):
        out = value.detach().clone()
        torch.distributed.all_reduce(out, op=torch.distributed.ReduceOp.SUM)
        return out
    t = torch.tensor([float(value)], dtype=torch.float64)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return float(t.item())


def init_from_env(timeout_s: float = 1800.0) -> bool:
    """Start the process group when the environment says ``WORLD_SIZE`` > 1 (and none is up yet).

    Returns True if it started one (the caller may then ``destroy_process_group`` at the end).
    """
    world = int(os.environ.get("WORLD_SIZE", "1") or "1")
    if world <= 1 or initialized():
        return False
    missing = [key for key in ENV_VARS if not os.environ.get(key)]
    if missing:
        raise RuntimeError(f"WORLD_SIZE={world} but {', '.join(missing)} not set; start data-parallel workers with "
                           "`cogym train ... --nproc N` (or torchrun), which sets them")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "nccl"
    else:
        backend = "gloo"
    torch.distributed.init_process_group(backend, init_method="env://", rank=int(os.environ["RANK"]), world_size=world,
                                         timeout=datetime.timedelta(seconds=timeout_s))
    return True
