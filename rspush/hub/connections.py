"""HTTP connections within limits: deadlines for reading requests, a connection cap below the
process's open-file limit, and logging that a flood of failures cannot turn into a flood of
lines.

uvicorn times out idle keep-alive connections (``timeout_keep_alive``) but nothing else: a
connection that never sends a byte, or sends its headers one byte a minute (slowloris), or
declares a body it never sends, is held for ever, and a few hundred of them exhaust the file
descriptors every other connection (Redis, the push port, the health checks) needs. The
protocol here adds, per request:

- a **head deadline**: the request line and headers must be complete within
  ``header_timeout_s`` of the connection opening or of the request's first byte; otherwise the
  hub answers ``408`` and closes;
- a **request deadline**: the body must be complete within ``body_timeout_s`` (plus a grace
  period, so that the app's own ``408`` from :mod:`.bodies` comes first when it is reading);
  this also ends bodies nobody reads, such as the rest of an unauthorised post;
- a **head limit**: a request line and headers over :data:`MAX_HEAD_BYTES` are answered
  ``431`` and the connection closed;
- a **connection cap**: past ``max_connections`` open connections a new one is answered ``503``
  and closed at once, so the hub never holds more descriptors than it can afford.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import time
from collections.abc import Callable
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("rspush.hub.connections")

MAX_HEAD_BYTES = 16 * 1024
"""The request line and headers at most (as h11's and Node's default): ingest needs < 2 KiB."""
BODY_DEADLINE_GRACE_S = 2.0
FD_RESERVE = 64
"""Descriptors kept for everything but sockets: log files, the embedded server's pipes, the
event loop's own, libraries'."""
MIN_CONNECTIONS = 32


def plain_response(status: str, text: str, *extra: str) -> bytes:
    """A complete HTTP/1.1 text response that closes the connection, written straight to a
    transport (before any protocol took the connection over)."""
    body = text.encode() + b"\n"
    head = [
        f"HTTP/1.1 {status}",
        "content-type: text/plain; charset=utf-8",
        *extra,
        "connection: close",
        f"content-length: {len(body)}",
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


_REQUEST_TIMEOUT = plain_response("408 Request Timeout", "the request did not arrive in time")
_BUSY = plain_response("503 Service Unavailable", "too many open connections", "retry-after: 1")
_HEAD_TOO_LARGE = plain_response(
    "431 Request Header Fields Too Large",
    f"the request line and headers are over {MAX_HEAD_BYTES:,} bytes",
)


REDIS_MAX_CONNECTIONS = 200
"""The hub's Redis connection pool, counted in the descriptor budget."""


def connection_cap(
    configured: int, fd_limit: int | None, *, redis_connections: int = REDIS_MAX_CONNECTIONS
) -> int:
    """How many connections one listener (HTTP, or push) may hold: ``configured``, lowered to
    half the descriptors left once Redis's pool and :data:`FD_RESERVE` are counted; the two
    listeners share the budget, so together they stay below the limit. ``fd_limit`` None
    means unlimited."""
    if fd_limit is None:
        return configured
    share = (fd_limit - redis_connections - FD_RESERVE) // 2
    return max(MIN_CONNECTIONS, min(configured, share))


def open_file_limit() -> int | None:
    """The process's soft ``RLIMIT_NOFILE`` (None when unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def guarded_protocol(
    *, header_timeout_s: float, body_timeout_s: float, max_connections: int
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with these deadlines and this cap."""
    head_s, request_s, cap = (
        header_timeout_s,
        body_timeout_s + BODY_DEADLINE_GRACE_S,
        max_connections,
    )

    class Configured(GuardedProtocol):
        header_timeout_s = head_s
        body_timeout_s = request_s
        max_connections = cap

    return Configured


class HeadTooLarge(Exception):
    """Raised from a parser callback: the request's head is over :data:`MAX_HEAD_BYTES`.
    httptools turns it into a parser error, so uvicorn stops parsing and answers through
    ``send_400_response``, which answers ``431`` instead."""


# Where a connection is in its current request.
_IDLE, _HEAD, _BODY = "idle", "head", "body"


class GuardedProtocol(HttpToolsProtocol):
    """One HTTP/1.1 connection (httptools, llhttp's C parser: about a third of h11's cost
    per request) with a deadline on each request's head and body and a bound on its head.

    httptools keeps no limit of its own on a head, so one is kept here: the URL and header
    lines the parser completes are counted exactly; bytes of a head still incomplete after a
    read are counted as they arrive (a read holds at most one socket buffer, so what the
    parser buffers stays bounded too). Over :data:`MAX_HEAD_BYTES` the hub answers ``431``
    and closes."""

    header_timeout_s: ClassVar[float]
    body_timeout_s: ClassVar[float]
    max_connections: ClassVar[int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = _IDLE
        self._head_parsed = 0
        self._head_pending = 0
        self._head_too_large = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning(
                "HTTP connection refused: %d open, the limit is %d",
                len(self.connections) - 1,
                self.max_connections,
            )
            transport.write(_BUSY)
            transport.close()
            return
        self._arm(self.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        continued = self._phase is _HEAD
        super().data_received(data)
        if continued and self._phase is _HEAD and not self.transport.is_closing():
            # Every byte of this read belongs to the unfinished head.
            self._head_pending += len(data)
            if self._head_pending > MAX_HEAD_BYTES:
                self._refuse_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # Parser callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = _HEAD
        self._head_parsed = self._head_pending = 0
        if self._deadline is None:
            # The next request of a kept-alive connection: uvicorn has cancelled its
            # keep-alive timer; the head's deadline runs from its first byte.
            self._arm(self.header_timeout_s)

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._phase = _BODY
        self._arm(self.body_timeout_s)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase = _IDLE
        self._disarm()

    def send_400_response(self, msg: str) -> None:
        if self._head_too_large:
            self._refuse_head()
        else:
            super().send_400_response(msg)

    # ------------------------------------------------------------------------------------

    def _count_head(self, size: int) -> None:
        self._head_parsed += size
        if self._head_parsed > MAX_HEAD_BYTES:
            self._head_too_large = True
            raise HeadTooLarge("request head too large")

    def _refuse_head(self) -> None:
        self._disarm()
        self.transport.write(_HEAD_TOO_LARGE)
        self.transport.close()

    def _arm(self, delay: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            # No response of this request is under way: the client may be told why.
            self.transport.write(_REQUEST_TIMEOUT)
        self.transport.close()


# --- logging -------------------------------------------------------------------------------

_EXHAUSTION = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
FLOOD_LOGGERS = ("asyncio", "uvicorn.error", "websockets.server", "rspush.hub")
LOG_INTERVAL_S = 10.0


class RateLimitFilter(logging.Filter):
    """Lets one record of a kind through per ``interval_s`` and counts the rest; the next one
    let through says how many were dropped. Kinds are the records that come in floods when
    resources run out: errors about exhausted descriptors or memory (accept failures among
    them) and refused connections. Every other record passes untouched."""

    def __init__(
        self, interval_s: float = LOG_INTERVAL_S, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not _flood_prone(record):
            return True
        # The first line: asyncio's messages go on with the socket's details.
        kind = (record.name, str(record.msg).partition("\n")[0])
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._dropped[kind] = self._dropped.get(kind, 0) + 1
            return False
        self._last[kind] = now
        dropped = self._dropped.pop(kind, 0)
        if dropped:
            record.msg = f"{record.msg} ({dropped} like it in the last {self.interval_s:g} s)"
        return True


def _flood_prone(record: logging.LogRecord) -> bool:
    if record.name == log.name:
        return True
    if record.name.startswith("websockets.server") and record.levelno >= logging.WARNING:
        return True  # failed handshakes: one per hostile or broken connection
    message = str(record.msg)
    if "Too many open files" in message or "out of system resource" in message:
        return True
    # Clients wrap the OSError (a Redis connection error, an ASGI application error): look
    # down the chain of causes.
    exc = record.exc_info[1] if record.exc_info else None
    for _ in range(8):
        if exc is None:
            return False
        if isinstance(exc, OSError) and exc.errno in _EXHAUSTION:
            return True
        if "Too many open files" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


_FILTER = RateLimitFilter()


def limit_flood_logging() -> None:
    """Install the rate limit on the loggers that report connection failures (idempotent)."""
    for name in (*FLOOD_LOGGERS, log.name):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
