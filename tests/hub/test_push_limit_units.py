"""Pure parts of the push channel's bounds: the connection cap, the 503 answer. No sockets.
(Rate-limited logging, shared with the HTTP edge, is tested in test_limits_connections.)"""

from __future__ import annotations

from rspush.hub.connections import connection_cap
from rspush.hub.push.limits import ConnectionLimiter, service_unavailable


def test_the_push_and_http_caps_together_stay_below_the_descriptor_limit() -> None:
    # Each listener gets half of what Redis's pool and the reserve leave.
    assert connection_cap(10_000, 1024) == (1024 - 200 - 64) // 2
    assert 2 * connection_cap(10_000, 1024) + 200 < 1024
    assert connection_cap(100, 1024) == 100
    assert connection_cap(10_000, None) == 10_000


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
    assert f"content-length: {len(body)}".encode() in head.lower()
    assert body == b"full; retry later\n"
