"""Data-parallel launcher: ``cogym train CONFIG --nproc N`` runs the same training command in N processes.

Each worker gets torchrun's environment (``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``,
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``) and ``OMP_NUM_THREADS`` = cores / N
unless set, and joins one process group (gloo on CPU, nccl on GPU) through
:func:`cogym.learners.torch_dist.init_from_env`. Rank 0's output is this command's output; rank
r > 0 writes to a temporary log whose tail is shown if it fails. The first worker to fail stops
the others, and the command exits with its code and a message naming its rank. On Linux the
workers also die with the launcher, even when it is killed with ``kill -9``.

What the ranks do (:mod:`cogym.runners.train.loop`): each plays ``num_games / N`` of an iteration's games,
all ranks gather every rank's rollout, and the learners train data-parallel on the global batch.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cogym.core.processes import free_port
from cogym.core.threads import cpu_capacity
from cogym.runners import rundir
from cogym.runners.config.schema import Config
from cogym.runners.config.validate import check_data_parallel


def _die_with_parent() -> None:
    """In the worker, before exec: on Linux, ask the kernel to SIGTERM it when the launcher dies
    (even by ``kill -9``), so no orphaned rank keeps a port and the cores busy."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        except OSError:
            pass


WORKER_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _stop(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_workers(cmd: list[str], nproc: int, env: dict | None = None, name: str = "cogym train",
                poll_s: float = 0.05) -> int:
    """Run ``nproc`` copies of ``cmd`` with torchrun's environment; 0 when all succeed. As soon as one
    fails, stop the others, print which rank failed (and the tail of its log, for r > 0) to stderr,
    and return its exit code (1 if it died of a signal)."""
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    base = dict(os.environ if env is None else env)
    for key in WORKER_ENV:
        base.pop(key, None)
    base.setdefault("OMP_NUM_THREADS", str(max(1, cpu_capacity() // nproc)))  # affinity and cgroup quota
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(nproc),
                LOCAL_WORLD_SIZE=str(nproc))
    procs: list[subprocess.Popen] = []
    logs: dict[int, Path] = {}
    try:
        for r in range(nproc):
            worker_env = {**base, "RANK": str(r), "LOCAL_RANK": str(r)}
            if r == 0:
                procs.append(subprocess.Popen(cmd, env=worker_env, preexec_fn=_die_with_parent))
            else:
                fd, path = tempfile.mkstemp(prefix=f"cogym-rank{r}-", suffix=".log")
                logs[r] = Path(path)
                with os.fdopen(fd, "w") as log:
                    procs.append(subprocess.Popen(cmd, env=worker_env, stdout=log, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent))
        while True:
            codes = [p.poll() for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                r = failed[0]
                code = codes[r]
                _stop(procs)
                how = f"exit code {code}" if code > 0 else f"killed by signal {-code}"
                print(f"{name}: error: worker rank {r} of {nproc} failed ({how}); stopped the other workers",
                      file=sys.stderr)
                if r in logs:
                    print(f"--- last lines of rank {r}'s output ({logs[r]}) ---\n{_tail(logs[r])}", file=sys.stderr)
                    logs.pop(r)  # kept for the user
                return code if code > 0 else 1
            if all(c == 0 for c in codes):
                return 0
            time.sleep(poll_s)
    except KeyboardInterrupt:
        _stop(procs)
        raise
    finally:
        for path in logs.values():
            path.unlink(missing_ok=True)


def worker_argv(args: argparse.Namespace) -> list[str]:
    """The ``cogym train`` arguments of one worker: the user's, without ``--nproc``."""
    argv = ["train"]
    if args.config:
        argv.append(str(args.config))
    argv += list(args.overrides)
    if args.run_dir:
        argv += ["--run-dir", str(args.run_dir)]
    if args.resume:
        argv += ["--resume", str(args.resume)]
    if getattr(args, "overwrite", False):
        argv.append("--overwrite")
    if getattr(args, "trust_run_modules", False):
        argv.append("--trust-run-modules")
    if args.no_progress:
        argv.append("--no-progress")
    return argv


def launch_train(args: argparse.Namespace, cfg: Config) -> int:
    """``cogym train ... --nproc N``: check ``cfg`` splits N ways, then run N workers."""
    check_data_parallel(cfg, args.nproc)
    if args.run_dir and not args.resume:  # refused here in one line, before any worker starts
        rundir.claim(Path(args.run_dir), "train", overwrite=getattr(args, "overwrite", False))
    cmd = [sys.executable, "-m", "cogym.runners.cli", *worker_argv(args)]
    return run_workers(cmd, args.nproc)
