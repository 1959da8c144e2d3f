"""Pure parts of the push channel's bounds: connection caps, the 503 answer, rate-limited
logging. No sockets."""

from __future__ import annotations

import logging

from rspush.hub.push.limits import (
    FD_RESERVE,
    ConnectionLimiter,
    connection_cap,
    service_unavailable,
)
from rspush.hub.push.logfilter import RateLimitFilter


def test_the_cap_stays_below_the_descriptor_limit() -> None:
    assert connection_cap(10_000, 1024) == 1024 - FD_RESERVE
    assert connection_cap(100, 1024) == 100
    assert connection_cap(10_000, None) == 10_000
    assert connection_cap(10_000, 400) == 300  # a small limit keeps a quarter in reserve
    assert connection_cap(10_000, 1) == 1


def test_limiter_counts_per_process_and_per_address() -> None:
    limiter = ConnectionLimiter(max_total=3, max_per_address=2)
    assert limiter.admit("10.0.0.1") is None
    assert limiter.admit("10.0.0.1") is None
    refusal = limiter.admit("10.0.0.1")
    assert refusal is not None and "per client address" in refusal
    assert limiter.admit("10.0.0.2") is None
    refusal = limiter.admit("10.0.0.3")
    assert refusal is not None and "maximum of 3" in refusal
    limiter.release("10.0.0.1")
    assert limiter.total == 2
    assert limiter.admit("10.0.0.3") is None
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        limiter.release(address)
    assert limiter.total == 0 and not limiter.by_address


def test_service_unavailable_is_a_complete_response() -> None:
    raw = service_unavailable("full; retry later")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    assert f"Content-Length: {len(body)}".encode() in head
    assert body == b"full; retry later\n"


def test_rate_limit_filter_logs_each_message_once_per_interval() -> None:
    now = [0.0]
    limiter = RateLimitFilter(10.0, clock=lambda: now[0])

    def record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
        return logging.LogRecord("asyncio", level, __file__, 1, msg, None, None)

    accept = "socket.accept() out of system resource\nsocket: <socket fd=%d>"
    assert limiter.filter(record(accept % 1))
    assert not any(limiter.filter(record(accept % n)) for n in range(2, 1000))
    assert limiter.filter(record("another error"))  # keyed by message
    assert limiter.filter(record("debug noise", logging.DEBUG))
    now[0] = 10.5
    passed = record(accept % 1001)
    assert limiter.filter(passed)
    assert "998 more" in str(passed.msg)
