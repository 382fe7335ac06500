"""Helpers for tests that run `cogym` as real processes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def sigkill_once_written(proc: subprocess.Popen, path: Path, timeout: float) -> None:
    """Wait until ``path`` exists (a checkpoint's last file, say), then kill ``proc`` with SIGKILL, so it
    dies mid-run; fails if the process ended by itself before that."""
    deadline = time.monotonic() + timeout
    while not path.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before it could be killed (waiting for {path})"
