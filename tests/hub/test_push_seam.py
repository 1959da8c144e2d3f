"""The seam between a subscription's replay and the live feed when the replay reads further
than the feed has delivered: a replay reads the stream itself, so it can send changes the
feed has read but not yet handed out, or not yet read. Those must not come a second time once
the subscription is live (docs/protocol.md: no gap and no duplicate at the seam)."""

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
