"""Raw WebSocket subscribers of a real hub's push channel, and what the push tests post and
read: Change List fragments posted to the hub, the topic's stream and metadata in Redis, the
frame invariants (contiguous, increasing positions), hubs with settings of a test's own."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
from redis.asyncio import Redis
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Settings
from rspush.protocol import (
    REQUIRED_FIELDS,
    decode_xml_frame,
)
from rspush.resourcesync import DocumentType, parse_document, validate
from rspush.resourcesync.w3cdt import parse_w3c_datetime
from tests.support.fragments import TOKEN_A, Times, auth, change_fragment
from tests.support.hubs import make_settings
from tests.support.waiting import eventually


def _changes_of_xml(frame: str) -> dict[str, Any]:
    """An XML frame in the shape of a JSON one, to compare both formats alike."""
    document = parse_document(frame.encode())
    assert document.type is DocumentType.CHANGE_NOTIFICATION
    assert [v for v in validate(document) if v.severity.value == "error"] == []
    decoded = decode_xml_frame(frame)
    assert decoded.start is not None and decoded.until is not None
    return {
        "type": "changes",
        "topic": decoded.topic,
        "epoch": decoded.epoch,
        "from": decoded.start,
        "until": decoded.until,
        "changes": [{name: change[name] for name in REQUIRED_FIELDS} for change in decoded.changes],
        "xml": True,
    }


class Client:
    """A raw WebSocket subscriber recording every message and how its connection ended."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.messages: list[dict[str, Any]] = []
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                assert isinstance(raw, str), "the hub sends text frames"
                if raw.startswith("<"):
                    self.messages.append(_changes_of_xml(raw))
                else:
                    self.messages.append(json.loads(raw))
        except ConnectionClosed:
            pass

    @property
    def frames(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == "changes"]

    def frames_of(self, topic: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["topic"] == topic]

    def changes(self, topic: str = "dataset1") -> list[dict[str, Any]]:
        return [
            {**c, "topic": f["topic"], "epoch": f["epoch"]}
            for f in self.frames_of(topic)
            for c in f["changes"]
        ]

    def positions(self, topic: str = "dataset1") -> list[str]:
        return [c["position"] for c in self.changes(topic)]

    def control(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]

    @property
    def done(self) -> bool:
        return self.task.done()

    async def ended(self, timeout: float = 10) -> tuple[int | None, str | None]:
        """Wait for the hub to close the connection: (close code, reason)."""
        async with asyncio.timeout(timeout):
            await asyncio.shield(self.task)
        return self.ws.close_code, self.ws.close_reason


@asynccontextmanager
async def subscribed(
    url: str,
    topics: Sequence[dict[str, Any]] | None = None,
    *,
    fmt: str = "json",
    token: str | None = None,
    raw: str | None = None,
    wait: bool = True,
    paused: bool = False,
) -> AsyncIterator[Client]:
    """Connect, send a subscribe message (or ``raw``), read in the background; with ``wait``,
    return once the hub confirmed every topic. ``paused``: a small receive buffer and
    reading paused from the start (the test resumes it with ``client.ws.transport``)."""
    topics = list(topics or [{"topic": "dataset1"}])
    request: dict[str, Any] = {"type": "subscribe", "version": 1, "format": fmt, "topics": topics}
    if token is not None:
        request["token"] = token
    sock = None
    if paused:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.setblocking(False)
        host, port = urlsplit(url).hostname, urlsplit(url).port
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    async with connect(url, max_size=None, compression=None, open_timeout=10, sock=sock) as ws:
        if paused:
            ws.transport.pause_reading()
        await ws.send(raw if raw is not None else json.dumps(request))
        client = Client(ws)
        try:
            if wait:
                await eventually(
                    lambda: len(client.control("subscribed")) == len(topics) or client.done,
                    what="subscribed",
                )
                assert len(client.control("subscribed")) == len(topics), client.messages
            yield client
        finally:
            await ws.close()
            await client.task


async def post(
    http: httpx.AsyncClient,
    changes: Sequence[tuple[str, str, str]],
    *,
    topic: str = "dataset1",
    token: str = TOKEN_A,
) -> dict[str, Any]:
    reply = await http.post(
        f"/topics/{topic}/changes", content=change_fragment(*changes), headers=auth(token)
    )
    assert reply.status_code == 202, reply.text
    receipt: dict[str, Any] = reply.json()
    return receipt


def batch(
    times: Times, name: str, count: int, change: str = "created"
) -> list[tuple[str, str, str]]:
    return [(f"http://example.com/{name}/{i}", change, times.next()) for i in range(count)]


async def stream(redis: Redis, prefix: str, topic: str = "dataset1") -> list[tuple[str, str]]:
    """(position, loc) of every change the topic's stream holds, in order."""
    rows: Any = await redis.xrange(f"{prefix}:{{{topic}}}:changes")
    return [(raw_id.decode(), fields[b"loc"].decode()) for raw_id, fields in rows]


async def meta(redis: Redis, prefix: str, topic: str = "dataset1") -> dict[str, str]:
    raw: Any = await redis.hgetall(f"{prefix}:{{{topic}}}:meta")
    return {k.decode(): v.decode() for k, v in raw.items()}


def assert_contiguous(frames: list[dict[str, Any]], first_from: str | None = None) -> None:
    """Each frame's from is the previous frame's until (docs/protocol.md, gap detection)."""
    assert frames, "no frames"
    if first_from is not None:
        assert parse_w3c_datetime(frames[0]["from"]) == parse_w3c_datetime(first_from)
    for previous, frame in zip(frames, frames[1:], strict=False):
        assert parse_w3c_datetime(frame["from"]) == parse_w3c_datetime(previous["until"]), (
            previous,
            frame,
        )
    for frame in frames:
        assert frame["changes"], "a frame carries at least one change"
        assert parse_w3c_datetime(frame["until"]) == parse_w3c_datetime(
            frame["changes"][-1]["datetime"]
        )
        assert parse_w3c_datetime(frame["from"]) <= parse_w3c_datetime(
            frame["changes"][0]["datetime"]
        )


def position_key(position: str) -> tuple[int, int]:
    ms, _, seq = position.partition("-")
    return int(ms), int(seq)


def assert_increasing(positions: list[str]) -> None:
    keys = [position_key(p) for p in positions]
    assert all(a < b for a, b in zip(keys, keys[1:], strict=False)), positions


@asynccontextmanager
async def custom_hub(
    redis_url: str, prefix: str, adjust: Callable[[Settings], Settings]
) -> AsyncIterator[tuple[RunningHub, httpx.AsyncClient]]:
    """A hub on loopback with settings of the test's own, and an HTTP client for it."""
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = adjust(make_settings(redis_url, prefix, base))
    async with (
        running_hub(settings, sock=sock) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
    ):
        yield running, http
