"""Endpoint replies are untrusted input (issue 49): against raw loopback servers that trickle the status
line, headers, interim 100 replies, chunk sizes or the body, a try with ``timeout_s=1, retries=0`` ends
within 2 s; deep JSON, huge integers, redirects and 50 MB bodies are failed moves, never exceptions; a
164-character key a server echoes (whole or in part) reaches no file of a training run or a tournament;
``timeout_s: 1e309`` is refused in one line; a dead endpoint stops a training run with one line (exit 2)
and is counted in a tournament's leaderboard, which finishes."""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from cogym.agents.endpoint import KEY_RUN, MAX_REASON, EndpointAgent, EndpointConfig, mask_key
from cogym.core.errors import ConfigError
from cogym.core.types import Request

KEY_VAR = "COGYM_TEST_LONG_KEY"
KEY = "sk-" + "".join("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(i * 7 + 3) % 62]
                      for i in range(161))  # 164 characters, no 12-character run repeated
# A try that must end at timeout_s = 1 s: 2 s is the bound, which leaves a busy 2-core machine
# a full second for the thread pool, the loopback server's threads and the interpreter.
BOUND_S = 2.0
REPLY = json.dumps({"choices": [{"message": {"role": "assistant", "content": "1"}}]}).encode()


class RawServer:
    """A TCP server on 127.0.0.1 whose every connection is answered by ``behave(conn, stop)``: bytes
    written by hand, trickled or not. Handlers stop when the client goes or ``stop`` is set."""

    def __init__(self, behave: Callable[[socket.socket, threading.Event], None], tls: ssl.SSLContext | None = None):
        self.behave, self.stop, self.requests = behave, threading.Event(), []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://{'localhost' if tls else '127.0.0.1'}:{self.sock.getsockname()[1]}/v1"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn.settimeout(5)
                conn = self.tls.wrap_socket(conn, server_side=True)
            self.requests.append(_read_request(conn))
            self.behave(conn, self.stop)
        except OSError:  # the client closed its end: the try is over
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _read_request(conn: socket.socket) -> bytes:
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(65536) or b" " * length
    return head


def _trickle(conn: socket.socket, stop: threading.Event, prefix: bytes, endless: bytes, gap: float = 0.02) -> None:
    """``prefix`` at once, then ``endless`` (repeated) one byte per ``gap`` seconds for at most 20 s."""
    conn.sendall(prefix)
    for k in range(int(20 / gap)):
        if stop.wait(gap):
            return
        conn.sendall(endless[k % len(endless):k % len(endless) + 1])


def _reply(status: bytes, body: bytes, extra: bytes = b"") -> Callable:
    def behave(conn, stop):
        conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n" + extra
                     + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return behave


def _flood(head: bytes) -> Callable:
    """``head``, then up to 60 MB of body as fast as the client reads it."""
    def behave(conn, stop):
        conn.sendall(head)
        block = b"x" * (1 << 20)
        for _ in range(60):
            if stop.is_set():
                return
            conn.sendall(block)
    return behave


@pytest.fixture
def serve():
    servers: list[RawServer] = []

    def start(behave, tls=None) -> RawServer:
        servers.append(RawServer(behave, tls))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    return KEY


def _request() -> Request:
    return Request(messages=[{"role": "user", "content": "your move"}], role="first", seat="player_0", key=1)


def _act(url: str, agent_tls: ssl.SSLContext | None = None, n: int = 1, **config) -> tuple[list, float]:
    """``n`` requests at once: their actions and the seconds until the last one ended."""
    cfg = {"timeout_s": 1, "retries": 0, "max_concurrency": n, **config}
    agent = EndpointAgent(EndpointConfig(base_url=url, model="m", api_key_env=KEY_VAR, **cfg), "e")
    if agent_tls is not None:
        agent._tls = agent_tls
    try:
        t0 = time.monotonic()
        actions = agent.act([_request()] * n)
        return actions, time.monotonic() - t0
    finally:
        agent.shutdown()


HEAD_200 = b"HTTP/1.1 200 OK\r\n"
TRICKLERS = {
    "status line": lambda c, s: _trickle(c, s, b"", b"HTTP/1.1 200 OK" + b" " * 100_000),
    "headers": lambda c, s: _trickle(c, s, HEAD_200, b"X-Pad: 1\r\n"),
    "one endless header": lambda c, s: _trickle(c, s, HEAD_200 + b"X-Pad: ", b"a"),
    "endless 100 Continue": lambda c, s: _trickle(c, s, b"", b"HTTP/1.1 100 Continue\r\n\r\n"),
    "chunk sizes": lambda c, s: _trickle(c, s, HEAD_200 + b"Transfer-Encoding: chunked\r\n\r\n", b"1\r\na\r\n"),
    "one chunk-size line": lambda c, s: _trickle(c, s, HEAD_200 + b"Transfer-Encoding: chunked\r\n\r\n", b"0"),
    "body": lambda c, s: _trickle(c, s, HEAD_200 + b"Content-Length: 100000\r\n\r\n", b" "),
    "close-delimited body": lambda c, s: _trickle(c, s, HEAD_200 + b"\r\n", b" "),
}


@pytest.mark.parametrize("what", list(TRICKLERS))
def test_a_trickling_server_is_cut_at_the_deadline(serve, key, what):
    server = serve(TRICKLERS[what])
    actions, elapsed = _act(server.url, n=3)  # every time, not once: three tries at once, each on its own connection
    for action in actions:
        assert action.text == "" and "timed out after 1 s (1 try)" in action.error, action.error
    assert 0.9 < elapsed < BOUND_S, (what, elapsed)
    assert len(server.requests) == 3


BAD_REPLIES = {
    "deep JSON": (_reply(b"200 OK", b"[" * 100_000 + b"]" * 100_000), "nested deeper than 64"),
    "deep JSON inside the content": (_reply(b"200 OK", b'{"choices": [{"message": {"content": ' + b"[" * 100_000 + b"}}]}"),
                                     "nested deeper than 64"),
    "a 5000-digit integer": (_reply(b"200 OK", REPLY[:-1] + b', "usage": ' + b"9" * 5000 + b"}"),
                             "a number of 5000 characters"),
    "a 5000-digit float": (_reply(b"200 OK", REPLY[:-1] + b', "usage": 0.' + b"9" * 5000 + b"}"), "a number of 5002"),
    "not UTF-8": (_reply(b"200 OK", b'{"choices": "\xff\xfe"}'), "malformed JSON"),
    "302 with a valid body": (_reply(b"302 Found", REPLY, b"Location: http://127.0.0.1:9/v1\r\n"),
                              "answered HTTP 302 (redirects are not followed)"),
    "201 with a valid body": (_reply(b"201 Created", REPLY), "answered HTTP 201"),
    "a 50 MB Content-Length": (_flood(HEAD_200 + b"Content-Length: 50000000\r\n\r\n"), "50000000 bytes, over"),
    "a 50 MB chunked body": (_flood(HEAD_200 + b"Transfer-Encoding: chunked\r\n\r\n3200000\r\n"), "body over"),
    "a 50 MB close-delimited body": (_flood(HEAD_200 + b"\r\n"), "body over"),
    "an endless head": (_flood(HEAD_200 + b"X-Pad: "), "line over"),
    "a head of many lines": (lambda c, s: c.sendall(HEAD_200 + b"X: 1\r\n" * 1000), "head over"),
    "200 interim replies": (lambda c, s: c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 200), "interim"),
    "not HTTP": (lambda c, s: c.sendall(b"SSH-2.0-OpenSSH\r\n\r\n"), "not an HTTP/1.x status line"),
    "a malformed chunk size": (lambda c, s: c.sendall(HEAD_200 + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n"),
                               "malformed chunk size"),
    "two Content-Lengths": (lambda c, s: c.sendall(HEAD_200 + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"),
                            "malformed Content-Length"),
}


@pytest.mark.parametrize("what", list(BAD_REPLIES))
def test_a_hostile_reply_is_a_failed_move_with_its_reason_never_an_exception(serve, key, what):
    behave, cause = BAD_REPLIES[what]
    server = serve(behave)
    [action], elapsed = _act(server.url, timeout_s=5)
    assert action.text == "" and action.error.startswith(f"endpoint {server.url}") and cause in action.error, action.error
    assert len(action.error) <= MAX_REASON and elapsed < 5


def test_a_chunked_reply_with_trailers_and_an_https_one_are_read(serve, key, tmp_path):
    chunked = HEAD_200 + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n%s\r\n" % (len(REPLY[i:i + 7]), REPLY[i:i + 7]) for i in range(0, len(REPLY), 7)) + b"0\r\nX-T: 1\r\n\r\n"
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    server = serve(lambda c, s: c.sendall(interim + chunked))
    [action], _ = _act(server.url)
    assert action.text == "1" and action.error is None
    assert f"Authorization: Bearer {KEY}".encode() in server.requests[0]
    # https: the same reader over TLS (a self-signed certificate the client is told to trust)
    cert, pkey = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(pkey), "-out", str(cert)],
                   check=True, capture_output=True)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, pkey)
    client_tls = ssl.create_default_context(cafile=str(cert))
    good = serve(_reply(b"200 OK", REPLY), tls=server_tls)
    [action], _ = _act(good.url, agent_tls=client_tls)
    assert action.text == "1" and action.error is None
    slow = serve(TRICKLERS["headers"], tls=server_tls)
    [action], elapsed = _act(slow.url, agent_tls=client_tls)
    assert "timed out after 1 s" in action.error and elapsed < BOUND_S
    [action], _ = _act(good.url)  # the system's trust store does not know the certificate: a failed move
    assert "could not be reached (" in action.error and "CERTIFICATE_VERIFY_FAILED" in action.error


def test_the_key_is_masked_before_any_cut_and_any_run_of_12_of_its_characters():
    text = f"you sent Bearer {KEY}; again {KEY[30:100]}; tail {KEY[-KEY_RUN:]}; short {KEY[5:5 + KEY_RUN - 1]}."
    masked = mask_key(text, KEY)
    assert masked == f"you sent Bearer ***; again ***; tail ***; short {KEY[5:5 + KEY_RUN - 1]}."
    assert not any(KEY[i:i + KEY_RUN] in masked for i in range(len(KEY) - KEY_RUN + 1))
    assert mask_key("x" + KEY[:40] + KEY[20:60] + "y", KEY) == "x***y"  # overlapping runs are one mask


class EchoServer(RawServer):
    """Answers every other request HTTP 500 with a body that echoes the Authorization header, whole,
    in part and spread over the cut, and the others with a legal move, so a run goes on."""

    def __init__(self):
        self.count = 0
        super().__init__(self._answer)

    def _answer(self, conn, stop):
        head = self.requests[-1].decode("latin-1")
        sent = next(line.split(" ", 2)[2] for line in head.split("\r\n") if line.lower().startswith("authorization:"))
        self.count += 1
        if self.count % 2:
            body = (f"invalid key {sent}; partial {sent[10:80]} and {sent[90:]}; {'x' * 200}; {sent}").encode()
            _reply(b"500 Internal Server Error", body)(conn, stop)
        else:
            _reply(b"200 OK", REPLY)(conn, stop)


def _all_files_lack_the_key(root: Path) -> None:
    grams = {KEY[i:i + KEY_RUN].encode() for i in range(len(KEY) - KEY_RUN + 1)}
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    leaked = sorted({str(p) for p in files for g in grams if g in p.read_bytes()})
    assert leaked == []  # files holding 12 or more consecutive characters of the key


def test_a_long_key_echoed_by_a_server_reaches_no_file_of_a_training_run_or_a_tournament(tmp_path, key, capsys):
    from cogym.runners.cli import main

    server = EchoServer()
    try:
        run_dir = tmp_path / "run"
        config = tmp_path / "train.yaml"
        config.write_text("game: {id: kuhn_poker-v0, num_games: 4}\neval: {declared: false}\n"
                          "run: {iterations: 2, transcripts_every: 1, checkpoint_every: 0}\n"
                          "seats: {first: gpt, second: scripted:always_check}\n"
                          f"policies:\n  gpt:\n    endpoint: {{base_url: '{server.url}', model: m, api_key_env: {KEY_VAR}, "
                          "timeout_s: 2, retries: 0, max_consecutive_failures: 100}\n")
        assert main(["train", str(config), "--run-dir", str(run_dir), "--no-progress"]) == 0
        assert list(run_dir.rglob("events.out.tfevents*"))  # TensorBoard's files are searched too
        assert "HTTP 500" in (run_dir / "transcripts.jsonl").read_text()  # the echoing replies were recorded, masked
        out = tmp_path / "tournament"
        players = f"endpoint:{server.url}?model=m&api_key_env={KEY_VAR}&name=gpt&timeout_s=2&retries=0"
        assert main(["tournament", "--game", "kuhn_poker-v0", "--players", players, "scripted:always_check",
                     "--games-per-pairing", "8", "--out", str(out), "--no-progress", "--bootstrap", "10"]) == 0
        assert "HTTP 500" in (out / "results.jsonl").read_text()
    finally:
        server.close()
    printed = capsys.readouterr()
    assert not any(KEY[i:i + KEY_RUN] in printed.out + printed.err for i in range(len(KEY) - KEY_RUN + 1))
    _all_files_lack_the_key(tmp_path)


def test_non_finite_or_huge_numbers_are_refused_in_one_line(tmp_path):
    from cogym.runners.config.load import load_config
    from cogym.runners.tournament.players import resolve_players

    for key_value, shown in [("timeout_s: 1e309", "timeout_s must be"),
                             ("timeout_s: .nan", "timeout_s must be"), ("timeout_s: 86400", "timeout_s must be"),
                             ("backoff_s: .inf", "backoff_s must be"), ("retries: 1000000000", "retries must be"),
                             ("max_consecutive_failures: 0", "max_consecutive_failures must be")]:
        path = tmp_path / "c.yaml"
        path.write_text("game: {id: kuhn_poker-v0}\nseats: {first: gpt, second: scripted:always_check}\n"
                        f"policies:\n  gpt:\n    endpoint: {{base_url: 'http://127.0.0.1:9/v1', model: m, {key_value}}}\n")
        with pytest.raises(ConfigError, match=shown) as err:
            load_config(path)
        assert "\n" not in str(err.value) and len(str(err.value)) < 300
    for value in (float("inf"), float("nan"), 1e309, 3601, True):  # the section itself, whoever builds it
        with pytest.raises(ValueError, match=r"timeout_s must be a number in \(0, 3600\]"):
            EndpointConfig(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=value)
    for query in ("timeout_s=1e309", "timeout_s=inf", "retries=101", "backoff_s=nan"):
        with pytest.raises(ConfigError) as err:
            resolve_players([f"endpoint:http://127.0.0.1:9/v1?model=m&{query}"], minimum=1)
        assert "\n" not in str(err.value)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cogym.runners.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_a_dead_endpoint_stops_a_training_run_with_one_line(tmp_path):
    dead = socket.create_server(("127.0.0.1", 0))  # listening, never answering: every try times out
    try:
        config = tmp_path / "train.yaml"
        config.write_text("game: {id: kuhn_poker-v0, num_games: 4}\neval: {declared: false}\nrun: {iterations: 50, checkpoint_every: 0}\n"
                          "seats: {first: gpt, second: scripted:always_check}\n"
                          f"policies:\n  gpt:\n    endpoint: {{base_url: 'http://127.0.0.1:{dead.getsockname()[1]}/v1', "
                          "model: m, timeout_s: 0.3, retries: 0, max_consecutive_failures: 6}\n")
        proc = _cli("train", str(config), "--run-dir", str(tmp_path / "run"), "--no-progress")
    finally:
        dead.close()
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("cogym train: error: endpoint 'gpt' (http://127.0.0.1:")
    assert re.search(r"failed \d+ requests in a row \(max_consecutive_failures 6\); the last: endpoint ", lines[0])
    assert "timed out after 0.3 s (1 try)" in lines[0]


def test_a_dead_endpoint_is_counted_on_the_leaderboard_and_the_tournament_finishes(tmp_path, capsys):
    from cogym.runners.cli import main

    out = tmp_path / "t"
    players = "endpoint:http://127.0.0.1:9/v1?model=m&name=dead&retries=0&timeout_s=1&max_consecutive_failures=1"
    assert main(["tournament", "--game", "kuhn_poker-v0", "--players", players, "scripted:always_check",
                 "--games-per-pairing", "6", "--out", str(out), "--no-progress", "--bootstrap", "10", "--no-plots"]) == 0
    printed = capsys.readouterr().out
    board = {row["name"]: row for row in json.loads((out / "leaderboard.json").read_text())}
    assert board["dead"]["failed"] == 6 and board["scripted:always_check"]["failed"] == 0
    header = next(line for line in printed.splitlines() if line.lstrip().startswith("#"))
    assert header.split()[-2:] == ["failed", "player"]
    assert "failed: dead made no move in 6 of its 6 games" in printed
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["failed_players"] == ["dead"] for r in rows)


def test_a_password_in_base_url_is_refused_and_never_quoted(tmp_path):
    from cogym.runners.config.load import load_config
    from cogym.runners.tournament.players import resolve_players

    secret = "hunter2-secret"
    path = tmp_path / "c.yaml"
    path.write_text("game: {id: kuhn_poker-v0}\nseats: {first: gpt, second: scripted:always_check}\n"
                    f"policies:\n  gpt:\n    endpoint: {{base_url: 'http://user:{secret}@127.0.0.1:9/v1', model: m}}\n")
    errors = []
    for build in (lambda: load_config(path),  # was accepted and then quoted in every failure reason on disk
                  lambda: resolve_players([f"endpoint:http://user:{secret}@127.0.0.1:9/v1?model=m"], minimum=1),
                  lambda: resolve_players([f"endpoint:ftp://user:{secret}@h?model=m"], minimum=1)):
        with pytest.raises(ConfigError) as err:
            build()
        errors.append(str(err.value))
    for value in (f"http://user:{secret}@h/v1", f"user:{secret}@h", f"http://{secret}@h:99999/v1"):
        with pytest.raises(ValueError) as err:
            EndpointConfig(base_url=value, model="m")
        errors.append(str(err.value))
    assert all("must not hold a user name or password" in e and secret not in e and "\n" not in e for e in errors)


def test_a_host_name_the_lookup_cannot_encode_is_a_config_error_and_a_failed_try(monkeypatch):
    from cogym.agents import http_bounded
    from cogym.runners.tournament.players import resolve_players

    host = "a" * 64 + ".example"  # a label over 63 characters: IDNA (and so getaddrinfo) raises UnicodeError
    with pytest.raises(ConfigError, match="is not a valid host name") as err:
        resolve_players([f"endpoint:http://{host}/v1?model=m"], minimum=1)
    assert "\n" not in str(err.value)
    crashed = []  # the look-up thread's exception used to print a traceback, then post() raised KeyError
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    with pytest.raises(http_bounded.ProtocolError, match="cannot resolve"):
        http_bounded.post(host, 80, "/v1", b"{}", {}, time.monotonic() + 5, 1000)
    assert crashed == []


def test_the_backoff_waits_are_capped_and_a_request_is_bounded(monkeypatch):
    from cogym.agents import endpoint, http_bounded

    assert endpoint.backoff_waits(0.5, 4) == [0.5, 1.0, 2.0, 4.0]
    assert endpoint.backoff_waits(600, 100) == [endpoint.MAX_WAIT_S] * 100  # was 600 * 2**99 s before the last
    with pytest.raises(ValueError, match="lets one request take up to"):
        EndpointConfig(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=3600, retries=100)
    slept = []
    monkeypatch.setattr(endpoint.time, "sleep", slept.append)  # no real waiting: the schedule is what is checked
    agent = EndpointAgent(EndpointConfig(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=1, retries=5,
                                         backoff_s=20), "e")

    def times_out(body):
        raise http_bounded.Timeout("timed out")

    monkeypatch.setattr(agent, "_post", times_out)
    try:
        [action] = agent.act([_request()])
    finally:
        agent.shutdown()
    assert "timed out after 1 s (6 tries)" in action.error
    assert slept == [20, 40, 60, 60, 60]
