"""Proving that a refused request wrote nothing: a snapshot of every key under a test's
prefix before and after (:class:`Unchanged`), a topic seeded so every key has something a
stray write could change (:func:`seeded`), and strictly increasing change times
(:class:`Clock`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from redis.asyncio import Redis

from tests.support.fragments import TOKEN_A, TOKEN_B, auth, change_fragment, iso


async def snapshot(redis_url: str, prefix: str) -> dict[str, tuple[str, Any]]:
    """TYPE and content of every key under ``prefix``. Left out: TTLs, the rotation lease,
    which the rotator renews (or loses, on a stalled loop) on its own schedule, and the
    framework events with their bookkeeping in the meta (``fw_*``), which the lease holder
    records on its own schedule too (a Resource List update announced after an interval)."""
    client = Redis.from_url(redis_url)
    try:
        dump: dict[str, tuple[str, Any]] = {}
        raw: Any
        async for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
            key = raw.decode()
            if key.endswith((":lease", ":framework")):
                continue
            kind = (await client.type(raw)).decode()  # type: ignore[union-attr]
            value: Any
            if kind == "stream":
                info = await client.xinfo_stream(raw)
                value = (
                    await client.xrange(raw),
                    info.get("last-generated-id"),
                    info.get("entries-added"),
                )
            elif kind == "hash":
                fields = await client.hgetall(raw)
                value = {k: v for k, v in fields.items() if not k.startswith(b"fw_")}
            elif kind == "list":
                value = await client.lrange(raw, 0, -1)
            elif kind == "string":
                value = await client.get(raw)
            elif kind == "set":
                value = sorted(await client.smembers(raw))
            elif kind == "zset":
                value = await client.zrange(raw, 0, -1, withscores=True)
            else:
                value = None
            dump[key] = (kind, value)
        return dump
    finally:
        await client.aclose()


class Unchanged:
    """``async with Unchanged(url, prefix):`` fails if any key under the prefix changed."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.before: dict[str, tuple[str, Any]] = {}

    async def __aenter__(self) -> Unchanged:
        self.before = await snapshot(self.redis_url, self.prefix)
        assert self.before, "snapshot of an empty prefix proves nothing"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is None:
            assert await snapshot(self.redis_url, self.prefix) == self.before


class Clock:
    """Strictly increasing change times near the real clock."""

    def __init__(self, start: datetime | None = None) -> None:
        self.last = start or datetime.now(UTC) - timedelta(minutes=10)

    def __call__(self) -> str:
        self.last = max(datetime.now(UTC) - timedelta(minutes=5), self.last + timedelta(seconds=1))
        return iso(self.last)


async def seeded(client: httpx.AsyncClient, clock: Clock, topic: str = "dataset1") -> None:
    """Something in every key of the topic, so a stray write has something to change."""
    token = TOKEN_A if topic == "dataset1" else TOKEN_B
    body = change_fragment(
        ("http://example.com/a", "created", clock()),
        ("http://example.com/b", "created", clock()),
        ("http://example.com/b", "deleted", clock()),
    )
    reply = await client.post(
        f"/topics/{topic}/changes",
        content=body,
        headers={**auth(token), "Idempotency-Key": f"seed-{topic}"},
    )
    assert reply.status_code == 202, reply.text
