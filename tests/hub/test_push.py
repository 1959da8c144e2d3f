"""The WebSocket push channel end to end (docs/protocol.md): a real hub, real Redis, real
WebSocket clients on loopback. Live delivery, replay then live with no gap and no duplicate,
resume by datetime, history-insufficient once every trimmed change is behind, slow consumers,
several hub processes, and the advertised endpoint. (What is also read with the subscriber's
own push client is in ``tests/e2e/test_push_client.py``.)"""

from __future__ import annotations

import asyncio
import json
import socket
from datetime import timedelta
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from rspush.hub.server import RunningHub
from rspush.hub.settings import Settings
from rspush.protocol import (
    PUSH_REL,
    CloseCode,
)
from rspush.resourcesync import Capability, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime
from tests.support.fragments import TOKEN_B, Times
from tests.support.hubs import HubFactory
from tests.support.push import (
    assert_contiguous,
    assert_increasing,
    batch,
    custom_hub,
    meta,
    position_key,
    post,
    stream,
    subscribed,
)
from tests.support.waiting import eventually

# --- helpers -----------------------------------------------------------------------------


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
        # One write-time observation per batch, as for the lag, each the time the writes
        # took: real socket writes take some.
        assert _metric(metrics, "rspush_push_write_seconds_count") == _metric(
            metrics, "rspush_push_lag_seconds_count"
        )
        assert _metric(metrics, "rspush_push_write_seconds_sum") > 0
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


# --- shutdown ----------------------------------------------------------------------------
