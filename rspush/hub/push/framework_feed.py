"""The framework feed of one hub process (protocol version 2, docs/protocol.md "Framework
frames"): one task that reads every topic's framework stream and hands each topic's new
events, as one framework notification (Framework Notification §3) encoded once, to that
topic's feed for every subscription that asked for them.

One reader for all topics, not one per topic (the change feeds already hold a pooled Redis
connection each): one ``XREAD BLOCK`` naming every topic's framework stream, so an idle hub
costs one blocked connection and an event goes out at once. On a Redis Cluster the streams
live in different slots and one command cannot name them all: there the reader polls, one
pipelined round of ``XRANGE`` every ``[framework] push_interval_s`` — framework events are
rare and a hint to re-read a document, so a fraction of a second of latency costs nothing.
(``bench/bench_framework.py``: on 1,000 idle topics one multi-key ``XREAD`` takes about a
sixth of a pipelined round.)

Frames are live: a subscription receives the events recorded after it was registered.
"""

from __future__ import annotations

import asyncio
import logging

from rspush.protocol import Position, framework_frame

from ..errors import StoreUnavailable
from ..framework import FRAMEWORK
from ..rotation import cancel_and_wait
from ..store import TopicStore
from .feed import TopicFeed

log = logging.getLogger("rspush.hub.push")

MAX_EVENTS = 100
"""Events of one topic in one framework notification at most (the rest follow next)."""
BLOCK_MS = 2000
"""How long one ``XREAD BLOCK`` waits before it is issued again (stop requests, too)."""


class FrameworkFeed:
    def __init__(
        self, store: TopicStore, feeds: dict[str, TopicFeed], base_url: str, *, interval_s: float
    ) -> None:
        self.store = store
        self.feeds = feeds
        self.base_url = base_url
        self.interval_s = interval_s
        self.sent = 0
        """Framework frames handed to the topics' feeds (for tests and status)."""
        self._positions: dict[str, Position] = {}
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        # Live from now: the events recorded before this process started are not resent.
        self._positions = {t: await self.store.framework_position(t) for t in self.feeds}
        self._task = asyncio.create_task(self._run(), name="rspush-framework")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while not self._stopping:
            blocking = not self.store.is_cluster
            try:
                await self.round(block_ms=BLOCK_MS if blocking else None)
                if blocking:
                    continue
            except StoreUnavailable as exc:
                if self._stopping:
                    return
                log.warning("framework feed: %s; retrying", exc.__cause__ or exc)
            except Exception:
                # Never end the reader: a lost frame is a hint lost, the documents still tell.
                log.exception("framework feed: a round failed; retrying")
            await asyncio.sleep(self.interval_s)

    async def round(self, *, block_ms: int | None = None) -> int:
        """Read every topic's new events (waiting up to ``block_ms`` for one, in one
        blocking read; None: one pipelined read, no wait) and deliver them; returns the
        frames delivered."""
        if not self._positions:
            return 0
        if block_ms is None:
            found = await self.store.framework_events_after_each(self._positions, count=MAX_EVENTS)
        else:
            found = await self.store.wait_framework_events_all(
                self._positions, count=MAX_EVENTS, block_ms=block_ms
            )
        delivered = 0
        for topic, events in found.items():
            if not events:
                continue
            self._positions[topic] = events[-1].position
            notification = FRAMEWORK.notification(self.base_url, topic, events)
            frame = framework_frame(topic, events[-1].position, notification)
            self.feeds[topic].deliver_framework(frame)
            delivered += 1
        self.sent += delivered
        return delivered
