"""The topic store in Redis: atomic appends, seeding, rotation and the reads behind the
materialised documents.

Every write is one Lua script touching only one topic's keys (one hash slot), so it is atomic
on a single server and on a Redis Cluster alike: a request that fails writes nothing, and
concurrent posters are serialised by the server. The script checks the idempotency key (scoped
by Source, with the body's digest), skips the changes the topic already holds (duplicates),
refuses conflicting ones and applies the backwards-time policy *inside* the same atomic step
as the append.

The scripts and the functions building their arguments are in :mod:`.scripts`.

Every public coroutine of :class:`TopicStore` raises :class:`.errors.StoreUnavailable` (from the
``RedisError``) when Redis fails: callers never see redis-py's exceptions.

It is the only module that talks to Redis (hence its length): every read and write of a
topic's keys, and the one decoder of stream rows, stay where the key layout of
:mod:`.keys` is used.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError, ResponseError

from rspush.protocol import ZERO, Position, PushedChange, SinceLookup
from rspush.resourcesync import Change, FrameworkChange
from rspush.resourcesync.w3cdt import from_us, to_us

from . import scripts
from .errors import (
    ChangeTimeBackwards,
    ConflictingChange,
    IdempotencyKeyReused,
    StoreUnavailable,
    TopicHasHistory,
)
from .ingest import IngestPlan, SeedPlan
from .keys import HubKeys, TopicKeys, WebSubKeys

log = logging.getLogger("rspush.hub.store")

_P = ParamSpec("_P")
_R = TypeVar("_R")
_C = TypeVar("_C", bound=type)


def _translated(method: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    @functools.wraps(method)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await method(*args, **kwargs)
        except RedisError as exc:
            # Redis's text names sockets, hosts and versions: the log has it, clients do not.
            log.warning("store: %s failed: %s", method.__name__, exc)
            raise StoreUnavailable() from exc

    return wrapper


def _store_boundary(cls: _C) -> _C:
    """Wrap every public coroutine method of ``cls`` with :func:`_translated`."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _translated(member))
    return cls


class StaleCheckpoint(Exception):
    """A bridge's checkpoint moved since it was read (another process ran the bridge): its
    step wrote nothing."""


@dataclass(frozen=True, slots=True)
class BridgeState:
    """A bridge's checkpoint and its status hash (field -> value), read together."""

    checkpoint: str | None
    status: dict[str, str]


@dataclass(frozen=True, slots=True)
class ListedChanges:
    """Stream entries as a Change List document needs them: how many, the first and last
    stream ids, the last change's time, and their ``<url>`` XML concatenated in order."""

    count: int
    first_id: str
    last_id: str
    last_time_us: int
    xml: bytes


@dataclass(frozen=True, slots=True)
class StreamEntry(PushedChange):
    """One row of a topic's stream: what the push channel sends (position, time, XML and
    JSON forms) and what the materialised Change Lists need besides (URI, change type)."""

    loc: str
    change: str

    @property
    def id(self) -> str:
        """The row's stream id, as Redis writes it."""
        return str(self.position)


@dataclass(frozen=True, slots=True)
class FrameworkEvent:
    """One row of a topic's framework stream: its position there and the change it records
    (framework notification §3: one ``<url>`` of a notification)."""

    position: Position
    change: FrameworkChange

    @property
    def time_us(self) -> int:
        """When the hub recorded it (every event the hub records has a time)."""
        return to_us(self.change.time) if self.change.time is not None else 0


@dataclass(frozen=True, slots=True)
class PushMeta:
    """The topic meta the push channel reads: the stream's epoch ("" before the topic's
    first write) and how far retention trimmed it (the last removed row and its time)."""

    epoch: str
    trimmed: Position | None
    trimmed_time: datetime | None


RELEASE = -1
"""The lease script's ``ttl_ms`` that gives a lease back (lua/lease.lua)."""


@dataclass(frozen=True, slots=True)
class TopicMeta:
    epoch: str | None
    created_us: int | None
    last_us: int | None
    open_from_us: int | None
    open_since_us: int | None
    """Hub clock when the open list got its first change: its age counts from here."""
    open_start: str
    open_count: int
    version: int
    state_at_us: int | None
    modified_us: int | None = None
    """Hub clock at the last change of version (append, seed, rotation): Last-Modified."""

    @property
    def etag_base(self) -> str:
        return f"{self.epoch or 'new'}-{self.version}"


@dataclass(frozen=True, slots=True)
class ClosedList:
    number: int
    from_us: int
    until_us: int
    first_id: str
    last_id: str
    count: int

    def as_json(self) -> str:
        return json.dumps(
            {
                "n": self.number,
                "from": self.from_us,
                "until": self.until_us,
                "first": self.first_id,
                "last": self.last_id,
                "count": self.count,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> ClosedList:
        data = json.loads(raw)
        return cls(
            number=data["n"],
            from_us=data["from"],
            until_us=data["until"],
            first_id=data["first"],
            last_id=data["last"],
            count=data["count"],
        )


def _text(value: Any) -> str:
    """A Redis reply as text (bytes are UTF-8; a script may also return a number)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    """A Lua HGETALL reply (k1, v1, k2, v2…) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _meta(raw: Any) -> TopicMeta:
    values = {k.decode(): v.decode() for k, v in raw.items()}
    return TopicMeta(
        epoch=values.get("epoch"),
        created_us=_int(values.get("created")),
        last_us=_int(values.get("last_t")),
        open_from_us=_int(values.get("open_from")),
        open_since_us=_int(values.get("open_since")),
        open_start=values.get("open_start", "0-0"),
        open_count=int(values.get("open_count", 0)),
        version=int(values.get("version", 0)),
        state_at_us=_int(values.get("state_at")),
        modified_us=_int(values.get("modified")),
    )


@_store_boundary
class TopicStore:
    """Reads and writes of one hub process, for all topics, over one Redis client."""

    def __init__(self, redis: Redis, *, prefix: str = "rs") -> None:
        self.redis = redis
        self.prefix = prefix
        self._append = redis.register_script(
            scripts.load("append", server_now=True, step_guards=True)
        )
        self._seed = redis.register_script(scripts.load("seed", server_now=True, step_guards=True))
        self._rotate = redis.register_script(scripts.load("rotate", server_now=True))
        self._lease = redis.register_script(scripts.load("lease"))
        self._snapshot = redis.register_script(scripts.load("snapshot"))
        self._trim = redis.register_script(scripts.load("trim"))
        self._listed = redis.register_script(scripts.load("listed"))
        self._framework_rl = redis.register_script(scripts.load("framework_resourcelist"))
        self._framework_doc = redis.register_script(scripts.load("framework_document"))
        self._cursor = redis.register_script(scripts.load("cursor"))
        self.websub = WebSubKeys(prefix)

    def keys(self, topic: str) -> TopicKeys:
        return TopicKeys(self.prefix, topic)

    async def ping(self) -> None:
        await self.redis.ping()

    @staticmethod
    async def _run(script: AsyncScript, call: scripts.Call) -> Any:
        return await script(keys=list(call.keys.values()), args=call.argv)

    async def append(
        self,
        topic: str,
        plan: IngestPlan,
        *,
        now_us: int,
        idempotency_key: str | None,
        idempotency_ttl_s: int,
        source: str = "",
        body_sha256: str = "",
        checkpoint: scripts.CheckpointSet | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Append the records atomically, but for those the topic already holds (counted as
        ``duplicates`` in the receipt). Returns (receipt, replayed).

        The idempotency key is scoped by ``source``; ``body_sha256`` is kept with its receipt,
        and the same key with another body raises :class:`.errors.IdempotencyKeyReused`.

        With ``checkpoint`` (a bridge's), the checkpoint is set in the same atomic step, and
        nothing is written (:class:`StaleCheckpoint`) if it is no longer the one expected. A
        plan without records then only moves the checkpoint."""
        call = scripts.append_call(
            self.keys(topic),
            plan,
            idempotency_key=idempotency_key,
            idempotency_ttl_s=idempotency_ttl_s,
            epoch_candidate=secrets.token_hex(8),
            now_us=now_us,
            source=source,
            body_sha256=body_sha256,
            checkpoint=checkpoint,
        )
        first_us = plan.first_time_us if plan.records else 0
        return self._outcome(topic, await self._run(self._append, call), first_us, plan)

    async def seed(
        self,
        topic: str,
        plan: SeedPlan,
        *,
        now_us: int,
        idempotency_key: str | None,
        idempotency_ttl_s: int,
        source: str = "",
        body_sha256: str = "",
        checkpoint: scripts.CheckpointSet | None = None,
    ) -> tuple[dict[str, Any], bool]:
        call = scripts.seed_call(
            self.keys(topic),
            plan,
            idempotency_key=idempotency_key,
            idempotency_ttl_s=idempotency_ttl_s,
            epoch_candidate=secrets.token_hex(8),
            now_us=now_us,
            source=source,
            body_sha256=body_sha256,
            checkpoint=checkpoint,
        )
        return self._outcome(topic, await self._run(self._seed, call), plan.at_us)

    @staticmethod
    def _outcome(
        topic: str, outcome: list[Any], first_us: int, plan: IngestPlan | None = None
    ) -> tuple[dict[str, Any], bool]:
        status = _text(outcome[0])
        if status == "reused":
            raise IdempotencyKeyReused()
        if status == "stale":
            raise StaleCheckpoint(f"the bridge checkpoint of {topic} moved")
        if status == "history":
            raise TopicHasHistory(topic)
        if status == "conflict" and plan is not None:
            index = int(outcome[1])
            record = plan.records[index]
            raise ConflictingChange(
                f"entry {index}: {record.loc} already has a change at "
                f"{from_us(record.time_us).isoformat()} with another change type or other "
                "content; a resource has one history",
                topic=topic,
                entry=index,
            )
        if status == "backwards":
            last_us = int(outcome[1])
            # The first change the topic does not already hold (duplicates are skipped).
            first_us = int(outcome[2]) if len(outcome) > 2 else first_us
            raise ChangeTimeBackwards(
                f"change time {from_us(first_us).isoformat()} is before the topic's last "
                f"accepted change at {from_us(last_us).isoformat()}; the hub publishes Change "
                "Lists in forward chronological order and rejects changes that go back in time",
                topic=topic,
                first_us=first_us,
                last_us=last_us,
            )
        receipt: dict[str, Any] = json.loads(outcome[1])
        receipt.pop("body_sha256", None)  # kept for the key's check, not part of the receipt
        return receipt, status == "dup"

    async def meta(self, topic: str) -> TopicMeta:
        return _meta(await self.redis.hgetall(self.keys(topic).meta))

    async def ensure_topic(self, topic: str, *, now_us: int) -> None:
        """Give a new topic its epoch and creation time (idempotent)."""
        k = self.keys(topic)
        if await self.redis.hsetnx(k.meta, "epoch", secrets.token_hex(8)):
            await self.redis.hset(k.meta, "created", now_us)

    async def open_entries(
        self, topic: str, open_start: str, *, limit: int | None = None
    ) -> list[StreamEntry]:
        """Stream entries after ``open_start`` (exclusive): the open Change List."""
        return await self.entries_after(topic, Position.parse(open_start), count=limit)

    async def listed(
        self, topic: str, after: str, *, limit: int | None = None
    ) -> ListedChanges | None:
        """Up to ``limit`` (None: all) stream entries after ``after`` (exclusive), as a
        Change List document needs them (None when there are none): what
        :meth:`open_entries` reads, as one string of XML instead of a row per change."""
        call = scripts.listed_call(self.keys(topic), after=after, count=limit)
        reply: Any = await self._run(self._listed, call)
        if not int(reply[0]):
            return None
        count, first, last, last_time, xml = reply
        return ListedChanges(int(count), _text(first), _text(last), int(last_time), bytes(xml))

    async def stream_length(self, topic: str) -> int:
        return int(await self.redis.xlen(self.keys(topic).stream))

    async def closed_lists(self, topic: str) -> list[ClosedList]:
        rows = await self.redis.lrange(self.keys(topic).closed, 0, -1)
        return [ClosedList.from_json(row) for row in rows]

    async def closed_count(self, topic: str) -> int:
        """How many Change Lists of the topic are closed (the next one's number)."""
        return int(await self.redis.llen(self.keys(topic).closed))

    async def closed_xml(self, topic: str, number: int) -> bytes | None:
        value: Any = await self.redis.get(self.keys(topic).closed_list(number))
        return None if value is None else bytes(value)

    async def state(self, topic: str) -> tuple[TopicMeta, dict[str, str]]:
        """The current state and the meta it belongs to, read in one atomic step."""
        call = scripts.snapshot_call(self.keys(topic))
        raw_meta, raw_state = await self._run(self._snapshot, call)
        return _meta(_pairs(raw_meta)), {
            a.decode(): b.decode() for a, b in _pairs(raw_state).items()
        }

    async def acquire_lease(self, topic: str, token: str, ttl_ms: int) -> bool:
        call = scripts.lease_call(self.keys(topic), token=token, ttl_ms=ttl_ms)
        return bool(await self._run(self._lease, call))

    async def acquire_bridge_lease(self, topic: str, token: str, ttl_ms: int) -> bool:
        """Take or renew the lease of the topic's bridge (one process runs it at a time)."""
        k = self.keys(topic)
        call = scripts.lease_call(k, token=token, ttl_ms=ttl_ms, key=k.bridge_lease)
        return bool(await self._run(self._lease, call))

    async def release_bridge_lease(self, topic: str, token: str) -> None:
        k = self.keys(topic)
        await self._run(
            self._lease, scripts.lease_call(k, token=token, ttl_ms=RELEASE, key=k.bridge_lease)
        )

    async def bridge_state(self, topic: str) -> BridgeState:
        k = self.keys(topic)
        raw: Any = await self.redis.get(k.bridge_checkpoint)
        status: Any = await self.redis.hgetall(k.bridge_status)
        return BridgeState(
            checkpoint=None if raw is None else raw.decode(),
            status={a.decode(): b.decode() for a, b in status.items()},
        )

    async def set_bridge_status(self, topic: str, fields: dict[str, str | int | float]) -> None:
        """Record figures of the topic's bridge (every hub process's status page reads them)."""
        await self.redis.hset(self.keys(topic).bridge_status, mapping=fields)  # type: ignore[arg-type]

    async def incr_bridge_status(self, topic: str, field: str, by: int) -> None:
        await self.redis.hincrby(self.keys(topic).bridge_status, field, by)

    async def state_uris(self, topic: str) -> set[str]:
        """The URIs of the topic's current state."""
        keys: Any = await self.redis.hkeys(self.keys(topic).state)
        return {k.decode() for k in keys}

    async def state_entries(self, topic: str, locs: list[str]) -> dict[str, str]:
        """The current Resource List entries of ``locs`` (absent URIs are left out)."""
        if not locs:
            return {}
        values: Any = await self.redis.hmget(self.keys(topic).state, locs)
        return {loc: v.decode() for loc, v in zip(locs, values, strict=True) if v is not None}

    async def release_lease(self, topic: str, token: str) -> None:
        await self._run(
            self._lease, scripts.lease_call(self.keys(topic), token=token, ttl_ms=RELEASE)
        )

    async def close_list(
        self,
        topic: str,
        *,
        token: str,
        expected_open_start: str,
        closed: ClosedList,
        xml: bytes,
        now_us: int,
        framework: RotationAnnouncement | None = None,
    ) -> str:
        """Close the list atomically; with ``framework``, record its events in the same step
        (none when the rotation does not happen: a replayed call adds nothing)."""
        announce = framework or RotationAnnouncement(0, "", "", "")
        call = scripts.rotate_call(
            self.keys(topic),
            number=closed.number,
            token=token,
            expected_open_start=expected_open_start,
            new_open_start=closed.last_id,
            until_us=closed.until_us,
            closed_count=closed.count,
            xml=xml,
            record=closed.as_json(),
            now_us=now_us,
            framework_maxlen=announce.max_events,
            closed_loc=announce.closed_loc,
            open_loc=announce.open_loc,
            index_loc=announce.index_loc,
        )
        outcome = await self._run(self._rotate, call)
        return _text(outcome)

    async def trim(self, topic: str, min_id: str) -> int:
        """Drop stream entries older than ``min_id`` (callers keep the open list).

        Records ``trimmed_through`` (the last id removed) in the same atomic step, so the push
        channel can tell a subscriber whose resume point is gone to catch up from the archive.
        """
        call = scripts.trim_call(self.keys(topic), min_id=min_id)
        return int(await self._run(self._trim, call))

    # --- stream and meta reads of the push channel (and of the open Change List) ---------

    async def entries_after(
        self, topic: str, after: Position, *, count: int | None = None
    ) -> list[StreamEntry]:
        """Up to ``count`` stream entries after ``after`` (exclusive), in order."""
        rows: Any = await self.redis.xrange(
            self.keys(topic).stream, min=f"({after}", max="+", count=count
        )
        return [decode_stream_row(row) for row in rows]

    async def entry_at(self, topic: str, position: Position) -> StreamEntry | None:
        """The stream entry at ``position``, if the stream still holds it."""
        rows: Any = await self.redis.xrange(
            self.keys(topic).stream, min=str(position), max=str(position)
        )
        return decode_stream_row(rows[0]) if rows else None

    async def oldest(self, topic: str) -> Position | None:
        """The position of the first entry the stream still holds (None when empty)."""
        rows: Any = await self.redis.xrange(self.keys(topic).stream, count=1)
        return decode_stream_row(rows[0]).position if rows else None

    async def newest(self, topic: str) -> StreamEntry | None:
        """The stream's last entry (None when empty)."""
        rows: Any = await self.redis.xrevrange(self.keys(topic).stream, count=1)
        return decode_stream_row(rows[0]) if rows else None

    async def wait_entries(
        self, topic: str, after: Position, *, count: int, block_ms: int
    ) -> list[StreamEntry]:
        """Entries after ``after``, waiting up to ``block_ms`` for the first one
        (``XREAD BLOCK``): empty when none arrived in time."""
        reply: Any = await self.redis.xread(
            {self.keys(topic).stream: str(after)}, count=count, block=block_ms
        )
        return [decode_stream_row(row) for row in reply[0][1]] if reply else []

    async def locate_since(self, topic: str, since: datetime, *, page: int) -> SinceLookup:
        """Where ``since`` falls in the stream, read in pages of ``page`` entries (change
        times are in stream order: the ingest policy rejects changes that go back)."""
        since_us = to_us(since)
        before: Position | None = None
        cursor = ZERO
        while True:
            entries = await self.entries_after(topic, cursor, count=page)
            for entry in entries:
                if entry.time_us >= since_us:
                    return SinceLookup(first=entry.position, before=before)
                before = entry.position
            if len(entries) < page:
                return SinceLookup(first=None, before=before)
            cursor = entries[-1].position

    async def epoch(self, topic: str) -> str:
        """The topic's epoch ("" before its first write)."""
        value: Any = await self.redis.hget(self.keys(topic).meta, "epoch")
        return value.decode() if value else ""

    async def push_meta(self, topic: str) -> PushMeta:
        """The epoch and the trim mark. The trim script records how far it went in the same
        atomic step as the trim, so reading this after a page of entries is enough to know
        whether that page started after a gap."""
        fields: Any = await self.redis.hmget(
            self.keys(topic).meta, ["epoch", "trimmed_through", "trimmed_through_t"]
        )
        epoch, trimmed, trimmed_t = fields
        return PushMeta(
            epoch=epoch.decode() if epoch else "",
            trimmed=None if trimmed is None else Position.parse(trimmed.decode()),
            trimmed_time=None if trimmed_t is None else from_us(int(trimmed_t)),
        )

    # --- framework events (framework notification §2-§3) -----------------------------------

    async def framework_events_after(
        self, topic: str, after: Position, *, count: int | None = None
    ) -> list[FrameworkEvent]:
        """Up to ``count`` framework events after ``after`` (exclusive), in order."""
        rows: Any = await self.redis.xrange(
            self.keys(topic).framework, min=f"({after}", max="+", count=count
        )
        return [decode_framework_row(row) for row in rows]

    @property
    def is_cluster(self) -> bool:
        """Whether Redis is a Cluster (a command may then name keys of one slot only)."""
        return isinstance(self.redis, RedisCluster)

    async def wait_framework_events_all(
        self, after: dict[str, Position], *, count: int, block_ms: int
    ) -> dict[str, list[FrameworkEvent]]:
        """Per topic, up to ``count`` framework events after its position, waiting up to
        ``block_ms`` for the first one in any topic: ONE ``XREAD BLOCK`` over every topic's
        stream (one connection for all topics). Not on a Redis Cluster, where the streams
        live in different slots: use :meth:`framework_events_after_each` there."""
        topic_of = {self.keys(topic).framework: topic for topic in after}
        reply: Any = await self.redis.xread(
            {key: str(after[topic]) for key, topic in topic_of.items()},
            count=count,
            block=block_ms,
        )
        found: dict[str, list[FrameworkEvent]] = {}
        for raw_key, rows in reply or []:
            key = _text(raw_key)
            found[topic_of[key]] = [decode_framework_row(row) for row in rows]
        return found

    async def framework_events_after_each(
        self, after: dict[str, Position], *, count: int
    ) -> dict[str, list[FrameworkEvent]]:
        """Per topic, up to ``count`` framework events after its position: one pipelined
        round trip (not a transaction: each topic's stream is read on its own, as a Redis
        Cluster requires)."""
        topics = list(after)
        async with self.redis.pipeline(transaction=False) as pipe:
            for topic in topics:
                pipe.xrange(self.keys(topic).framework, min=f"({after[topic]}", count=count)
            replies: Any = await pipe.execute()
        return {
            topic: [decode_framework_row(row) for row in rows]
            for topic, rows in zip(topics, replies, strict=True)
        }

    async def framework_position(self, topic: str) -> Position:
        """The position of the topic's newest framework event (``0-0`` when none)."""
        rows: Any = await self.redis.xrevrange(self.keys(topic).framework, count=1)
        return decode_framework_row(rows[0]).position if rows else ZERO

    async def add_framework_event(
        self, topic: str, change: FrameworkChange, *, max_events: int
    ) -> Position:
        """Record one framework event (the stream kept to about ``max_events``)."""
        assert change.time is not None
        raw: Any = await self.redis.xadd(
            self.keys(topic).framework,
            {
                "t": to_us(change.time),
                "loc": change.loc,
                "ch": change.change.value,
                "cap": change.capability,
                "idx": change.index or "",
            },
            maxlen=max_events,
            approximate=True,
        )
        return Position.parse(_text(raw))

    async def announce_resource_list(
        self,
        topic: str,
        *,
        now_us: int,
        interval_us: int,
        max_events: int,
        list_loc: str,
        part_loc: str,
        max_entries: int,
    ) -> str:
        """Record 'Resource List updated' if the state changed since the last such event and
        ``interval_us`` has passed: 'added', 'throttled' or 'same' (one atomic step)."""
        call = scripts.framework_resourcelist_call(
            self.keys(topic),
            now_us=now_us,
            interval_us=interval_us,
            framework_maxlen=max_events,
            list_loc=list_loc,
            part_loc=part_loc,
            max_entries=max_entries,
        )
        outcome = await self._run(self._framework_rl, call)
        return _text(outcome)

    async def announce_document(
        self,
        topic: str,
        *,
        field: str,
        digest: str,
        first_change: Change,
        now_us: int,
        max_events: int,
        loc: str,
        capability: str,
    ) -> str:
        """Record the document's change if its digest differs from the one recorded in
        ``field``: the change added ('created'/'updated') or '' (one atomic step)."""
        call = scripts.framework_document_call(
            self.keys(topic),
            field=field,
            digest=digest,
            first_change=first_change.value,
            now_us=now_us,
            framework_maxlen=max_events,
            loc=loc,
            capability=capability,
        )
        outcome = await self._run(self._framework_doc, call)
        return _text(outcome)

    async def record_topics(
        self, topics: list[str], *, forget: str | None = None
    ) -> tuple[list[str], list[str]]:
        """Record the configured topics; returns (added, removed) since the set recorded.
        Each topic is reported by one process only (SADD/SREM say who changed the set).
        ``forget``: a meta field dropped from each removed topic (so a topic that comes
        back is announced again)."""
        key = HubKeys(self.prefix).topics
        added = [t for t in topics if await self.redis.sadd(key, t)]
        members: Any = await self.redis.smembers(key)
        recorded = {m.decode() for m in members}
        removed = []
        for topic in sorted(recorded - set(topics)):
            if await self.redis.srem(key, topic):
                removed.append(topic)
                if forget is not None:
                    await self.redis.hdel(self.keys(topic).meta, forget)
        return added, removed

    async def swap_description_digest(self, digest: str) -> str | None:
        """Record the Source Description's digest; returns the one recorded before."""
        old: Any = await self.redis.set(HubKeys(self.prefix).description, digest, get=True)
        return None if old is None else old.decode()

    # --- any channel's stream (WebSub delivery: rspush.hub.websub.channels) -------------

    async def rows_after(
        self, key: str, decode: Callable[[Any], _R], after: Position, *, count: int
    ) -> list[_R]:
        """Up to ``count`` rows of stream ``key`` after ``after`` (exclusive), decoded."""
        rows: Any = await self.redis.xrange(key, min=f"({after}", max="+", count=count)
        return [decode(row) for row in rows]

    async def wait_rows(
        self, key: str, decode: Callable[[Any], _R], after: Position, *, count: int, block_ms: int
    ) -> list[_R]:
        """Rows of stream ``key`` after ``after``, waiting up to ``block_ms`` for the first."""
        reply: Any = await self.redis.xread({key: str(after)}, count=count, block=block_ms)
        return [decode(row) for row in reply[0][1]] if reply else []

    async def trim_mark(self, key: str) -> Position | None:
        """The newest position stream ``key`` has lost (to ``MAXLEN`` trimming), None when it
        has lost nothing: what a stream bounded by ``MAXLEN ~`` alone says of its history.
        Trimming removes from the oldest end, so once entries were removed (Redis and Valkey
        7+ count ``entries-added``), everything before the oldest remaining entry is gone.
        Older servers do not count: there the bound is the same, which at worst reports a
        loss that did not happen (before the stream's first entry), never hides one."""
        try:
            info: Any = await self.redis.xinfo_stream(key)
        except ResponseError:  # no such stream yet
            return None
        added, length = info.get("entries-added"), info.get("length")
        if added is not None and length is not None and int(added) <= int(length):
            return None  # nothing removed
        first = info.get("first-entry")
        if not first:
            return None
        raw = first[0]
        oldest = Position.parse(_text(raw))
        return None if oldest == ZERO else oldest.predecessor()

    async def last_row(self, key: str, decode: Callable[[Any], _R]) -> _R | None:
        rows: Any = await self.redis.xrevrange(key, count=1)
        return decode(rows[0]) if rows else None

    # --- WebSub subscriptions (keys: WebSubKeys) ---------------------------------------

    async def save_subscription(self, subscription: str, record: str, cursor: str) -> bool:
        """Store a verified subscription. A renewal keeps its cursor (``cursor`` is only the
        start of a new one). Returns whether it is new."""
        k = self.websub
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(k.subscriptions, subscription, record)
            pipe.hsetnx(k.cursors, subscription, cursor)
            pipe.hdel(k.failing, subscription)
            _, new, _ = await pipe.execute()
        return bool(new)

    async def subscriptions(self) -> dict[str, str]:
        raw: Any = await self.redis.hgetall(self.websub.subscriptions)
        return {key.decode(): value.decode() for key, value in raw.items()}

    async def subscription_count(self) -> int:
        return int(await self.redis.hlen(self.websub.subscriptions))

    async def subscription(self, subscription: str) -> tuple[str, str] | None:
        """(record, cursor) of a subscription, or None."""
        k = self.websub
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(k.subscriptions, subscription)
            pipe.hget(k.cursors, subscription)
            record, cursor = await pipe.execute()
        if record is None:
            return None
        return record.decode(), (cursor or b"").decode()

    async def remove_subscription(self, subscription: str) -> bool:
        k = self.websub
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(k.subscriptions, subscription)
            pipe.hdel(k.cursors, subscription)
            pipe.hdel(k.failing, subscription)
            removed, _, _ = await pipe.execute()
        return bool(removed)

    async def acquire_subscription_lease(self, subscription: str, token: str, ttl_ms: int) -> bool:
        call = scripts.subscription_lease_call(
            self.websub, subscription, token=token, ttl_ms=ttl_ms
        )
        return bool(await self._run(self._lease, call))

    async def release_subscription_lease(self, subscription: str, token: str) -> None:
        call = scripts.subscription_lease_call(
            self.websub, subscription, token=token, ttl_ms=RELEASE
        )
        await self._run(self._lease, call)

    async def advance_cursor(
        self, subscription: str, token: str, cursor: str, *, ttl_ms: int
    ) -> bool:
        """Move the cursor (and renew the lease) if no other process holds the lease and the
        subscription exists."""
        call = scripts.cursor_call(
            self.websub, subscription, token=token, cursor=cursor, ttl_ms=ttl_ms
        )
        return bool(await self._run(self._cursor, call))

    async def failing_since(self, subscription: str, now_us: int) -> int:
        """When deliveries to the subscription started failing (``now_us`` if they just
        did): kept across processes, so a take-over does not reset the retry horizon."""
        k = self.websub
        await self.redis.hsetnx(k.failing, subscription, now_us)
        value: Any = await self.redis.hget(k.failing, subscription)
        return int(value) if value is not None else now_us

    async def delivered(self, subscription: str) -> None:
        await self.redis.hdel(self.websub.failing, subscription)


@dataclass(frozen=True, slots=True)
class RotationAnnouncement:
    """What a rotation's framework events name: the closed list's final URI, the open list,
    the index both reside under; ``max_events`` the stream's bound (0: record none)."""

    max_events: int
    closed_loc: str
    open_loc: str
    index_loc: str


def decode_framework_row(row: Any) -> FrameworkEvent:
    """The one decoder of a framework stream row."""
    raw_id, fields = row
    return FrameworkEvent(
        position=Position.parse(_text(raw_id)),
        change=FrameworkChange(
            loc=fields[b"loc"].decode(),
            change=Change(fields[b"ch"].decode()),
            capability=fields[b"cap"].decode(),
            time=from_us(int(fields[b"t"])),
            index=fields[b"idx"].decode() or None,
        ),
    )


def decode_stream_row(row: Any) -> StreamEntry:
    """The one decoder of a stream row (an id and the fields the append script writes)."""
    raw_id, fields = row
    return StreamEntry(
        position=Position.parse(_text(raw_id)),
        time_us=int(fields[b"t"]),
        xml=fields[b"x"].decode(),
        json=fields[b"j"].decode(),
        loc=fields[b"loc"].decode(),
        change=fields[b"ch"].decode(),
    )
