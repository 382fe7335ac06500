"""The attacks of test_sandbox_containment.py sent by a *remote* player (issue 49): a chat endpoint on
127.0.0.1 whose replies are the payloads plays the solvers of ``proposer_solver-v0(source="reasoning_gym")``
in a ``cogym tournament`` against the oracle. Every payload is contained (no file, no key, no process, no
connection), each scores 0, and the tournament finishes (exit 0, every game's result written)."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import socket
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym", reason="needs the reasoning-gym extra: pip install 'cogym[reasoning-gym]'")

from cogym.core.sandbox import isolation  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning"),
              pytest.mark.skipif(not isolation().namespaces, reason=f"this machine gives the {isolation().description}")]
KEY_VAR = "OPENAI_API_KEY"
KEY = "sk-proj-" + "Tq9" * 20


def payloads(outside: Path, port: int, token: str) -> list[str]:
    """One reply per payload class (a) to (h); each writes a file under ``outside`` if it gets that far."""
    codes = [
        f"import os; os.system('id > {outside}/shell')",
        f"import os; v = [x for x in os.environ.values() if 'sk-' in x]; v and open('{outside}/key', 'w').write(v[0])",
        f"import subprocess; subprocess.Popen(['sleep', '{token}'], start_new_session=True)",
        "import os; [os.write(fd, b'{\"score\": 1.0}\\n') for fd in (1, 2)]",
        f"open('{outside}/file', 'w').write('x')",
        f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'pwned')",
        "import os\nfor _ in range(600):\n    if os.fork() == 0:\n        __import__('time').sleep(5)\n        os._exit(0)",
        "chunks = [bytearray(256 << 20) for _ in range(12)]",
    ]
    return [f"Thinking... <answer>exec({code!r})</answer>" for code in codes]


class EvilEndpoint:
    """An OpenAI-compatible chat server on 127.0.0.1 that answers every request with the next payload."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.lock, self.sent = itertools.cycle(replies), threading.Lock(), 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                with server.lock:
                    reply, server.sent = next(server.replies), server.sent + 1
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            pass
    return found


def test_payloads_from_an_endpoint_are_contained_and_the_tournament_finishes(tmp_path, monkeypatch) -> None:
    from cogym.runners.cli import main

    monkeypatch.setenv(KEY_VAR, KEY)
    outside = Path(tempfile.mkdtemp(prefix="cogym-sandbox-test-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    connections: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                connections.append(conn.recv(64))
                conn.close()
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    token = f"{random.randrange(10**5, 10**6)}.{random.randrange(10**6)}"
    endpoint = EvilEndpoint(payloads(outside, listener.getsockname()[1], token))
    out = tmp_path / "out"
    config = tmp_path / "t.yaml"
    config.write_text(
        "game: {id: proposer_solver-v0, kwargs: {source: reasoning_gym, tasks: [spiral_matrix], levels: [0],"
        " task_choice: random, num_solvers: 2}}\n"
        "tournament:\n"
        f"  players: [{{name: evil, endpoint: {{base_url: '{endpoint.url}', model: m, api_key_env: {KEY_VAR}, "
        "timeout_s: 10}}, scripted:oracle]\n"
        f"  games_per_pairing: 8\n  out: {out}\n"
        "prompts: {solver: {system: Solve it.}}\n")
    try:
        assert main(["tournament", "--config", str(config), "--no-progress", "--bootstrap", "10", "--no-plots"]) == 0
        rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert len(rows) == 8 and endpoint.sent == 8  # every game played, one payload class each
        assert all(r["score"] == (0.0 if r["a"] == "evil" else 1.0) for r in rows), rows  # the oracle won each
        assert list(outside.iterdir()) == [] and processes_with(token) == [] and connections == []
        assert not [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    finally:
        stop.set()
        endpoint.close()
        listener.close()
        for pid in processes_with(token):  # only on failure: leave nothing behind
            os.kill(pid, signal.SIGKILL)
        for p in outside.iterdir():
            p.unlink()
        outside.rmdir()
