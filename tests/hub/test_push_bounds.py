"""Bounds of the push endpoint against clients that misbehave (docs/protocol.md, "Limits"):
a real hub and real Redis on loopback, raw and WebSocket clients.

- a resume position out of the 64-bit range is a protocol error (4000), not "try again";
- a client that stops reading during its replay is closed as a slow consumer (4002) with its
  resume position, counted as a subscriber meanwhile, and still gets the close frame if it
  reads again before the close deadline;
- sockets are capped per client address (HTTP 503 before any handshake) and idle sockets are
  dropped after the handshake timeout;
- the agent refuses a frame larger than MAX_FRAME_BYTES.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from rspush.hub.server import RunningHub
from rspush.hub.settings import Settings
from rspush.protocol import CloseCode
from tests.support.fragments import Times
from tests.support.push import custom_hub, post, subscribed
from tests.support.sockets import close_stream
from tests.support.waiting import eventually

PADDING = "p" * 200


def _push(**update: object) -> Callable[[Settings], Settings]:
    def adjust(settings: Settings) -> Settings:
        return settings.model_copy(update={"push": settings.push.model_copy(update=update)})

    return adjust


@asynccontextmanager
async def bounded_hub(
    redis_url: str, prefix: str, **push: object
) -> AsyncIterator[tuple[RunningHub, httpx.AsyncClient]]:
    async with custom_hub(redis_url, prefix, _push(**push)) as (running, http):
        assert running.push_url is not None and running.push is not None
        yield running, http


async def _history(http: httpx.AsyncClient, count: int) -> None:
    """``count`` changes in the topic, 1,000 per request."""
    times = Times()
    for start in range(0, count, 1000):
        await post(
            http,
            [
                (f"http://example.com/{PADDING}/{n}", "created", times.next())
                for n in range(start, min(start + 1000, count))
            ],
        )


async def test_an_out_of_range_resume_position_is_a_protocol_error(
    redis_url: str, prefix: str
) -> None:
    async with bounded_hub(redis_url, prefix) as (running, _):
        assert running.push_url is not None
        topics = [{"topic": "dataset1", "position": "99999999999999999999999-0"}]
        async with subscribed(running.push_url, topics, wait=False) as client:
            code, reason = await client.ended()
        assert code == CloseCode.PROTOCOL_ERROR == 4000
        assert reason is not None and "out of range" in reason
        (error,) = client.control("error")
        assert error["error"] == "protocol-error" and "out of range" in error["message"]


@pytest.mark.timeout(60)
async def test_a_client_stalled_in_replay_is_closed_as_a_slow_consumer(
    redis_url: str, prefix: str
) -> None:
    async with bounded_hub(
        redis_url, prefix, send_buffer_bytes=16 * 1024, stall_timeout_s=1.0, close_timeout_s=20.0
    ) as (running, http):
        assert running.push_url is not None and running.push is not None
        await _history(http, 20_000)
        slow = running.hub.metrics.slow_closes.labels("dataset1")
        gauge = running.hub.metrics.subscribers.labels("dataset1")
        topics = [{"topic": "dataset1", "position": "0-0"}]
        async with subscribed(running.push_url, topics, paused=True, wait=False) as client:
            # Counted while it replays, not only once it is live.
            await eventually(lambda: gauge._value.get() == 1, what="the replaying subscriber")
            await eventually(lambda: slow._value.get() == 1, timeout=20, what="the stall close")
            assert running.push.connections == 1, "held until it reads or the close deadline"
            assert client.ws.transport is not None
            client.ws.transport.resume_reading()
            code, reason = await client.ended(timeout=20)
        assert code == CloseCode.SLOW_CONSUMER == 4002
        assert reason is not None
        # Everything queued before the close frame arrived: its resume position is the last
        # change it received, so resuming there loses and repeats nothing.
        assert json.loads(reason) == {"dataset1": client.positions()[-1]}
        assert 0 < len(client.positions()) < 20_000
        await eventually(lambda: gauge._value.get() == 0, what="the gauge to drop it")
        await eventually(lambda: running.push.connections == 0, what="the socket released")


@pytest.mark.timeout(60)
async def test_a_live_slow_consumer_gets_its_close_frame_after_a_pause(
    redis_url: str, prefix: str
) -> None:
    async with bounded_hub(
        redis_url, prefix, send_buffer_bytes=16 * 1024, close_timeout_s=20.0
    ) as (running, http):
        assert running.push_url is not None
        slow = running.hub.metrics.slow_closes.labels("dataset1")
        assert running.push is not None
        feed = running.push.feeds["dataset1"]
        async with subscribed(running.push_url, paused=True, wait=False) as client:
            await eventually(
                lambda: any(sub.live for sub in feed.subscriptions), what="a live subscription"
            )
            times = Times()
            for n in range(200):
                await post(
                    http,
                    [
                        (f"http://example.com/{PADDING}/{n}/{i}", "created", times.next())
                        for i in range(50)
                    ],
                )
                if slow._value.get() == 1:
                    break
            await eventually(lambda: slow._value.get() == 1, what="the slow consumer close")
            # The client is slow, not dead: it reads again a while after the hub gave up on
            # it (a fixed pause on purpose: the behaviour under test is its slowness).
            await asyncio.sleep(2.0)
            assert client.ws.transport is not None
            client.ws.transport.resume_reading()
            code, reason = await client.ended(timeout=20)
        assert code == CloseCode.SLOW_CONSUMER
        assert reason is not None
        assert json.loads(reason) == {"dataset1": client.positions()[-1]}


async def test_sockets_past_the_per_address_cap_get_503_before_the_handshake(
    redis_url: str, prefix: str
) -> None:
    async with bounded_hub(redis_url, prefix, max_connections_per_address=2) as (running, _):
        assert running.push_url is not None and running.push is not None
        port = int(running.push_url.rsplit(":", 1)[1].strip("/"))
        loop = asyncio.get_running_loop()
        idle = []
        for _ in range(2):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", port))
            idle.append(sock)
        try:
            await eventually(lambda: running.push.connections == 2, what="two idle sockets")
            # The third is answered at once, before it even sends its request.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            async with asyncio.timeout(5):
                answer = await reader.read()
            await close_stream(writer)
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert b"per client address" in answer
            assert running.push.connections == 2
        finally:
            for sock in idle:
                sock.close()
        await eventually(lambda: running.push.connections == 0, what="sockets released")
        async with subscribed(running.push_url) as client:
            assert client.control("subscribed")


async def test_idle_sockets_are_dropped_after_the_handshake_timeout(
    redis_url: str, prefix: str
) -> None:
    async with bounded_hub(redis_url, prefix, open_timeout_s=0.5) as (running, _):
        assert running.push_url is not None and running.push is not None
        port = int(running.push_url.rsplit(":", 1)[1].strip("/"))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # a slowloris: never ends its headers
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # the hub closed it
        await close_stream(writer)
        await eventually(lambda: running.push.connections == 0, what="the socket released")
