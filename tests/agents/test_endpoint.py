"""Endpoint players: seats played by an OpenAI-compatible chat endpoint, against real HTTP servers on
127.0.0.1 (a good one, one that hangs, one that answers HTTP 500, one that sends malformed JSON, one
that trickles its reply): tournaments finish and rate them, every failure is an invalid move with its
reason within the time-out bound, concurrency stays bounded, retries back off, the API key is never
written anywhere, and configs refuse a learner on an endpoint and name a missing key variable."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cogym.agents.endpoint import EndpointAgent, EndpointConfig, MissingKeyError
from cogym.core.errors import ConfigError
from cogym.core.types import Request
from cogym.runners.tournament.players import resolve_players
from cogym.runners.tournament.results import RESULTS_FILE
from cogym.runners.tournament.run import run_tournament
from cogym.runners.tournament.spec import TournamentSpec

KEY_VAR = "COGYM_TEST_ENDPOINT_KEY"
KEY = "sk-cogym-FAKE-7d41c9e2b8a05f36"  # a distinctive fake key: grepped for in everything a run writes


class Server:
    """A chat-completions server on 127.0.0.1 that counts requests in flight, attempts and their times."""

    def __init__(self, mode: str = "good", reply: str = "1", delay: float = 0.0) -> None:
        self.mode, self.reply, self.delay = mode, reply, delay
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.in_flight = self.max_in_flight = self.attempts = 0
        self.times: list[float] = []
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.attempts += 1
                    server.times.append(time.monotonic())
                self.counted = True
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    with server.lock:
                        server.bodies.append(body)
                        server.auth.append(self.headers.get("Authorization"))
                    server.answer(self, body)
                finally:
                    server.done(self)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def done(self, handler: BaseHTTPRequestHandler) -> None:
        """A request stops counting as in flight once its reply is ready: the client may send its next
        request as soon as it has read the reply, before this handler's thread runs again."""
        with self.lock:
            if handler.counted:
                handler.counted = False
                self.in_flight -= 1

    def answer(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        if self.delay:
            time.sleep(self.delay)
        if self.mode == "hang":
            self.stop.wait(10)
            return
        if self.mode == "trickle":  # headers, then one byte at a time, slower than the time-out allows in all
            handler.send_response(200)
            handler.send_header("Content-Length", "2000")
            handler.end_headers()
            for _ in range(2000):
                if self.stop.wait(0.05):
                    return
                handler.wfile.write(b" ")
                handler.wfile.flush()
            return
        if self.mode == "error500":
            data, status = f"internal error; you sent {handler.headers.get('Authorization')}".encode(), 500
        elif self.mode == "malformed":
            data, status = b'{"choices": [{"message": {"content": "1"', 200
        elif self.mode == "no_content":
            data, status = json.dumps({"choices": []}).encode(), 200
        else:
            data, status = json.dumps({"choices": [{"message": {"role": "assistant", "content": self.reply}}]}).encode(), 200
        self.done(handler)
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(mode: str = "good", **kwargs) -> Server:
        servers.append(Server(mode, **kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    return KEY


def _files_with(root: Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def _request(text: str = "card J; history: none; moves: 1=check 2=bet", key: int | None = 7) -> Request:
    return Request(messages=[{"role": "system", "content": "play well"}, {"role": "user", "content": text}],
                   role="first", seat="player_0", key=key)


def test_a_tournament_against_a_twin_finishes_rates_and_never_writes_the_key(tmp_path, serve, key):
    from cogym.runners.cli import main

    server = serve("good", delay=0.05)  # slow enough that requests overlap
    out = tmp_path / "out"
    config = tmp_path / "t.yaml"
    config.write_text(
        "game: {id: kuhn_poker-v0}\n"
        "tournament:\n"
        f"  players: [{{name: gpt, endpoint: {{base_url: '{server.url}', model: fake-1, api_key_env: {KEY_VAR}, "
        "max_concurrency: 2, timeout_s: 5}}, scripted:always_check]\n"
        f"  games_per_pairing: 12\n  transcripts: 4\n  out: {out}\n"
        "prompts: {first: {system: You play Kuhn poker.}, second: {system: You play Kuhn poker.}}\n")
    assert main(["tournament", "--config", str(config), "--no-progress", "--bootstrap", "20", "--no-plots"]) == 0
    rows = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert len(rows) == 12 and not any("agent_errors" in r for r in rows)
    board = json.loads((out / "leaderboard.json").read_text())
    assert {r["name"] for r in board} == {"gpt", "scripted:always_check"} and all(r["games"] == 12 for r in board)
    info = json.loads((out / "tournament.json").read_text())["players"]["gpt"]
    assert info["kind"] == "endpoint" and info["endpoint"]["api_key_env"] == KEY_VAR
    # what was asked: the messages a model would see (the role's system prompt, then the game's text)
    body = server.bodies[0]
    assert body["model"] == "fake-1" and body["max_tokens"] == 256 and body["temperature"] == 1.0 and "seed" in body
    assert body["messages"][0] == {"role": "system", "content": "You play Kuhn poker."}
    assert body["messages"][1]["role"] == "user" and "moves: 1=" in body["messages"][1]["content"]
    assert set(server.auth) == {f"Bearer {key}"}  # sent with every request ...
    assert server.max_in_flight == 2  # ... concurrently, never more than max_concurrency at once
    assert server.attempts == 12  # the endpoint plays one move per game (its "1" is check, or fold to a bet)
    assert _files_with(tmp_path, key) == []  # ... and written nowhere


@pytest.mark.parametrize("mode, cause, tries", [("hang", "timed out after 0.5 s (2 tries)", 2),
                                                ("error500", "answered HTTP 500", 2),
                                                ("malformed", "malformed JSON", 1),
                                                ("trickle", "timed out after 0.5 s (2 tries)", 2),
                                                ("no_content", "without choices[0].message.content", 1)])
def test_a_failing_endpoint_loses_each_game_by_an_invalid_move_that_says_why(tmp_path, serve, key, mode, cause, tries,
                                                                            capsys):
    from cogym.runners.cli import main

    server = serve(mode)
    spec_text = (f"endpoint:{server.url}?model=m&api_key_env={KEY_VAR}&name=bad&timeout_s=0.5&retries=1"
                 "&backoff_s=0.05&max_concurrency=4")
    players = resolve_players([spec_text, "scripted:always_check"])
    spec = TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=4, transcripts=2)
    t0 = time.monotonic()
    rows = run_tournament(spec, tmp_path, progress=False)
    elapsed = time.monotonic() - t0
    assert len(rows) == 4
    for r in rows:
        seat = "player_0" if r["a"] == "bad" and r["order"] == 0 or r["b"] == "bad" and r["order"] == 1 else "player_1"
        reason = r["agent_errors"][seat]
        assert reason.startswith(f"endpoint {server.url}") and cause in reason, reason
        assert (r["score"] == 0.0) == (r["a"] == "bad")  # the endpoint's side lost every game
    assert server.attempts == 4 * tries  # one move per game (its first one ends the hand), retried as the cause allows
    # two steps of play (the endpoint moves first in two games, second in the other two), each step's requests at
    # once: two tries of at most 0.5 s and a 0.05 s backoff per step (2.1 s), not one request after another (4.2 s)
    assert elapsed < 3.5, elapsed
    moves = [m for line in (tmp_path / "transcripts.jsonl").read_text().splitlines()
             for m in json.loads(line)["moves"] if m["policy"] == "bad"]
    assert moves and all(m["text"] == "" and cause in m["error"] for m in moves)
    capsys.readouterr()
    assert main(["show", str(tmp_path), "--full"]) == 0 and "[no move: endpoint " in capsys.readouterr().out
    assert _files_with(tmp_path, key) == []  # the 500 server echoes the key: masked in every reason


def test_the_outcome_of_a_failed_seat_is_invalid_with_the_reason(serve, key):
    from cogym.envs import make
    from cogym.runners.rollout.agents import AgentFactory
    from cogym.runners.rollout.turns import rollout

    server = serve("error500")
    agent = EndpointAgent(EndpointConfig(base_url=server.url, model="m", api_key_env=KEY_VAR, timeout_s=0.5, retries=0),
                          "bad")
    twin = AgentFactory("kuhn_poker-v0").scripted("always_check", "second")
    seats = {"player_0": ("bad", agent), "player_1": ("scripted:always_check", twin)}
    res = rollout([make("kuhn_poker-v0")], lambda seat, role: seats[seat], {}, [3])
    info = res.infos[0]["player_0"]
    assert info["invalid"] is True and info["agent_error"].startswith(f"endpoint {server.url} answered HTTP 500")
    assert info["reason"].startswith(info["agent_error"]) and "the game: no move" in info["reason"]
    assert KEY not in info["reason"] and "***" in info["reason"]  # the server echoed the Authorization header
    assert res.returns[0]["player_0"] < 0  # the game's own invalid-move rule: the hand is folded
    agent.shutdown()


def test_retries_back_off_exponentially(serve, key):
    server = serve("error500")
    agent = EndpointAgent(EndpointConfig(base_url=server.url, model="m", api_key_env=KEY_VAR, timeout_s=1, retries=3,
                                         backoff_s=0.1), "backoff")
    [action] = agent.act([_request()])
    assert action.text == "" and action.error.endswith("(4 tries)")
    assert server.attempts == 4
    gaps = [b - a for a, b in zip(server.times, server.times[1:])]
    for gap, want in zip(gaps, (0.1, 0.2, 0.4)):
        assert want * 0.9 <= gap < want + 0.25, gaps
    agent.shutdown()


def test_a_good_reply_and_the_limits_on_one(serve, key):
    server = serve("good", reply="bet, because I hold the king")
    agent = EndpointAgent(EndpointConfig(base_url=server.url, model="m", api_key_env=KEY_VAR, max_tokens=5,
                                         temperature=0.0), "ok", max_tokens=99, temperature=1.0)
    [action] = agent.act([_request(key=2**62 + 5)])
    assert action.text == "bet, because I hold the king" and action.error is None and action.response_ids is None
    assert server.bodies[0]["max_tokens"] == 5 and server.bodies[0]["temperature"] == 0.0
    assert 0 <= server.bodies[0]["seed"] < 2**31
    short = EndpointAgent(EndpointConfig(base_url=server.url, model="m", max_reply_chars=10), "short")
    [action] = short.act([_request(key=None)])
    assert action.text == "" and "28 characters, over max_reply_chars 10" in action.error
    assert "seed" not in server.bodies[-1] and server.auth[-1] is None  # no key variable: no Authorization header
    refused = EndpointAgent(EndpointConfig(base_url="http://127.0.0.1:9/v1", model="m", retries=0, timeout_s=0.5), "nobody")
    [action] = refused.act([_request()])
    assert "could not be reached" in action.error and action.error.endswith("(1 try)")
    for a in (agent, short, refused):
        assert KEY not in repr(a) and KEY not in repr(a.config)
        a.shutdown()


def test_endpoint_player_specs_and_their_errors(monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    [p] = resolve_players([f"endpoint:http://127.0.0.1:8000/v1?model=gpt-x&api_key_env={KEY_VAR}&timeout_s=2&name=g@first"],
                          minimum=1)
    assert p.name == "g" and p.bind == ("first",) and p.endpoint.timeout_s == 2.0
    assert p.endpoint.base_url == "http://127.0.0.1:8000/v1" and p.endpoint.model == "gpt-x"
    [p] = resolve_players([{"name": "h", "endpoint": {"base_url": "https://api.example.com/v1", "model": "x"}}], minimum=1)
    assert p.name == "h" and p.endpoint.api_key_env is None and p.bind is None
    with pytest.raises(ConfigError, match="did you mean 'timeout_s'"):
        resolve_players(["endpoint:http://h/v1?model=m&timeout=3"], minimum=1)
    with pytest.raises(ConfigError, match="base_url must be an http"):
        resolve_players([{"endpoint": {"base_url": "localhost:8000", "model": "m"}}], minimum=1)
    with pytest.raises(ConfigError) as err:  # the key pasted where its variable's name goes is never echoed
        resolve_players([{"endpoint": {"base_url": "http://h/v1", "model": "m", "api_key_env": KEY}}], minimum=1)
    assert KEY not in str(err.value) and "NAME of an environment variable" in str(err.value)


def test_a_missing_key_variable_fails_before_the_first_game(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_VAR, raising=False)
    players = resolve_players([f"endpoint:http://127.0.0.1:9/v1?model=m&api_key_env={KEY_VAR}", "scripted:nash"])
    with pytest.raises(MissingKeyError, match=f"the environment variable {KEY_VAR} .* is not set") as err:
        run_tournament(TournamentSpec(game="kuhn_poker-v0", players=players, games_per_pairing=2), tmp_path, progress=False)
    assert "\n" not in str(err.value) and not (tmp_path / RESULTS_FILE).exists()


def _train_config(tmp_path: Path, server_url: str, learner: str = "") -> Path:
    path = tmp_path / "c.yaml"
    path.write_text("game: {id: kuhn_poker-v0, num_games: 4}\neval: {declared: false}\n"
                    "seats: {first: gpt, second: scripted:always_check}\n"
                    f"policies:\n  gpt:\n    endpoint: {{base_url: '{server_url}', model: m, api_key_env: {KEY_VAR}, "
                    "timeout_s: 2}\n    sampling: {max_new_tokens: 16, temperature: 0.5}\n" + learner)
    return path


def test_a_training_config_seats_an_endpoint_frozen_and_refuses_a_learner(tmp_path, serve, key, monkeypatch):
    from cogym.runners.config.load import load_config
    from cogym.runners.rollout.turns import rollout
    from cogym.runners.train.build import build

    server = serve("good", reply="2")
    cfg = load_config(_train_config(tmp_path, server.url))
    assert cfg.learners["gpt"].algorithm == "frozen"  # added: an endpoint is never trained
    assert cfg.to_dict()["policies"]["gpt"]["endpoint"]["api_key_env"] == KEY_VAR and KEY not in json.dumps(cfg.to_dict())
    run = build(cfg)
    assert run.policies == {} and run.learners == {}
    res = rollout(run.games, run.seat_map, {}, [1, 2, 3, 4])
    assert len(res.returns) == 4 and res.turns == []  # its moves are no training data
    assert all(b["max_tokens"] == 16 and b["temperature"] == 0.5 for b in server.bodies)
    assert all(not info.get("invalid") for game in res.infos for info in game.values())  # "2" is a legal bet
    with pytest.raises(ConfigError, match="never trained") as err:
        load_config(_train_config(tmp_path, server.url, "learners:\n  gpt: {algorithm: grpo}\n"))
    assert "\n" not in str(err.value)
    load_config(_train_config(tmp_path, server.url, "learners:\n  gpt: {algorithm: frozen}\n"))  # frozen is fine
    monkeypatch.delenv(KEY_VAR)
    with pytest.raises(MissingKeyError, match=f"policies.gpt.endpoint: the environment variable {KEY_VAR}"):
        build(load_config(_train_config(tmp_path, server.url)))
