"""One topic's live feed in one hub process: a single stream reader (``XREAD BLOCK``, through
:meth:`TopicStore.wait_entries`) whose batches fan out in memory to every subscriber of the topic.

Each batch is encoded once per format, framed once (:mod:`.fanout`), and the same bytes are
written to every live subscriber's socket (no per-connection encoding, framing or coroutine).
Batching adapts by itself: ``XREAD`` returns whatever arrived since the last read, so under
light load a change goes out alone at once and under heavy load batches grow up to
``MAX_BATCH``; a batch whose frame would pass :data:`rspush.protocol.MAX_FRAME_BYTES` or
``send_buffer_bytes`` goes out as several contiguous frames.

Backpressure: before each broadcast a connection whose transport write buffer is over
``send_buffer_bytes`` is closed with :attr:`CloseCode.SLOW_CONSUMER` and its resume position,
so one slow Destination never slows the others or grows the hub's memory without bound. A
subscription still replaying is bounded by its replay's sends (:mod:`.flow`) and by
``max_pending_batches``.

The reader runs only while the topic has subscribers: a topic nobody follows costs ingest
nothing (no read-back of every append). The first subscriber wakes it (:meth:`TopicFeed.wake`)
from the stream's newest entry, before it takes its own starting position; the last one to
leave stops it. Exactness does not depend on the reader: a subscription with a resume point
replays from the stream, and one without starts at the position the woken reader starts from.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from websockets.asyncio.server import ServerConnection

from rspush.protocol import (
    FRAME_ENCODERS,
    MAX_FRAME_BYTES,
    ZERO,
    CloseCode,
    EncodedFrame,
    Position,
    close_reason,
    encode_frames,
)
from rspush.resourcesync.w3cdt import from_us

from ..errors import StoreUnavailable
from ..rotation import cancel_and_wait
from ..store import StreamEntry, TopicStore
from .fanout import wire_text, write_text
from .flow import close_slow

RETRY_S = 0.5
"""Pause before the reader retries a failed read of the stream."""

log = logging.getLogger("rspush.hub.push")
MAX_BATCH = 1000
BLOCK_MS = 2000


@dataclass
class Batch:
    changes: list[StreamEntry]
    start: datetime
    until: datetime
    encoded: dict[str, list[EncodedFrame]] = field(default_factory=dict)
    wired: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    """Per format, each frame's payload and its bytes on the wire (:func:`.fanout.wire_text`)."""

    @property
    def last(self) -> Position:
        return self.changes[-1].position


@dataclass(eq=False, slots=True)
class Subscription:
    """One topic of one connection. Until ``live``, feed batches wait in ``pending`` while
    the connection's replay runs; the seam is then de-duplicated by position."""

    connection: ServerConnection
    topic: str
    format: str
    last_sent: Position
    until: datetime | None
    live: bool = False
    pending: list[Batch] = field(default_factory=list)
    closed: bool = False
    framework: bool = False
    """The client asked for framework frames (protocol version 2)."""
    framework_pending: list[bytes] = field(default_factory=list)
    """Framework frames that arrived while the replay ran: sent once it is live."""


class TopicFeed:
    def __init__(
        self,
        store: TopicStore,
        topic: str,
        *,
        epoch: str,
        send_buffer_bytes: int,
        max_pending_batches: int,
        close_timeout_s: float = 5.0,
        on_sent: Callable[[str, int, int, float, float], None] | None = None,
        on_slow: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.topic = topic
        self.epoch = epoch
        self.send_buffer_bytes = send_buffer_bytes
        self.max_pending_batches = max_pending_batches
        self.close_timeout_s = close_timeout_s
        self.subscriptions: set[Subscription] = set()
        self.last = ZERO
        """The position the reader has read through."""
        self.last_until: datetime | None = None
        self.delivered = ZERO
        """The position of the last batch handed to the subscriptions."""
        self._deliveries: list[asyncio.Future[None]] = []
        self.on_sent = on_sent
        self.on_slow = on_slow
        self._task: asyncio.Task[None] | None = None
        self._retired: set[asyncio.Task[None]] = set()
        self._generation = 0
        self._waking = asyncio.Lock()
        self._stopping = False
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def reading(self) -> bool:
        """Whether the reader runs (only while the topic has subscribers)."""
        return self._task is not None

    async def wake(self) -> None:
        """Start the reader from the stream's newest entry unless it runs. A caller adds its
        subscription right after, with no await in between: the reader cannot stop before."""
        async with self._waking:
            if self._task is not None or self._stopping:
                return
            # A reader stopped a moment ago must be gone before another reads from ``last``.
            for task in list(self._retired):
                await cancel_and_wait(task)
            newest = await self.store.newest(self.topic)
            if self._task is not None:
                return
            self.last = self.delivered = ZERO if newest is None else newest.position
            self.last_until = None if newest is None else from_us(newest.time_us)
            self._generation += 1
            self._task = asyncio.create_task(
                self._run(self._generation), name=f"rspush-feed-{self.topic}"
            )

    def leave(self, sub: Subscription) -> None:
        """``sub`` ends; the reader stops with the last subscription."""
        sub.closed = True
        self.subscriptions.discard(sub)
        if not self.subscriptions and self._task is not None:
            task, self._task = self._task, None
            self._generation += 1  # the reader's loop ends even if the cancel is swallowed
            task.cancel()
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)

    async def delivery(self) -> None:
        """Wait until the next batch has been handed out (or the feed stops)."""
        waiter = asyncio.get_running_loop().create_future()
        self._deliveries.append(waiter)
        await waiter

    def _delivered(self, position: Position) -> None:
        self.delivered = position
        waiters, self._deliveries = self._deliveries, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def stop(self) -> None:
        self._stopping = True
        self._delivered(self.delivered)
        self._generation += 1
        tasks = [*self._retired, *([self._task] if self._task is not None else [])]
        self._task = None
        for task in tasks:
            await cancel_and_wait(task)

    async def _run(self, generation: int) -> None:
        # The next read goes out once a batch is written, not before: what is appended while
        # the sockets are written then comes back as one batch, so under load frames grow
        # instead of multiplying (each frame costs one write per subscriber). A read sent
        # ahead would save one round trip but be answered by the first append alone.
        while not self._stopping and generation == self._generation:
            try:
                changes = await self.store.wait_entries(
                    self.topic, self.last, count=MAX_BATCH, block_ms=BLOCK_MS
                )
            except StoreUnavailable as exc:
                # The server restarts or is unreachable: retry until it is back; the
                # subscribers stay connected and get everything from ``self.last`` on.
                if self._stopping:
                    return
                log.warning("feed %s: %s; retrying", self.topic, exc.__cause__ or exc)
                await asyncio.sleep(RETRY_S)
                continue
            except Exception:
                # Never end silently: subscribers would wait on an open connection for ever.
                log.exception("feed %s: reading the stream failed; retrying", self.topic)
                await asyncio.sleep(RETRY_S)
                continue
            if not changes:
                continue
            until = from_us(changes[-1].time_us)
            start = self.last_until or from_us(changes[0].time_us)
            self.last = changes[-1].position
            self.last_until = until
            try:
                self.deliver(Batch(changes, start, until))
            except Exception:
                # A failed delivery must not end the reader (subscribers would wait for
                # ever); whoever missed the batch is closed below the next time, or resumes.
                log.exception("feed %s: delivering a batch failed", self.topic)

    def encoded(self, batch: Batch, fmt: str) -> list[EncodedFrame]:
        """The batch's frames in ``fmt`` (one unless it passes the frame size bound),
        encoded once for every subscriber."""
        frames = batch.encoded.get(fmt)
        if frames is None:
            frames = self.encode(batch.changes, batch.start, batch.until, fmt)
            batch.encoded[fmt] = frames
        return frames

    def wired(self, batch: Batch, fmt: str) -> list[tuple[bytes, bytes]]:
        """The batch's frames in ``fmt``, each as its payload and its bytes on the wire,
        framed once for every subscriber."""
        frames = batch.wired.get(fmt)
        if frames is None:
            frames = [(frame.data, wire_text(frame.data)) for frame in self.encoded(batch, fmt)]
            batch.wired[fmt] = frames
        return frames

    def encode(
        self, changes: list[StreamEntry], start: datetime, until: datetime, fmt: str
    ) -> list[EncodedFrame]:
        # A frame no larger than the send buffer either: the buffer then bounds what one
        # connection holds (limit + one frame) in replay as live.
        frames = encode_frames(
            FRAME_ENCODERS[fmt],
            self.topic,
            self.epoch,
            start,
            until,
            changes,
            max_bytes=min(MAX_FRAME_BYTES, self.send_buffer_bytes),
        )
        if any(len(frame.data) > MAX_FRAME_BYTES for frame in frames):
            # Only a single change larger than MAX_CHANGE_BYTES gets here.
            log.error(
                "topic %s: change %s exceeds the frame size bound", self.topic, frames[-1].last
            )
        return frames

    def deliver(self, batch: Batch) -> None:
        """Hand a batch to every subscription: broadcast to the live ones, queue for the
        ones still replaying."""
        # Runs per subscriber per batch: what can be is taken out of the loop.
        by_format: dict[str, list[ServerConnection]] = {}
        last, until, limit = batch.last, batch.until, self.send_buffer_bytes
        for sub in list(self.subscriptions):
            if sub.closed:
                continue
            if not sub.live:
                sub.pending.append(batch)
                if len(sub.pending) > self.max_pending_batches:
                    self.close_slow(sub)
                continue
            connection = sub.connection
            transport = connection.transport
            if transport is not None and transport.get_write_buffer_size() > limit:
                self.close_slow(sub)
                continue
            connections = by_format.get(sub.format)
            if connections is None:
                connections = by_format[sub.format] = []
            connections.append(connection)
            sub.last_sent = last
            sub.until = until
        lag = time.time() - batch.changes[0].position.ms / 1000
        writing = 0.0  # the socket writes alone, not the encoding and framing before them
        subscribers = 0
        for fmt, connections in by_format.items():
            frames = self.wired(batch, fmt)
            started = time.perf_counter()
            for payload, wire in frames:
                write_text(connections, payload, wire)
            writing += time.perf_counter() - started
            subscribers += len(connections)
        if self.on_sent is not None and subscribers:
            self.on_sent(self.topic, subscribers, len(batch.changes), lag, writing)
        self._delivered(last)

    def deliver_framework(self, frame: bytes) -> None:
        """Hand a framework frame to every subscription that asked for them: broadcast to
        the live ones, queue for the ones still replaying (bounded like change batches)."""
        connections = []
        for sub in list(self.subscriptions):
            if sub.closed or not sub.framework:
                continue
            if not sub.live:
                sub.framework_pending.append(frame)
                if len(sub.framework_pending) > self.max_pending_batches:
                    self.close_slow(sub)
                continue
            if self._over_limit(sub.connection):
                self.close_slow(sub)
                continue
            connections.append(sub.connection)
        if connections:
            write_text(connections, frame, wire_text(frame))

    def _over_limit(self, connection: ServerConnection) -> bool:
        transport = connection.transport
        return transport is not None and (
            transport.get_write_buffer_size() > self.send_buffer_bytes
        )

    def close_slow(self, sub: Subscription) -> None:
        self.leave(sub)
        if self.on_slow is not None:
            self.on_slow(self.topic)
        reason = close_reason({self.topic: sub.last_sent})
        task = asyncio.create_task(
            close_slow(
                sub.connection, CloseCode.SLOW_CONSUMER, reason, deadline_s=self.close_timeout_s
            )
        )
        # The loop keeps only weak references to tasks: hold it until it is done.
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
