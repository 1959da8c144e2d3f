"""Keepalive pings of the push endpoint (docs/protocol.md, "Limits and slow consumers"): a real hub
on loopback and clients on websockets' Sans-I/O protocol over plain TCP streams, so each test
decides whether a client answers pings.

- a subscriber that answers is pinged once per ``ping_interval_s``, first one interval
  after it connected, and is kept;
- one that does not answer is closed with 1011 "keepalive ping timeout" once
  ``ping_timeout_s`` has passed after its ping, sent no second ping meanwhile, and is
  dropped (socket, subscription, keepalive entry), while a subscriber beside it stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from rspush.hub.push.keepalive import TIMEOUT_REASON
from rspush.hub.settings import Settings
from tests.support.push import custom_hub
from tests.support.sockets import close_stream
from tests.support.waiting import eventually

SUBSCRIBE = json.dumps({"type": "subscribe", "topics": [{"topic": "dataset1"}]})


def _push(**update: object) -> Callable[[Settings], Settings]:
    def adjust(settings: Settings) -> Settings:
        return settings.model_copy(update={"push": settings.push.model_copy(update=update)})

    return adjust


@dataclass
class PingLog:
    """What one client saw: when its handshake was answered and it was subscribed, when
    each ping came, the close frame."""

    opened: float | None = None
    subscribed: float | None = None
    pings: list[float] = field(default_factory=list)
    close: Close | None = None
    close_at: float | None = None


@asynccontextmanager
async def ping_client(url: str, *, answer: bool) -> AsyncIterator[PingLog]:
    """A subscriber to ``dataset1`` that answers pings (as every WebSocket library does) or,
    with ``answer=False``, never writes anything after its subscribe message."""
    uri = parse_uri(url)
    reader, writer = await asyncio.open_connection(uri.host, uri.port)
    protocol = ClientProtocol(uri)
    protocol.send_request(protocol.connect())
    writer.write(b"".join(protocol.data_to_send()))
    log = PingLog()

    async def read() -> None:
        while data := await reader.read(65536):
            protocol.receive_data(data)
            for event in protocol.events_received():
                if isinstance(event, Response):
                    log.opened = time.monotonic()
                    protocol.send_text(SUBSCRIBE.encode())
                    writer.write(b"".join(protocol.data_to_send()))
                elif isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                    if json.loads(event.data)["type"] == "subscribed":
                        log.subscribed = time.monotonic()
                elif isinstance(event, Frame) and event.opcode is Opcode.PING:
                    log.pings.append(time.monotonic())
                elif isinstance(event, Frame) and event.opcode is Opcode.CLOSE:
                    log.close, log.close_at = Close.parse(event.data), time.monotonic()
            out = b"".join(protocol.data_to_send())  # pongs and the close reply
            if answer and out:
                writer.write(out)

    task = asyncio.create_task(read())
    try:
        await eventually(lambda: log.subscribed is not None or task.done(), what="subscribed")
        assert log.subscribed is not None, task
        yield log
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await task
        await close_stream(writer)


@pytest.mark.timeout(60)
async def test_a_subscriber_that_answers_is_pinged_every_interval_and_kept(
    redis_url: str, prefix: str
) -> None:
    interval = 0.5
    adjust = _push(ping_interval_s=interval, ping_timeout_s=interval)
    async with custom_hub(redis_url, prefix, adjust) as (running, _):
        assert running.push_url is not None and running.push is not None
        async with contextlib.AsyncExitStack() as stack:
            logs = [
                await stack.enter_async_context(ping_client(running.push_url, answer=True))
                for _ in range(3)
            ]
            await eventually(
                lambda: all(len(log.pings) >= 4 for log in logs), what="four pings each"
            )
            for log in logs:
                assert log.close is None
                assert log.opened is not None
                # Not before one interval (less a tick of the wheel), then once per interval:
                # the mean gap of a client pinged more often would be a fraction of it.
                assert log.pings[0] - log.opened >= interval * 0.9
                gaps = [b - a for a, b in zip(log.pings, log.pings[1:], strict=False)]
                assert sum(gaps) / len(gaps) >= interval * 0.6, gaps
            assert running.push.connections == 3
            assert running.push.keepalive.connections == 3
        await eventually(lambda: running.push.keepalive.connections == 0, what="discarded")


@pytest.mark.timeout(60)
async def test_a_subscriber_that_does_not_answer_is_closed_after_the_ping_timeout(
    redis_url: str, prefix: str
) -> None:
    # A timeout longer than the interval: the unanswered ping is not followed by another.
    interval, timeout = 0.3, 1.5
    adjust = _push(ping_interval_s=interval, ping_timeout_s=timeout, close_timeout_s=1.0)
    async with custom_hub(redis_url, prefix, adjust) as (running, _):
        assert running.push_url is not None and running.push is not None
        gauge = running.hub.metrics.subscribers.labels("dataset1")
        async with (
            ping_client(running.push_url, answer=True) as alive,
            ping_client(running.push_url, answer=False) as deaf,
        ):
            await eventually(lambda: deaf.close is not None, what="the keepalive close")
            assert deaf.close is not None and deaf.close_at is not None
            assert (deaf.close.code, deaf.close.reason) == (1011, TIMEOUT_REASON)
            assert len(deaf.pings) == 1, deaf.pings
            assert deaf.close_at - deaf.pings[0] >= timeout * 0.9
            # Its socket is dropped (it never answers the close frame either), its
            # subscription with it; the subscriber that answers stays.
            await eventually(lambda: running.push.connections == 1, what="the socket dropped")
            await eventually(lambda: gauge._value.get() == 1, what="its subscription dropped")
            assert running.push.keepalive.connections == 1
            assert alive.close is None and len(alive.pings) >= 2
