"""The framework feed of one hub process (protocol version 2, docs/protocol.md "Framework
frames"): one task that reads every topic's framework stream and hands each topic's new
events, as one framework notification (Framework Notification §3) encoded once, to that
topic's feed for every subscription that asked for them.

One reader for all topics, polling every ``[framework] push_interval_s`` with one pipelined
round of ``XRANGE`` (no ``XREAD BLOCK`` per topic): framework events are rare (a rotation, a
Resource List update at most once per interval, a configuration change at startup), and the
change feeds already hold one pooled Redis connection per topic. A notification is a hint
to re-read a document, so a fraction of a second of latency costs nothing.

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
            try:
                await self.round()
            except StoreUnavailable as exc:
                if self._stopping:
                    return
                log.warning("framework feed: %s; retrying", exc.__cause__ or exc)
            except Exception:
                # Never end the reader: a lost frame is a hint lost, the documents still tell.
                log.exception("framework feed: a round failed; retrying")
            await asyncio.sleep(self.interval_s)

    async def round(self) -> int:
        """Read every topic's new events and deliver them; returns the frames delivered."""
        found = await self.store.framework_events_after_each(self._positions, count=MAX_EVENTS)
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
