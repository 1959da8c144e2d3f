"""The topic store in Redis: atomic appends, seeding, rotation and the reads behind the
materialised documents.

Every write is one Lua script touching only one topic's keys (one hash slot), so it is atomic
on a single server and on a Redis Cluster alike: a request that fails writes nothing, and
concurrent posters are serialised by the server. The script checks the idempotency key and
the backwards-time policy *inside* the same atomic step as the append.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis.asyncio import Redis

from rspush.protocol import ZERO, Position, PushedChange, SinceLookup
from rspush.resourcesync.w3cdt import from_us, to_us

from .ingest import IngestError, IngestPlan, SeedPlan
from .keys import TopicKeys

# Last-Modified of the documents: the Redis server's clock, the same for every hub process.
_SERVER_NOW = """
local function server_now()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))  -- exact: no float formatting
end
"""

# KEYS: stream, meta, state, idempotency (or the meta key again when there is none)
# ARGV: n, has_idem, idem_ttl, epoch_candidate, now_us, then n x (time_us, loc, change,
#       entry_xml, state_xml, entry_json)
_APPEND = """
local stream, meta, state, idem = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
{SERVER_NOW}
local n = tonumber(ARGV[1])
if ARGV[2] == '1' then
  local seen = redis.call('GET', idem)
  if seen then return {'dup', seen} end
end
-- Times are integers below 2^53: exact as Lua numbers; returned as the stored string.
local last_raw = redis.call('HGET', meta, 'last_t') or '0'
if tonumber(ARGV[6]) < tonumber(last_raw) then return {'backwards', last_raw} end
if redis.call('HSETNX', meta, 'epoch', ARGV[4]) == 1 then
  redis.call('HSET', meta, 'created', ARGV[5])
end
-- The first list covers the topic from its start, not from its first change: a Resource
-- List served before any change (at = creation or seed time) must be continued by it.
if redis.call('HEXISTS', meta, 'open_from') == 0 then
  local from = ARGV[6]
  for _, field in ipairs({'created', 'state_at'}) do
    local t = redis.call('HGET', meta, field)
    if t and tonumber(t) < tonumber(from) then from = t end
  end
  redis.call('HSET', meta, 'open_from', from)
end
redis.call('HSETNX', meta, 'open_since', ARGV[5])
local first_id, last_id
for i = 0, n - 1 do
  local b = 6 + i * 6
  local id = redis.call('XADD', stream, '*', 't', ARGV[b], 'loc', ARGV[b + 1],
                        'ch', ARGV[b + 2], 'x', ARGV[b + 3], 'j', ARGV[b + 5])
  if i == 0 then first_id = id end
  last_id = id
  if ARGV[b + 2] == 'deleted' then
    redis.call('HDEL', state, ARGV[b + 1])
  else
    redis.call('HSET', state, ARGV[b + 1], ARGV[b + 4])
  end
end
redis.call('HSET', meta, 'last_t', ARGV[6 + (n - 1) * 6])
redis.call('HINCRBY', meta, 'open_count', n)
redis.call('HINCRBY', meta, 'version', 1)
redis.call('HSET', meta, 'modified', server_now())
local epoch = redis.call('HGET', meta, 'epoch')
local receipt = cjson.encode({accepted = n, first = first_id, last = last_id, epoch = epoch})
if ARGV[2] == '1' then redis.call('SET', idem, receipt, 'EX', tonumber(ARGV[3])) end
return {'ok', receipt}
"""

# KEYS: meta, state, idempotency-or-meta; ARGV: has_idem, idem_ttl, epoch, now_us, at_us,
#       then pairs loc, xml
_SEED = """
local meta, state, idem = KEYS[1], KEYS[2], KEYS[3]
{SERVER_NOW}
if ARGV[1] == '1' then
  local seen = redis.call('GET', idem)
  if seen then return {'dup', seen} end
end
local last_raw = redis.call('HGET', meta, 'last_t') or '0'
if tonumber(ARGV[5]) < tonumber(last_raw) then return {'backwards', last_raw} end
if redis.call('HSETNX', meta, 'epoch', ARGV[3]) == 1 then
  redis.call('HSET', meta, 'created', ARGV[4])
end
redis.call('DEL', state)
local count = 0
for i = 6, #ARGV, 2 do
  redis.call('HSET', state, ARGV[i], ARGV[i + 1])
  count = count + 1
end
redis.call('HSET', meta, 'last_t', ARGV[5], 'state_at', ARGV[5])
redis.call('HSETNX', meta, 'open_from', ARGV[5])
redis.call('HINCRBY', meta, 'version', 1)
redis.call('HSET', meta, 'modified', server_now())
local epoch = redis.call('HGET', meta, 'epoch')
local receipt = cjson.encode({seeded = count, at = ARGV[5], epoch = epoch})
if ARGV[1] == '1' then redis.call('SET', idem, receipt, 'EX', tonumber(ARGV[2])) end
return {'ok', receipt}
"""

# KEYS: meta, closed, closed_n, lease
# ARGV: token, expected_open_start, new_open_start, until_us, count, xml, record, number,
#       now_us
_ROTATE = """
local meta, closed, closed_n, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
{SERVER_NOW}
if redis.call('GET', lease) ~= ARGV[1] then return 'lost-lease' end
if (redis.call('HGET', meta, 'open_start') or '0-0') ~= ARGV[2] then return 'moved' end
if redis.call('LLEN', closed) ~= tonumber(ARGV[8]) then return 'moved' end
redis.call('SET', closed_n, ARGV[6])
redis.call('RPUSH', closed, ARGV[7])
redis.call('HSET', meta, 'open_start', ARGV[3], 'open_from', ARGV[4])
local left = redis.call('HINCRBY', meta, 'open_count', -tonumber(ARGV[5]))
-- The age of the open list counts from its first change (hub clock).
if left > 0 then redis.call('HSET', meta, 'open_since', ARGV[9])
else redis.call('HDEL', meta, 'open_since') end
redis.call('HINCRBY', meta, 'version', 1)
redis.call('HSET', meta, 'modified', server_now())
return 'ok'
"""

# KEYS: meta, state. One consistent snapshot (a script is atomic on a Cluster too, where
# MULTI pipelines are not available).
_SNAPSHOT = """
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
"""

# KEYS: stream, meta; ARGV: minid. Trim, remembering the last id removed and its time.
_TRIM = """
local last = redis.call('XREVRANGE', KEYS[1], '(' .. ARGV[1], '-', 'COUNT', 1)
if #last == 0 then return 0 end
local fields = last[1][2]
local t = '0'
for i = 1, #fields, 2 do if fields[i] == 't' then t = fields[i + 1] end end
redis.call('HSET', KEYS[2], 'trimmed_through', last[1][1], 'trimmed_through_t', t)
return redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
"""

# Lease: set if absent or renew if ours. KEYS: lease; ARGV: token, ttl_ms
_LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
  return 1
end
return 0
"""


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
class PushMeta:
    """The topic meta the push channel reads: the stream's epoch ("" before the topic's
    first write) and how far retention trimmed it (the last removed row and its time)."""

    epoch: str
    trimmed: Position | None
    trimmed_time: datetime | None


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


class TopicStore:
    """Reads and writes of one hub process, for all topics, over one Redis client."""

    def __init__(self, redis: Redis, *, prefix: str = "rs") -> None:
        self.redis = redis
        self.prefix = prefix
        self._append = redis.register_script(_APPEND.replace("{SERVER_NOW}", _SERVER_NOW))
        self._seed = redis.register_script(_SEED.replace("{SERVER_NOW}", _SERVER_NOW))
        self._rotate = redis.register_script(_ROTATE.replace("{SERVER_NOW}", _SERVER_NOW))
        self._lease = redis.register_script(_LEASE)
        self._snapshot = redis.register_script(_SNAPSHOT)
        self._trim = redis.register_script(_TRIM)

    def keys(self, topic: str) -> TopicKeys:
        return TopicKeys(self.prefix, topic)

    async def append(
        self,
        topic: str,
        plan: IngestPlan,
        *,
        now_us: int,
        idempotency_key: str | None,
        idempotency_ttl_s: int,
    ) -> tuple[dict[str, Any], bool]:
        """Append all records atomically. Returns (receipt, replayed)."""
        k = self.keys(topic)
        argv: list[Any] = [
            len(plan.records),
            "1" if idempotency_key else "0",
            idempotency_ttl_s,
            secrets.token_hex(8),
            now_us,
        ]
        for record in plan.records:
            argv += [
                record.time_us,
                record.loc,
                record.change,
                record.entry_xml,
                record.state_xml or "",
                record.entry_json,
            ]
        idem = k.idempotency(idempotency_key) if idempotency_key else k.meta
        outcome = await self._append(keys=[k.stream, k.meta, k.state, idem], args=argv)
        return self._outcome(outcome, plan.first_time_us)

    async def seed(
        self,
        topic: str,
        plan: SeedPlan,
        *,
        now_us: int,
        idempotency_key: str | None,
        idempotency_ttl_s: int,
    ) -> tuple[dict[str, Any], bool]:
        k = self.keys(topic)
        argv: list[Any] = [
            "1" if idempotency_key else "0",
            idempotency_ttl_s,
            secrets.token_hex(8),
            now_us,
            plan.at_us,
        ]
        for loc, xml in plan.state.items():
            argv += [loc, xml]
        idem = k.idempotency(idempotency_key) if idempotency_key else k.meta
        outcome = await self._seed(keys=[k.meta, k.state, idem], args=argv)
        return self._outcome(outcome, plan.at_us)

    @staticmethod
    def _outcome(outcome: list[Any], first_us: int) -> tuple[dict[str, Any], bool]:
        status = outcome[0].decode() if isinstance(outcome[0], bytes) else outcome[0]
        if status == "backwards":
            last = from_us(int(outcome[1]))
            raise IngestError(
                409,
                "change-time-backwards",
                f"change time {from_us(first_us).isoformat()} is before the topic's last "
                f"accepted change at {last.isoformat()}; the hub publishes Change Lists in "
                "forward chronological order and rejects changes that go back in time",
            )
        receipt: dict[str, Any] = json.loads(outcome[1])
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

    async def stream_length(self, topic: str) -> int:
        return int(await self.redis.xlen(self.keys(topic).stream))

    async def closed_lists(self, topic: str) -> list[ClosedList]:
        rows = await self.redis.lrange(self.keys(topic).closed, 0, -1)
        return [ClosedList.from_json(row) for row in rows]

    async def closed_xml(self, topic: str, number: int) -> bytes | None:
        value: Any = await self.redis.get(self.keys(topic).closed_list(number))
        return None if value is None else bytes(value)

    async def state(self, topic: str) -> tuple[TopicMeta, dict[str, str]]:
        """The current state and the meta it belongs to, read in one atomic step."""
        k = self.keys(topic)
        raw_meta, raw_state = await self._snapshot(keys=[k.meta, k.state])
        return _meta(_pairs(raw_meta)), {
            a.decode(): b.decode() for a, b in _pairs(raw_state).items()
        }

    async def acquire_lease(self, topic: str, token: str, ttl_ms: int) -> bool:
        return bool(await self._lease(keys=[self.keys(topic).lease], args=[token, ttl_ms]))

    async def release_lease(self, topic: str, token: str) -> None:
        key = self.keys(topic).lease
        if await self.redis.get(key) == token.encode():
            await self.redis.delete(key)

    async def close_list(
        self,
        topic: str,
        *,
        token: str,
        expected_open_start: str,
        closed: ClosedList,
        xml: bytes,
        now_us: int,
    ) -> str:
        k = self.keys(topic)
        outcome = await self._rotate(
            keys=[k.meta, k.closed, k.closed_list(closed.number), k.lease],
            args=[
                token,
                expected_open_start,
                closed.last_id,
                closed.until_us,
                closed.count,
                xml,
                closed.as_json(),
                closed.number,
                now_us,
            ],
        )
        return outcome.decode() if isinstance(outcome, bytes) else str(outcome)

    async def trim(self, topic: str, min_id: str) -> int:
        """Drop stream entries older than ``min_id`` (callers keep the open list).

        Records ``trimmed_through`` (the last id removed) in the same atomic step, so the push
        channel can tell a subscriber whose resume point is gone to catch up from the archive.
        """
        k = self.keys(topic)
        return int(await self._trim(keys=[k.stream, k.meta], args=[min_id]))

    # --- stream and meta reads of the push channel (and of the open Change List) ---------

    async def entries_after(
        self, topic: str, after: Position, *, count: int | None = None
    ) -> list[StreamEntry]:
        """Up to ``count`` stream entries after ``after`` (exclusive), in order."""
        rows: Any = await self.redis.xrange(
            self.keys(topic).stream, min=f"({after}", max="+", count=count
        )
        return [_stream_entry(row) for row in rows]

    async def entry_at(self, topic: str, position: Position) -> StreamEntry | None:
        """The stream entry at ``position``, if the stream still holds it."""
        rows: Any = await self.redis.xrange(
            self.keys(topic).stream, min=str(position), max=str(position)
        )
        return _stream_entry(rows[0]) if rows else None

    async def oldest(self, topic: str) -> Position | None:
        """The position of the first entry the stream still holds (None when empty)."""
        rows: Any = await self.redis.xrange(self.keys(topic).stream, count=1)
        return _stream_entry(rows[0]).position if rows else None

    async def newest(self, topic: str) -> StreamEntry | None:
        """The stream's last entry (None when empty)."""
        rows: Any = await self.redis.xrevrange(self.keys(topic).stream, count=1)
        return _stream_entry(rows[0]) if rows else None

    async def wait_entries(
        self, topic: str, after: Position, *, count: int, block_ms: int
    ) -> list[StreamEntry]:
        """Entries after ``after``, waiting up to ``block_ms`` for the first one
        (``XREAD BLOCK``): empty when none arrived in time."""
        reply: Any = await self.redis.xread(
            {self.keys(topic).stream: str(after)}, count=count, block=block_ms
        )
        return [_stream_entry(row) for row in reply[0][1]] if reply else []

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


def _stream_entry(row: Any) -> StreamEntry:
    """The one decoder of a stream row (an id and the fields the append script writes)."""
    raw_id, fields = row
    return StreamEntry(
        position=Position.parse(raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)),
        time_us=int(fields[b"t"]),
        xml=fields[b"x"].decode(),
        json=fields[b"j"].decode(),
        loc=fields[b"loc"].decode(),
        change=fields[b"ch"].decode(),
    )
