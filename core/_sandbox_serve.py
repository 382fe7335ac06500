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
output is interpreted -- which gets its own session, no capabilities over the sandbox (a nested user
namespace), /dev/null for stdin and stdout, no descriptor but its own result pipe, rlimits on CPU time and
address space, and an interval timer. It writes exactly one frame, ``{"reply": {...}}`` and a newline,
and exits 0; anything else (a second frame, stray bytes, another exit) makes the call fail with the
handler's ``FAILED`` reply. After each call every other process in the sandbox is killed (PID 1 kills -1;
without namespaces, the fork's process group), so nothing a call starts outlives it.
"""

from __future__ import annotations

import os
import sys

# The script's folder (cogym/core) holds types.py and others that must not shadow the standard library.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import ctypes  # noqa: E402 - after the sys.path fix on purpose
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
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
    if _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
        return
    flag_names = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:  # parents come before their children in mountinfo
        target = fields[4].encode().decode("unicode_escape")
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY  # a user namespace may not drop the flags it inherited: keep them
        flags |= sum(bit for name, bit in flag_names.items() if name in fields[5].split(","))
        _mount("none", target, "none", flags)


def private_dir(needed: list[str]) -> str:
    """Where the private tmpfs goes: /tmp unless the interpreter, its packages or the handler live there."""
    for candidate in ("/tmp", "/var/tmp", "/mnt", "/dev/shm"):
        if os.path.isdir(candidate) and not any(p == candidate or p.startswith(candidate + "/") for p in needed):
            return candidate
    raise OSError("no directory for the sandbox's private tmpfs (/tmp, /var/tmp, /mnt and /dev/shm hold what it runs)")


def enter_namespaces(limits: dict[str, int], handler: str) -> str:
    """As PID 1 of the new namespaces: /proc of this PID namespace, its PID cap, / read-only, a private
    tmpfs (returned). Raises OSError when the kernel refuses a step (the parent then runs without them)."""
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
    needed = [os.path.realpath(p) for p in [sys.prefix, sys.base_prefix, sys.executable, handler, *sys.path] if p]
    tmp = private_dir(needed)
    _read_only_everywhere()
    _mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, f"size={limits['tmp_bytes']},mode=1777")
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


def _in_fork(handler: Any, request: dict, timeout_s: float, result_fd: int, config: dict) -> None:
    """The fork that interprets model output: strip it of everything but its result pipe, then call."""
    os.setsid()
    if config["namespaces"]:
        # No capability over the sandbox's namespaces any more: it cannot remount / read-write, open
        # /proc/1/fd (the sandbox's pipe to cogym) or read the memory of PID 1.
        _check(_libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    if result_fd != 3:
        os.dup2(result_fd, 3)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    limits = config["limits"]
    cpu = math.ceil(timeout_s) + 1
    set_limit(resource.RLIMIT_CPU, cpu)
    with open("/proc/self/statm") as f:  # address space: what the warm process maps, plus a call's share
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    set_limit(resource.RLIMIT_AS, mapped + limits["memory_bytes"])
    reply = timed_call(handler, request, timeout_s)
    frame = (json.dumps({"reply": reply}) + "\n").encode()
    while frame:
        frame = frame[os.write(3, frame):]
    os._exit(0)


def _kill_rest(child: int, config: dict) -> int:
    """Kill everything the call started, however it detached, reap it, and return the fork's exit code."""
    code = 0
    if config["namespaces"]:
        os.kill(-1, signal.SIGKILL)  # from PID 1 of a PID namespace: every other process in it
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return code
            if pid == child:
                code = os.waitstatus_to_exitcode(status)
    for kill in (os.killpg, os.kill):
        try:
            kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    while True:  # without namespaces a process that left the group survives (docs/security.md says so)
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return code
        except ChildProcessError:
            return code


def _read_available(fd: int) -> bytes:
    try:
        return os.read(fd, MAX_FRAME + 2)
    except BlockingIOError:
        return b""


def forked_call(handler: Any, request: dict, timeout_s: float, config: dict) -> dict:
    """The reply of one call made in a fresh fork, or the handler's ``FAILED`` reply saying what went wrong."""
    failed = dict(handler.FAILED)
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(read_fd)
            _in_fork(handler, request, timeout_s, write_fd, config)
        finally:
            os._exit(70)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    exit_fd = os.pidfd_open(child)
    deadline = time.monotonic() + timeout_s + KILL_MARGIN_S
    data, exited, eof = b"", False, False
    try:
        # Until the fork exits (the pipe's EOF is not enough: a process it started may hold the pipe open).
        while not exited and len(data) <= MAX_FRAME:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready, _, _ = select.select([exit_fd] if eof else [read_fd, exit_fd], [], [], remaining)
            exited = exit_fd in ready
            if read_fd in ready or exited:
                chunk = _read_available(read_fd)
                eof = eof or (read_fd in ready and not chunk)
                data += chunk
        code = _kill_rest(child, config)
    finally:
        os.close(read_fd)
        os.close(exit_fd)
    if not exited:
        return {**failed, "timeout": True, "error": f"no result within {timeout_s:g} s (the call was killed)"}
    if code != 0:
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        return {**failed, "error": f"the call ended with {how} before it replied"}
    forged = {**failed, "error": "the call wrote something other than its one reply"}
    lines = data.split(b"\n")
    if len(data) > MAX_FRAME or len(lines) != 2 or lines[1]:
        return forged
    try:
        reply = json.loads(lines[0])
    except ValueError:
        return forged
    if not isinstance(reply, dict) or set(reply) != {"reply"} or not isinstance(reply["reply"], dict):
        return forged
    return reply["reply"]


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
        print(json.dumps({"ready": True, "tmp": os.environ.get("TMPDIR")}), flush=True)
        return
    set_limit(resource.RLIMIT_NOFILE, limits["open_files"])
    set_limit(resource.RLIMIT_FSIZE, limits["file_bytes"])
    set_limit(resource.RLIMIT_CORE, 0)
    if limits.get("nproc"):
        set_limit(resource.RLIMIT_NPROC, limits["nproc"])
    # Not dumpable: a call (same user) can neither open this process's descriptors in /proc nor read its memory.
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
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
    for line in sys.stdin:
        envelope = json.loads(line)
        request, timeout_s = envelope["request"], float(envelope["timeout_s"])
        if request.get("op") in in_place:
            reply = timed_call(handler, request, timeout_s)
        else:
            reply = forked_call(handler, request, timeout_s, config)
        out.write(json.dumps({"id": envelope["id"], "reply": reply}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
