"""Connections that never finish a request: idle, slowloris, over the cap. Real sockets
against a real hub on loopback; the hub must close them within its deadlines and keep
answering ``/healthz`` meanwhile."""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import httpx
import pytest

from rspush.hub.connections import MAX_HEAD_BYTES, RateLimitFilter, connection_cap
from tests.support.hubs import HubFactory
from tests.support.waiting import TIMEOUT_SCALE

HEADER_TIMEOUT_S = 1.0
CLOSE_BOUND_S = HEADER_TIMEOUT_S + 4.0 * TIMEOUT_SCALE
HEALTHZ_BOUND_S = 1.0 * TIMEOUT_SCALE


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


@asynccontextmanager
async def connections(
    url: str, count: int
) -> AsyncIterator[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    host, port = address(url)
    opened = [await asyncio.open_connection(host, port) for _ in range(count)]
    try:
        yield opened
    finally:
        for _, writer in opened:
            writer.close()
        for _, writer in opened:
            with suppress(OSError):
                await writer.wait_closed()


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent before closing (waits for the close)."""
    received = b""
    try:
        while chunk := await reader.read(4096):
            received += chunk
    except (ConnectionResetError, BrokenPipeError):
        # Closed while the client was still sending (slowloris): a reset, or the client's
        # own write failing first (the stream then reports that error on read).
        pass
    return received


async def trickle(writer: asyncio.StreamWriter, head: bytes) -> None:
    """Slowloris: the request head one byte every 50 ms, then one header byte at a time."""
    data = head + b"X-Slow: " + b"a" * 10_000
    try:
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)
    except (ConnectionError, OSError):
        return


async def healthz_time(client: httpx.AsyncClient) -> float:
    started = time.perf_counter()
    reply = await client.get("/healthz")
    assert reply.status_code == 200
    return time.perf_counter() - started


@pytest.mark.timeout(60)
async def test_idle_and_slowloris_connections_are_closed_and_healthz_keeps_answering(
    hub_factory: HubFactory,
) -> None:
    async with hub_factory(header_timeout_s=HEADER_TIMEOUT_S) as running:
        head = b"POST /topics/dataset1/changes HTTP/1.1\r\nHost: x\r\n"
        async with (
            connections(running.url, 100) as idle,
            connections(running.url, 100) as slow,
            httpx.AsyncClient(base_url=running.url, timeout=10) as client,
        ):
            started = time.monotonic()
            tricklers = [asyncio.create_task(trickle(w, head)) for _, w in slow]
            try:
                latency = max([await healthz_time(client) for _ in range(5)])
                assert latency < HEALTHZ_BOUND_S, latency
                async with asyncio.timeout(CLOSE_BOUND_S):
                    idle_replies = await asyncio.gather(*(closed_by_server(r) for r, _ in idle))
                    slow_replies = await asyncio.gather(*(closed_by_server(r) for r, _ in slow))
                elapsed = time.monotonic() - started
            finally:
                for task in tricklers:
                    task.cancel()
                await asyncio.gather(*tricklers, return_exceptions=True)
            assert elapsed >= HEADER_TIMEOUT_S * 0.9, "closed before the deadline"
            assert all(r.startswith(b"HTTP/1.1 408 ") for r in idle_replies), set(idle_replies)
            # A slowloris client still sending may see the close as a reset, the 408 lost.
            assert all(r == b"" or r.startswith(b"HTTP/1.1 408 ") for r in slow_replies)
            # The hub still serves after the flood.
            assert await healthz_time(client) < HEALTHZ_BOUND_S


@pytest.mark.timeout(60)
async def test_an_idle_keep_alive_connection_is_closed(hub_factory: HubFactory) -> None:
    async with (
        hub_factory(keepalive_timeout_s=1, header_timeout_s=30) as running,
        connections(running.url, 1) as [(reader, writer)],
    ):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        async with asyncio.timeout(1 + 2 * TIMEOUT_SCALE):  # uvicorn's default is 5 s
            received = await closed_by_server(reader)
        assert received.startswith(b"HTTP/1.1 200 ")
        assert time.monotonic() - started >= 0.9


@pytest.mark.timeout(60)
async def test_connections_past_the_cap_are_refused_at_once(hub_factory: HubFactory) -> None:
    async with hub_factory(max_connections=40, header_timeout_s=2.0) as running:
        async with connections(running.url, 40) as held, connections(running.url, 20) as extra:
            async with asyncio.timeout(2 * TIMEOUT_SCALE):  # well before the head deadline
                refused = await asyncio.gather(*(closed_by_server(r) for r, _ in extra))
            assert all(r.startswith(b"HTTP/1.1 503 ") for r in refused), set(refused)
            assert all(b"retry-after: 1" in r for r in refused)
            async with asyncio.timeout(2 + 4 * TIMEOUT_SCALE):
                await asyncio.gather(*(closed_by_server(r) for r, _ in held))
        # Once the held connections are gone, new ones are served again.
        async with httpx.AsyncClient(base_url=running.url, timeout=10) as client:
            assert await healthz_time(client) < HEALTHZ_BOUND_S


def test_the_cap_keeps_room_for_redis_and_the_push_port() -> None:
    assert connection_cap(1000, 1024, redis_connections=200) == 380
    assert connection_cap(1000, 20_000, redis_connections=200) == 1000
    assert connection_cap(1000, None, redis_connections=200) == 1000
    assert connection_cap(1000, 256, redis_connections=200) == 32  # never below the floor


def test_descriptor_exhaustion_logs_one_line_per_interval() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.limits.flood")
    logger.propagate = False
    handler = Keep()
    logger.addHandler(handler)
    now = [0.0]  # the filter's clock: the flood takes no time, however loaded the machine
    flood = RateLimitFilter(interval_s=0.2, clock=lambda: now[0])
    logger.addFilter(flood)
    try:
        exhausted = OSError(errno.EMFILE, "Too many open files")
        for _ in range(10_000):
            logger.error(
                "socket.accept() out of system resource\nsocket: <fd=%d>",
                7,
                exc_info=(OSError, exhausted, None),
            )
        logger.error("an unrelated error")
        logger.error("an unrelated error")
        assert [r.getMessage().partition("\n")[0] for r in records] == [
            "socket.accept() out of system resource",
            "an unrelated error",
            "an unrelated error",
        ]
        now[0] = 0.1  # still within the interval: dropped
        logger.error("socket.accept() out of system resource", exc_info=exhausted)
        assert len(records) == 3
        now[0] = 0.25  # the interval is over: one line, with the count of those dropped
        logger.error("socket.accept() out of system resource", exc_info=exhausted)
        assert len(records) == 4
        assert "(10000 like it in the last 0.2 s)" in records[3].getMessage()
    finally:
        logger.removeFilter(flood)
        logger.removeHandler(handler)


def test_failed_push_handshakes_are_rate_limited_too() -> None:
    # One per hostile or broken connection: the push port shares the HTTP edge's filter.
    flood = RateLimitFilter(interval_s=60)

    def record(level: int) -> logging.LogRecord:
        return logging.LogRecord(
            "websockets.server", level, __file__, 1, "opening handshake failed", None, None
        )

    assert flood.filter(record(logging.ERROR))
    assert not any(flood.filter(record(logging.ERROR)) for _ in range(1000))
    assert flood.filter(record(logging.INFO))  # below WARNING: never limited


async def head_reply(url: str, pieces: list[bytes]) -> bytes:
    """Send ``pieces`` (a pause after each), then read until the server closes or has
    answered: what it sent."""
    reader, writer = await asyncio.open_connection(*address(url))
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.005)
        async with asyncio.timeout(5 * TIMEOUT_SCALE):
            return await reader.read(65536)
    finally:
        writer.close()
        with suppress(OSError):
            await writer.wait_closed()


@pytest.mark.timeout(60)
async def test_a_head_over_the_limit_is_answered_431_whether_whole_or_trickling(
    hub_factory: HubFactory,
) -> None:
    """The request line and headers are bounded (MAX_HEAD_BYTES): a head over it sent in
    one write, and one that never ends sent 1 KiB at a time, are both answered 431 and
    closed — the second once the bound is crossed, so the parser never buffers more."""
    start = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
    async with hub_factory(header_timeout_s=30) as running:
        whole = await head_reply(
            running.url, [start + b"a" * (MAX_HEAD_BYTES + 2048) + b"\r\n\r\n"]
        )
        assert whole.startswith(b"HTTP/1.1 431 "), whole[:80]
        assert b"over 16,384 bytes" in whole
        # The first piece and then just enough to cross the bound; nothing more is sent.
        trickle_pieces = [start] + [b"a" * 1024] * (MAX_HEAD_BYTES // 1024 + 2)
        trickled = await head_reply(running.url, trickle_pieces)
        assert trickled.startswith(b"HTTP/1.1 431 "), trickled[:80]


@pytest.mark.timeout(60)
async def test_a_head_under_the_limit_is_served(hub_factory: HubFactory) -> None:
    async with hub_factory(header_timeout_s=30) as running:
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES - 1024)
        reply = await head_reply(running.url, [head[:5000], head[5000:] + b"\r\n\r\n"])
        assert reply.startswith(b"HTTP/1.1 200 "), reply[:80]


@pytest.mark.timeout(60)
async def test_the_next_request_of_a_kept_alive_connection_has_its_own_head_deadline(
    hub_factory: HubFactory,
) -> None:
    """After a served request, a second one whose head never completes is closed at the head
    deadline (counted from its first byte), answered 408."""
    async with (
        hub_factory(header_timeout_s=HEADER_TIMEOUT_S, keepalive_timeout_s=30) as running,
        connections(running.url, 1) as [(reader, writer)],
    ):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5 * TIMEOUT_SCALE)
        assert first.startswith(b"HTTP/1.1 200 ")
        length = int(
            next(
                line.split(b":")[1]
                for line in first.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        await reader.readexactly(length)
        writer.write(b"GET /healthz HTTP/1.1\r\nHo")
        started = time.monotonic()
        async with asyncio.timeout(CLOSE_BOUND_S):
            received = await closed_by_server(reader)
        assert received.startswith(b"HTTP/1.1 408 "), received
        assert time.monotonic() - started >= HEADER_TIMEOUT_S * 0.9
