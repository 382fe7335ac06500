"""A seat played by an OpenAI-compatible chat endpoint: a frozen player that is never trained.

:class:`EndpointAgent` answers each request with one ``POST {base_url}/chat/completions`` of the
chat messages a model policy would be prompted with (``{model, messages, max_tokens, temperature,
seed}``), with the standard library's HTTP client (a connection per try) and at most
``max_concurrency`` requests in flight (one agent per endpoint policy or player, for the whole run).
A try is cut at ``timeout_s`` in all: connecting, and each read waits at most what is left of it, so
a server that trickles bytes is cut too. A request is tried again, ``retries`` times at most with
exponential backoff (``backoff_s``, doubled each time), after a connection error, a time-out, HTTP
429 or a 5xx.

Every failure (time-out, HTTP error, malformed JSON, no ``choices[0].message.content``, a reply
longer than ``max_reply_chars``) is an :class:`~cogym.core.types.Action` with empty text and its
``error`` set to the reason ("endpoint http://127.0.0.1:8000/v1 timed out after 2 s (3 tries)"):
the rollout steps the game with the empty message, which the game judges by its own rules (an
invalid move), and records the reason in the move and the seat's outcome
(:mod:`cogym.runners.rollout.loop`). An endpoint never crashes a run.

The API key is read from the environment variable ``api_key_env`` names when each request is made,
sent as ``Authorization: Bearer ...`` and kept nowhere: configs hold the variable's name, and a
reason that would quote the key (a server echoing it) has it masked. Endpoint output is not
reproducible: the request's sampling key is sent as ``seed`` (``send_seed``), which servers may
ignore, and a server's model may change under the same name.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional, Sequence
from urllib.parse import urlsplit

from cogym.core.errors import ConfigError
from cogym.core.types import Action, Request

DEFAULT_MAX_TOKENS = 256  # an endpoint's reply limit when neither its config nor the run sets one
MAX_BODY_FACTOR = 16  # a reply body is read up to this many bytes per allowed reply character (+ 64 KiB)
SHOWN = 120  # characters of a server's body quoted in a reason
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EndpointConfig:
    """An OpenAI-compatible chat endpoint that plays seats (frozen: never trained). Requests go to
    ``{base_url}/chat/completions``; see :mod:`cogym.agents.endpoint`."""

    base_url: str = ""  # e.g. http://127.0.0.1:8000/v1 (requests go to {base_url}/chat/completions)
    model: str = ""  # the model name the endpoint serves (the request's "model")
    api_key_env: Optional[str] = None  # the environment variable holding the API key (sent as a Bearer token); null: no key
    max_concurrency: int = 4  # requests in flight at once, for the whole run
    timeout_s: float = 30.0  # a try (connect, send, wait, read) is cut after this long in all, a trickling reply too
    retries: int = 2  # tries after the first, on a connection error, a time-out, HTTP 429 or 5xx
    backoff_s: float = 0.5  # wait before the first retry, doubled before each next one
    max_tokens: Optional[int] = None  # the reply limit sent; null: the policy's sampling.max_new_tokens (tournaments: --max-new-tokens, else 256)
    temperature: Optional[float] = None  # null: the policy's sampling.temperature (tournaments: sampling.temperature)
    max_reply_chars: int = 16000  # a longer reply is an invalid move
    send_seed: bool = True  # send each request's sampling key as "seed" (servers may ignore it)

    def __post_init__(self) -> None:
        if not re.match(r"https?://[^/\s]", self.base_url or ""):
            raise ValueError(f"base_url must be an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1; got {self.base_url!r}")
        if not self.model:
            raise ValueError("model must name the model the endpoint serves")
        if self.api_key_env is not None and not ENV_NAME.fullmatch(self.api_key_env):
            # never echo the value: it may be the key itself, pasted in the wrong place
            raise ValueError("api_key_env must be the NAME of an environment variable (letters, digits and _), "
                             "which holds the key; the config never holds the key itself")
        checks = [("max_concurrency", self.max_concurrency >= 1, ">= 1"), ("timeout_s", self.timeout_s > 0, "> 0"),
                  ("retries", self.retries >= 0, ">= 0"), ("backoff_s", self.backoff_s >= 0, ">= 0"),
                  ("max_tokens", self.max_tokens is None or self.max_tokens >= 1, ">= 1 or null"),
                  ("temperature", self.temperature is None or self.temperature >= 0, ">= 0 or null"),
                  ("max_reply_chars", self.max_reply_chars >= 1, ">= 1")]
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"{name} must be {want}, got {getattr(self, name)!r}")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def require_key(self, where: str) -> None:
        """A one-line :class:`ConfigError` naming the variable when ``api_key_env`` is set but not in the environment."""
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise ConfigError(f"{where}: the environment variable {self.api_key_env} (api_key_env of endpoint "
                              f"{self.base_url}) is not set; export it with the API key, or set api_key_env: null "
                              "for an endpoint that needs none")


class EndpointFailure(Exception):
    """A request that produced no move; its message is the reason the move is invalid."""


class EndpointAgent:
    """Seats played by one chat endpoint: each ``act`` sends its requests concurrently (at most
    ``max_concurrency`` in flight, for the agent's whole life) and returns one Action per request,
    a failed one with empty text and ``error`` set. ``max_tokens`` / ``temperature``: the defaults
    the config's own values override."""

    trainable = False

    def __init__(self, config: EndpointConfig, name: str, max_tokens: int = DEFAULT_MAX_TOKENS,
                 temperature: float = 1.0, where: str | None = None) -> None:
        config.require_key(where or f"endpoint player {name!r}")
        self.config, self.name = config, name
        self.max_tokens = config.max_tokens or max_tokens
        self.temperature = config.temperature if config.temperature is not None else temperature
        self.max_body = MAX_BODY_FACTOR * config.max_reply_chars + (64 << 10)
        self._pool = ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="cogym-endpoint")
        parts = urlsplit(config.url)
        self._https, self._host, self._port = parts.scheme == "https", parts.hostname, parts.port
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "tries": 0, "failures": 0}

    def __repr__(self) -> str:
        return f"EndpointAgent({self.name!r}, {self.config.base_url!r}, model={self.config.model!r})"

    def __getstate__(self):
        raise TypeError(f"an EndpointAgent ({self.name!r}) holds threads and connections; pickle its EndpointConfig "
                        "and build the agent where it plays")

    def act(self, requests: Sequence[Request]) -> list[Action]:
        return list(self._pool.map(self._answer, requests))

    def shutdown(self) -> None:
        """Stop the worker threads and close the connections (the agent cannot act after)."""
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------------------------ one request
    def _answer(self, request: Request) -> Action:
        with self._lock:
            self.stats["requests"] += 1
        try:
            return Action(text=self._complete(request))
        except EndpointFailure as exc:
            with self._lock:
                self.stats["failures"] += 1
            return Action(text="", error=self._mask(str(exc)))

    def _mask(self, text: str) -> str:
        """``text`` with the API key masked (a server may echo it back in an error body)."""
        key = os.environ.get(self.config.api_key_env) if self.config.api_key_env is not None else None
        return text.replace(key, "***") if key else text

    def payload(self, request: Request) -> dict:
        """The JSON body of ``request``: the chat messages a model policy would be prompted with."""
        messages = request.conversation if request.conversation is not None else request.messages
        body: dict[str, Any] = {"model": self.config.model, "messages": [{"role": m["role"], "content": m["content"]}
                                                                         for m in messages],
                                "max_tokens": self.max_tokens, "temperature": self.temperature}
        if self.config.send_seed and request.key is not None:
            body["seed"] = int(request.key) % (1 << 31)
        return body

    def _complete(self, request: Request) -> str:
        cfg, body = self.config, self.payload(request)
        tries, last = cfg.retries + 1, ""
        for attempt in range(tries):
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            with self._lock:
                self.stats["tries"] += 1
            try:
                status, data = self._post(body)
            except (TimeoutError, socket.timeout, _Deadline):
                last = f"timed out after {cfg.timeout_s:g} s"
                continue
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, a broken status line, ...
                last = f"could not be reached ({type(exc).__name__}: {_shown(str(exc))})"
                continue
            if status == 429 or status >= 500:
                last = f"answered HTTP {status} {_shown(data.decode('utf-8', 'replace'))}"
                continue
            if status >= 400:
                raise EndpointFailure(f"endpoint {cfg.base_url} answered HTTP {status} {_shown(data.decode('utf-8', 'replace'))}")
            return self._content(data)
        raise EndpointFailure(f"endpoint {cfg.base_url} {last} ({tries} {'try' if tries == 1 else 'tries'})")

    def _post(self, body: dict) -> tuple[int, bytes]:
        """One try: the status and the body, read under the whole-request deadline and the size cap."""
        headers = {"Content-Type": "application/json"}
        if self.config.api_key_env is not None:
            key = os.environ.get(self.config.api_key_env)
            if not key:
                raise EndpointFailure(f"endpoint {self.config.base_url}: the environment variable {self.config.api_key_env} "
                                      "(api_key_env) is not set")
            headers["Authorization"] = f"Bearer {key}"
        timeout = self.config.timeout_s
        deadline = time.monotonic() + timeout
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            conn.request("POST", self._path, body=json.dumps(body).encode(), headers=headers)
            sock = conn.sock  # kept: getresponse hands a closing connection's socket to the response
            sock.settimeout(_left(deadline))
            resp = conn.getresponse()
            chunks, size = [], 0
            while True:
                sock.settimeout(_left(deadline))  # each read waits at most what is left of the whole try
                chunk = resp.read1(1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.max_body:
                    raise EndpointFailure(f"endpoint {self.config.base_url} sent a reply body over {self.max_body} bytes "
                                          f"(max_reply_chars {self.config.max_reply_chars})")
                chunks.append(chunk)
            return resp.status, b"".join(chunks)
        finally:
            conn.close()

    def _content(self, data: bytes) -> str:
        """The reply text, ``choices[0].message.content``, else an :class:`EndpointFailure` saying what is wrong."""
        where = f"endpoint {self.config.base_url}"
        try:
            reply = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EndpointFailure(f"{where} replied with malformed JSON ({exc}): {_shown(data.decode('utf-8', 'replace'))}") from None
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise EndpointFailure(f"{where} replied without choices[0].message.content: "
                                  f"{_shown(json.dumps(reply)[:500])}") from None
        if not isinstance(content, str):
            raise EndpointFailure(f"{where} replied with a content that is not text: {_shown(repr(content))}")
        if len(content) > self.config.max_reply_chars:
            raise EndpointFailure(f"{where} replied with {len(content)} characters, over max_reply_chars "
                                  f"{self.config.max_reply_chars}")
        return content


class _Deadline(Exception):
    """A try ran past ``timeout_s`` in all (a server that trickles its reply)."""


def _left(deadline: float) -> float:
    """Seconds left before ``deadline``; a :class:`_Deadline` when none are."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Deadline
    return left


def _shown(text: str) -> str:
    """``text`` for a reason: printable, on one line, cut to SHOWN characters."""
    text = "".join(c if c.isprintable() else " " for c in text).strip()
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")
