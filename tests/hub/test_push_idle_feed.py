"""A topic nobody subscribes to costs ingest no stream reads: the push feed reads a topic's
stream only while it has subscribers, and a subscriber that wakes it still gets exactly the
changes after the position it is told. Stream reads are counted by the server itself
(``INFO commandstats``), so the test sees every ``XREAD`` of the hub whatever issues it —
which is why the hub here records no framework events: their reader has an ``XREAD`` of its
own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis

from rspush.hub.server import RunningHub
from tests.support.fragments import Times
from tests.support.hubs import HubFactory
from tests.support.push import batch, post, subscribed
from tests.support.waiting import eventually


@pytest.fixture
async def hub(hub_factory: HubFactory) -> AsyncIterator[RunningHub]:
    async with hub_factory(framework={"enabled": False}) as running:
        yield running


async def _xreads(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_xread", {}).get("calls", 0))


async def _blocked_readers(redis: Redis) -> int:
    """Connections blocked in ``XREAD`` right now (the feed's reader waits there)."""
    clients = await redis.client_list()
    return sum(1 for c in clients if c.get("cmd") == "xread" and "b" in c.get("flags", ""))


async def test_no_stream_reads_while_a_topic_has_no_subscribers(
    hub: RunningHub, client: httpx.AsyncClient, redis: Redis
) -> None:
    assert hub.push_url is not None and hub.push is not None
    feed = hub.push.feeds["dataset1"]
    times = Times()
    before = await _xreads(redis)
    for n in range(5):
        await post(client, batch(times, f"quiet{n}", 20))
    # An append wakes any blocked XREAD before the server answers the next command.
    assert await _xreads(redis) == before
    assert not feed.reading

    # With a subscriber the feed reads (so the counter above could see it).
    async with subscribed(hub.push_url) as sub:
        assert feed.reading
        await post(client, batch(times, "live", 3))
        await eventually(lambda: len(sub.changes()) == 3, what="the live changes")
        assert await _xreads(redis) > before

    # The last subscriber gone, the reader stops: posts read nothing back again.
    await eventually(lambda: not feed.subscriptions and not feed.reading, what="reader stopped")
    await eventually(lambda: _no_blocked_readers(redis), what="no XREAD left blocked")
    idle = await _xreads(redis)
    for n in range(5):
        await post(client, batch(times, f"quiet-again{n}", 20))
    assert await _xreads(redis) == idle


async def _no_blocked_readers(redis: Redis) -> bool:
    return await _blocked_readers(redis) == 0


async def test_a_subscriber_waking_the_feed_starts_at_the_newest_change(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    """Changes appended while nobody listened are not pushed to a subscriber without a resume
    point, and nothing after its ``subscribed`` position is missed."""
    assert hub.push_url is not None and hub.push is not None
    times = Times()
    async with subscribed(hub.push_url):
        await post(client, batch(times, "first", 2))
    await eventually(lambda: not hub.push.feeds["dataset1"].reading, what="reader stopped")
    quiet = await post(client, batch(times, "unheard", 4))
    async with subscribed(hub.push_url) as sub:
        [ack] = sub.control("subscribed")
        assert ack["position"] == quiet["last"]
        sent = batch(times, "heard", 5)
        await post(client, sent[:2])
        await post(client, sent[2:])
        await eventually(lambda: len(sub.changes()) == 5, what="the five changes")
        assert [c["loc"] for c in sub.changes()] == [loc for loc, _, _ in sent]


async def test_a_resuming_subscriber_gets_what_was_appended_while_nobody_listened(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    assert hub.push_url is not None and hub.push is not None
    times = Times()
    async with subscribed(hub.push_url) as first:
        seen = await post(client, batch(times, "seen", 2))
        await eventually(lambda: len(first.changes()) == 2, what="the first changes")
    await eventually(lambda: not hub.push.feeds["dataset1"].reading, what="reader stopped")
    missed = batch(times, "missed", 30)
    await post(client, missed)
    topics = [{"topic": "dataset1", "position": seen["last"], "epoch": seen["epoch"]}]
    async with subscribed(hub.push_url, topics) as sub:
        later = batch(times, "later", 3)
        await post(client, later)
        await eventually(lambda: len(sub.changes()) == 33, what="missed and later changes")
        assert [c["loc"] for c in sub.changes()] == [loc for loc, _, _ in missed + later]
