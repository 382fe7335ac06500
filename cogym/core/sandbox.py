"""One sandbox for anything that interprets model output (scorers now; code executors next).

A ``Sandbox`` is a warm worker process that loads a *handler* file and answers JSON requests::

    box = Sandbox(Path("my_handler.py"), "my_scorer", "is my-lib installed?")
    box.request({"op": "score", "answer": "...", "timeout_s": 0.5}, deadline_s=0.75)  # -> dict | None
    box.close()

The handler is a plain module (it must import nothing from cogym) with ``setup()`` (slow imports, run once),
``handle(request) -> dict``, ``FAILED`` (the reply of a call that failed, e.g. ``{"score": 0.0}``) and
optionally ``IN_PLACE`` (ops that run in the warm process itself because they fill a cache; only trusted
work). Every other request runs in a fresh fork of the warm process (see ``_sandbox_serve.py``) that holds
no channel but its own result socket and is killed, with whatever it started, when it has answered or
overrun its ``timeout_s``. A failed, killed or malformed call answers ``FAILED`` plus ``"error"``.

What the sandbox is (``isolation()`` says which one is in force here):

* namespaces (``unshare`` from util-linux, user namespaces allowed): PID 1 of new user, PID, network,
  mount and IPC namespaces; no network (a loopback that is down); the file system read-only but for a
  private tmpfs (``HOME`` and ``TMPDIR``), /run, /tmp, /var/tmp and /dev/shm hidden (UNIX sockets live
  there) but for what the sandbox runs from them, /proc showing only the sandbox; PIDs capped
  (Linux 6.14+, and RLIMIT_NPROC where the user is not root); everything dies with PID 1.
* fallback (no ``unshare``, user namespaces refused, or ``COGYM_SANDBOX=fallback``), with a one-time
  warning: the same forks, rlimits and scrubbed environment, a private temporary directory, and what a call
  starts killed with it (its process group, and what left the group: the worker is a subreaper); but the
  code runs as the user: the network and the user's files stay reachable (cogym's own code included), so
  does /proc (the environment of the user's other processes, cogym's own included), a call that kills the
  worker leaves what it started running (it can then fail every later call, or, where the kernel lets the
  user ptrace his own processes, tamper with cogym itself), and root's forks are not bounded (RLIMIT_NPROC
  exempts root). It stops accidents and careless code, not a deliberate attack: docs/security.md.

Both: the environment is scrubbed to ``ENV_ALLOWED`` (no key is handed to a handler), rlimits bound CPU
time, address space, file size, open files and processes; the sandbox ends when cogym does (EOF on its
socket, a socketpair: unlike a pipe it cannot be opened again through /proc/<cogym>/fd), and replies carry a
per-request nonce: a reply without it is taken as tampering, the worker is killed and replaced and the
request answers None. The caller checks what a reply says (a scorer's reply is model output's work).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

SERVE_SCRIPT = Path(__file__).with_name("_sandbox_serve.py")
STARTUP_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 20.0
ENV_ALLOWED = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8",
    "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    # set on processors where older OpenBLAS builds crash or compute wrong results: numpy needs them there too
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"})
_UNSHARE = ("--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--net", "--mount", "--ipc", "--uts",
            "--propagation", "private")


@dataclass(frozen=True)
class Limits:
    """What one sandboxed call may use. ``memory_bytes`` is address space on top of what the warm worker
    maps (a call is a fork of it). ``processes`` bounds the processes a call may run at once: the sandbox's
    PID cap is 300 + ``processes`` (Linux 6.14+; PIDs below 300 are reserved only after the first wrap),
    and RLIMIT_NPROC, where the user is not root, allows ``processes`` more than the user runs already."""

    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    open_files: int = 256
    processes: int = 64
    tmp_bytes: int = 64 << 20


@dataclass(frozen=True)
class Isolation:
    namespaces: bool
    description: str


_ISOLATION: Isolation | None = None
_ISOLATION_LOCK = threading.Lock()


def scrubbed_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment cut to ``ENV_ALLOWED`` and ``LC_*``, plus ``extra``: never a key or token."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWED or k.startswith("LC_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the file system is read-only in there
    return {**env, **(extra or {})}


def isolation() -> Isolation:
    """Which sandbox this machine gives (probed once per process: a sandbox started, set up and closed)."""
    global _ISOLATION
    with _ISOLATION_LOCK:
        if _ISOLATION is None:
            _ISOLATION = _probe()
            if not _ISOLATION.namespaces:
                warnings.warn(f"cogym sandbox: {_ISOLATION.description}", RuntimeWarning, stacklevel=2)
        return _ISOLATION


def _probe() -> Isolation:
    fallback = "fallback (rlimits, a scrubbed environment and a process group; network and files reachable)"
    if os.environ.get("COGYM_SANDBOX", "").lower() == "fallback":
        return Isolation(False, f"{fallback}: COGYM_SANDBOX=fallback")
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        return Isolation(False, f"{fallback}: no unshare (util-linux) here")
    config = {"handler": str(SERVE_SCRIPT), "namespaces": True, "probe": True, "limits": asdict(Limits())}
    try:
        done = subprocess.run([unshare, *_UNSHARE, sys.executable, str(SERVE_SCRIPT), json.dumps(config)],
                              capture_output=True, timeout=PROBE_TIMEOUT_S, env=scrubbed_env(), cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation(False, f"{fallback}: unshare failed ({exc})")
    if done.returncode != 0 or b'"ready": true' not in done.stdout:
        why = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1][:200]
        return Isolation(False, f"{fallback}: user namespaces are not available ({why})")
    return Isolation(True, "namespaces (user, PID, network, mount, IPC): no network, read-only files but a "
                           "private tmpfs, nothing outlives a call")


def _processes_of_this_user() -> int:
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def _child_of(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


class Sandbox:
    """A warm sandboxed worker running ``handler`` (see the module docstring), started on first use and
    shared by every caller in this Python process (calls are serialized by a lock).

    ``request(message, deadline_s)`` returns the handler's reply, or None when no reply came within
    ``deadline_s`` seconds, the worker died, or a reply was forged: the worker is then killed whole,
    ``kills`` counts it, and the next request starts a fresh one. ``message["timeout_s"]`` (default
    ``deadline_s``) is the call's own budget, enforced inside; the deadline is the last resort. A forked copy
    of this process never touches its parent's worker. ``hint`` says what to check when it does not start;
    ``namespaces=False`` forces the fallback (None: ``isolation()`` decides).
    """

    def __init__(self, handler: Path, name: str, hint: str, env: Mapping[str, str] | None = None,
                 limits: Limits | None = None, namespaces: bool | None = None) -> None:
        self.script, self.name, self.hint = Path(handler), name, hint
        self.limits = limits or Limits()
        self._namespaces = namespaces
        self._env = dict(env or {})
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._namespaces_now = False
        self._pid: int | None = None
        self._tmp: str | None = None
        self._owner_pid = os.getpid()
        self._buffer = b""
        self.kills = 0  # how many times a worker had to be killed (hung, dead or tampered with)

    @property
    def pid(self) -> int | None:
        """The worker's process id as this process sees it (inside ``unshare``), None when not running."""
        return self._pid if self._proc is not None and self._proc.poll() is None else None

    def start(self) -> None:
        with self._lock:
            self._ensure_started()

    def request(self, message: Mapping[str, object], deadline_s: float) -> dict | None:
        """The worker's reply to ``message``, or None (worker killed) if none came within ``deadline_s``."""
        with self._lock:
            self._ensure_started()
            nonce = secrets.token_hex(16)
            timeout_s = float(message.get("timeout_s", deadline_s))  # type: ignore[arg-type]
            line = (json.dumps({"id": nonce, "timeout_s": timeout_s, "request": dict(message)}) + "\n").encode()
            if not self._send(line):
                # The worker died between calls (killed from outside); one fresh start, then retry.
                self._kill()
                self._ensure_started()
                if not self._send(line):
                    self._kill()
                    self.kills += 1
                    return None
            reply = self._read_line(time.monotonic() + deadline_s)
            envelope = _parse(reply)
            if envelope is None or envelope.get("id") != nonce or not isinstance(envelope.get("reply"), dict):
                # No reply in time (a call no timer could stop), a dead worker, or a line it did not send.
                self._kill()
                self.kills += 1
                return None
            return envelope["reply"]

    def _send(self, line: bytes) -> bool:
        assert self._sock is not None
        try:
            self._sock.sendall(line)
            return True
        except OSError:  # BrokenPipeError, ConnectionResetError: the worker is gone
            return False

    def _command(self, namespaces: bool) -> list[str]:
        limits = asdict(self.limits)
        if os.geteuid() != 0:  # RLIMIT_NPROC counts every process of the user (of the namespace, Linux 5.14+)
            limits["nproc"] = _processes_of_this_user() + self.limits.processes
        config = {"handler": str(self.script.resolve()), "namespaces": namespaces, "limits": limits}
        serve = [sys.executable, str(SERVE_SCRIPT), json.dumps(config)]
        return [shutil.which("unshare") or "unshare", *_UNSHARE, *serve] if namespaces else serve

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._owner_pid != os.getpid():
            # We are a forked copy: the worker belongs to our parent, leave it alone.
            if self._sock is not None:
                self._sock.close()  # our copy of the parent's socket: the parent's worker keeps its own
            self._proc, self._sock, self._pid, self._tmp, self._owner_pid, self._buffer = None, None, None, None, os.getpid(), b""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._kill()
        namespaces = isolation().namespaces if self._namespaces is None else self._namespaces and isolation().namespaces
        tmp = None if namespaces else tempfile.mkdtemp(prefix=f"cogym-sandbox-{self.name}-")
        env = scrubbed_env({**self._env, **({"HOME": tmp, "TMPDIR": tmp} if tmp else {})})
        stderr = tempfile.TemporaryFile()
        # A socket, not pipes: a pipe can be opened again through /proc/<cogym>/fd/N by any process of the
        # user (one that escaped the fallback's process group could then read requests and write replies);
        # a socket cannot be opened that way.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen(self._command(namespaces), stdin=theirs.fileno(), stdout=theirs.fileno(),
                                    stderr=stderr, env=env, cwd=tmp or "/", start_new_session=True)
        finally:
            theirs.close()
        self._proc, self._sock, self._tmp, self._buffer = proc, ours, tmp, b""
        self._namespaces_now = namespaces
        ready = _parse(self._read_line(time.monotonic() + STARTUP_TIMEOUT_S))
        if ready is None or not ready.get("ready"):
            self._kill()
            stderr.seek(0)
            tail = stderr.read()[-2000:].decode(errors="replace").strip().replace("\n", " | ")
            raise RuntimeError(f"the {self.name} worker ({self.script}) did not start; {self.hint} stderr: {tail}")
        self._pid = (_child_of(proc.pid) if namespaces else None) or proc.pid
        return proc

    def _read_line(self, deadline: float) -> bytes | None:
        """One reply line, or None if the deadline passes or the worker dies first."""
        assert self._sock is not None
        fd = self._sock.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                return None
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # ECONNRESET: the worker died with a request unread
                return None
            if not chunk:  # EOF: the worker exited
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _kill(self) -> None:
        """Kill the worker's whole process group (and with it its PID namespace) and remove its directory."""
        proc, sock, tmp = self._proc, self._sock, self._tmp
        self._proc, self._sock, self._pid, self._tmp, self._buffer = None, None, None, None, b""
        if proc is not None:
            if proc.poll() is None:
                if not self._namespaces_now:
                    _kill_descendants(proc.pid)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
        if sock is not None:
            sock.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            if self._owner_pid == os.getpid():
                self._kill()


def _living_children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    except (OSError, ValueError):
        pass
    living = []
    for child in found:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):  # a killed child stays listed until its parent reaps it
            living.append(child)
    return living


def _kill_descendants(pid: int, rounds: int = 50) -> None:
    """Fallback only: kill what the worker ``pid`` has started, before the worker (a subreaper, so a call's
    double-forked, re-sessioned processes are still its children). Stopped first, it forks no spare."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    for _ in range(rounds):  # a killed process's children pass to the (stopped) worker: kill those next
        children = _living_children(pid)
        if not children:
            return
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)


def _parse(line: bytes | None) -> dict | None:
    if line is None:
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
