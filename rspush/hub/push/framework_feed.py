"""One topic's framework feed in one hub process (protocol version 2, docs/protocol.md
"Framework frames"): a single reader of the topic's framework stream (``XREAD BLOCK``)
whose events become one framework notification (Framework Notification §3) per read,
encoded once and handed to the topic's feed for every subscription that asked for them.

Frames are live: a subscription receives the events recorded after it was registered.
Framework events are rare (a rotation, a Resource List update at most once per interval, a
configuration change at startup), so a read holds at most :data:`MAX_EVENTS` of them.
"""

from __future__ import annotations

import asyncio
import logging

from rspush.protocol import ZERO, framework_frame

from ..errors import StoreUnavailable
from ..framework import FRAMEWORK
from ..rotation import cancel_and_wait
from ..store import TopicStore
from .feed import RETRY_S, TopicFeed

log = logging.getLogger("rspush.hub.push")

MAX_EVENTS = 100
"""Events in one framework notification at most (the rest follow in the next)."""
BLOCK_MS = 2000


class FrameworkFeed:
    def __init__(self, store: TopicStore, feed: TopicFeed, base_url: str) -> None:
        self.store = store
        self.feed = feed
        self.base_url = base_url
        self.last = ZERO
        """The position of the last event read."""
        self.sent = 0
        """Framework frames handed to the topic's feed (for tests and status)."""
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        # Live from now: the events recorded before this process started are not resent.
        self.last = await self.store.framework_position(self.feed.topic)
        self._task = asyncio.create_task(self._run(), name=f"rspush-framework-{self.feed.topic}")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        topic = self.feed.topic
        while not self._stopping:
            try:
                events = await self.store.wait_framework_events(
                    topic, self.last, count=MAX_EVENTS, block_ms=BLOCK_MS
                )
            except StoreUnavailable as exc:
                if self._stopping:
                    return
                log.warning("framework feed %s: %s; retrying", topic, exc.__cause__ or exc)
                await asyncio.sleep(RETRY_S)
                continue
            except Exception:
                log.exception("framework feed %s: reading the stream failed; retrying", topic)
                await asyncio.sleep(RETRY_S)
                continue
            if not events:
                continue
            self.last = events[-1].position
            try:
                notification = FRAMEWORK.notification(self.base_url, topic, events)
                self.feed.deliver_framework(framework_frame(topic, self.last, notification))
                self.sent += 1
            except Exception:
                # Never end the reader: a lost frame is a hint lost, the documents still tell.
                log.exception("framework feed %s: delivering failed", topic)
