"""The WebSocket push endpoint: subscribe, replay from a resume point, then the live tail.

Per connection: the first message must be a ``subscribe`` (docs/protocol.md). For each topic
the hub checks the token (private topics), gathers the facts about the stream through
:class:`~rspush.hub.store.TopicStore` (epoch, oldest change, trim mark, where a ``since``
falls) and lets :func:`rspush.protocol.decide_resume` pick the resume point or refuse with
``history-insufficient``. It then registers the subscription with the topic's feed (so live
batches start queueing), replays every change after the resume point in bounded pages, then
flushes the queued batches skipping what the replay already sent: no gap and no duplicate at
the seam.

Bounds (docs/protocol.md, "Limits"): the opening handshake has ``open_timeout_s``, the
subscribe message :data:`SUBSCRIBE_TIMEOUT_S`; sockets are capped per process and per client
address from the moment they are accepted (:mod:`.limits`); every send waits at most
``stall_timeout_s`` for a full send buffer (:mod:`.flow`), in replay as live, so a client
that stops reading is closed as a slow consumer instead of holding memory.

Why one module of this size: one connection's life (admission, subscribe, resume decision,
replay, seam, close) works on that connection's state at every step; the pure parts are in
:mod:`rspush.protocol` (messages, frames, the resume decision), :mod:`.limits` and
:mod:`.flow`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from rspush.protocol import (
    MAX_SUBSCRIBE_BYTES,
    CloseCode,
    EncodedFrame,
    HistoryInsufficient,
    ProtocolError,
    Refusal,
    StreamFacts,
    Subscribed,
    TopicRequest,
    check_replay,
    close_reason,
    decide_resume,
    parse_subscribe,
)
from rspush.resourcesync.w3cdt import from_us

from ..auth import find_holder
from ..connections import connection_cap, limit_flood_logging, open_file_limit
from ..errors import StoreUnavailable
from ..materialise import Urls
from ..settings import Settings
from ..store import StreamEntry, TopicStore
from .feed import Subscription, TopicFeed
from .flow import Stalled, close_slow, send_bounded
from .framework_feed import FrameworkFeed
from .heap import freeze_startup_heap
from .keepalive import Keepalive
from .limits import ConnectionLimiter, service_unavailable

log = logging.getLogger("rspush.hub.push")
REPLAY_PAGE = 1000
SUBSCRIBE_TIMEOUT_S = 10.0
SHUTDOWN_SETTLE_S = 1.0


class _Stalled(Exception):
    """A replay send found the client not reading: close it with its resume position."""

    def __init__(self, sub: Subscription) -> None:
        super().__init__(sub.topic)
        self.sub = sub


class LimitedConnection(ServerConnection):
    """A push connection counted against the caps from the moment it is accepted; over a
    cap, it is answered 503 and closed before any handshake."""

    limiter: ConnectionLimiter
    socket_send_buffer: int | None = None
    _address: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if self.socket_send_buffer is not None and sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.socket_send_buffer)
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        refusal = self.limiter.admit(address)
        if refusal is None:
            self._address = address
            return
        assert isinstance(transport, asyncio.Transport)
        # Before the request is read, so the descriptor is freed at once instead of after the
        # handshake timeout (an idle socket sends no request). A client whose request is
        # already in flight may see a reset instead of the 503: refused either way.
        transport.write(service_unavailable(refusal))
        transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._address is not None:
            self.limiter.release(self._address)
            self._address = None
        super().connection_lost(exc)


class PushServer:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        *,
        on_sent: Callable[[str, int, int, float, float], None] | None = None,
        on_slow: Callable[[str], None] | None = None,
        on_subscribers: Callable[[str, int], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = TopicStore(redis, prefix=settings.redis_prefix)
        self.feeds: dict[str, TopicFeed] = {}
        self.framework: FrameworkFeed | None = None
        """Framework frames (protocol version 2), when ``[framework] enabled``."""
        self.on_sent = on_sent
        self.on_slow = on_slow
        self.on_subscribers = on_subscribers
        push = settings.push
        self.limiter = ConnectionLimiter(
            max_total=connection_cap(push.max_connections, open_file_limit()),
            max_per_address=push.max_connections_per_address,
        )
        self.keepalive = Keepalive(
            push.ping_interval_s, push.ping_timeout_s, close_timeout_s=push.close_timeout_s
        )
        self._replay_slots = asyncio.Semaphore(push.replay_concurrency)
        self._subscribing = 0
        self._settled = asyncio.Event()
        self._settled.set()
        self._server: Any = None

    @property
    def connections(self) -> int:
        """Push sockets this process holds, handshaking ones included."""
        return self.limiter.total

    async def start(self, sock: Any) -> None:
        push = self.settings.push
        for topic in self.settings.topics:
            feed = TopicFeed(
                self.store,
                topic.name,
                epoch=await self.store.epoch(topic.name),
                send_buffer_bytes=push.send_buffer_bytes,
                max_pending_batches=push.max_pending_batches,
                close_timeout_s=push.close_timeout_s,
                on_sent=self.on_sent,
                on_slow=self.on_slow,
            )
            self.feeds[topic.name] = feed
        if self.settings.framework.enabled:
            self.framework = FrameworkFeed(
                self.store,
                self.feeds,
                self.settings.hub.base_url,
                interval_s=self.settings.framework.push_interval_s,
            )
            await self.framework.start()
        limit_flood_logging()
        connection_class = type(
            "PushConnection",
            (LimitedConnection,),
            {"limiter": self.limiter, "socket_send_buffer": push.socket_send_buffer_bytes},
        )
        self._server = await serve(
            self.handle,
            sock=sock,
            open_timeout=push.open_timeout_s,
            ping_interval=None,  # one task pings every connection (.keepalive)
            close_timeout=push.close_timeout_s,
            compression=None,  # frames are sent once to many: per-connection deflate defeats it
            max_size=MAX_SUBSCRIBE_BYTES,  # clients only send small control messages
            write_limit=push.send_buffer_bytes,
            create_connection=connection_class,
        )
        self.keepalive.start()
        freeze_startup_heap()

    async def stop(self) -> None:
        await self.keepalive.stop()
        if self._server is not None:
            # Subscribe messages being served finish registering their topics first (briefly:
            # a long replay is not waited for), so each resume map names every topic.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SHUTDOWN_SETTLE_S):
                    await self._settled.wait()

            # Tell every client to resume elsewhere, with its positions; all at once, so
            # clients that do not read hold the shutdown for one close deadline in all, not
            # one each. Each map is taken just before its close frame is queued: nothing is
            # sent to a connection after that.
            async def close(connection: ServerConnection) -> None:
                resume = {
                    sub.topic: sub.last_sent
                    for feed in self.feeds.values()
                    for sub in feed.subscriptions
                    if sub.connection is connection
                }
                await close_slow(
                    connection,
                    CloseCode.SHUTDOWN,
                    close_reason(resume),
                    deadline_s=self.settings.push.close_timeout_s,
                )

            await asyncio.gather(*(close(c) for c in list(self._server.connections)))
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self.framework is not None:
            await self.framework.stop()
        for feed in self.feeds.values():
            await feed.stop()

    async def handle(self, connection: ServerConnection) -> None:
        forget_handshake(connection)
        self.keepalive.add(connection)
        subs: list[Subscription] = []
        try:
            if not await self._take_subscribe(connection, subs):
                return
            # Only the subscriptions are kept from here on: an idle connection holds nothing
            # of its subscribe message. Nothing else is expected from the client; reading
            # goes on so that a stray message is dropped rather than queued (pings are
            # answered by websockets itself).
            while True:
                await connection.recv()
        except ProtocolError as exc:
            await self._refuse(connection, CloseCode.PROTOCOL_ERROR, "protocol-error", str(exc))
        except TimeoutError:
            await self._refuse(
                connection, CloseCode.PROTOCOL_ERROR, "protocol-error", "no subscribe message"
            )
        except _Refused as exc:
            await self._refuse(connection, exc.code, exc.kind, exc.message)
        except _Stalled as exc:
            resume = {sub.topic: sub.last_sent for sub in [*subs, exc.sub]}
            if self.on_slow is not None:
                self.on_slow(exc.sub.topic)
            await close_slow(
                connection,
                CloseCode.SLOW_CONSUMER,
                close_reason(resume),
                deadline_s=self.settings.push.close_timeout_s,
            )
        except ConnectionClosed:
            pass
        except StoreUnavailable as exc:
            # The store is briefly unreachable or saturated: "try again later" (RFC 6455).
            log.warning("push subscribe failed: %s", exc)
            with contextlib.suppress(ConnectionClosed):
                await connection.close(CloseCode.TRY_AGAIN_LATER, "store unavailable, retry")
        finally:
            self.keepalive.discard(connection)
            for sub in subs:
                _drop(self.feeds[sub.topic], sub)
            self._count()

    async def _take_subscribe(self, connection: ServerConnection, subs: list[Subscription]) -> bool:
        """Read the subscribe message and subscribe each topic, adding to ``subs`` as it
        goes (the caller drops them however this ends); False when a topic's history is
        insufficient (the connection is then closed)."""
        async with asyncio.timeout(SUBSCRIBE_TIMEOUT_S):
            raw = await connection.recv()
        request = parse_subscribe(raw)
        for topic_request in request.topics:
            self._authorise(topic_request.topic, request.token)
        self._subscribing += 1
        self._settled.clear()
        try:
            for topic_request in request.topics:
                outcome = await self._subscribe(
                    connection,
                    topic_request,
                    request.format,
                    framework=request.framework and self.framework is not None,
                )
                if isinstance(outcome, HistoryInsufficient):
                    with contextlib.suppress(ConnectionClosed, Stalled):
                        await self._write(connection, outcome.encode().encode())
                    await connection.close(CloseCode.HISTORY_INSUFFICIENT, "history insufficient")
                    return False
                subs.append(outcome)
        finally:
            self._subscribing -= 1
            if self._subscribing == 0:
                self._settled.set()
        return True

    def _count(self) -> None:
        if self.on_subscribers is not None:
            for topic, feed in self.feeds.items():
                self.on_subscribers(topic, len(feed.subscriptions))

    def _authorise(self, topic: str, token: str | None) -> None:
        config = self.settings.topic(topic)
        if config is None or topic not in self.feeds:
            raise _Refused(CloseCode.UNKNOWN_TOPIC, "unknown-topic", f"no topic {topic!r}")
        if not config.private:
            return
        if token is None:
            raise _Refused(
                CloseCode.UNAUTHORISED, "unauthorised", f"topic {topic!r} is private: send a token"
            )
        holder = find_holder(self.settings.subscribers, token)
        allowed = holder is not None and topic in holder.topics
        if not allowed:
            raise _Refused(
                CloseCode.UNAUTHORISED, "unauthorised", f"this token may not subscribe to {topic!r}"
            )

    async def _subscribe(
        self,
        connection: ServerConnection,
        request: TopicRequest,
        fmt: str,
        *,
        framework: bool = False,
    ) -> Subscription | HistoryInsufficient:
        """Decide where the topic's subscription starts (:func:`decide_resume`), register it
        with the feed, say ``subscribed``, replay, then hand it to the live feed."""
        topic = request.topic
        feed = self.feeds[topic]
        meta = await self.store.push_meta(topic)
        feed.epoch = feed.epoch or meta.epoch
        archive = Urls(self.settings.hub.base_url, topic).change_list_archive
        since = request.resume_since
        decision = decide_resume(
            request,
            StreamFacts(
                epoch=meta.epoch,
                archive=archive,
                oldest=await self.store.oldest(topic),
                trimmed=meta.trimmed,
                trimmed_time=meta.trimmed_time,
                since=None
                if since is None
                else await self.store.locate_since(topic, since, page=REPLAY_PAGE),
            ),
        )
        if isinstance(decision, HistoryInsufficient):
            return decision
        start = decision.after
        await feed.wake()  # then no await until the subscription is added
        sub = Subscription(
            connection=connection,
            topic=topic,
            format=fmt,
            last_sent=feed.last if start is None else start,
            until=feed.last_until if start is None else None,
            framework=framework,
        )
        # From here on live batches queue in sub.pending: nothing is sent before the
        # "subscribed" message, and nothing after the position it names is missed. It counts
        # as a subscriber from here on, replaying or not.
        feed.subscriptions.add(sub)
        self._count()
        try:
            subscribed = Subscribed(topic, meta.epoch, sub.last_sent).encode().encode()
            try:
                await self._write(connection, subscribed)
            except Stalled:
                raise _Stalled(sub) from None
            if sub.until is None and start is not None:
                at = await self.store.entry_at(topic, start)
                sub.until = since if at is None else from_us(at.time_us)
            gap = await self._replay(connection, feed, sub, meta.epoch, archive)
        except BaseException:
            # handle() only cleans up the subscriptions _subscribe returned.
            _drop(feed, sub)
            raise
        if gap is not None:
            _drop(feed, sub)
            return gap
        return sub

    async def _replay(
        self,
        connection: ServerConnection,
        feed: TopicFeed,
        sub: Subscription,
        epoch: str,
        archive: str,
    ) -> HistoryInsufficient | None:
        """Send every stored change after ``sub.last_sent`` in pages, then the queued live
        batches minus what the replay sent; None once the subscription is live."""
        while True:
            # Pages are read and encoded a few at a time per process: a burst of replaying
            # clients then holds a few pages of entries at once, not one each, and cannot
            # starve the live feed. Sending happens outside, with only the frames kept.
            async with self._replay_slots:
                changes = await self.store.entries_after(
                    feed.topic, sub.last_sent, count=REPLAY_PAGE
                )
                # Retention may have trimmed past our cursor since the subscription was
                # decided: the page would then silently start after a gap. The trim records
                # how far it went in the same script, so reading it *after* the page is enough.
                meta = await self.store.push_meta(feed.topic)
                facts = StreamFacts(
                    epoch=epoch,
                    archive=archive,
                    oldest=await self.store.oldest(feed.topic),
                    trimmed=meta.trimmed,
                    trimmed_time=meta.trimmed_time,
                )
                gap = check_replay(feed.topic, sub.last_sent, facts)
                if gap is not None:
                    return gap
                full = len(changes) == REPLAY_PAGE
                frames = self._frames(feed, sub, changes) if changes else []
                del changes
            while frames:
                await self._send_frame(connection, sub, frames.pop(0))
            if not full:
                break
        # Seam: queued live batches, minus what the replay already sent. The replay reads the
        # stream itself, so it may have sent changes the feed has not handed out yet: the
        # subscription goes live only once the feed has caught up with it (their batches
        # queue here meanwhile, and are dropped as repeats), so that every batch it gets
        # live starts right after the last change it was sent.
        while True:
            while sub.pending:
                batch = sub.pending.pop(0)
                fresh = [c for c in batch.changes if c.position > sub.last_sent]
                if len(fresh) == len(batch.changes) and batch.start == sub.until:
                    for frame in feed.encoded(batch, sub.format):
                        await self._send_frame(connection, sub, frame)
                elif fresh:
                    await self._send(connection, feed, sub, fresh)
            if sub.last_sent <= feed.delivered or not await _feed_delivers(feed, connection):
                break
        # Framework frames that arrived meanwhile, in order, before any live one.
        while sub.framework_pending:
            try:
                await self._write(connection, sub.framework_pending.pop(0))
            except Stalled:
                raise _Stalled(sub) from None
        sub.live = True
        return None

    async def _send(
        self,
        connection: ServerConnection,
        feed: TopicFeed,
        sub: Subscription,
        changes: list[StreamEntry],
    ) -> None:
        """Send ``changes`` (the fresh part of a queued batch) as frames contiguous with
        what the subscription was sent before."""
        frames = self._frames(feed, sub, changes)
        while frames:
            await self._send_frame(connection, sub, frames.pop(0))

    @staticmethod
    def _frames(
        feed: TopicFeed, sub: Subscription, changes: list[StreamEntry]
    ) -> list[EncodedFrame]:
        until = from_us(changes[-1].time_us)
        start = sub.until or from_us(changes[0].time_us)
        return feed.encode(changes, start, until, sub.format)

    async def _write(self, connection: ServerConnection, data: bytes) -> None:
        await send_bounded(connection, data, stall_s=self.settings.push.stall_timeout_s)

    async def _send_frame(
        self, connection: ServerConnection, sub: Subscription, frame: EncodedFrame
    ) -> None:
        try:
            await self._write(connection, frame.data)
        except Stalled:
            # The frame is queued ahead of the close frame: a client that reads up to the
            # close frame has it, so the resume position includes it.
            sub.last_sent, sub.until = frame.last, frame.until
            raise _Stalled(sub) from None
        sub.last_sent, sub.until = frame.last, frame.until

    async def _refuse(
        self, connection: ServerConnection, code: int, kind: str, message: str
    ) -> None:
        with contextlib.suppress(ConnectionClosed, Stalled):
            await self._write(connection, Refusal(kind, message).encode().encode())
        await close_slow(
            connection, code, message[:120], deadline_s=self.settings.push.close_timeout_s
        )


def forget_handshake(connection: ServerConnection) -> None:
    """Empty the opening handshake's request and response headers, which nothing reads once
    the connection is open: they are most of what an idle connection would otherwise hold.
    The objects themselves stay (websockets keeps a reference to the request in its parser);
    only their contents go."""
    for message in (connection.request, connection.response):
        if message is not None:
            message.headers.clear()


async def _feed_delivers(feed: TopicFeed, connection: ServerConnection) -> bool:
    """Wait for the feed's next batch: True once it is handed out, False if the connection
    closed first (then nothing is owed to it)."""
    delivery = asyncio.ensure_future(feed.delivery())
    closed = asyncio.ensure_future(connection.wait_closed())
    try:
        await asyncio.wait({delivery, closed}, return_when=asyncio.FIRST_COMPLETED)
        return not closed.done()
    finally:
        delivery.cancel()
        closed.cancel()


def _drop(feed: TopicFeed, sub: Subscription) -> None:
    feed.leave(sub)


class _Refused(Exception):
    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.message = message
