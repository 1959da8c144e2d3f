"""The WebSocket push endpoint: subscribe, replay from a resume point, then the live tail.

Per connection: the first message must be a ``subscribe`` (docs/protocol.md). For each topic
the hub checks the token (private topics), the epoch and the history the stream still holds,
registers the subscription with the topic's feed (so live batches start queueing), replays
every change after the resume point from Redis in bounded ``XRANGE`` pages, then flushes the
queued batches skipping what the replay already sent: no gap and no duplicate at the seam.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from rspush.resourcesync.w3cdt import format_w3c_datetime, from_us, to_us

from ..auth import token_sha256
from ..keys import TopicKeys
from ..materialise import Urls
from ..settings import Settings
from .feed import Batch, Subscription, TopicFeed, row_change
from .protocol import (
    FRAME_ENCODERS,
    ZERO,
    CloseCode,
    Position,
    ProtocolError,
    PushedChange,
    TopicRequest,
    close_reason,
    control,
    parse_subscribe,
)

log = logging.getLogger("rspush.hub.push")
REPLAY_PAGE = 1000
SUBSCRIBE_TIMEOUT_S = 10.0


class HistoryInsufficient(Exception):
    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


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
        self.redis = redis
        self.feeds: dict[str, TopicFeed] = {}
        self.on_sent = on_sent
        self.on_slow = on_slow
        self.on_subscribers = on_subscribers
        self._server: Any = None

    def keys(self, topic: str) -> TopicKeys:
        return TopicKeys(self.settings.redis_prefix, topic)

    async def start(self, sock: Any) -> None:
        push = self.settings.push
        for topic in self.settings.topics:
            epoch: Any = await self.redis.hget(self.keys(topic.name).meta, "epoch")
            feed = TopicFeed(
                self.redis,
                self.keys(topic.name),
                epoch=epoch.decode() if epoch else "",
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
                subs.append(await self._subscribe(connection, topic_request, request.format))
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
        except HistoryInsufficient as exc:
            with contextlib.suppress(ConnectionClosed):
                await connection.send(exc.reply)
            await connection.close(CloseCode.HISTORY_INSUFFICIENT, "history insufficient")
        except ConnectionClosed:
            pass
        except RedisError as exc:
            # The store is briefly unreachable or saturated: "try again later" (RFC 6455).
            log.warning("push subscribe failed: %s", exc)
            with contextlib.suppress(ConnectionClosed):
                await connection.close(CloseCode.TRY_AGAIN_LATER, "store unavailable, retry")
        finally:
            for sub in subs:
                sub.closed = True
                feed = self.feeds.get(sub.topic)
                if feed is not None:
                    feed.subscriptions.discard(sub)
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
    ) -> Subscription:
        topic = request.topic
        feed = self.feeds[topic]
        keys = self.keys(topic)
        raw_meta: Any = await self.redis.hgetall(keys.meta)
        meta = {k.decode(): v.decode() for k, v in raw_meta.items()}
        epoch = meta.get("epoch", "")
        feed.epoch = feed.epoch or epoch
        trimmed = Position.parse(meta["trimmed_through"]) if "trimmed_through" in meta else None
        trimmed_us = int(meta["trimmed_through_t"]) if "trimmed_through_t" in meta else None
        urls = Urls(self.settings.hub.base_url, topic)

        def insufficient(
            reason: str,
            oldest: Position | None,
            after: Position | None = trimmed,
            after_us: int | None = trimmed_us,
        ) -> HistoryInsufficient:
            return HistoryInsufficient(
                control(
                    "history-insufficient",
                    topic=topic,
                    reason=reason,
                    epoch=epoch,
                    oldest=None if oldest is None else str(oldest),
                    # Everything after this position (the last trimmed change, at after_time)
                    # is still in the stream: a client that has caught up from the archive
                    # to at least after_time can resume from it exactly.
                    after=str(after or ZERO),
                    after_time=None if after_us is None else _w3c_us(after_us),
                    archive=urls.change_list_archive,
                )
            )

        if request.epoch is not None and request.epoch != epoch:
            raise insufficient("epoch-changed", await self._oldest(keys))
        start: Position | None = request.resume_position
        since = request.resume_since
        if start is not None and trimmed is not None and start < trimmed:
            raise insufficient("trimmed", await self._oldest(keys))
        if since is not None:
            start = await self._position_before(
                keys, since, trimmed_us, insufficient, floor=trimmed or ZERO
            )

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
            await connection.send(
                control("subscribed", topic=topic, epoch=epoch, position=str(sub.last_sent))
            )
            if sub.until is None and start is not None:
                sub.until = await self._time_at(keys, start) or since
            await self._replay(connection, feed, sub, insufficient)
        except BaseException:
            # handle() only cleans up the subscriptions _subscribe returned.
            sub.closed = True
            feed.subscriptions.discard(sub)
            raise
        return sub

    async def _replay(
        self,
        connection: ServerConnection,
        feed: TopicFeed,
        sub: Subscription,
        insufficient: Callable[..., HistoryInsufficient],
    ) -> None:
        keys = feed.keys
        while True:
            rows: Any = await self.redis.xrange(
                keys.stream, min=f"({sub.last_sent}", max="+", count=REPLAY_PAGE
            )
            # Retention may have trimmed past our cursor since the subscription was checked:
            # the page would then silently start after a gap. The trim records how far it
            # went in the same script, so reading it *after* the page is enough.
            fields: Any = await self.redis.hmget(
                keys.meta, ["trimmed_through", "trimmed_through_t"]
            )
            raw, raw_t = fields
            if raw is not None and (now_trimmed := Position.parse(raw.decode())) > sub.last_sent:
                raise insufficient(
                    "trimmed",
                    await self._oldest(keys),
                    now_trimmed,
                    None if raw_t is None else int(raw_t),
                )
            changes = [row_change(row) for row in rows]
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

    async def _send(
        self,
        connection: ServerConnection,
        feed: TopicFeed,
        sub: Subscription,
        changes: list[PushedChange],
    ) -> None:
        until = from_us(changes[-1].time_us)
        start = sub.until or from_us(changes[0].time_us)
        batch = Batch(changes, start, until)
        frame = FRAME_ENCODERS[sub.format](feed.topic, feed.epoch, start, until, changes)
        await connection.send(frame.decode())
        sub.last_sent, sub.until = batch.last, until

    async def _oldest(self, keys: TopicKeys) -> Position | None:
        rows: Any = await self.redis.xrange(keys.stream, count=1)
        return row_change(rows[0]).position if rows else None

    async def _time_at(self, keys: TopicKeys, position: Position) -> datetime | None:
        rows: Any = await self.redis.xrange(keys.stream, min=str(position), max=str(position))
        return from_us(row_change(rows[0]).time_us) if rows else None

    async def _position_before(
        self,
        keys: TopicKeys,
        since: datetime,
        trimmed_us: int | None,
        insufficient: Callable[..., HistoryInsufficient],
        *,
        floor: Position,
    ) -> Position:
        """The position just before the first change at or after ``since`` (change times
        are in stream order: the hub's ingest policy guarantees it). History is
        insufficient only if a trimmed change may be at or after ``since``. ``floor``: the
        last trimmed position (everything up to it is before ``since`` when we get here)."""
        since_us = to_us(since)
        cursor = "-"
        previous = floor
        first = True
        while True:
            rows: Any = await self.redis.xrange(keys.stream, min=cursor, max="+", count=REPLAY_PAGE)
            changes = [row_change(row) for row in rows]
            for change in changes:
                if change.time_us >= since_us:
                    if first and trimmed_us is not None and since_us <= trimmed_us:
                        # The last trimmed change is at/after since: it would be missed.
                        raise insufficient("trimmed", change.position)
                    return previous
                previous = change.position
                first = False
            if len(changes) < REPLAY_PAGE:
                # Nothing at/after since in the stream. Unless retention trimmed changes at
                # or after it (then the stream may even be empty), start at the tail.
                if trimmed_us is not None and since_us <= trimmed_us:
                    raise insufficient("trimmed", None)
                return previous
            cursor = f"({changes[-1].position}"


class _Refused(Exception):
    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.message = message


async def _refuse(connection: ServerConnection, code: int, kind: str, message: str) -> None:
    with contextlib.suppress(ConnectionClosed):
        await connection.send(control("error", error=kind, message=message))
    await connection.close(code, message[:120])


def _w3c_us(time_us: int) -> str:
    return format_w3c_datetime(from_us(time_us))
