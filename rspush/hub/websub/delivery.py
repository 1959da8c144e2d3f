"""Delivery of notifications to verified subscriptions (notification spec §4.3, WebSub §7).

Exactly one hub process delivers a subscription at a time: the one holding its lease (the
rotation's lease script on the subscription's own key, renewed while it works; another
process takes over ``worker_lease_s`` after a holder dies). The holder runs one task per
subscription, so a slow callback only ever delays itself:

1. read the subscription and its cursor (the last stream position delivered with a 2xx, and
   where that notification's interval ended);
2. take the events after the cursor, from this process's recent-events cache of the channel
   (:class:`Feed`, one ``XREAD BLOCK`` per channel) or from the stream (``XRANGE``);
3. if retention trimmed the stream past the cursor, send the channel's "history moved"
   notification for the lost interval first (docs/websub.md);
4. POST one notification (bounded by entries and bytes) with ``Link`` self and hub, signed
   when the subscription has a secret; on a 2xx move the cursor (a script that checks the
   lease), otherwise retry with backoff, and drop the subscription past the retry horizon.

A crash between the callback's 2xx and the cursor's move re-sends that notification once to
the next holder: duplicates happen only at that seam, never gaps.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import secrets
import time
from typing import Any, Literal

from rspush.protocol import ZERO, Position

from ..errors import StoreUnavailable
from ..materialise import Urls
from ..metrics import HubMetrics
from ..rotation import cancel_and_wait
from ..settings import Settings
from ..store import TopicStore
from .backoff import Backoff
from .batches import interval, split
from .callbacks import REQUEST_ERRORS, CallbackClient
from .channels import CHANNELS, Channel
from .leases import expired
from .records import Cursor, Subscription
from .signature import HEADER, sign
from .subscriptions import now_us

log = logging.getLogger("rspush.hub.websub")

FEED_CACHE_EVENTS = 20_000
"""Recent events of a channel kept in memory per process: subscriptions at the tail read
them from here rather than each from Redis."""
FEED_READ = 1000
FEED_BLOCK_MS = 1000
IDLE_WAIT_S = 1.0
"""How long a caught-up task waits for new events before it looks at its record again
(expiry, unsubscribe)."""
STORE_RETRY_S = 0.5
RECORD_REFRESH_S = 1.0
"""How often a delivering task reads its subscription's record again (renewals, secret)."""


class _Stop(Exception):
    """This process no longer delivers the subscription (lease lost, or unsubscribed)."""


class Feed:
    """The recent events of one channel of one topic, read by one ``XREAD BLOCK`` loop; tasks
    waiting for new events wait on :attr:`changed`."""

    def __init__(self, store: TopicStore, key: str, channel: Channel) -> None:
        self.store = store
        self.key = key
        self.channel = channel
        self.events: list[Any] = []
        self.positions: list[Position] = []
        self.floor: Position | None = None
        """The cache holds every event after this position (None: not started)."""
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"rspush-websub-feed-{self.key}")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait(self._task)

    def after(self, position: Position, count: int) -> list[Any] | None:
        """Up to ``count`` events after ``position``, or None when the cache does not reach
        back that far."""
        if self.floor is None or position < self.floor:
            return None
        start = bisect.bisect_right(self.positions, position)
        return self.events[start : start + count]

    async def _run(self) -> None:
        last: Position | None = None
        while not self._stopping:
            try:
                if last is None:
                    newest = await self.store.last_row(self.key, self.channel.decode)
                    last = ZERO if newest is None else newest.position
                    self.floor = last
                rows = await self.store.wait_rows(
                    self.key, self.channel.decode, last, count=FEED_READ, block_ms=FEED_BLOCK_MS
                )
            except StoreUnavailable:
                await asyncio.sleep(STORE_RETRY_S)
                continue
            if not rows:
                continue
            self.events += rows
            self.positions += [row.position for row in rows]
            last = self.positions[-1]
            excess = len(self.events) - FEED_CACHE_EVENTS
            if excess > 0:
                self.floor = self.positions[excess - 1]
                del self.events[:excess], self.positions[:excess]
            woken, self.changed = self.changed, asyncio.Event()
            woken.set()


class Deliveries:
    """Every subscription this process delivers, and the scan that finds new ones."""

    def __init__(
        self,
        settings: Settings,
        store: TopicStore,
        client: CallbackClient,
        metrics: HubMetrics,
    ) -> None:
        self.settings = settings
        self.config = settings.websub
        self.store = store
        self.client = client
        self.metrics = metrics
        self.base_url = settings.hub.base_url
        self.token = secrets.token_hex(16)
        self.lease_ms = int(self.config.worker_lease_s * 1000)
        self.backoff = Backoff(
            self.config.retry_base_s, self.config.retry_max_s, self.config.retry_horizon_s
        )
        self.workers: dict[str, asyncio.Task[None]] = {}
        self.feeds: dict[tuple[str, str], Feed] = {}
        self._poke = asyncio.Event()
        self._stop = asyncio.Event()
        self._scanner: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._scanner = asyncio.create_task(self._scan_loop(), name="rspush-websub-scan")

    def poke(self, subscription: str | None = None) -> None:
        """Look for subscriptions to deliver now (one was just verified)."""
        self._poke.set()

    def drop(self, subscription: str) -> None:
        """Stop delivering a subscription now (this process verified its unsubscribe; other
        processes notice within :data:`RECORD_REFRESH_S`, and their cursor moves fail)."""
        task = self.workers.get(subscription)
        if task is not None:
            task.cancel()

    async def stop(self) -> None:
        self._stop.set()
        if self._scanner is not None:
            await cancel_and_wait(self._scanner)
        for task in list(self.workers.values()):
            await cancel_and_wait(task)
        for feed in self.feeds.values():
            await feed.stop()

    async def _scan_loop(self) -> None:
        while not self._stop.is_set():
            self._poke.clear()
            try:
                await self.scan()
            except StoreUnavailable:
                pass
            except Exception:
                log.exception("websub: scan failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.scan_interval_s):
                    await self._poke.wait()

    async def scan(self) -> None:
        """Start a task for every subscription nobody delivers (its lease is free); remove
        expired ones (WebSub §5.1: a lease ends the subscription)."""
        for sid, text in (await self.store.subscriptions()).items():
            if sid in self.workers or self._stop.is_set():
                continue
            if not await self.store.acquire_subscription_lease(sid, self.token, self.lease_ms):
                continue
            record = Subscription.from_json(text)
            if expired(record.expires_us, now_us()):
                await self._remove(sid, record, "expired")
                await self.store.release_subscription_lease(sid, self.token)
                continue
            self.workers[sid] = asyncio.create_task(self._work(sid), name=f"rspush-websub-{sid}")
            # Set, not computed on scrape: with --workers, another process serves /metrics.
            self.metrics.websub_delivering.set(len(self.workers))

    def _feed(self, topic: str, channel: Channel) -> Feed:
        feed = self.feeds.get((topic, channel.name))
        if feed is None:
            key = channel.stream_key(self.store.keys(topic))
            feed = self.feeds[(topic, channel.name)] = Feed(self.store, key, channel)
            feed.start()
        return feed

    def _allowed(self, record: Subscription) -> bool:
        config = self.settings.topic(record.topic)
        if config is None:
            return False
        if record.channel == "framework" and not self.settings.framework.enabled:
            return False  # the hub no longer offers the channel (nothing to deliver)
        if not config.private:
            return True
        holder = next((s for s in self.settings.subscribers if s.name == record.subscriber), None)
        return holder is not None and record.topic in holder.topics

    async def _remove(self, sid: str, record: Subscription, reason: str) -> None:
        await self.store.remove_subscription(sid)
        self.metrics.websub_removed.labels(reason).inc()
        log.warning("websub: removed %s on %s (%s)", record.callback, record.topic_uri, reason)

    async def _work(self, sid: str) -> None:
        try:
            await self._deliver_loop(sid)
        except _Stop:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("websub: delivery task of %s failed", sid)
        finally:
            self.workers.pop(sid, None)
            self.metrics.websub_delivering.set(len(self.workers))
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await self.store.release_subscription_lease(sid, self.token)

    async def _deliver_loop(self, sid: str) -> None:
        """Deliver until caught out (unsubscribed, expired, lease lost, given up, stopped).

        While this process holds the lease it is the cursor's only writer, so the cursor is
        kept here between deliveries; the record (lease, secret, existence) is read again
        every :data:`RECORD_REFRESH_S`, and a cursor move fails at once on a subscription
        removed meanwhile."""
        attempt = 0
        clean = False
        renew_at = time.monotonic() + self.config.worker_lease_s / 3
        refresh_at = 0.0
        record: Subscription | None = None
        cursor = Cursor.decode("0-0")
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now >= renew_at:
                    if not await self.store.acquire_subscription_lease(
                        sid, self.token, self.lease_ms
                    ):
                        return  # another process took over
                    renew_at = now + self.config.worker_lease_s / 3
                if record is None or now >= refresh_at:
                    got = await self.store.subscription(sid)
                    if got is None:
                        return  # unsubscribed
                    record, cursor = Subscription.from_json(got[0]), Cursor.decode(got[1])
                    refresh_at = now + RECORD_REFRESH_S
                    if expired(record.expires_us, now_us()):
                        await self._remove(sid, record, "expired")
                        return
                    if record.channel not in CHANNELS or not self._allowed(record):
                        await self._remove(sid, record, "not-allowed")
                        return
                outcome = await self._step(sid, record, cursor, CHANNELS[record.channel])
            except StoreUnavailable:
                await self._sleep(STORE_RETRY_S)
                continue
            if outcome is None:
                continue  # caught up
            if outcome is not False:
                cursor = outcome
                renew_at = time.monotonic() + self.config.worker_lease_s / 3
                if not clean:
                    await self.store.delivered(sid)
                    clean = True
                attempt = 0
                continue
            attempt += 1
            clean = False
            since = await self.store.failing_since(sid, now_us())
            if self.backoff.given_up((now_us() - since) / 1e6):
                await self._remove(sid, record, "retries-exhausted")
                return
            await self._sleep(self.backoff.delay(attempt))

    async def _step(
        self, sid: str, record: Subscription, cursor: Cursor, channel: Channel
    ) -> Cursor | Literal[False] | None:
        """One delivery: the new cursor once delivered, False when it failed, None when
        there was nothing to deliver (after waiting a little for new events)."""
        feed = self._feed(record.topic, channel)
        wake = feed.changed
        urls = Urls(self.base_url, record.topic)
        limit = self.config.max_entries_per_notification
        events = feed.after(cursor.position, limit)
        if events is None:
            key = channel.stream_key(self.store.keys(record.topic))
            events = await self.store.rows_after(key, channel.decode, cursor.position, count=limit)
            trimmed = await channel.trimmed(self.store, record.topic)
            if trimmed is not None and trimmed[0] > cursor.position:
                return await self._history_moved(sid, record, cursor, channel, urls, trimmed)
        if not events:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(IDLE_WAIT_S):
                    await wake.wait()
            return None
        count = next(
            split(
                (channel.size(e) for e in events),
                max_entries=limit,
                max_bytes=self.config.max_notification_bytes,
            )
        )
        batch = events[:count]
        span = interval(cursor.until_us, [e.time_us for e in batch])
        body = channel.build(urls, span, batch)
        if not await self._post(record, urls, body):
            return False
        self.metrics.websub_changes.labels(record.topic).inc(len(batch))
        self.metrics.websub_lag.labels(record.topic).observe(
            max(time.time() - batch[-1].position.ms / 1000, 0.0)
        )
        return await self._advance(sid, Cursor(batch[-1].position, span.until_us))

    async def _advance(self, sid: str, cursor: Cursor) -> Cursor:
        if not await self.store.advance_cursor(
            sid, self.token, cursor.encode(), ttl_ms=self.lease_ms
        ):
            raise _Stop  # another process took over, or the subscription is gone
        return cursor

    async def _history_moved(
        self,
        sid: str,
        record: Subscription,
        cursor: Cursor,
        channel: Channel,
        urls: Urls,
        trimmed: tuple[Position, int],
    ) -> Cursor | Literal[False]:
        position, time_us = trimmed
        span = interval(cursor.until_us, [time_us])
        if not await self._post(record, urls, channel.moved(urls, span)):
            return False
        self.metrics.websub_history_moved.labels(record.topic).inc()
        log.warning("websub: %s fell behind retention on %s", record.callback, record.topic_uri)
        return await self._advance(sid, Cursor(position, span.until_us))

    async def _post(self, record: Subscription, urls: Urls, body: bytes) -> bool:
        headers = {
            "Content-Type": "application/xml",
            # Notification spec §4.3: Link self (the topic URI) and hub; WebSub §7.
            "Link": f'<{record.topic_uri}>; rel="self", <{urls.hub}>; rel="hub", '
            f'<{urls.capability_list}>; rel="resourcesync"',
        }
        if record.secret:
            headers[HEADER] = sign(record.secret, body)
        try:
            answer = await self.client.post(record.callback, headers, body)
        except REQUEST_ERRORS as exc:
            log.info("websub: delivery to %s failed: %r", record.callback, exc)
            self.metrics.websub_deliveries.labels("failed").inc()
            return False
        self.metrics.websub_deliveries.labels("ok" if answer.ok else "failed").inc()
        return answer.ok

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()
