"""The WebSocket push channel end to end (docs/protocol.md): a real hub, real Redis, real
WebSocket clients on loopback. Live delivery, replay then live with no gap and no duplicate,
resume by position and by datetime, history-insufficient, slow consumers, several hub
processes, private topics, shutdown, and the advertised endpoint."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from redis.asyncio import Redis
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Settings, Subscriber, Topic
from rspush.protocol import (
    PUSH_REL,
    REQUIRED_FIELDS,
    CloseCode,
    TopicRequest,
    decode_xml_frame,
)
from rspush.resourcesync import Capability, DocumentType, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime
from rspush.subscriber.push import (
    Change,
    HistoryInsufficientError,
    PushError,
    RefusedError,
    push_changes,
)
from tests.hub.conftest import (
    TOKEN_A,
    TOKEN_B,
    HubFactory,
    Times,
    auth,
    change_fragment,
    make_settings,
)

SUBSCRIBER_TOKEN = "token-of-mirror-1"

# --- helpers -----------------------------------------------------------------------------


async def eventually(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 10, what: str = ""
) -> None:
    """Wait until ``predicate()`` holds, polling; fail after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        outcome = predicate()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"condition not met within {timeout} s: {what or predicate}")
        await asyncio.sleep(0.01)


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


async def collect(url: str, topics: list[TopicRequest], count: int, **options: Any) -> list[Change]:
    """The first ``count`` changes :func:`push_changes` yields (then it is closed)."""
    got: list[Change] = []
    async with aclosing(push_changes(url, topics, **options)) as items, asyncio.timeout(10):
        async for item in items:
            if isinstance(item, Change):
                got.append(item)
                if len(got) == count:
                    break
    return got


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


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


# --- the advertised endpoint -------------------------------------------------------------


async def test_capability_list_advertises_the_push_endpoint(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    assert hub.push_url is not None and hub.push_url.startswith("ws://127.0.0.1:")
    reply = await client.get("/topics/dataset1/capabilitylist.xml")
    assert reply.status_code == 200
    document = parse_document(reply.content)
    assert validate(document) == []
    assert schema_errors(reply.content) == []
    [notification] = [
        e
        for e in document.entries
        if e.md is not None and e.md.capability == Capability.CHANGE_NOTIFICATION
    ]
    link = notification.link(PUSH_REL)
    assert link is not None
    assert link.href == hub.push_url
    hub_link = notification.link("hub")
    assert hub_link is not None and hub_link.href.startswith("http://")  # WebSub stays HTTP
    assert f'<rs:ln rel="urn:rspush:websocket" href="{hub.push_url}"/>' in reply.text
    assert f'<{hub.push_url}>; rel="urn:rspush:websocket"' in reply.headers["link"]
    well_known = await client.get("/.well-known/resourcesync")
    assert f'<{hub.push_url}>; rel="urn:rspush:websocket"' in well_known.headers["link"]


# --- live --------------------------------------------------------------------------------


async def test_live_changes_reach_a_subscriber(hub: RunningHub, client: httpx.AsyncClient) -> None:
    assert hub.push_url is not None
    times = Times()
    earlier = batch(times, "before", 2)
    before = await post(client, earlier)
    assert hub.push is not None
    feed = hub.push.feeds["dataset1"]
    await eventually(lambda: str(feed.last) == before["last"], what="the feed read them")
    async with subscribed(hub.push_url) as sub:
        [ack] = sub.control("subscribed")
        assert ack["topic"] == "dataset1"
        assert ack["epoch"] == before["epoch"]
        assert ack["position"] == before["last"]  # nothing from before the subscription
        sent = [
            ("http://example.com/a", "created", times.next()),
            ("http://example.com/b", "created", times.next()),
            ("http://example.com/a", "updated", times.next()),
            ("http://example.com/b", "deleted", times.next()),
        ]
        receipts = [
            await post(client, sent[:1]),
            await post(client, sent[1:3]),
            await post(client, sent[3:]),
        ]
        await eventually(lambda: len(sub.changes()) >= 4, what="4 changes")
        await asyncio.sleep(0.05)  # nothing more arrives
        changes = sub.changes()
        assert [(c["loc"], c["change"], c["datetime"]) for c in changes] == sent
        assert {c["topic"] for c in changes} == {"dataset1"}
        assert {c["epoch"] for c in changes} == {before["epoch"]}
        positions = [c["position"] for c in changes]
        assert_increasing([before["last"], *positions])
        assert positions[0] == receipts[0]["first"]
        assert positions[1:3] == [receipts[1]["first"], receipts[1]["last"]]
        assert positions[3] == receipts[2]["last"]
        assert all(c["length"] == len(c["loc"]) and c["type"] == "text/plain" for c in changes)
        # The first frame continues from the last change before the subscription.
        assert_contiguous(sub.frames, first_from=earlier[-1][2])
        # Nothing of the other topic.
        await post(client, batch(times, "other", 1), topic="dataset2", token=TOKEN_B)
        await asyncio.sleep(0.05)
        assert sub.frames_of("dataset2") == []


async def test_live_xml_frames(hub: RunningHub, client: httpx.AsyncClient) -> None:
    assert hub.push_url is not None
    times = Times()
    async with (
        subscribed(hub.push_url, fmt="xml") as xml_sub,
        subscribed(hub.push_url) as json_sub,
    ):
        sent = batch(times, "x", 3)
        for change in sent:
            await post(client, [change])
        await eventually(lambda: len(xml_sub.changes()) >= 3 and len(json_sub.changes()) >= 3)
        assert all(f.get("xml") for f in xml_sub.frames)
        strip = [
            {k: c[k] for k in ("position", "loc", "change", "datetime")} for c in json_sub.changes()
        ]
        assert [{k: c[k] for k in strip[0]} for c in xml_sub.changes()] == strip
        assert [c["loc"] for c in strip] == [loc for loc, _, _ in sent]
        assert_contiguous(xml_sub.frames)


async def test_one_connection_several_topics(hub: RunningHub, client: httpx.AsyncClient) -> None:
    assert hub.push_url is not None
    times = Times()
    async with subscribed(hub.push_url, [{"topic": "dataset1"}, {"topic": "dataset2"}]) as sub:
        await post(client, batch(times, "one", 2))
        await post(client, batch(times, "two", 3), topic="dataset2", token=TOKEN_B)
        await eventually(lambda: len(sub.changes("dataset1")) == 2)
        await eventually(lambda: len(sub.changes("dataset2")) == 3)
        assert [c["loc"] for c in sub.changes("dataset2")] == [
            f"http://example.com/two/{i}" for i in range(3)
        ]
        assert {c["topic"] for c in sub.changes("dataset2")} == {"dataset2"}
        assert_contiguous(sub.frames_of("dataset1"))
        assert_contiguous(sub.frames_of("dataset2"))


def _metric(text: str, name: str, topic: str = "dataset1", default: float | None = None) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{topic="{topic}"}} '):
            return float(line.rsplit(" ", 1)[1])
    if default is not None:
        return default  # a labelled counter appears once first incremented
    raise AssertionError(f"no {name} for {topic} in /metrics")


async def test_push_metrics(hub: RunningHub, client: httpx.AsyncClient) -> None:
    assert hub.push_url is not None
    times = Times()
    assert hub.push is not None
    feed = hub.push.feeds["dataset1"]
    async with subscribed(hub.push_url) as one, subscribed(hub.push_url, fmt="xml") as two:
        await eventually(lambda: all(s.live for s in feed.subscriptions), what="live")
        metrics = (await client.get("/metrics")).text
        assert _metric(metrics, "rspush_push_subscribers") == 2
        await post(client, batch(times, "m", 3))
        await eventually(lambda: len(one.changes()) == 3 and len(two.changes()) == 3)
        metrics = (await client.get("/metrics")).text
        assert _metric(metrics, "rspush_push_changes_sent_total") == 6
        assert _metric(metrics, "rspush_push_frames_sent_total") == len(one.frames) + len(
            two.frames
        )
        assert _metric(metrics, "rspush_push_lag_seconds_count") >= 1
        assert _metric(metrics, "rspush_push_slow_consumer_closes_total", default=0) == 0
    await eventually(lambda: not feed.subscriptions, what="unsubscribed")
    metrics = (await client.get("/metrics")).text
    assert _metric(metrics, "rspush_push_subscribers") == 0


async def test_push_connections_send_without_delay(hub: RunningHub) -> None:
    """Frames go out at once: the hub's sockets disable Nagle's algorithm (TCP_NODELAY), or a
    frame sent while the previous one is unacknowledged waits for the peer's delayed ACK
    (~40 ms on Linux), far over the latency the push channel promises."""
    assert hub.push_url is not None and hub.push is not None
    async with subscribed(hub.push_url):
        [connection] = list(hub.push._server.connections)
        sock = connection.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


# --- replay then live --------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_replay_then_live_no_gap_no_duplicate(
    hub: RunningHub, client: httpx.AsyncClient, redis: Redis, prefix: str
) -> None:
    """Subscribers join from the start, from the middle and near the tail while a Source
    keeps posting: each receives exactly the stream after its resume point, in order, once,
    in contiguous frames."""
    assert hub.push_url is not None and hub.push is not None
    feed = hub.push.feeds["dataset1"]
    times = Times()
    # History of several replay pages (1,000 changes each), big enough that a subscriber
    # that does not read blocks its replay: live batches then queue up behind it.
    # (<loc> is at most 2,048 characters, sitemap-0.9.xsd: more entries make up the bytes.)
    padding = "h" * 2000
    receipt: dict[str, Any] = {}
    for part in range(6):
        history = [
            (f"http://example.com/{padding}/{part}/{i}", "created", times.next())
            for i in range(700)
        ]
        receipt = await post(client, history)
    epoch = receipt["epoch"]

    posted = 0
    stop = asyncio.Event()

    async def source() -> None:
        nonlocal posted
        n = 0
        while not stop.is_set():
            await post(client, batch(times, f"live{n}", 1 + n % 3))
            n += 1
            posted += 1

    poster = asyncio.create_task(source())
    try:
        await eventually(lambda: posted >= 2, what="posting started")
        async with subscribed(
            hub.push_url, [{"topic": "dataset1", "position": "0-0"}], wait=False, paused=True
        ) as full:
            # Its replay is stuck on the full buffer while live batches queue for it.
            await eventually(
                lambda: any(len(s.pending) >= 3 and not s.live for s in feed.subscriptions),
                what="live batches queued behind a replay",
            )
            assert full.ws.transport is not None
            full.ws.transport.resume_reading()
            middle_at = (await stream(redis, prefix))[1111][0]
            async with subscribed(
                hub.push_url,
                [{"topic": "dataset1", "position": middle_at, "epoch": epoch}],
                fmt="xml",
            ) as middle:
                mark = posted
                await eventually(lambda: posted >= mark + 2, what="more posts")
                live_at = (await stream(redis, prefix))[-1][0]
                async with subscribed(
                    hub.push_url, [{"topic": "dataset1", "position": live_at, "epoch": epoch}]
                ) as late:
                    mark = posted
                    await eventually(lambda: posted >= mark + 3, what="yet more posts")
                    stop.set()
                    await poster
                    expected = await stream(redis, prefix)
                    assert len(expected) > 1400 + 7
                    last = expected[-1][0]

                    def caught_up() -> bool:
                        return all(sub.positions()[-1:] == [last] for sub in (full, middle, late))

                    await eventually(caught_up, timeout=30, what="every subscriber caught up")
                    await asyncio.sleep(0.05)

                    assert [(c["position"], c["loc"]) for c in full.changes()] == expected
                    assert_contiguous(full.frames)
                    assert full.control("subscribed")[0]["position"] == "0-0"

                    cut = [p for p, _ in expected].index(middle_at)
                    assert [(c["position"], c["loc"]) for c in middle.changes()] == expected[
                        cut + 1 :
                    ]
                    # The first frame continues from the resume point's change time.
                    [at_middle] = [c for c in full.changes() if c["position"] == middle_at]
                    assert_contiguous(middle.frames, first_from=at_middle["datetime"])

                    cut = [p for p, _ in expected].index(live_at)
                    assert [(c["position"], c["loc"]) for c in late.changes()] == expected[
                        cut + 1 :
                    ]
                    assert_contiguous(late.frames)
                    for sub in (full, middle, late):
                        assert {c["epoch"] for c in sub.changes()} == {epoch}
                        assert {c["topic"] for c in sub.changes()} == {"dataset1"}
    finally:
        stop.set()
        await poster


# --- resume ------------------------------------------------------------------------------


async def test_resume_by_position_is_exclusive(hub: RunningHub, client: httpx.AsyncClient) -> None:
    assert hub.push_url is not None
    times = Times()
    sent = batch(times, "r", 5)
    receipt = await post(client, sent)
    async with subscribed(hub.push_url, [{"topic": "dataset1", "position": "0-0"}]) as everything:
        await eventually(lambda: len(everything.changes()) == 5)
    positions = everything.positions()
    assert positions[-1] == receipt["last"]

    resume = {"topic": "dataset1", "position": positions[2], "epoch": receipt["epoch"]}
    async with subscribed(hub.push_url, [resume]) as sub:
        [ack] = sub.control("subscribed")
        assert ack["position"] == positions[2]
        await eventually(lambda: len(sub.changes()) >= 2)
        more = batch(times, "after", 2)
        await post(client, more)
        await eventually(lambda: len(sub.changes()) >= 4)
        await asyncio.sleep(0.05)
        assert [c["loc"] for c in sub.changes()] == [loc for loc, _, _ in sent[3:] + more]
        assert sub.positions()[:2] == positions[3:]
        assert_contiguous(sub.frames, first_from=sent[2][2])

    # At the tail: nothing to replay, then live.
    tail = {"topic": "dataset1", "position": receipt["last"], "epoch": receipt["epoch"]}
    async with subscribed(hub.push_url, [tail]) as sub:
        await eventually(lambda: len(sub.changes()) >= 2)  # the two posted after
        assert [c["loc"] for c in sub.changes()] == [loc for loc, _, _ in more]

    # Through the client library, without an epoch.
    got = await collect(hub.push_url, [TopicRequest(topic="dataset1", position=positions[3])], 3)
    assert [c.loc for c in got] == [sent[4][0], more[0][0], more[1][0]]
    assert got[0].position == positions[4]
    assert got[0].epoch == receipt["epoch"] and got[0].topic == "dataset1"


async def test_resume_by_datetime_is_inclusive(hub: RunningHub, client: httpx.AsyncClient) -> None:
    assert hub.push_url is not None
    times = Times()
    second = timedelta(seconds=1)
    t = [times.next(second) for _ in range(4)]
    same = t[2]
    sent = [
        ("http://example.com/d/0", "created", t[0]),
        ("http://example.com/d/1", "created", t[1]),
        ("http://example.com/d/2", "created", same),
        ("http://example.com/d/3", "updated", same),  # two changes at the same time
        ("http://example.com/d/4", "created", t[3]),
    ]
    receipt = await post(client, sent)

    async def since(moment: str, count: int) -> list[str]:
        async with subscribed(hub.push_url or "", [{"topic": "dataset1", "since": moment}]) as s:
            await eventually(lambda: len(s.changes()) >= count)
            await asyncio.sleep(0.05)  # and no more
            return [c["loc"] for c in s.changes()]

    locs = [loc for loc, _, _ in sent]
    assert await since(same, 3) == locs[2:]  # at or after: both changes at that time
    assert await since(t[1], 4) == locs[1:]
    between = format_w3c_datetime(parse_w3c_datetime(t[1]) + timedelta(milliseconds=500))
    assert await since(between, 3) == locs[2:]
    assert await since("2000-01-01T00:00:00Z", 5) == locs
    assert await since(t[3], 1) == locs[4:]
    later = format_w3c_datetime(parse_w3c_datetime(t[3]) + timedelta(seconds=1))
    async with subscribed(hub.push_url, [{"topic": "dataset1", "since": later}]) as sub:
        [ack] = sub.control("subscribed")
        assert ack["position"] == receipt["last"]
        await asyncio.sleep(0.05)
        assert sub.changes() == []
        fresh = [("http://example.com/d/5", "created", times.next(second))]
        await post(client, fresh)
        await eventually(lambda: len(sub.changes()) == 1)
        assert sub.changes()[0]["loc"] == "http://example.com/d/5"
    # The subscribed message names the position just before the first change replayed.
    async with subscribed(hub.push_url, [{"topic": "dataset1", "since": same}]) as sub:
        await eventually(lambda: len(sub.changes()) == 4)
        [ack] = sub.control("subscribed")
        positions = sub.positions()
        assert position_key(ack["position"]) < position_key(positions[0])
        assert_contiguous(sub.frames, first_from=t[1])


# --- history insufficient ----------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_history_insufficient_after_trimming(
    hub_factory: HubFactory, redis: Redis, prefix: str
) -> None:
    async with (
        hub_factory(changelist_max_entries=3, retention_s=0) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
    ):
        assert running.push_url is not None
        times = Times()
        sent = batch(times, "h", 10)
        receipts = [await post(http, [change]) for change in sent]
        positions = [r["last"] for r in receipts]
        epoch = receipts[0]["epoch"]
        # Three lists of three close; their nine changes leave the stream.

        async def trimmed() -> bool:
            return (await meta(redis, prefix)).get("trimmed_through") == positions[8]

        await eventually(trimmed, what="stream trimmed")
        assert [p for p, _ in await stream(redis, prefix)] == positions[9:]
        archive = f"{running.hub.settings.hub.base_url}/topics/dataset1/changelist-archive.xml"

        async def refused(topic: dict[str, Any]) -> dict[str, Any]:
            async with subscribed(running.push_url or "", [topic], wait=False) as sub:
                code, _ = await sub.ended()
                assert code == CloseCode.HISTORY_INSUFFICIENT == 4003
                [reply] = sub.messages
                assert sub.control("subscribed") == []
                return reply

        reply = await refused({"topic": "dataset1", "position": "0-0"})
        assert reply == {
            "type": "history-insufficient",
            "topic": "dataset1",
            "reason": "trimmed",
            "epoch": epoch,
            "oldest": positions[9],
            "after": positions[8],  # the last trimmed: everything after it is in the stream
            "after_time": format_w3c_datetime(parse_w3c_datetime(sent[8][2])),
            "archive": archive,
        }
        reply = await refused({"topic": "dataset1", "position": positions[7], "epoch": epoch})
        assert reply["reason"] == "trimmed" and reply["oldest"] == positions[9]
        # From a date whose changes were trimmed.
        reply = await refused({"topic": "dataset1", "since": "2000-01-01T00:00:00Z"})
        assert reply["reason"] == "trimmed" and reply["archive"] == archive
        # Epoch changed (whatever the position).
        reply = await refused({"topic": "dataset1", "position": positions[9], "epoch": "0" * 16})
        assert reply["reason"] == "epoch-changed"
        assert reply["epoch"] == epoch
        assert reply["oldest"] == positions[9]
        assert reply["archive"] == archive

        # The last trimmed position itself is fine: everything after it is still there.
        ok = {"topic": "dataset1", "position": positions[8], "epoch": epoch}
        async with subscribed(running.push_url, [ok]) as sub:
            await eventually(lambda: len(sub.changes()) == 1)
            assert sub.positions() == positions[9:]

        # The archive the reply names does hold the trimmed changes.
        archive_doc = parse_document((await http.get(archive)).content)
        assert len(archive_doc.entries) == 3

        # The client library raises a typed error carrying the reply.
        with pytest.raises(HistoryInsufficientError) as caught:
            async for _ in push_changes(
                running.push_url, [TopicRequest(topic="dataset1", position="0-0", epoch=epoch)]
            ):
                pass
        assert caught.value.code == 4003
        assert caught.value.info["oldest"] == positions[9]
        assert archive in str(caught.value)


@pytest.mark.timeout(60)
async def test_since_after_every_trimmed_change_is_served_from_the_stream(
    hub_factory: HubFactory, redis: Redis, prefix: str
) -> None:
    """A ``since`` later than every trimmed change needs nothing the stream lost: the hub
    serves it (docs/protocol.md: history-insufficient only when the resume point is older
    than the stream holds). A ``since`` at a trimmed change's time does need the archive."""
    async with (
        hub_factory(changelist_max_entries=3, retention_s=0) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
    ):
        assert running.push_url is not None
        times = Times()
        sent = batch(times, "t", 4)  # a list of three closes and is trimmed; one stays
        receipts = [await post(http, [change]) for change in sent]

        async def trimmed() -> bool:
            return (await meta(redis, prefix)).get("trimmed_through") == receipts[2]["last"]

        await eventually(trimmed, what="stream trimmed")
        last_trimmed = parse_w3c_datetime(sent[2][2])
        just_after = format_w3c_datetime(last_trimmed + timedelta(microseconds=500))

        async with subscribed(
            running.push_url, [{"topic": "dataset1", "since": just_after}], wait=False
        ) as sub:
            await eventually(lambda: len(sub.changes()) == 1 or sub.done, what="the last change")
            assert sub.control("history-insufficient") == [], sub.messages
            assert [c["loc"] for c in sub.changes()] == [sent[3][0]]

        async with subscribed(
            running.push_url, [{"topic": "dataset1", "since": sent[2][2]}], wait=False
        ) as sub:
            code, _ = await sub.ended()
            assert code == 4003
            assert sub.control("history-insufficient")[0]["reason"] == "trimmed"


async def test_epoch_mismatch_on_an_untrimmed_stream(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    assert hub.push_url is not None
    receipt = await post(client, batch(Times(), "e", 2))
    request = {"topic": "dataset1", "position": receipt["first"], "epoch": "feedfacefeedface"}
    async with subscribed(hub.push_url, [request], wait=False) as sub:
        code, _ = await sub.ended()
    assert code == 4003
    [reply] = sub.messages
    assert reply["type"] == "history-insufficient"
    assert reply["reason"] == "epoch-changed"
    assert reply["epoch"] == receipt["epoch"]
    assert reply["oldest"] == receipt["first"]
    assert reply["archive"].endswith("/topics/dataset1/changelist-archive.xml")
    with pytest.raises(HistoryInsufficientError) as caught:
        async for _ in push_changes(
            hub.push_url,
            [TopicRequest(topic="dataset1", position=receipt["first"], epoch="feedfacefeedface")],
        ):
            pass
    assert caught.value.info["reason"] == "epoch-changed"


# --- slow consumers ----------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_slow_consumer_is_closed_while_fast_ones_keep_up(
    redis_url: str, prefix: str, redis: Redis
) -> None:
    def small_buffers(settings: Settings) -> Settings:
        push = settings.push.model_copy(update={"send_buffer_bytes": 4096})
        return settings.model_copy(update={"push": push})

    async with custom_hub(redis_url, prefix, small_buffers) as (running, http):
        assert running.push_url is not None and running.push is not None
        feed = running.push.feeds["dataset1"]
        times = Times()
        async with subscribed(running.push_url) as fast, subscribed(running.push_url) as slow:
            assert len(feed.subscriptions) == 2
            assert slow.ws.transport is not None
            slow.ws.transport.pause_reading()  # a Destination that stops reading
            padding = "p" * 1500
            posted = 0

            async def source() -> None:
                nonlocal posted
                for n in range(200):
                    changes = [
                        (f"http://example.com/{padding}/{n}/{i}", "created", times.next())
                        for i in range(50)
                    ]
                    await post(http, changes)
                    posted += 1
                    if len(feed.subscriptions) < 2 and posted % 5 == 0:
                        return

            poster = asyncio.create_task(source())
            try:
                await eventually(
                    lambda: len(feed.subscriptions) < 2 or poster.done(),
                    timeout=40,
                    what="slow consumer detected",
                )
                slow.ws.transport.resume_reading()  # read what was sent, then the close
                assert len(feed.subscriptions) == 1, "the slow consumer was never closed"
                code, reason = await slow.ended()
            finally:
                await poster
            assert code == CloseCode.SLOW_CONSUMER == 4002
            assert reason is not None
            resume = json.loads(reason)
            # The resume position is the last change the hub sent it: nothing skipped.
            assert resume == {"dataset1": slow.positions()[-1]}
            expected = await stream(redis, prefix)
            assert slow.positions() == [p for p, _ in expected[: len(slow.positions())]]
            assert len(slow.positions()) < len(expected)

            # The fast subscriber got everything, in order, and is still connected.
            await post(http, batch(times, "final", 1))
            expected = await stream(redis, prefix)
            await eventually(lambda: len(fast.changes()) >= len(expected), timeout=20)
            assert [(c["position"], c["loc"]) for c in fast.changes()] == expected
            assert not fast.done
            assert running.hub.metrics.slow_closes.labels("dataset1")._value.get() == 1


# --- several hub processes ---------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_two_hubs_serve_identical_sequences(hub_factory: HubFactory) -> None:
    async with (
        hub_factory() as one,
        hub_factory() as two,
        httpx.AsyncClient(base_url=one.url, timeout=30) as http_one,
        httpx.AsyncClient(base_url=two.url, timeout=30) as http_two,
    ):
        assert one.push_url is not None and two.push_url is not None
        assert one.push_url != two.push_url
        times = Times()
        async with (
            subscribed(one.push_url) as on_one,
            subscribed(two.push_url) as on_two,
            subscribed(two.push_url, fmt="xml") as xml_on_two,
        ):
            receipts = []
            for n in range(20):
                http = http_one if n % 2 else http_two
                receipts.append(await post(http, batch(times, f"m{n}", 1 + n % 4)))
            total = sum(r["accepted"] for r in receipts)
            for sub in (on_one, on_two, xml_on_two):
                await eventually(lambda sub=sub: len(sub.changes()) >= total)
            seen = [(c["position"], c["loc"], c["epoch"]) for c in on_one.changes()]
            assert len(seen) == total
            assert [(c["position"], c["loc"], c["epoch"]) for c in on_two.changes()] == seen
            assert [(c["position"], c["loc"], c["epoch"]) for c in xml_on_two.changes()] == seen
            assert_increasing([p for p, _, _ in seen])
            assert seen[-1][0] == receipts[-1]["last"]

            # A subscriber resumes on the other process from a position the first gave it.
            middle = on_one.changes()[total // 2]
            resume = {"topic": "dataset1", "position": middle["position"], "epoch": seen[0][2]}
            async with subscribed(two.push_url, [resume]) as resumed:
                await eventually(lambda: len(resumed.changes()) >= total - total // 2 - 1)
                assert [(c["position"], c["loc"]) for c in resumed.changes()] == [
                    (p, loc) for p, loc, _ in seen[total // 2 + 1 :]
                ]


# --- refusals ----------------------------------------------------------------------------


def _private(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "topics": [Topic(name="dataset1", private=True), Topic(name="dataset2")],
            "subscribers": [
                Subscriber(
                    name="mirror-1",
                    token_sha256=hashlib.sha256(SUBSCRIBER_TOKEN.encode()).hexdigest(),
                    topics=["dataset1"],
                )
            ],
        }
    )


async def _refusal(
    url: str, topics: list[dict[str, Any]] | None = None, **options: Any
) -> tuple[int | None, str | None, list[dict[str, Any]]]:
    async with subscribed(url, topics, wait=False, **options) as sub:
        code, reason = await sub.ended()
    return code, reason, sub.messages


async def test_private_topics_need_a_token(redis_url: str, prefix: str) -> None:
    async with custom_hub(redis_url, prefix, _private) as (running, http):
        url = running.push_url
        assert url is not None
        # No token.
        code, reason, messages = await _refusal(url)
        assert code == CloseCode.UNAUTHORISED == 4001
        assert reason and "private" in reason
        [error] = messages
        assert error["type"] == "error" and error["error"] == "unauthorised"
        # A wrong token.
        code, _, messages = await _refusal(url, token="not-the-token")
        assert code == 4001
        assert messages[0]["error"] == "unauthorised"
        # The private topic in a subscription with a public one: all refused.
        code, _, messages = await _refusal(url, [{"topic": "dataset2"}, {"topic": "dataset1"}])
        assert code == 4001
        assert [m["type"] for m in messages] == ["error"]
        # A public topic needs no token.
        async with subscribed(url, [{"topic": "dataset2"}]) as public:
            assert public.control("subscribed")[0]["topic"] == "dataset2"
        # The right token.
        times = Times()
        async with subscribed(
            url, [{"topic": "dataset1"}, {"topic": "dataset2"}], token=SUBSCRIBER_TOKEN
        ) as sub:
            await post(http, batch(times, "secret", 2))
            await eventually(lambda: len(sub.changes()) == 2)
            assert [c["loc"] for c in sub.changes()] == [
                "http://example.com/secret/0",
                "http://example.com/secret/1",
            ]
        # The client library.
        with pytest.raises(RefusedError, match="unauthorised"):
            async for _ in push_changes(url, [TopicRequest(topic="dataset1")], token="wrong"):
                pass
        request = TopicRequest(topic="dataset1", position="0-0")
        got = await collect(url, [request], 2, token=SUBSCRIBER_TOKEN)
        assert [c.loc for c in got] == [
            "http://example.com/secret/0",
            "http://example.com/secret/1",
        ]


async def test_unknown_topic_and_protocol_errors(hub: RunningHub) -> None:
    url = hub.push_url
    assert url is not None
    code, reason, messages = await _refusal(url, [{"topic": "nope"}])
    assert code == CloseCode.UNKNOWN_TOPIC == 4004
    assert reason and "nope" in reason
    assert messages == [
        {"type": "error", "error": "unknown-topic", "message": reason},
    ]
    with pytest.raises(RefusedError, match="unknown-topic"):
        async for _ in push_changes(url, [TopicRequest(topic="nope")]):
            pass

    for raw in (
        "hello",
        '{"type": "subscribe"}',
        '{"type": "subscribe", "version": 2, "topics": [{"topic": "dataset1"}]}',
        '{"type": "subscribe", "topics": [{"topic": "dataset1", "position": "soon"}]}',
    ):
        code, reason, messages = await _refusal(url, raw=raw)
        assert code == CloseCode.PROTOCOL_ERROR == 4000, raw
        assert reason, raw
        assert messages and messages[0]["type"] == "error", raw
        assert messages[0]["error"] == "protocol-error"


# --- shutdown ----------------------------------------------------------------------------


async def test_shutdown_closes_with_resume_positions(hub_factory: HubFactory) -> None:
    times = Times()
    items: list[Change | dict[str, Any]] = []

    async def library(url: str) -> PushError | None:
        try:
            async for item in push_changes(url, [TopicRequest(topic="dataset1")]):
                items.append(item)
        except PushError as exc:
            return exc
        return None

    async with (
        hub_factory() as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
    ):
        assert running.push_url is not None
        receipt = await post(http, batch(times, "s", 3))
        ws = await connect(running.push_url, open_timeout=10)
        request = {
            "type": "subscribe",
            "topics": [{"topic": "dataset1", "position": "0-0"}, {"topic": "dataset2"}],
        }
        await ws.send(json.dumps(request))
        sub = Client(ws)
        other = asyncio.create_task(library(running.push_url))
        await eventually(lambda: len(sub.changes()) == 3 and len(items) == 1)
    # Leaving the block stopped the hub.
    try:
        code, reason = await sub.ended()
    finally:
        await ws.close()
    assert code == CloseCode.SHUTDOWN == 1001
    assert reason is not None
    assert json.loads(reason) == {"dataset1": receipt["last"], "dataset2": "0-0"}
    error = await other
    assert isinstance(error, PushError) and error.code == 1001
    assert items == [
        {
            "type": "subscribed",
            "topic": "dataset1",
            "epoch": receipt["epoch"],
            "position": receipt["last"],
        }
    ]
