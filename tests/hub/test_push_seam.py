"""The seam between a subscription's replay and the live feed when the replay reads further
than the feed has handed out: a replay reads the stream itself, so it can send changes the
feed has not read yet (the feed waits out a failed read, or is simply a step behind). Those
must not come a second time once the subscription is live (docs/protocol.md: no gap and no
duplicate at the seam)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from rspush.hub.server import RunningHub
from tests.support.fragments import Times
from tests.support.push import Client, batch, post, stream, subscribed
from tests.support.waiting import eventually

JOINS = 40
"""Subscribers that join near the tail, one after the other, while a Source posts."""


@pytest.mark.timeout(120)
async def test_subscribers_joining_at_the_tail_while_changes_arrive_get_each_once(
    hub: RunningHub, client: httpx.AsyncClient, redis: Redis, prefix: str
) -> None:
    assert hub.push_url is not None
    times = Times()
    receipt = await post(client, batch(times, "history", 3))
    epoch = receipt["epoch"]
    stop = asyncio.Event()

    async def source() -> None:
        n = 0
        while not stop.is_set():
            await post(client, batch(times, f"live{n}", 1 + n % 2))
            n += 1

    poster = asyncio.create_task(source())
    joined: list[tuple[str, Client]] = []
    try:
        async with AsyncExitStack() as stack:
            for _ in range(JOINS):
                # The newest change as the resume point: the replay then reads just what
                # arrives while it runs, the changes the feed is about to deliver.
                at = (await stream(redis, prefix))[-1][0]
                resume: dict[str, Any] = {"topic": "dataset1", "position": at, "epoch": epoch}
                joined.append(
                    (at, await stack.enter_async_context(subscribed(hub.push_url, [resume])))
                )
            stop.set()
            await poster
            expected = await stream(redis, prefix)
            last = expected[-1][0]
            await eventually(
                lambda: all(c.positions()[-1:] == [last] for _, c in joined),
                timeout=30,
                what="every subscriber caught up",
            )
            positions = [p for p, _ in expected]
            for at, joiner in joined:
                got = [(c["position"], c["loc"]) for c in joiner.changes()]
                assert got == expected[positions.index(at) + 1 :], at
    finally:
        stop.set()
        await poster


async def _cut_blocked_readers(redis: Redis) -> int:
    """Close every connection waiting in ``XREAD`` (the feed's reader waits there): its read
    fails and the reader waits a moment before it reads again."""
    clients = await redis.client_list()
    blocked = [c for c in clients if c.get("cmd") == "xread" and "b" in c.get("flags", "")]
    for c in blocked:
        await redis.client_kill_filter(_id=c["id"])
    return len(blocked)


@pytest.mark.timeout(60)
async def test_a_replay_ahead_of_the_feed_goes_live_only_once_the_feed_caught_up(
    hub: RunningHub, client: httpx.AsyncClient, redis: Redis
) -> None:
    """Changes appended while the feed's reader cannot read are sent by a joining
    subscription's replay; the feed hands them out again once it reads: the joiner must get
    them once, then the live changes."""
    assert hub.push_url is not None and hub.push is not None
    feed = hub.push.feeds["dataset1"]
    times = Times()
    async with subscribed(hub.push_url) as first:  # keeps the feed reading
        seen = await post(client, batch(times, "seen", 2))
        await eventually(lambda: len(first.changes()) == 2, what="the first changes")
        delivered = feed.delivered
        assert await _cut_blocked_readers(redis) >= 1
        ahead = batch(times, "ahead", 3)
        await post(client, ahead)
        resume = {"topic": "dataset1", "position": seen["last"], "epoch": seen["epoch"]}
        async with subscribed(hub.push_url, [resume]) as joiner:
            await eventually(lambda: len(joiner.changes()) == 3, what="the replayed changes")
            # The replay is ahead of the feed: what this test is about.
            assert feed.delivered == delivered
            later = batch(times, "later", 2)
            await post(client, later)
            await eventually(lambda: len(first.changes()) == 7, what="the feed caught up")
            await eventually(lambda: len(joiner.changes()) >= 5, what="the live changes")
            expected = [loc for loc, _, _ in ahead + later]
            assert [c["loc"] for c in joiner.changes()] == expected
            assert [c["loc"] for c in first.changes()][2:] == expected
