"""The process inside a cogym sandbox (``cogym.core.sandbox`` starts it; cogym never imports it).

Run as ``python _sandbox_serve.py CONFIG`` (stdlib only, so it starts the same way however cogym is
installed). ``CONFIG`` is JSON: ``{"handler": path, "namespaces": bool, "limits": {...}}``. With
``namespaces`` it is PID 1 of fresh user, PID, network, mount and IPC namespaces (``unshare``) and first
makes the file system read-only but for a private tmpfs, mounts a /proc that shows only the sandbox, and caps
the namespace's PIDs. Then it loads the handler file as a module, calls its ``setup()`` (slow imports, before
``{"ready": true}``) and answers one request per line on stdin::

    {"id": str, "timeout_s": float, "request": {...}}  ->  {"id": str, "reply": {...}}

Requests whose ``op`` is in the handler's ``IN_PLACE`` run here (trusted work that fills a cache, such as
generating an item). Every other request runs in a fresh fork of this warm process -- the only place model
output is interpreted -- made ahead of the call, which gets its own session, no capabilities over the
sandbox (a nested user namespace), /dev/null for stdout, no descriptor but its request socket and its result
socket, rlimits on CPU time and address space, and an interval timer. It writes one frame, ``{"reply":
{...}}`` and a newline, and closes the socket; anything else (a second frame, stray bytes, nothing) makes the
call fail with the handler's ``FAILED`` reply. Then every other process in the sandbox is killed (PID 1
kills -1; without namespaces, the fork's process group and every other child of this process, which is a
subreaper, so a double-forked process is its child too), so nothing a call starts outlives it or sees the
next call -- unless, without namespaces, it kills this process first (docs/security.md). Code that runs in
the fork can still write a well-formed frame of its own and exit: it owns that one call's reply (as it
could by returning a value that compares equal to anything), never another's.
"""

from __future__ import annotations

import os
import sys

# The script's folder (cogym/core) holds types.py and others that must not shadow the standard library.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import ctypes  # noqa: E402 - after the sys.path fix on purpose
import fcntl  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 36, 38
SYS_MOUNT_SETATTR = 442  # the same number on every architecture cogym runs on (asm-generic and x86_64)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
MAX_FRAME = 1 << 20  # bytes a call's reply may take
KILL_MARGIN_S = 0.1  # after the call's own timer, before this process kills the fork (the parent waits 0.25 s)

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str, flags: int, data: str = "") -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), data.encode() or None),
           f"mount {fstype} on {target}")


def _read_only_everywhere() -> None:
    """Every mount below / read-only: in one call where the kernel has mount_setattr (5.12), else one by one."""
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
        _read_only_one_by_one()


def _read_only_one_by_one() -> None:
    flag_names = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:  # parents come before their children in mountinfo
        target = fields[4].encode().decode("unicode_escape")
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY  # a user namespace may not drop the flags it inherited: keep them
        flags |= sum(bit for name, bit in flag_names.items() if name in fields[5].split(","))
        _mount("none", target, "none", flags)


SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")  # where any user leaves sockets (X11, ssh-agent, tmux, ...)


def private_dir(needed: list[str]) -> str:
    """Where the private tmpfs goes: /tmp unless the interpreter, its packages or the handler live there."""
    for candidate in (*SCRATCH, "/mnt"):
        if os.path.isdir(candidate) and not any(p == candidate or p.startswith(candidate + "/") for p in needed):
            return candidate
    raise OSError("no directory for the sandbox's private tmpfs (/tmp, /var/tmp, /mnt and /dev/shm hold what it runs)")


def hide(directory: str, needed: list[str]) -> None:
    """Cover ``directory`` with an empty tmpfs (a read-only mount does not stop connect() on the UNIX sockets
    in it), then bind back only the ``needed`` paths that live in it: what this sandbox runs stays readable,
    nothing beside it (a socket, another user's file) is reachable. A ``directory`` that is itself needed
    stays as it is."""
    inside = sorted({p for p in needed if p.startswith(directory + "/") and os.path.exists(p)})
    if directory in needed:
        return
    outermost = [p for p in inside if not any(p.startswith(q + "/") for q in inside)]
    handles = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in outermost]  # reachable once covered
    _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=1024,mode=755")
    for path, fd in handles:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        _mount(f"/proc/self/fd/{fd}", path, "none", MS_BIND | MS_REC)
        os.close(fd)


def enter_namespaces(limits: dict[str, int], handler: str) -> str:
    """As PID 1 of the new namespaces: /proc of this PID namespace, its PID cap, /run and the scratch
    directories (/tmp, /var/tmp, /dev/shm) hidden but for what the sandbox runs from them, / read-only, and
    a private tmpfs (returned). Raises OSError when the kernel refuses a step: the sandbox then does not
    start (``cogym.core.sandbox`` probes this once, and chooses the fallback where it fails)."""
    if os.getpid() != 1:
        raise OSError("not the first process of a new PID namespace")
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # the host's processes (and environs) vanish
    try:  # Linux 6.14+ caps PIDs per namespace; pids below 300 are used once, then reserved
        with open("/proc/sys/kernel/pid_max", "w") as f:
            f.write(str(301 + limits["processes"]))
    except OSError:
        pass  # older kernels: RLIMIT_NPROC bounds forks where the user is not root
    if os.path.isdir("/run"):  # sockets of host daemons (a read-only mount does not stop connect())
        _mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "size=16k,mode=755")
    paths = [sys.prefix, sys.base_prefix, sys.executable, handler, *sys.path]
    needed = sorted({q for p in paths if p for q in (os.path.abspath(p), os.path.realpath(p))})
    tmp = private_dir(needed)
    for directory in SCRATCH:
        if directory != tmp and os.path.isdir(directory):
            hide(directory, needed)
    _read_only_everywhere()
    _mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, f"size={limits['tmp_bytes']},nr_inodes=4096,mode=1777")
    return tmp


def set_limit(kind: int, value: int) -> None:
    hard = resource.getrlimit(kind)[1]
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


class _Deadline(BaseException):
    """Raised by the timer. A BaseException on purpose: scorers catch ``Exception`` and would carry on."""


_FIRED = [False]  # the timer went off during this call (a bare ``except:`` in the handler may swallow _Deadline)


def _on_alarm(signum: int, frame: object) -> None:
    _FIRED[0] = True
    raise _Deadline()


def timed_call(handler: Any, request: dict, timeout_s: float) -> dict:
    """The handler's reply within ``timeout_s`` (interval timer), or its ``FAILED`` reply with the reason."""
    failed = dict(handler.FAILED)
    _FIRED[0] = False
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    # Nested so that an alarm firing inside the inner ``finally`` (before the timer is cleared) is still caught.
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            try:
                reply = handler.handle(request)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0.0)
            if _FIRED[0]:  # the handler swallowed the deadline and returned a result it never finished
                raise _Deadline()
        except _Deadline:
            reply = {**failed, "timeout": True, "error": f"no result within {timeout_s:g} s"}
        except BaseException as exc:  # noqa: BLE001 - model output is adversarial: a crash is a failed call
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {**failed, "error": f"{type(exc).__name__}: {exc}"[:200]}
    finally:
        signal.signal(signal.SIGALRM, previous)
    return reply


def _child(handler: Any, request_fd: int, result_fd: int, config: dict) -> None:
    """A fork that will interpret model output: stripped of everything but its two private sockets, it waits
    for its one request (read to EOF), calls, writes its one frame and exits."""
    os.setsid()
    if config["namespaces"]:
        # No capability over the sandbox's namespaces any more: it cannot remount / read-write, open
        # /proc/1/fd (the sandbox's socket to cogym) or read the memory of PID 1.
        _check(_libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    request_fd, result_fd = fcntl.fcntl(request_fd, fcntl.F_DUPFD, 10), fcntl.fcntl(result_fd, fcntl.F_DUPFD, 10)
    os.dup2(request_fd, 0)
    os.dup2(result_fd, 3)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    if os.path.exists("/proc/self/statm"):  # address space: what the warm process maps, plus a call's share
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        set_limit(resource.RLIMIT_AS, mapped + config["limits"]["memory_bytes"])
    data = b""
    while chunk := os.read(0, 1 << 16):
        data += chunk
    if not data:  # the sandbox closed: this spare is not needed
        os._exit(0)
    envelope = json.loads(data)
    timeout_s = float(envelope["timeout_s"])
    set_limit(resource.RLIMIT_CPU, math.ceil(timeout_s) + 1)
    reply = timed_call(handler, envelope["request"], timeout_s)
    frame = (json.dumps({"reply": reply}) + "\n").encode()
    while frame:
        frame = frame[os.write(3, frame):]
    os.close(3)
    os._exit(0)


def _channel() -> tuple[int, int]:
    """A one-way channel (read end, write end) like ``os.pipe()``, but a socket: unlike a pipe it cannot
    be opened again through /proc/<pid>/fd by a process that does not hold it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return ours.detach(), theirs.detach()


class _CogymGone(Exception):
    """The process that started this sandbox has exited (EOF on stdin during a call)."""


class Forks:
    """Calls in forks of the warm process. One fork is made ahead (after the previous call has answered),
    so a call's latency holds no fork; a call that changed the warm process (an ``IN_PLACE`` op) discards it."""

    def __init__(self, handler: Any, config: dict) -> None:
        self.handler, self.config = handler, config
        self.spare: tuple[int, int, int] | None = None  # (pid, request socket, result socket)
        self.last: int | None = None  # the last call's fork: killed, maybe not reaped yet
        # The private directory, emptied before each call: the namespace's tmpfs, or the directory cogym made.
        tmp = os.environ.get("TMPDIR", "")
        self.tmp = tmp if config["namespaces"] or os.path.basename(tmp).startswith("cogym-sandbox-") else None

    def _spawn(self) -> tuple[int, int, int]:
        request_r, request_w = _channel()
        result_r, result_w = _channel()
        child = os.fork()
        if child == 0:
            try:
                _child(self.handler, request_r, result_w, self.config)
            finally:
                os._exit(70)
        os.close(request_r)
        os.close(result_w)
        os.set_blocking(result_r, False)
        return child, request_w, result_r

    def discard(self) -> None:
        """Drop the spare (it was forked before the warm process changed)."""
        if self.spare is not None:
            child, request_w, result_r = self.spare
            self.spare = None
            os.close(request_w)
            os.close(result_r)
            self._kill(child)
            self.reap(block=True)

    def prepare(self) -> None:
        """Fork the next call's spare, then reap what has died of the last call (the rest the next time:
        a fork that exits tears its memory down meanwhile)."""
        if self.spare is None:
            self.spare = self._spawn()
        self.reap(block=False)

    def call(self, request: dict, timeout_s: float) -> dict:
        """The reply of one call made in a fork, or the handler's ``FAILED`` reply saying what went wrong."""
        failed = dict(self.handler.FAILED)
        self._settle()
        child, request_w, result_r = self.spare or self._spawn()
        self.spare = None
        self.last = child  # killed below, reaped later (cleared once reaped: its pid may be reused)
        exit_fd = os.pidfd_open(child) if hasattr(os, "pidfd_open") else None  # Linux 5.3+
        try:
            data = json.dumps({"timeout_s": timeout_s, "request": request}).encode()
            try:
                while data:
                    data = data[os.write(request_w, data):]
            except (BrokenPipeError, ConnectionResetError):
                pass  # the fork died before its request: it exited, and says how below
            os.close(request_w)
            data, done, exited = self._collect(child, result_r, exit_fd, time.monotonic() + timeout_s + KILL_MARGIN_S)
        except _CogymGone:
            self._kill(child)
            os._exit(0)  # as PID 1 this ends the namespace and every process in it
        finally:
            os.close(result_r)
            if exit_fd is not None:
                os.close(exit_fd)
        self._kill(child)  # whatever it left running cannot act once killed; reaped after the reply ...
        if self.config["namespaces"] and any(e.isdigit() and int(e) not in (1, child) for e in os.listdir("/proc")):
            self.reap(block=True)  # ... unless it left more than itself: then this call, not the next, waits
        if not done:
            return {**failed, "timeout": True, "error": f"no result within {timeout_s:g} s (the call was killed)"}
        forged = {**failed, "error": "the call wrote something other than its one reply"}
        lines = data.split(b"\n")
        if not data and exited:
            return {**failed, "error": "the call ended before it replied"}
        if len(data) > MAX_FRAME or len(lines) != 2 or lines[1]:
            return forged
        try:
            reply = json.loads(lines[0])
        except ValueError:
            return forged
        if not isinstance(reply, dict) or set(reply) != {"reply"} or not isinstance(reply["reply"], dict):
            return forged
        return reply["reply"]

    def _collect(self, child: int, result_r: int, exit_fd: int | None, deadline: float) -> tuple[bytes, bool, bool]:
        """What the fork wrote until it closed its socket or exited (done), or until the deadline (not done)."""
        data, exited = b"", False
        while len(data) <= MAX_FRAME:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return data, False, False
            watch = [result_r, 0] if exit_fd is None else [result_r, exit_fd, 0]
            ready, _, _ = select.select(watch, [], [], remaining if exit_fd is not None else min(remaining, 0.005))
            if 0 in ready:  # cogym sends nothing while it waits for a reply: this is EOF, cogym is gone
                raise _CogymGone()
            exited = exit_fd in ready if exit_fd is not None else self._exited(child)
            if result_r in ready or exited:
                try:
                    chunk = os.read(result_r, MAX_FRAME + 2)
                except BlockingIOError:
                    chunk = b""
                except ConnectionResetError:  # the fork died with its request unread
                    return data, True, exited
                data += chunk
                if exited or (result_r in ready and not chunk):  # exited, or every writer closed the socket
                    return data, True, exited
        return data, True, exited

    def _exited(self, child: int) -> bool:
        """Without pidfds: whether the fork has exited (reaped here then)."""
        if os.waitpid(child, os.WNOHANG)[0] == 0:
            return False
        self.last = None if self.last == child else self.last
        return True

    def _kill(self, child: int) -> None:
        if self.config["namespaces"]:
            os.kill(-1, signal.SIGKILL)  # from PID 1 of a PID namespace: every other process in it
            return
        for kill in (os.killpg, os.kill):
            try:
                kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.sweep(spare_or_fork=child)

    def sweep(self, spare_or_fork: int | None) -> None:
        """Without namespaces: kill every child of this process but ``spare_or_fork``. This process is a
        subreaper, so what left a call's process group (a double fork and setsid) is still its child and dies
        with the call; what a killed process had started becomes its child as that one dies, and goes at
        the latest before the next call (``_settle``). Never waits: a call's latency holds no sweep."""
        if self.config["namespaces"]:
            return
        killed = {spare_or_fork}
        for _ in range(100):
            new = [pid for pid in _living_children() if pid not in killed]
            if not new:
                return
            for pid in new:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed.update(new)

    def reap(self, block: bool) -> None:
        """Reap dead forks and the orphans they left (this process is PID 1 or a subreaper); ``block`` waits
        for every child (only when all were killed: no spare)."""
        while True:
            try:
                pid = os.waitpid(-1, 0 if block else os.WNOHANG)[0]
            except ChildProcessError:
                self.last = None
                return
            if pid == 0:
                return
            if pid == self.last:
                self.last = None

    def _settle(self) -> None:
        """Before a call: the last call's fork is gone (it may have been inside a system call when killed),
        and the private directory is empty again, so no call sees what another left."""
        if self.last is not None:
            try:
                os.waitpid(self.last, 0)
            except ChildProcessError:
                pass
            self.last = None
        self.sweep(self.spare[0] if self.spare else None)
        if self.tmp and os.path.isdir(self.tmp):
            for entry in os.scandir(self.tmp):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    try:
                        os.unlink(entry.path)
                    except OSError:
                        pass


def _living_children() -> list[int]:
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            pass
    living = []
    for pid in found:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):  # killed, not reaped yet
            living.append(pid)
    return living


def load_handler(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("_sandboxed_handler", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a handler from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    config = json.loads(sys.argv[1])
    limits = config["limits"]
    # A call may signal this process; only cogym ends it (EOF or a kill from outside the sandbox).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    if config["namespaces"]:
        tmp = enter_namespaces(limits, config["handler"])
        os.environ["HOME"] = os.environ["TMPDIR"] = tmp
    if config.get("probe"):
        if config["namespaces"]:  # a call's fork gives up its capabilities in a nested user namespace
            child = os.fork()
            if child == 0:
                os._exit(_libc.unshare(CLONE_NEWUSER) != 0)
            if os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) != 0:
                raise OSError("a nested user namespace is refused")
        print(json.dumps({"ready": True, "tmp": os.environ.get("TMPDIR")}), flush=True)
        return
    set_limit(resource.RLIMIT_NOFILE, limits["open_files"])
    set_limit(resource.RLIMIT_FSIZE, limits["file_bytes"])
    set_limit(resource.RLIMIT_CORE, 0)
    if limits.get("nproc"):
        set_limit(resource.RLIMIT_NPROC, limits["nproc"])
    # Not dumpable: a call (same user) can neither open this process's descriptors in /proc nor read its memory.
    if hasattr(_libc, "prctl"):  # Linux
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if not config["namespaces"]:  # what a call starts stays this process's child (PID 1 is that already)
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    handler = load_handler(config["handler"])
    handler.setup()
    gc.collect()
    gc.freeze()  # the warm heap stays shared with each fork instead of being copied by the collector
    # Replies go to a private copy of stdout; anything a library prints goes to stderr, so it can never be
    # mistaken for a reply.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    in_place = frozenset(getattr(handler, "IN_PLACE", ()))
    forks = Forks(handler, config)
    for line in sys.stdin:
        envelope = json.loads(line)
        request, timeout_s = envelope["request"], float(envelope["timeout_s"])
        forked = request.get("op") not in in_place
        if forked:
            reply = forks.call(request, timeout_s)
        else:
            forks.discard()
            reply = timed_call(handler, request, timeout_s)
        out.write(json.dumps({"id": envelope["id"], "reply": reply}) + "\n")
        out.flush()
        if forked:
            forks.prepare()
    forks.discard()
    os._exit(0)  # cogym closed the socket: no interpreter teardown of the warm heap (as PID 1, all else dies too)


if __name__ == "__main__":
    main()
