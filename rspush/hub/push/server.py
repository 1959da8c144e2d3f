"""The WebSocket push endpoint: subscribe, replay from a resume point, then the live tail.

Per connection: the first message must be a ``subscribe`` (docs/protocol.md). For each topic
the hub checks the token (private topics), gathers the facts about the stream through
:class:`~rspush.hub.store.TopicStore` (epoch, oldest change, trim mark, where a ``since``
falls) and lets :func:`rspush.protocol.decide_resume` pick the resume point or refuse with
``history-insufficient``. It then registers the subscription with the topic's feed (so live
batches start queueing), replays every change after the resume point in bounded pages, then
flushes the queued batches skipping what the replay already sent: no gap and no duplicate at
the seam.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from rspush.protocol import (
    FRAME_ENCODERS,
    CloseCode,
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

from ..auth import token_sha256
from ..errors import StoreUnavailable
from ..materialise import Urls
from ..settings import Settings
from ..store import StreamEntry, TopicStore
from .feed import Batch, Subscription, TopicFeed

log = logging.getLogger("rspush.hub.push")
REPLAY_PAGE = 1000
SUBSCRIBE_TIMEOUT_S = 10.0


class PushServer:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        *,
        on_sent: Callable[[str, int, int, float], None] | None = None,
        on_slow: Callable[[str], None] | None = None,
        on_subscribers: Callable[[str, int], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = TopicStore(redis, prefix=settings.redis_prefix)
        self.feeds: dict[str, TopicFeed] = {}
        self.on_sent = on_sent
        self.on_slow = on_slow
        self.on_subscribers = on_subscribers
        self._server: Any = None

    async def start(self, sock: Any) -> None:
        push = self.settings.push
        for topic in self.settings.topics:
            feed = TopicFeed(
                self.store,
                topic.name,
                epoch=await self.store.epoch(topic.name),
                send_buffer_bytes=push.send_buffer_bytes,
                max_pending_batches=push.max_pending_batches,
                on_sent=self.on_sent,
                on_slow=self.on_slow,
            )
            await feed.start()
            self.feeds[topic.name] = feed
        self._server = await serve(
            self.handle,
            sock=sock,
            ping_interval=push.ping_interval_s,
            ping_timeout=push.ping_timeout_s,
            compression=None,  # frames are sent once to many: per-connection deflate defeats it
            max_size=64 * 1024,  # clients only send small control messages
            write_limit=push.send_buffer_bytes,
        )

    async def stop(self) -> None:
        if self._server is not None:
            # Tell every client to resume elsewhere, with its positions.
            for connection in list(self._server.connections):
                resume = {
                    sub.topic: sub.last_sent
                    for feed in self.feeds.values()
                    for sub in feed.subscriptions
                    if sub.connection is connection
                }
                with contextlib.suppress(Exception):
                    await connection.close(CloseCode.SHUTDOWN, close_reason(resume))
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for feed in self.feeds.values():
            await feed.stop()

    async def handle(self, connection: ServerConnection) -> None:
        subs: list[Subscription] = []
        try:
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT_S):
                raw = await connection.recv()
            request = parse_subscribe(raw)
            for topic_request in request.topics:
                self._authorise(topic_request.topic, request.token)
            for topic_request in request.topics:
                outcome = await self._subscribe(connection, topic_request, request.format)
                if isinstance(outcome, HistoryInsufficient):
                    with contextlib.suppress(ConnectionClosed):
                        await connection.send(outcome.encode())
                    await connection.close(CloseCode.HISTORY_INSUFFICIENT, "history insufficient")
                    return
                subs.append(outcome)
            self._count()
            async for _ in connection:
                pass  # nothing else is expected; pings are answered by websockets itself
        except ProtocolError as exc:
            await _refuse(connection, CloseCode.PROTOCOL_ERROR, "protocol-error", str(exc))
        except TimeoutError:
            await _refuse(
                connection, CloseCode.PROTOCOL_ERROR, "protocol-error", "no subscribe message"
            )
        except _Refused as exc:
            await _refuse(connection, exc.code, exc.kind, exc.message)
        except ConnectionClosed:
            pass
        except StoreUnavailable as exc:
            # The store is briefly unreachable or saturated: "try again later" (RFC 6455).
            log.warning("push subscribe failed: %s", exc)
            with contextlib.suppress(ConnectionClosed):
                await connection.close(CloseCode.TRY_AGAIN_LATER, "store unavailable, retry")
        finally:
            for sub in subs:
                _drop(self.feeds[sub.topic], sub)
            self._count()

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
        digest = token_sha256(token)
        allowed = False
        for subscriber in self.settings.subscribers:
            if hmac.compare_digest(digest, subscriber.token_sha256) and topic in subscriber.topics:
                allowed = True
        if not allowed:
            raise _Refused(
                CloseCode.UNAUTHORISED, "unauthorised", f"this token may not subscribe to {topic!r}"
            )

    async def _subscribe(
        self, connection: ServerConnection, request: TopicRequest, fmt: str
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
        sub = Subscription(
            connection=connection,
            topic=topic,
            format=fmt,
            last_sent=feed.last if start is None else start,
            until=feed.last_until if start is None else None,
        )
        # From here on live batches queue in sub.pending: nothing is sent before the
        # "subscribed" message, and nothing after the position it names is missed.
        feed.subscriptions.add(sub)
        try:
            await connection.send(Subscribed(topic, meta.epoch, sub.last_sent).encode())
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
            changes = await self.store.entries_after(feed.topic, sub.last_sent, count=REPLAY_PAGE)
            # Retention may have trimmed past our cursor since the subscription was decided:
            # the page would then silently start after a gap. The trim records how far it
            # went in the same script, so reading it *after* the page is enough.
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
            if changes:
                await self._send(connection, feed, sub, changes)
            if len(changes) < REPLAY_PAGE:
                break
        # Seam: queued live batches, minus what the replay already sent.
        while sub.pending:
            batch = sub.pending.pop(0)
            fresh = [c for c in batch.changes if c.position > sub.last_sent]
            if len(fresh) == len(batch.changes) and batch.start == sub.until:
                await connection.send(feed.encoded(batch, sub.format).decode())
                sub.last_sent, sub.until = batch.last, batch.until
            elif fresh:
                await self._send(connection, feed, sub, fresh)
        sub.live = True
        return None

    async def _send(
        self,
        connection: ServerConnection,
        feed: TopicFeed,
        sub: Subscription,
        changes: list[StreamEntry],
    ) -> None:
        until = from_us(changes[-1].time_us)
        start = sub.until or from_us(changes[0].time_us)
        batch = Batch(changes, start, until)
        frame = FRAME_ENCODERS[sub.format](feed.topic, feed.epoch, start, until, changes)
        await connection.send(frame.decode())
        sub.last_sent, sub.until = batch.last, until


def _drop(feed: TopicFeed, sub: Subscription) -> None:
    sub.closed = True
    feed.subscriptions.discard(sub)


class _Refused(Exception):
    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.message = message


async def _refuse(connection: ServerConnection, code: int, kind: str, message: str) -> None:
    with contextlib.suppress(ConnectionClosed):
        await connection.send(Refusal(kind, message).encode())
    await connection.close(code, message[:120])
