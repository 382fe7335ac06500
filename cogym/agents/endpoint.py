"""A seat played by an OpenAI-compatible chat endpoint: a frozen player that is never trained.

:class:`EndpointAgent` answers each request with one ``POST {base_url}/chat/completions`` of the
chat messages a model policy would be prompted with (``{model, messages, max_tokens, temperature,
seed}``), a fresh connection per try, at most ``max_concurrency`` requests in flight (one agent per
endpoint policy or player, for the whole run). A request is tried again, ``retries`` times at most
with exponential backoff (``backoff_s``, doubled each retry, each wait capped at :data:`MAX_WAIT_S`),
after a connection error, a time-out, HTTP 429 or a 5xx; a config whose one request could take longer
than :data:`MAX_REQUEST_S` in all (every try timing out, every wait in full) is refused. A ``base_url``
holding ``user:password@`` is refused without being quoted: the key goes in ``api_key_env``.

A reply is untrusted input, read by :mod:`cogym.agents.http_bounded`: a try ends at ``timeout_s``
in all whatever the server sends (a trickled status line, headers, endless ``100 Continue``,
trickled chunk sizes or body); the body is capped at ``16 * max_reply_chars + 64 KiB`` bytes; redirects
are never followed and any status but 200 is a failure; the JSON may nest at most
:data:`MAX_JSON_DEPTH` deep and hold numbers of at most :data:`MAX_NUMBER_CHARS` characters.

Every failure (time-out, HTTP error, malformed or oversized reply, no ``choices[0].message.content``,
a reply longer than ``max_reply_chars``) is an :class:`~cogym.core.types.Action` with empty text and
its ``error`` set to the reason ("endpoint http://127.0.0.1:8000/v1 timed out after 2 s (3 tries)");
nothing a server sends raises out of :meth:`EndpointAgent.act`. The rollout steps the game with the
empty message, which the game judges by its own rules (an invalid move), and records the reason in
the move and the seat's outcome (:mod:`cogym.runners.rollout.loop`). A dead endpoint does not pass
as a player: after ``max_consecutive_failures`` failed requests in a row, an agent built with
``stop_when_dead`` (training) raises :class:`EndpointDead` (one line: the endpoint and the last
reason); a tournament's agent goes on, and the leaderboard counts the player's failed games.

The API key is read from the environment variable ``api_key_env`` names when each request is made,
sent as ``Authorization: Bearer ...`` and kept nowhere: configs hold the variable's name, and every
reason and reply text has the key masked, and any run of :data:`KEY_RUN` or more of its characters
(a server echoing part of it), before it is cut to :data:`MAX_REASON` characters. Endpoint output
is not reproducible: the request's sampling key is sent as ``seed`` (``send_seed``), which servers
may ignore, and a server's model may change under the same name.
"""

from __future__ import annotations

import json
import math
import os
import re
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional, Sequence
from urllib.parse import urlsplit

from cogym.agents import http_bounded
from cogym.core.config_key import key
from cogym.core.errors import CogymError
from cogym.core.types import Action, Request

DEFAULT_MAX_TOKENS = 256  # an endpoint's reply limit when neither its config nor the run sets one
MAX_BODY_FACTOR = 16  # a reply body is read up to this many bytes per allowed reply character (+ 64 KiB)
SHOWN = 120  # characters of a server's body quoted in a reason (after the key is masked)
MAX_REASON = 400  # characters of a whole reason (after the key is masked)
KEY_RUN = 12  # this many consecutive characters of the key, anywhere in a reason or reply, are masked
MAX_JSON_DEPTH = 64  # nesting of a reply's JSON ([ and {); OpenAI's replies nest about 5 deep
MAX_NUMBER_CHARS = 100  # characters of one number in a reply's JSON (int("9" * 5000) raises, float() is slow)
MAX_WAIT_S = 60.0  # the longest wait between two tries, however many doublings of backoff_s
MAX_REQUEST_S = 6 * 3600  # the longest one request may take: every try timed out and every wait waited
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class MissingKeyError(CogymError, ValueError):
    """An endpoint's ``api_key_env`` names an environment variable that is not set."""


# A JSON string (unterminated too: it then runs to the end, so the scan never backtracks) or one bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\[\s\S]?[^"\\]*)*"?|[\[\]{}]')


@dataclass(frozen=True)
class EndpointConfig:
    """An OpenAI-compatible chat endpoint that plays seats (frozen: never trained). Requests go to
    ``{base_url}/chat/completions``; see :mod:`cogym.agents.endpoint`."""

    base_url: str = key("", "e.g. http://127.0.0.1:8000/v1 (requests go to {base_url}/chat/completions)")
    model: str = key("", "the model name the endpoint serves (the request's \"model\")")
    api_key_env: Optional[str] = key(None, "the environment variable holding the API key (sent as a Bearer token); "
                                     "null: no key")
    max_concurrency: int = key(4, "requests in flight at once, for the whole run (<= 256)")
    timeout_s: float = key(30.0, "a try (connect, send, wait, read) is cut after this long in all, whatever the "
                           "server sends (<= 3600)")
    retries: int = key(2, "tries after the first, on a connection error, a time-out, HTTP 429 or 5xx (<= 100)")
    backoff_s: float = key(0.5, "wait before the first retry, doubled before each next one, each wait at most 60 s "
                           "(<= 600)")
    max_tokens: Optional[int] = key(None, "the reply limit sent; null: the policy's sampling.max_new_tokens "
                                    "(tournaments: --max-new-tokens, else 256)")
    temperature: Optional[float] = key(None, "null: the policy's sampling.temperature (tournaments: "
                                       "sampling.temperature)")
    max_reply_chars: int = key(16000, "a longer reply is an invalid move (<= 10,000,000)")
    send_seed: bool = key(True, "send each request's sampling key as \"seed\" (servers may ignore it)")
    max_consecutive_failures: int = key(8, "this many failed requests in a row stop a training run (a tournament "
                                        "counts them)")

    def __post_init__(self) -> None:
        if isinstance(self.base_url, str) and has_userinfo(self.base_url):
            # never echo it: what sits before the @ is a password; nor send it (cogym sends no Basic auth)
            raise ValueError("base_url must not hold a user name or password (user:password@host); put the "
                             "endpoint's key in an environment variable and name it in api_key_env")
        if (not isinstance(self.base_url, str) or not re.match(r"https?://[^/\s]", self.base_url)
                or not _port_ok(self.base_url)):
            raise ValueError(f"base_url must be an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1; got "
                             f"{str(self.base_url)[:200]!r}")
        if not re.fullmatch(r"[!-~]+", self.base_url):  # it goes into the request's head as it is
            raise ValueError(f"base_url must be printable ASCII without spaces (percent-encode the rest); got "
                             f"{self.base_url[:200]!r}")
        host = urlsplit(self.base_url).hostname or ""
        try:
            host.encode("idna")  # what the name look-up does first: a label over 63 characters fails there
        except UnicodeError:
            raise ValueError(f"base_url's host name {host[:80]!r} is not a valid host name (dot-separated labels of "
                             "1 to 63 characters)") from None
        if not self.model:
            raise ValueError("model must name the model the endpoint serves")
        if self.api_key_env is not None and not ENV_NAME.fullmatch(self.api_key_env):
            # never echo the value: it may be the key itself, pasted in the wrong place
            raise ValueError("api_key_env must be the NAME of an environment variable (letters, digits and _), "
                             "which holds the key; the config never holds the key itself")
        checks = [("max_concurrency", _within(self.max_concurrency, 1, 256), "an integer in [1, 256]"),
                  ("timeout_s", _within(self.timeout_s, 0, 3600) and self.timeout_s > 0, "a number in (0, 3600]"),
                  ("retries", _within(self.retries, 0, 100), "an integer in [0, 100]"),
                  ("backoff_s", _within(self.backoff_s, 0, 600), "a number in [0, 600]"),
                  ("max_tokens", self.max_tokens is None or _within(self.max_tokens, 1, 10**7), "in [1, 10000000] or null"),
                  ("temperature", self.temperature is None or _within(self.temperature, 0, 100), "in [0, 100] or null"),
                  ("max_reply_chars", _within(self.max_reply_chars, 1, 10**7), "an integer in [1, 10000000]"),
                  ("max_consecutive_failures", _within(self.max_consecutive_failures, 1, 10**6),
                   "an integer in [1, 1000000]")]
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"{name} must be {want}, got {str(getattr(self, name))[:60]}")
        worst = (self.retries + 1) * self.timeout_s + sum(backoff_waits(self.backoff_s, self.retries))
        if worst > MAX_REQUEST_S:
            raise ValueError(f"timeout_s {self.timeout_s:g} with retries {self.retries} lets one request take up to "
                             f"{worst / 3600:.1f} h (every try timed out), over {MAX_REQUEST_S // 3600} h; lower "
                             "either")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def require_key(self, where: str) -> None:
        """A one-line :class:`MissingKeyError` naming the variable when ``api_key_env`` is set but not in the environment."""
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise MissingKeyError(f"{where}: the environment variable {self.api_key_env} (api_key_env of endpoint "
                              f"{self.base_url}) is not set; export it with the API key, or set api_key_env: null "
                              "for an endpoint that needs none")


def _authority(url: str) -> tuple[str, str, str]:
    """``url`` cut into what precedes its authority (``http://``), the authority, and the rest."""
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    return head + sep, authority, rest[len(authority):]


def has_userinfo(url: str) -> bool:
    """Whether ``url`` holds a ``user[:password]@`` before its host (with or without a scheme)."""
    return "@" in _authority(url)[1]


def without_userinfo(url: str) -> str:
    """``url`` with any ``user[:password]@`` before its host shown as ``***@``: safe to quote."""
    head, authority, rest = _authority(url)
    return f"{head}***@{authority.rsplit('@', 1)[1]}{rest}" if "@" in authority else url


def backoff_waits(backoff_s: float, retries: int) -> list[float]:
    """The waits before each retry: ``backoff_s`` doubled each time, each at most MAX_WAIT_S."""
    return [min(backoff_s * 2.0 ** min(k, 64), MAX_WAIT_S) for k in range(retries)]


def _port_ok(url: str) -> bool:
    try:
        urlsplit(url).port  # noqa: B018 - urlsplit checks the port only when it is read
        return bool(urlsplit(url).hostname)
    except ValueError:
        return False


def _within(value: Any, lo: float, hi: float) -> bool:
    """A finite number (not a bool) in [lo, hi]: inf, nan and 1e309 never are."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and lo <= value <= hi)


class EndpointFailure(Exception):
    """A request that produced no move; its message is the reason the move is invalid."""


class EndpointDead(CogymError, RuntimeError):
    """An endpoint failed ``max_consecutive_failures`` requests in a row in a run that may not go on without
    it (training); one line naming the endpoint and its last failure."""


class EndpointAgent:
    """Seats played by one chat endpoint: each ``act`` sends its requests concurrently (at most
    ``max_concurrency`` in flight, for the agent's whole life) and returns one Action per request,
    a failed one with empty text and ``error`` set. ``max_tokens`` / ``temperature``: the defaults
    the config's own values override. ``stop_when_dead``: ``act`` raises :class:`EndpointDead` once
    ``max_consecutive_failures`` requests in a row have failed (else it goes on, each failure a move
    with its reason)."""

    trainable = False

    def __init__(self, config: EndpointConfig, name: str, max_tokens: int = DEFAULT_MAX_TOKENS,
                 temperature: float = 1.0, where: str | None = None, stop_when_dead: bool = True) -> None:
        config.require_key(where or f"endpoint player {name!r}")
        self.config, self.name, self.stop_when_dead = config, name, stop_when_dead
        self.max_tokens = config.max_tokens or max_tokens
        self.temperature = config.temperature if config.temperature is not None else temperature
        self.max_body = MAX_BODY_FACTOR * config.max_reply_chars + (64 << 10)
        self._pool = ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="cogym-endpoint")
        parts = urlsplit(config.url)
        self._tls = ssl.create_default_context() if parts.scheme == "https" else None
        self._host, self._port = parts.hostname or "", parts.port or (443 if self._tls else 80)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "tries": 0, "failures": 0}
        self.failed_in_a_row, self.last_error = 0, ""

    def __repr__(self) -> str:
        return f"EndpointAgent({self.name!r}, {self.config.base_url!r}, model={self.config.model!r})"

    def __getstate__(self):
        raise TypeError(f"an EndpointAgent ({self.name!r}) holds threads and connections; pickle its EndpointConfig "
                        "and build the agent where it plays")

    def act(self, requests: Sequence[Request]) -> list[Action]:
        actions = list(self._pool.map(self._answer, requests))
        if self.stop_when_dead and self.failed_in_a_row >= self.config.max_consecutive_failures:
            raise EndpointDead(f"endpoint {self.name!r} ({self.config.base_url}) failed {self.failed_in_a_row} "
                               f"requests in a row (max_consecutive_failures {self.config.max_consecutive_failures}); "
                               f"the last: {self.last_error}")
        return actions

    def shutdown(self) -> None:
        """Stop the worker threads (the agent cannot act after)."""
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------------------------ one request
    def _answer(self, request: Request) -> Action:
        with self._lock:
            self.stats["requests"] += 1
        try:
            action = Action(text=self._complete(request))
        except Exception as exc:  # noqa: BLE001 - EndpointFailure, or a bug here: either way this move failed, and says why
            why = str(exc) if isinstance(exc, EndpointFailure) else f"endpoint {self.config.base_url} failed ({type(exc).__name__}: {exc})"
            reason = self._mask(why)
            reason = reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 3] + "..."
            with self._lock:
                self.stats["failures"] += 1
                self.failed_in_a_row += 1
                self.last_error = reason
            return Action(text="", error=reason)
        with self._lock:
            self.failed_in_a_row = 0
        return action

    def _mask(self, text: str) -> str:
        """``text`` with the API key masked, and any run of KEY_RUN or more of its characters (a server
        may echo it back, whole or in part, in an error body)."""
        key = os.environ.get(self.config.api_key_env) if self.config.api_key_env is not None else None
        return mask_key(text, key) if key else text

    def _quote(self, text: str) -> str:
        """A server's ``text`` for a reason: the key masked first, then cut (:func:`_shown`)."""
        return _shown(self._mask(text))

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
        cfg, body = self.config, json.dumps(self.payload(request)).encode()
        tries, last = cfg.retries + 1, ""
        where = f"endpoint {cfg.base_url}"
        waits = backoff_waits(cfg.backoff_s, cfg.retries)
        for attempt in range(tries):
            if attempt:
                time.sleep(waits[attempt - 1])
            with self._lock:
                self.stats["tries"] += 1
            try:
                status, data = self._post(body)
            except http_bounded.Timeout:
                last = f"timed out after {cfg.timeout_s:g} s"
                continue
            except http_bounded.TooLarge as exc:
                raise EndpointFailure(f"{where} sent a reply over the limits: {exc} (max_reply_chars "
                                      f"{cfg.max_reply_chars})") from None
            except http_bounded.HTTPFailure as exc:  # refused, reset, not HTTP, ...
                last = f"could not be reached ({self._quote(str(exc))})"
                continue
            if status == 429 or status >= 500:
                last = f"answered HTTP {status} {self._quote(data.decode('utf-8', 'replace'))}"
                continue
            if status != 200:  # 3xx included: a redirect is never followed, nor its body played
                raise EndpointFailure(f"{where} answered HTTP {status}"
                                      f"{' (redirects are not followed)' if 300 <= status < 400 else ''} "
                                      f"{self._quote(data.decode('utf-8', 'replace'))}")
            return self._content(data)
        raise EndpointFailure(f"{where} {last} ({tries} {'try' if tries == 1 else 'tries'})")

    def _post(self, body: bytes) -> tuple[int, bytes]:
        """One try: the status and the body, under the whole-try deadline and the size caps."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key_env is not None:
            key = os.environ.get(self.config.api_key_env)
            if not key:
                raise EndpointFailure(f"endpoint {self.config.base_url}: the environment variable {self.config.api_key_env} "
                                      "(api_key_env) is not set")
            if any(c in key for c in "\r\n\0"):  # it would split the request's head
                raise EndpointFailure(f"endpoint {self.config.base_url}: the environment variable {self.config.api_key_env} "
                                      "holds a line break; it must hold the key alone")
            headers["Authorization"] = f"Bearer {key}"
        deadline = time.monotonic() + self.config.timeout_s
        return http_bounded.post(self._host, self._port, self._path, body, headers, deadline, self.max_body, self._tls)

    def _content(self, data: bytes) -> str:
        """The reply text, ``choices[0].message.content``, else an :class:`EndpointFailure` saying what is wrong."""
        where = f"endpoint {self.config.base_url}"
        try:
            reply = bounded_json(data.decode("utf-8"))
        except Exception as exc:  # noqa: BLE001 - whatever a hostile reply makes the decoder raise is a failed move
            raise EndpointFailure(f"{where} replied with malformed JSON ({type(exc).__name__}: {str(exc)[:120]}): "
                                  f"{self._quote(data.decode('utf-8', 'replace'))}") from None
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise EndpointFailure(f"{where} replied without choices[0].message.content: "
                                  f"{self._quote(data[:2000].decode('utf-8', 'replace'))}") from None
        if not isinstance(content, str):
            raise EndpointFailure(f"{where} replied with a content that is not text: {self._quote(repr(content)[:2000])}")
        if len(content) > self.config.max_reply_chars:
            raise EndpointFailure(f"{where} replied with {len(content)} characters, over max_reply_chars "
                                  f"{self.config.max_reply_chars}")
        return self._mask(content)


def bounded_json(text: str) -> Any:
    """``json.loads(text)``, refusing (ValueError) nesting deeper than MAX_JSON_DEPTH before the decoder
    recurses, and numbers longer than MAX_NUMBER_CHARS before they are converted."""
    depth = 0
    for match in _TOKEN.finditer(text):
        c = match.group()
        if c in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH}")
        elif c in "]}":
            depth -= 1
    return json.loads(text, parse_int=_number(int), parse_float=_number(float))


def _number(convert):
    def parse(digits: str):
        if len(digits) > MAX_NUMBER_CHARS:
            raise ValueError(f"a number of {len(digits)} characters, over {MAX_NUMBER_CHARS}")
        return convert(digits)
    return parse


def mask_key(text: str, key: str) -> str:
    """``text`` with ``key`` and every run of KEY_RUN or more of its consecutive characters replaced by ``***``."""
    text = text.replace(key, "***")
    if len(key) < KEY_RUN:
        return text
    spans = []
    for gram in {key[i:i + KEY_RUN] for i in range(len(key) - KEY_RUN + 1)}:
        at = text.find(gram)
        while at >= 0:
            spans.append((at, at + KEY_RUN))
            at = text.find(gram, at + 1)
    if not spans:
        return text
    out, pos = [], 0
    for start, end in sorted(spans):
        if start > pos:
            out.append(text[pos:start])
            out.append("***")
        elif not out:
            out.append("***")
        pos = max(pos, end)
    out.append(text[pos:])
    return "".join(out)


def _shown(text: str) -> str:
    """``text`` for a reason: printable, on one line, cut to SHOWN characters."""
    text = "".join(c if c.isprintable() else " " for c in text[:SHOWN * 4]).strip()
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")
