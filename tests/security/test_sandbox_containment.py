"""Model output that attacks the scorer (issue 49): each payload class is contained by the sandbox
(cogym.core.sandbox) that every reasoning-gym scorer runs in, through ``reasoning_gym.score`` and through
``env.step`` of ``proposer_solver-v0(source="reasoning_gym")``.

The carrier is ``spiral_matrix``, whose scorer runs ``eval(answer)`` on any answer that is not the exact
reference, with the builtins at hand; the payload is ``exec(CODE)``. A payload reports what it achieved by
raising ``SystemExit(text)``, which reaches the caller as the scorer's error (the sandbox turns any exception
into one), so a test sees that the payload ran and what it saw. Each test checks the effect (no file, no key,
no process, no connection), that the wrong answer scores the scorer's own 0, and that the next answer scores
right. Payloads that would hurt the machine outside a sandbox (forks, allocation) are bounded on purpose.
"""

from __future__ import annotations

import ast
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

pytest.importorskip("reasoning_gym", reason="needs the reasoning-gym extra: pip install 'cogym[reasoning-gym]'")

from cogym.core.sandbox import isolation  # noqa: E402
from cogym.envs import make  # noqa: E402
from cogym.envs import reasoning_gym as rg  # noqa: E402
from cogym.envs.proposer_solver import SCRIPTED  # noqa: E402
from cogym.envs.testing import step_as as act  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")
NAMESPACES = isolation().namespaces
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason=f"this machine gives the {isolation().description}")
KEY = "sk-proj-" + "Zq7" * 20


def payload(code: str) -> str:
    return f"Let me compute. <answer>exec({code!r})</answer>"


def score_path(reply: str, timeout_s: float = rg.ANSWER_TIMEOUT_S) -> tuple[float, str]:
    """The reply scored by ``reasoning_gym.score``, then the reference answer scored right after it."""
    item = rg.generate("spiral_matrix", 0, 1)
    value, error = rg.score(item, reply, timeout_s=timeout_s)
    assert rg.score(item, item.answer) == (1.0, None)  # the next score is right
    return value, str(error)


def step_path(reply: str, timeout_s: float = rg.ANSWER_TIMEOUT_S) -> tuple[float, str]:
    """The reply played by solver_0 in ``env.step`` (the game's own time budget; ``timeout_s`` is for
    ``score_path``); solver_1 answers right in the same game, and solver_0 too in the next."""
    env = make("proposer_solver-v0", source="reasoning_gym", tasks=["spiral_matrix"], levels=[0], num_solvers=2)
    for seed in range(2):
        env.reset(seed=seed)
        act(env, "proposer", "1")
        oracle = SCRIPTED["solver"]["oracle"](env.observe("solver_1")["text"], np.random.default_rng(0))
        act(env, "solver_0", reply if seed == 0 else oracle)
        rewards = act(env, "solver_1", oracle)
        assert rewards["solver_1"] == 1.0, rewards  # the run goes on, and scores right
        if seed == 0:
            value, info = rewards["solver_0"], repr(env.infos["solver_0"])
    assert rewards["solver_0"] == 1.0
    return value, info


PATHS = [pytest.param(score_path, id="score"), pytest.param(step_path, id="env.step")]


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the sandbox's private tmpfs where payloads try to leave files (in /var/tmp, which
    the sandbox hides like the host's /tmp; the fallback sees both)."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="cogym-sandbox-test-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            pass
    return found


@needs_namespaces
@pytest.mark.parametrize("path", PATHS)
def test_a_shell_command_writes_nothing(path: Callable, outside: Path) -> None:
    value, _ = path(payload(f"import os; os.system('id > {outside}/shell')"))
    assert value == 0.0 and list(outside.iterdir()) == []


@pytest.mark.parametrize("path", PATHS)
def test_no_key_is_readable(path: Callable, outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    rg.worker().close()  # the next call starts a worker from this environment
    code = ("import glob, os\n"
            "seen = [v for v in os.environ.values() if 'sk-' in v]\n"
            "for p in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n"
            "    try:\n"
            "        seen += [p] if b'sk-' in open(p, 'rb').read() else []\n"
            "    except OSError:\n"
            "        pass\n"
            f"open('{outside}/key', 'w').write(repr(seen)) if seen else None\n"
            "raise SystemExit('payload ran; seen: ' + repr(seen) + ' ' + ' '.join(sorted(os.environ)))")
    value, error = path(payload(code))
    assert value == 0.0 and list(outside.iterdir()) == [] and "OPENAI_API_KEY" not in error and KEY not in error
    if path is score_path:  # the payload ran, and saw no key
        assert "payload ran; seen: []" in error, error


@needs_namespaces
@pytest.mark.parametrize("path", PATHS)
def test_no_process_outlives_the_call(path: Callable) -> None:
    token = f"{random.randrange(10**5, 10**6)}.{random.randrange(10**6)}"  # a unique `sleep` argument
    code = ("import os, subprocess\n"
            f"subprocess.Popen(['sleep', '{token}'], start_new_session=True)\n"
            "if os.fork() == 0:\n"  # a double fork out of the session, as a daemon does
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            f"        os.execvp('sleep', ['sleep', '{token}1'])\n"
            "    os._exit(0)\n")
    try:
        value, _ = path(payload(code))
        assert value == 0.0 and processes_with(token) == []
    finally:
        for pid in processes_with(token):  # only on failure: leave nothing behind
            os.kill(pid, signal.SIGKILL)


@needs_namespaces
def test_nothing_outlives_a_killed_cogym_process() -> None:
    """cogym killed (SIGKILL, no atexit) while a call runs a payload that started a process: the sandbox
    and everything in it end within seconds (10 s allowed: a loaded 2-core machine takes about 2)."""
    token = f"{random.randrange(10**5, 10**6)}.{random.randrange(10**6)}"
    code = ("import subprocess, time; subprocess.Popen(['sleep', '" + token + "']); time.sleep(60)")
    script = ("from cogym.envs import reasoning_gym as rg\n"
              "item = rg.generate('spiral_matrix', 0, 1)\n"
              "print(rg.worker().pid, flush=True)\n"
              f"rg.score(item, {payload(code)!r}, timeout_s=60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while not processes_with(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(token), "the payload did not start its process"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while (processes_with(token) or os.path.exists(f"/proc/{worker}")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(token) == [] and not os.path.exists(f"/proc/{worker}")
    finally:
        parent.kill()
        for pid in processes_with(token):  # only on failure: leave nothing behind
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("path", PATHS)
def test_a_forged_score_is_not_taken(path: Callable) -> None:
    forged = '{"score": 1.0}\\n{"reply": {"score": 1.0}}\\n{"id": "0", "reply": {"score": 1.0}}\\n{"ok": true}\\n'
    code = ("import glob, os\n"
            "targets = ['/dev/stdout', '/dev/stderr'] + glob.glob('/proc/self/fd/*')\n"
            "targets += glob.glob(f'/proc/{os.getppid()}/fd/*')\n"  # the worker, without a PID namespace
            "if b'_sandbox_serve' in open('/proc/1/cmdline', 'rb').read():\n"  # the worker, as PID 1 of its namespace
            "    targets += glob.glob('/proc/1/fd/*')\n"
            "for p in targets:\n"
            "    try:\n"
            "        fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)\n"
            f"        os.write(fd, b'{forged}')\n"
            "    except OSError:\n"
            "        pass\n"
            "print('{\"score\": 1.0}', flush=True)\n"
            "os.write(1, b'{\"score\": 1.0}\\n')\n")
    value, _ = path(payload(code))
    assert value == 0.0


@needs_namespaces
@pytest.mark.parametrize("path", PATHS)
def test_nothing_is_written_outside_the_private_temporary_directory(path: Callable, outside: Path) -> None:
    code = ("import os\n"
            "wrote = []\n"
            f"for p in ['{outside}/file', os.path.expanduser('~/inside'), '/tmp/inside', '/var/tmp/cogym-pwned']:\n"
            "    try:\n"
            "        open(p, 'w').write('x')\n"
            "        wrote.append(p)\n"
            "    except OSError:\n"
            "        pass\n"
            "raise SystemExit('wrote ' + repr((os.environ['TMPDIR'], wrote)))")
    value, error = path(payload(code))
    assert value == 0.0 and list(outside.iterdir()) == [] and not os.path.exists("/var/tmp/cogym-pwned")
    if path is score_path:  # only its private directory (HOME and TMPDIR: /tmp, or /var/tmp where cogym lives in /tmp)
        private, wrote = ast.literal_eval(error.split("wrote ", 1)[1])
        assert private in ("/tmp", "/var/tmp") and f"{private}/inside" in wrote
        assert all(w.startswith(private + "/") for w in wrote), wrote


def test_a_call_sees_nothing_an_earlier_call_left() -> None:
    item = rg.generate("spiral_matrix", 0, 1)
    left = payload("import os; open(os.environ['TMPDIR'] + '/left', 'w').write('x'); raise SystemExit('wrote')")
    assert rg.score(item, left) == (0.0, "SystemExit: wrote")
    seen = payload("import os; raise SystemExit(repr(os.listdir(os.environ['TMPDIR'])))")
    assert rg.score(item, seen) == (0.0, "SystemExit: []")


@needs_namespaces
@pytest.mark.parametrize("path", PATHS)
def test_no_network_connection_is_made(path: Callable) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    accepted: list[bytes] = []

    def accept() -> None:
        try:
            conn, _ = server.accept()
            accepted.append(conn.recv(64))
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'pwned')"
    try:
        thread.start()
        value, _ = path(payload(code))
        thread.join(timeout=5)
    finally:
        server.close()
    assert value == 0.0 and accepted == []


@pytest.mark.skipif(not NAMESPACES and os.geteuid() == 0,
                    reason="without namespaces nothing bounds a root user's processes (RLIMIT_NPROC exempts root)")
@pytest.mark.parametrize("path", PATHS)
def test_forks_are_bounded(path: Callable) -> None:
    # Bounded on purpose (600 sleepers of 5 s), so that it cannot hurt a machine where it is not contained.
    code = ("import os, time\n"
            "n = 0\n"
            "try:\n"
            "    for _ in range(600):\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(5)\n"
            "            os._exit(0)\n"
            "        n += 1\n"
            "except OSError as exc:\n"
            "    raise SystemExit(f'forked {n}: {exc}')\n"
            "raise SystemExit(f'forked {n}')")
    value, error = path(payload(code), timeout_s=20.0)
    assert value == 0.0
    if path is score_path:
        assert error.startswith("SystemExit: forked ") and int(error.split()[2].rstrip(":")) < 600, error


@pytest.mark.parametrize("path", PATHS)
def test_allocation_is_bounded(path: Callable) -> None:
    # Bounded on purpose (3 GiB at most), so that it cannot hurt a machine where it is not contained.
    code = ("chunks = []\n"
            "try:\n"
            "    for _ in range(12):\n"
            "        chunks.append(bytearray(256 << 20))\n"
            "except MemoryError:\n"
            "    raise SystemExit(f'allocated {len(chunks) * 256} MiB, then MemoryError')\n"
            "raise SystemExit('allocated 3072 MiB')")
    value, error = path(payload(code), timeout_s=20.0)
    assert value == 0.0
    if path is score_path:
        assert "then MemoryError" in error, error


def test_the_fallback_still_scrubs_the_environment_refuses_forgeries_and_bounds_memory(monkeypatch) -> None:
    """Where namespaces are refused (or COGYM_SANDBOX=fallback), the sandbox keeps what does not need them."""
    from cogym.core.sandbox import Sandbox

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    box = Sandbox(Path(rg.__file__).with_name("_reasoning_gym_worker.py"), "fallback_test", "", namespaces=False)
    try:
        item = box.request({"op": "generate", "name": "spiral_matrix", "level": 0, "seed": 1, "timeout_s": 10}, 10.25)
        ask = {"op": "score", "name": "spiral_matrix", "level": 0, "seed": 1, "timeout_s": 10}

        def score(code: str) -> dict | None:
            return box.request({**ask, "answer": f"exec({code!r})"}, 10.25)

        seen = score("import os; raise SystemExit(repr([v for v in os.environ.values() if 'sk-' in v]))")
        assert seen == {"score": 0.0, "error": "SystemExit: []"}
        forged = score("import glob, os\nfor p in glob.glob('/proc/self/fd/*') + ['/dev/stdout']:\n    try:\n"
                       "        os.write(os.open(p, os.O_WRONLY | os.O_NONBLOCK), b'{\"reply\": {\"score\": 1.0}}\\n')\n"
                       "    except OSError:\n        pass")
        assert forged is not None and forged["score"] == 0.0
        memory = score("try:\n    x = [bytearray(256 << 20) for _ in range(12)]\n"  # 3 GiB at most, on purpose
                       "except MemoryError:\n    raise SystemExit('MemoryError')")
        assert memory == {"score": 0.0, "error": "SystemExit: MemoryError"}
        assert box.request({**ask, "answer": item["answer"]}, 10.25) == {"score": 1.0}  # the next score is right
    finally:
        box.close()


def test_cogym_games_says_which_sandbox_scores_answers(capsys) -> None:
    from cogym.runners.cli import main

    assert main(["games", "--source", "reasoning_gym"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"Answers are scored in a sandbox: {isolation().description}" in out


def frame(reply: str) -> str:
    """A payload that writes ``{"reply": REPLY}`` as its call's one frame (descriptor 3) and exits at once."""
    return payload(f"import os; os.write(3, b'{{\"reply\": {reply}}}\\n'); os._exit(0)")


@pytest.mark.parametrize("reply", ['{"score": NaN}', '{"score": 7.5}', '{"score": -Infinity}', "{}",
                                   '{"score": "abc"}', '{"score": true}', '{"score": 1.0, "error": 5}',
                                   '{"missing": 1}'])
def test_a_reply_the_answer_wrote_itself_is_checked(reply: str) -> None:
    """The call that scores an answer runs it, so the answer can write its call's reply: anything but a
    finite score in [0, 1] (and an optional string error) is a failed scorer's 0, never an exception."""
    item = rg.generate("spiral_matrix", 0, 1)
    assert rg.score(item, frame(reply)) == (0.0, "the scorer's reply was malformed")
    assert rg.score(item, item.answer) == (1.0, None)  # the next score is right


def test_a_scorer_error_the_answer_wrote_is_bounded() -> None:
    item = rg.generate("spiral_matrix", 0, 1)
    code = "import os; os.write(3, b'{\"reply\": {\"score\": 0.0, \"error\": \"' + b'x' * 100000 + b'\"}}\\n'); os._exit(0)"
    value, error = rg.score(item, payload(code))
    assert value == 0.0 and error == "x" * rg.MAX_ERROR_CHARS


def test_math_verify_counts_only_a_literal_true(monkeypatch: pytest.MonkeyPatch) -> None:
    from cogym.envs import verifiers

    for reply in ({}, {"ok": 1}, {"ok": "yes"}, {"ok": [1]}, {"ok": None}):
        monkeypatch.setattr(verifiers._WORKER, "request", lambda message, deadline_s, reply=reply: reply)
        assert verifiers._WORKER.check("1", "1", 0.3) is False, reply
    monkeypatch.setattr(verifiers._WORKER, "request", lambda message, deadline_s: {"ok": True})
    assert verifiers._WORKER.check("1", "1", 0.3) is True


# Without namespaces a call can leave its process group (double fork, setsid) and, being the user, open
# what /proc shows of cogym. It records what it managed in MARK, then tries to answer every later request.
ESCAPE = """
import json, os, select, signal, time
worker = os.getppid()
cogym = int(open(f'/proc/{worker}/stat').read().rsplit(')', 1)[1].split()[1])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        start = open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19]
        opened = []
        for mode in (os.O_RDONLY, os.O_WRONLY):
            try:
                opened.append(os.open(f'/proc/{cogym}/fd/{SOCKET}', mode | os.O_NONBLOCK))
            except OSError:
                pass
        with open(MARK + '.tmp', 'w') as f:
            json.dump({'pid': os.getpid(), 'start': start, 'opened': len(opened)}, f)
        os.rename(MARK + '.tmp', MARK)
        if STOP:
            os.kill(worker, signal.SIGSTOP)
        end = time.monotonic() + 30
        while len(opened) == 2 and time.monotonic() < end:  # forge a reply to each request it reads
            if select.select([opened[0]], [], [], 0.1)[0]:
                for line in os.read(opened[0], 1 << 16).splitlines():
                    nonce = json.loads(line)['id']
                    os.write(opened[1], json.dumps({'id': nonce, 'reply': {'score': 1.0}}).encode() + b'\\n')
        time.sleep(30)  # until killed: what escaped must not outlive its call
        os._exit(0)
    os._exit(0)
os.waitpid(-1, 0)
end = time.monotonic() + 10
while not os.path.exists(MARK) and time.monotonic() < end:
    time.sleep(0.01)
"""


def _running(pid: int, start: str) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` and has not died (a zombie has:
    killed, it waits for its new parent, init here, to reap it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start and fields[0] not in ("Z", "X")


@pytest.mark.parametrize("stop", [False, True], ids=["forge", "stop-the-worker"])
def test_the_fallback_keeps_an_escaped_call_from_later_calls(stop: bool, tmp_path: Path) -> None:
    """The fallback (forced): a call escapes its process group and (forge) opens cogym's channel to the
    worker through /proc to answer later requests itself, or (stop) stops the worker. It cannot open the
    channel (a socket), it dies with its call (the worker is a subreaper; a stopped worker is killed with
    what it started), and later answers score right."""
    from cogym.core.sandbox import Sandbox

    mark = tmp_path / "escaped.json"
    box = Sandbox(Path(rg.__file__).with_name("_reasoning_gym_worker.py"), "escape_test", "", namespaces=False)
    try:
        box.start()
        assert box.request({"op": "generate", "name": "spiral_matrix", "level": 0, "seed": 1, "timeout_s": 10}, 10.25)
        ask = {"op": "score", "name": "spiral_matrix", "level": 0, "seed": 1, "timeout_s": 2.0}
        code = f"SOCKET, MARK, STOP = {box._sock.fileno()}, {str(mark)!r}, {stop}\n" + ESCAPE
        attacked = box.request({**ask, "answer": f"exec({code!r})"}, 2.25)
        escaped = json.loads(mark.read_text())
        assert escaped["opened"] == 0  # cogym's end of the channel cannot be opened again
        if stop:
            assert attacked is None and box.kills == 1  # no reply in time: the worker was killed and replaced
            box.request({"op": "generate", "name": "spiral_matrix", "level": 0, "seed": 1, "timeout_s": 10}, 10.25)
        else:
            assert attacked == {"score": 0.0}
        wrong = box.request({**ask, "answer": "[[1]]"}, 2.25)
        assert wrong is not None and wrong["score"] == 0.0
        right = rg.generate("spiral_matrix", 0, 1).answer
        assert box.request({**ask, "answer": right}, 2.25) == {"score": 1.0}
        assert not _running(escaped["pid"], escaped["start"])  # the escaped process is gone
    finally:
        box.close()
        if mark.exists():  # only on failure: kill what escaped, by the PID and start time it recorded
            escaped = json.loads(mark.read_text())
            if _running(escaped["pid"], escaped["start"]):
                os.kill(escaped["pid"], signal.SIGKILL)


def test_a_request_whose_retry_cannot_be_sent_fails_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker gone before a request and its fresh start gone too: None (a failed call), no exception."""
    from cogym.core.sandbox import Sandbox

    box = Sandbox(Path(rg.__file__).with_name("_reasoning_gym_worker.py"), "retry_test", "", namespaces=False)
    try:
        box.start()
        monkeypatch.setattr(box, "_send", lambda line: False)
        assert box.request({"op": "catalog", "timeout_s": 10}, 10.25) is None and box.kills == 1
        monkeypatch.undo()
        assert "spiral_matrix" in box.request({"op": "catalog", "timeout_s": 10}, 10.25)["datasets"]
    finally:
        box.close()


UNIX_CLIENT = """
import os, socket
FAILED = {"reached": None}
def setup():
    pass
def handle(request):
    reached = []
    for path in request["sockets"]:
        client = socket.socket(socket.AF_UNIX)
        try:
            client.connect(path)
            reached.append(path)
        except OSError:
            pass
        finally:
            client.close()
    return {"reached": reached, "tmp": os.environ["TMPDIR"]}
"""


@needs_namespaces
@pytest.mark.parametrize("home", ["/tmp", "/var/tmp"])
def test_no_unix_socket_in_the_scratch_directories_is_reachable(home: str) -> None:
    """Even when what the sandbox runs lives in /tmp or /var/tmp (here: its handler), a listening UNIX
    socket elsewhere in /tmp, /var/tmp or /dev/shm (X11, ssh-agent, tmux put theirs there) cannot be reached."""
    from cogym.core.sandbox import Sandbox

    if not os.access(home, os.W_OK):
        pytest.skip(f"{home} is not writable here")
    made, servers, paths = [tempfile.mkdtemp(prefix="cogym-handler-", dir=home)], [], []
    try:
        handler = Path(made[0]) / "handler.py"
        handler.write_text(UNIX_CLIENT)
        for scratch in ("/tmp", "/var/tmp", "/dev/shm"):
            if os.access(scratch, os.W_OK):
                made.append(tempfile.mkdtemp(prefix="cogym-sock-", dir=scratch))
                server = socket.socket(socket.AF_UNIX)
                server.bind(f"{made[-1]}/s")
                server.listen(1)
                servers.append(server)
                paths.append(f"{made[-1]}/s")
        box = Sandbox(handler, "socket_test", "", namespaces=None)
        try:
            reply = box.request({"sockets": paths, "timeout_s": 5}, 5.25)
        finally:
            box.close()
        assert reply is not None and reply["reached"] == [], reply  # the handler loaded, and reached nothing
        assert not reply["tmp"].startswith(home)  # the private directory is elsewhere
    finally:
        for server in servers:
            server.close()
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
