"""One HTTP/1.1 POST under a hard wall-clock deadline and size caps, for replies cogym does not trust.

:func:`post` sends one request on a fresh connection (``Connection: close``) and reads the reply
itself, over a plain or TLS socket, because the standard library's client cannot be bounded: its
time-out is per read, so a server that trickles its status line, its headers, endless interim
``100 Continue`` replies or its chunk-size lines byte by byte keeps it waiting for ever. Here every
blocking step (name lookup, connect, TLS handshake, each send, each receive) waits at most what is
left of the one deadline, and the deadline is checked again before each, so a try ends at the
deadline whatever the server sends, give or take one scheduling tick. CPython's TLS reads and
handshakes bound their whole call by the socket time-out, so a trickled TLS record is cut too.

What the reply may hold is capped before it is read: head lines and bytes (interim replies
included), the number of interim replies, the body (``Content-Length`` refused up front when over
the cap; a chunked or close-delimited body refused as soon as it passes it). Redirects are never
followed: the caller gets the status and decides. Every failure is one of three exceptions:
:class:`Timeout` (the deadline), :class:`TooLarge` (a cap) and :class:`ProtocolError` (a reply that
is not HTTP/1.x, a reset, a refused connection); each message is short and quotes at most a few
bytes of what the server sent.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from typing import Mapping, Optional

MAX_HEAD_BYTES = 64 << 10  # status lines and headers of one reply, interim replies included
MAX_HEAD_LINES = 200
MAX_LINE = 8 << 10  # one status, header or chunk-size line
MAX_INTERIM = 16  # 1xx replies before the final one
RECV = 64 << 10


class HTTPFailure(Exception):
    """A try that produced no reply; the message says why, in a few words."""


class Timeout(HTTPFailure):
    """The try ran past its deadline."""


class TooLarge(HTTPFailure):
    """The reply passed a cap (body, head, a line, interim replies)."""


class ProtocolError(HTTPFailure):
    """No connection, or a reply that is not well-formed HTTP/1.x."""


def post(host: str, port: int, path: str, body: bytes, headers: Mapping[str, str], deadline: float, max_body: int,
         tls: Optional[ssl.SSLContext] = None) -> tuple[int, bytes]:
    """POST ``body`` to ``host:port`` ``path``; the final status and the whole body, by ``deadline``
    (a :func:`time.monotonic` time) and within ``max_body`` bytes. ``tls``: a context for https."""
    try:
        return _post(host, port, path, body, headers, deadline, max_body, tls)
    except HTTPFailure:
        raise
    except (OSError, ValueError) as exc:  # out of sockets, a header that is not latin-1, ...
        raise ProtocolError(f"{type(exc).__name__}: {str(exc)[:80]}") from None


def _post(host: str, port: int, path: str, body: bytes, headers: Mapping[str, str], deadline: float, max_body: int,
          tls: Optional[ssl.SSLContext]) -> tuple[int, bytes]:
    sock = _connect(host, port, deadline)
    try:
        if tls is not None:
            sock.settimeout(_left(deadline))
            try:
                sock = tls.wrap_socket(sock, server_hostname=host)  # the handshake: one call under the time-out
            except (socket.timeout, TimeoutError):
                raise Timeout("timed out") from None
            except (ssl.SSLError, OSError) as exc:
                raise ProtocolError(f"TLS handshake failed ({type(exc).__name__}: {str(exc)[:80]})") from None
        name = f"[{host}]" if ":" in host else host  # an IPv6 literal
        head = [f"POST {path} HTTP/1.1", f"Host: {name if port == (443 if tls is not None else 80) else f'{name}:{port}'}",
                f"Content-Length: {len(body)}", "Connection: close", "Accept-Encoding: identity",
                *(f"{k}: {v}" for k, v in headers.items())]
        _send(sock, ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body, deadline)
        return _Reader(sock, deadline).response(max_body)
    finally:
        try:
            sock.close()
        except OSError:
            pass


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout("timed out")
    return left


def _resolve(host: str, port: int, deadline: float) -> list:
    """getaddrinfo has no time-out of its own: a name is looked up on a daemon thread the try waits
    for only until the deadline (an address literal needs no look-up)."""
    try:
        ipaddress.ip_address(host)
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except ValueError:
        pass
    out: dict = {}

    def look_up() -> None:
        try:
            out["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except Exception as exc:  # noqa: BLE001 - OSError, or UnicodeError for a name IDNA cannot encode: the try failed
            out["error"] = exc

    thread = threading.Thread(target=look_up, daemon=True, name="cogym-resolve")
    thread.start()
    thread.join(_left(deadline))
    if thread.is_alive():
        raise Timeout("timed out")
    if "infos" not in out:
        error = out.get("error")
        raise ProtocolError(f"cannot resolve {host[:80]!r} ({str(error)[:80] if error is not None else 'no answer'})")
    return out["infos"]


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    last: Exception | None = None
    for family, kind, proto, _, address in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except (socket.timeout, TimeoutError):
            sock.close()
            raise Timeout("timed out") from None
        except OSError as exc:
            sock.close()
            last = exc
        except BaseException:
            sock.close()
            raise
    raise ProtocolError(f"{type(last).__name__}: {last}" if last else f"no address for {host[:80]!r}")


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    """Send ``data`` by the deadline: a server that reads slowly is cut like one that writes slowly."""
    view = memoryview(data)
    try:
        while view:
            sock.settimeout(_left(deadline))
            view = view[sock.send(view):]
    except (socket.timeout, TimeoutError):
        raise Timeout("timed out") from None
    except OSError as exc:
        raise ProtocolError(f"{type(exc).__name__}: {exc}") from None


class _Reader:
    """The reply read from ``sock``, every receive waiting at most what is left before ``deadline``."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline
        self.buf = bytearray()
        self.eof = False
        self.head_bytes = self.head_lines = 0

    def _fill(self) -> None:
        if self.eof:
            raise ProtocolError("the server closed the connection before the reply was complete")
        try:
            self.sock.settimeout(_left(self.deadline))
            data = self.sock.recv(RECV)
        except (socket.timeout, TimeoutError):
            raise Timeout("timed out") from None
        except OSError as exc:  # reset, a TLS alert, ...
            raise ProtocolError(f"{type(exc).__name__}: {str(exc)[:80]}") from None
        if not data:
            self.eof = True
        self.buf += data

    def _line(self, what: str) -> bytes:
        """One CRLF- (or LF-) terminated line, without it; longer than MAX_LINE is TooLarge."""
        start = 0
        while True:
            end = self.buf.find(b"\n", start)
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[:end + 1]
                return line[:-1] if line.endswith(b"\r") else line
            if len(self.buf) > MAX_LINE:
                raise TooLarge(f"a {what} line over {MAX_LINE} bytes")
            start = len(self.buf)
            if self.eof:
                raise ProtocolError(f"the server closed the connection in the reply's {what}")
            self._fill()

    def _head_line(self, what: str) -> bytes:
        line = self._line(what)
        self.head_lines += 1
        self.head_bytes += len(line) + 2
        if self.head_lines > MAX_HEAD_LINES or self.head_bytes > MAX_HEAD_BYTES:
            raise TooLarge(f"a reply head over {MAX_HEAD_LINES} lines or {MAX_HEAD_BYTES} bytes")
        return line

    def _head(self) -> tuple[int, dict[str, list[str]]]:
        status_line = self._head_line("status")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not (parts[1].isdigit() and len(parts[1]) == 3):
            raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:40]!r}")
        headers: dict[str, list[str]] = {}
        while True:
            line = self._head_line("header")
            if not line:
                return int(parts[1]), headers
            name, sep, value = line.partition(b":")
            if not sep or not name.strip():
                raise ProtocolError(f"a malformed header line: {line[:40]!r}")
            headers.setdefault(name.strip().lower().decode("latin-1"), []).append(value.strip().decode("latin-1"))

    def response(self, max_body: int) -> tuple[int, bytes]:
        for _ in range(MAX_INTERIM + 1):
            status, headers = self._head()
            if not 100 <= status < 200:
                break
            if status == 101:
                raise ProtocolError("the server switched protocols (HTTP 101)")
        else:
            raise TooLarge(f"over {MAX_INTERIM} interim (1xx) replies")
        if status in (204, 304):
            return status, b""
        if "chunked" in ",".join(headers.get("transfer-encoding", [])).lower():
            return status, self._chunked(max_body)
        lengths = {v.strip() for v in ",".join(headers.get("content-length", [])).split(",") if v.strip()}
        if lengths:
            if len(lengths) > 1 or not next(iter(lengths)).isdigit() or len(next(iter(lengths))) > 18:
                raise ProtocolError(f"a malformed Content-Length: {sorted(lengths)[:3]}"[:120])
            n = int(next(iter(lengths)))
            if n > max_body:
                raise TooLarge(f"a reply body of {n} bytes, over {max_body}")
            return status, self._exactly(n)
        while not self.eof:  # delimited by the connection's end
            if len(self.buf) > max_body:
                raise TooLarge(f"a reply body over {max_body} bytes")
            self._fill()
        if len(self.buf) > max_body:
            raise TooLarge(f"a reply body over {max_body} bytes")
        return status, bytes(self.buf)

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def _chunked(self, max_body: int) -> bytes:
        body = bytearray()
        while True:
            size_line = self._line("chunk-size").split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16) if size_line and len(size_line) <= 16 else -1
            except ValueError:
                size = -1
            if size < 0:
                raise ProtocolError(f"a malformed chunk size: {size_line[:20]!r}")
            if size == 0:
                while self._head_line("trailer"):  # trailers, to the blank line, under the head caps
                    pass
                return bytes(body)
            if len(body) + size > max_body:
                raise TooLarge(f"a reply body over {max_body} bytes")
            body += self._exactly(size)
            if self._line("chunk"):
                raise ProtocolError("a chunk longer than its size")
