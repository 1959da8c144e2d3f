"""Change List rotation and stream retention, run by exactly one hub process per topic.

Whoever holds the topic's lease (a Redis key with a TTL, renewed every round; see
:meth:`TopicStore.acquire_lease`) closes the open Change List once it reaches
``changelist_max_entries`` or ``changelist_max_age_s``: its entries become an immutable closed
list whose ``until`` is its last change's time, and the next list starts ``from`` there, so
the archive is gap-free. If the holder dies, its lease expires and another process takes
over; the rotation script checks the lease token and the open list's start, so a stale
holder can never close a list twice.

Framework notifications: the rotation script records the rotation's framework events in the
same atomic step (:mod:`.framework`); each round the lease holder also announces a changed
Resource List, at most once per ``[framework] resourcelist_interval_s``.

Retention: stream entries older than ``retention_s`` are trimmed, but never one that is not
yet in a closed list — history moves to the archive, it is never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from rspush.resourcesync.w3cdt import from_us, to_us

from .framework import FrameworkPolicy, announce_resource_list, rotation_announcement
from .materialise import Urls, change_list
from .store import ClosedList, ListedChanges, TopicMeta, TopicStore

log = logging.getLogger("rspush.hub.rotation")


@dataclass(frozen=True, slots=True)
class RotationPolicy:
    max_entries: int
    max_age_s: float
    retention_s: float


def entries_to_close(meta: TopicMeta, now: datetime, policy: RotationPolicy) -> int:
    """How many open entries to close now (0: none). Pure decision."""
    if meta.open_count <= 0 or meta.open_from_us is None:
        return 0
    if meta.open_count >= policy.max_entries:
        return policy.max_entries
    if meta.open_since_us is None:
        return 0
    age_s = (to_us(now) - meta.open_since_us) / 1_000_000
    return meta.open_count if age_s >= policy.max_age_s else 0


def trim_floor(open_start: str, now: datetime, retention_s: float) -> str | None:
    """The MINID for XTRIM: older than the retention window AND already in a closed list."""
    if open_start == "0-0":
        return None  # nothing closed yet: keep everything
    cutoff_ms = (to_us(now) - int(retention_s * 1_000_000)) // 1000
    ms, _, seq = open_start.partition("-")
    after_closed = (int(ms), int(seq) + 1)  # the first id not in a closed list
    floor = min(after_closed, (cutoff_ms, 0))
    return f"{floor[0]}-{floor[1]}" if floor[0] > 0 else None


async def rotate_once(
    store: TopicStore,
    urls: Urls,
    topic: str,
    *,
    token: str,
    now: datetime,
    policy: RotationPolicy,
    framework: FrameworkPolicy | None = None,
) -> ClosedList | None:
    """Close one Change List if due; trim the stream. Returns the list closed, if any.
    With ``framework``, the rotation's framework events are recorded with it."""
    meta = await store.meta(topic)
    count = entries_to_close(meta, now, policy)
    closed: ClosedList | None = None
    if count:
        listed = await store.listed(topic, meta.open_start, limit=count)
        if listed is not None and meta.open_from_us is not None:
            closed = await _close(store, urls, topic, token, meta, listed, now, framework)
    floor = trim_floor((await store.meta(topic)).open_start, now, policy.retention_s)
    if floor is not None:
        await store.trim(topic, floor)
    return closed


async def _close(
    store: TopicStore,
    urls: Urls,
    topic: str,
    token: str,
    meta: TopicMeta,
    listed: ListedChanges,
    now: datetime,
    framework: FrameworkPolicy | None = None,
) -> ClosedList | None:
    assert meta.open_from_us is not None
    number = await store.closed_count(topic)
    until_us = max(listed.last_time_us, meta.open_from_us)
    closed = ClosedList(
        number=number,
        from_us=meta.open_from_us,
        until_us=until_us,
        first_id=listed.first_id,
        last_id=listed.last_id,
        count=listed.count,
    )
    xml = change_list(
        urls, start=from_us(meta.open_from_us), until=from_us(until_us), entries=listed.xml
    )
    outcome = await store.close_list(
        topic,
        token=token,
        expected_open_start=meta.open_start,
        closed=closed,
        xml=xml,
        now_us=to_us(now),
        framework=None
        if framework is None
        else rotation_announcement(urls, number, framework.max_events),
    )
    if outcome != "ok":
        log.info("rotation of %s skipped: %s", topic, outcome)
        return None
    log.info("closed Change List %d of %s (%d changes)", number, topic, listed.count)
    return closed


async def cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it has ended.

    One ``cancel()`` is not always enough: a cancellation that lands inside a redis-py command
    can come out as a connection error, which a retrying loop survives. Callers also set a
    stop flag the loop checks; cancel until the task is done (tests/hub/test_rotation.py)."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()


class Rotator:
    """The background task of one hub process: per topic, hold the lease or wait for it."""

    def __init__(
        self,
        store: TopicStore,
        base_url: str,
        topics: list[str],
        policy: RotationPolicy,
        *,
        interval_s: float,
        lease_ttl_s: float,
        on_closed: Callable[[str], None] | None = None,
        framework: FrameworkPolicy | None = None,
    ) -> None:
        self.store = store
        self.base_url = base_url
        self.topics = topics
        self.policy = policy
        self.interval_s = interval_s
        self.lease_ttl_ms = int(lease_ttl_s * 1000)
        self.token = secrets.token_hex(16)
        self.rotations = 0
        self.on_closed = on_closed
        self.framework = framework
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def round(self, now: datetime) -> list[ClosedList]:
        closed = []
        for topic in self.topics:
            if not await self.store.acquire_lease(topic, self.token, self.lease_ttl_ms):
                continue
            urls = Urls(self.base_url, topic)
            # Close as many lists as are due (a burst may have filled several).
            while True:
                result = await rotate_once(
                    self.store,
                    urls,
                    topic,
                    token=self.token,
                    now=now,
                    policy=self.policy,
                    framework=self.framework,
                )
                if result is None:
                    break
                self.rotations += 1
                if self.on_closed is not None:
                    self.on_closed(topic)
                closed.append(result)
            if self.framework is not None:
                await announce_resource_list(self.store, urls, self.framework, now)
        return closed

    async def run(self) -> None:
        # The flag, not only cancellation, ends the loop: redis-py may turn a cancellation
        # that lands inside a command into a connection error, which the loop survives.
        while not self._stopping:
            try:
                await self.round(datetime.now(UTC))
            except Exception:  # keep rotating after a transient Redis failure
                if self._stopping:
                    return
                log.exception("rotation round failed")
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="rspush-rotation")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        # Best effort: an unreleased lease expires by itself after lease_ttl_s.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                for topic in self.topics:
                    await self.store.release_lease(topic, self.token)
