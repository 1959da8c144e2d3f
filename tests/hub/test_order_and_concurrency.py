"""Order under concurrency, and seeding a topic with a baseline Resource List: a real hub on
loopback, a real Redis, real concurrent HTTP posters."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from redis.asyncio import Redis

from rspush.hub.server import RunningHub
from rspush.resourcesync import Document, DocumentType, Entry, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from tests.support.fragments import auth, change_fragment, iso
from tests.support.hubs import HubFactory
from tests.support.rejections import snapshot
from tests.support.waiting import eventually

RS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


async def fetch(client: httpx.AsyncClient, url: str) -> tuple[bytes, Document]:
    reply = await client.get(urlsplit(url).path if url.startswith("http") else url)
    assert reply.status_code == 200, (url, reply.text)
    assert reply.headers["content-type"].split(";")[0] == "application/xml"
    return reply.content, parse_document(reply.content)


def valid(body: bytes, document: Document) -> None:
    assert validate(document) == []
    assert schema_errors(body) == []


class Clock:
    """A shared, strictly increasing clock: each call returns ``n`` fresh change times."""

    def __init__(self) -> None:
        self.last = datetime.now(UTC) - timedelta(seconds=1)

    def take(self, n: int) -> list[datetime]:
        start = max(datetime.now(UTC), self.last + timedelta(microseconds=1))
        times = [start + timedelta(microseconds=i) for i in range(n)]
        self.last = times[-1]
        return times


@dataclass
class Post:
    locs: list[str]
    times: list[datetime]
    status: int = 0
    reply: dict[str, Any] = field(default_factory=dict)


def stream_id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq)


# --- concurrent posters ------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_concurrent_posters_keep_every_list_in_order(
    hub_factory: HubFactory, redis_url: str, prefix: str
) -> None:
    posters, posts_each, per_list = 8, 20, 40
    clock = Clock()
    rng = random.Random(20260301)
    async with (
        hub_factory(changelist_max_entries=per_list) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as client,
    ):

        async def poster(number: int) -> list[Post]:
            done = []
            async with httpx.AsyncClient(base_url=running.url, timeout=30) as own:
                for index in range(posts_each):
                    size = rng.randint(1, 5)
                    locs = [f"http://example.com/p{number}/{index}/{i}" for i in range(size)]
                    times = clock.take(size)  # just before posting
                    await asyncio.sleep(rng.random() * 0.002)  # jitter: some arrive late
                    body = change_fragment(
                        *[(loc, "created", iso(t)) for loc, t in zip(locs, times, strict=True)]
                    )
                    reply = await own.post("/topics/dataset1/changes", content=body, headers=auth())
                    done.append(Post(locs, times, reply.status_code, reply.json()))
            return done

        posts = [p for batch in await asyncio.gather(*map(poster, range(posters))) for p in batch]
        accepted = [p for p in posts if p.status == 202]
        rejected = [p for p in posts if p.status != 202]
        for post in rejected:
            assert post.status == 409, post.reply
            assert post.reply["error"] == "change-time-backwards"
        assert accepted, "every post was rejected"
        total = sum(p.reply["accepted"] for p in accepted)
        assert total == sum(len(p.locs) for p in accepted)

        async def settled() -> bool:
            archive = parse_document(
                (await client.get("/topics/dataset1/changelist-archive.xml")).content
            )
            open_list = parse_document(
                (await client.get("/topics/dataset1/changelist.xml")).content
            )
            return bool(
                len(archive.entries) == total // per_list
                and len(open_list.entries) == total % per_list
            )

        await eventually(settled, what="rotation to catch up")

        body, archive = await fetch(client, "/topics/dataset1/changelist-archive.xml")
        valid(body, archive)
        listed: list[Entry] = []
        for item in archive.entries:
            body, closed = await fetch(client, item.loc)
            valid(body, closed)
            assert len(closed.entries) == per_list
            assert item.md is not None
            assert (closed.md.from_, closed.md.until) == (item.md.from_, item.md.until)
            listed += closed.entries
        body, open_list = await fetch(client, "/topics/dataset1/changelist.xml")
        valid(body, open_list)
        listed += open_list.entries

    # Every accepted change exactly once, with its own time; rejected ones nowhere.
    seen = [e.loc for e in listed]
    assert len(seen) == len(set(seen)) == total
    posted = {loc: t for p in accepted for loc, t in zip(p.locs, p.times, strict=True)}
    assert set(seen) == set(posted)
    assert {loc for p in rejected for loc in p.locs}.isdisjoint(seen)
    assert all(e.md is not None and e.md.datetime == posted[e.loc] for e in listed)
    # Forward chronological order across all the lists (Z39.99 §12.1).
    times = [posted[loc] for loc in seen]
    assert times == sorted(times)
    # Acceptance order: each request's changes are contiguous, requests in stream order.
    by_stream = sorted(accepted, key=lambda p: stream_id(p.reply["first"]))
    assert seen == [loc for p in by_stream for loc in p.locs]
    for before, after in zip(by_stream, by_stream[1:], strict=False):
        assert stream_id(before.reply["last"]) < stream_id(after.reply["first"])

    redis = Redis.from_url(redis_url)
    try:
        assert await redis.xlen(f"{prefix}:{{dataset1}}:changes") == total
    finally:
        await redis.aclose()


@pytest.mark.timeout(60)
async def test_concurrent_posts_without_times_are_all_accepted(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    """Changes without a time get the hub's clock; a stamped request that loses a race with
    a concurrent one is re-stamped, not rejected: the Source said nothing about time."""
    posters, posts_each = 6, 8

    async def poster(number: int) -> list[tuple[int, dict[str, Any]]]:
        out = []
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as own:
            for index in range(posts_each):
                urls = "".join(
                    f"<url><loc>http://example.com/s{number}/{index}/{i}</loc>"
                    f'<rs:md change="updated"/></url>'
                    for i in range(3)
                )
                body = (f'<urlset {RS}><rs:md capability="changelist"/>{urls}</urlset>').encode()
                reply = await own.post("/topics/dataset1/changes", content=body, headers=auth())
                out.append((reply.status_code, reply.json()))
        return out

    before = datetime.now(UTC)
    results = [r for batch in await asyncio.gather(*map(poster, range(posters))) for r in batch]
    after = datetime.now(UTC)
    assert [status for status, _ in results] == [202] * posters * posts_each, results
    _, doc = await fetch(client, "/topics/dataset1/changelist.xml")
    assert len(doc.entries) == posters * posts_each * 3
    stamps = [e.md.datetime for e in doc.entries if e.md is not None and e.md.datetime]
    assert len(stamps) == len(doc.entries)
    assert stamps == sorted(stamps)
    assert all(before - timedelta(seconds=1) <= t <= after + timedelta(seconds=1) for t in stamps)


async def test_a_fragment_is_never_interleaved(hub: RunningHub, client: httpx.AsyncClient) -> None:
    """Two large requests at the same time: each one's changes stay contiguous."""
    clock = Clock()
    a_times, b_times = clock.take(300), clock.take(300)
    # b's times all come after a's; post b first so a may well be rejected (409) as a whole.
    a = change_fragment(
        *[(f"http://example.com/a{i}", "created", iso(t)) for i, t in enumerate(a_times)]
    )
    b = change_fragment(
        *[(f"http://example.com/b{i}", "created", iso(t)) for i, t in enumerate(b_times)]
    )
    replies = await asyncio.gather(
        client.post("/topics/dataset1/changes", content=b, headers=auth()),
        client.post("/topics/dataset1/changes", content=a, headers=auth()),
    )
    statuses = sorted(r.status_code for r in replies)
    assert statuses in ([202, 202], [202, 409]), [r.text for r in replies]
    _, doc = await fetch(client, "/topics/dataset1/changelist.xml")
    prefixes = [e.loc.removeprefix("http://example.com/")[0] for e in doc.entries]
    assert prefixes in (["a"] * 300 + ["b"] * 300, ["b"] * 300), "".join(prefixes)


# --- seeding -----------------------------------------------------------------------------

MD5 = {
    "a": "md5:1584abdf8ebdc9802ac0c6a7402c03b6",
    "b": "md5:1e0d5cb8ef6ba40c99b14c0237be735e",
    "c": "md5:0988647082c8bc51778894a48ec3b576",
}


def baseline(at: datetime, entries: list[tuple[str, str | None, str, int]]) -> bytes:
    """A Resource List of (loc, lastmod, hash, length)."""
    urls = "".join(
        f"<url><loc>{loc}</loc>"
        + (f"<lastmod>{lastmod}</lastmod>" if lastmod else "")
        + f'<rs:md hash="{digest}" length="{length}" type="text/html"/></url>'
        for loc, lastmod, digest, length in entries
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {RS}>'
        f'<rs:ln rel="up" href="http://example.com/capabilitylist.xml"/>'
        f'<rs:md capability="resourcelist" at="{iso(at)}"/>{urls}</urlset>'
    ).encode()


def described(doc: Document) -> list[tuple[str, Any, Any, Any, Any]]:
    return [
        (
            e.loc,
            e.lastmod,
            e.hashes,
            e.length,
            None if e.md is None else e.md.type,
        )
        for e in doc.entries
    ]


async def dump(redis_url: str, prefix: str) -> dict[str, tuple[str, Any]]:
    """Every key under the prefix (what a refused request must leave as it was)."""
    return await snapshot(redis_url, prefix)


async def test_seeding_makes_the_resource_list_complete_from_day_one(
    hub: RunningHub, client: httpx.AsyncClient, redis_url: str, prefix: str
) -> None:
    at = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=250000)
    entries: list[tuple[str, str | None, str, int]] = [
        ("http://example.com/a", "2026-01-01T00:00:00Z", MD5["a"], 10),
        ("http://example.com/b", None, MD5["b"], 20),
        ("http://example.com/c", "2026-02-01T12:30:00Z", MD5["c"], 30),
    ]
    body = baseline(at, entries)
    reply = await client.post("/topics/dataset1/baseline", content=body, headers=auth())
    assert reply.status_code == 202, reply.text
    assert reply.json()["seeded"] == 3 and reply.json()["replayed"] is False

    raw, resource_list = await fetch(client, "/topics/dataset1/resourcelist.xml")
    valid(raw, resource_list)
    assert resource_list.type is DocumentType.RESOURCE_LIST
    assert resource_list.md.at == at
    posted = parse_document(body)
    # Same resources, same metadata; an entry without lastmod is as of the list's at.
    expected = [
        (loc, lastmod or at, hashes, length, kind)
        for loc, lastmod, hashes, length, kind in described(posted)
    ]
    assert described(resource_list) == expected
    # No change events were invented.
    raw, change_list = await fetch(client, "/topics/dataset1/changelist.xml")
    valid(raw, change_list)
    assert change_list.entries == ()
    assert change_list.md.from_ == at
    redis = Redis.from_url(redis_url)
    try:
        assert await redis.xlen(f"{prefix}:{{dataset1}}:changes") == 0
    finally:
        await redis.aclose()

    # A later change updates the state.
    t1, t2, t3 = (datetime.now(UTC) - timedelta(minutes=m) for m in (3, 2, 1))
    changes = change_fragment(
        ("http://example.com/a", "updated", iso(t1)),
        ("http://example.com/b", "deleted", iso(t2)),
        ("http://example.com/d", "created", iso(t3)),
    )
    assert (
        await client.post("/topics/dataset1/changes", content=changes, headers=auth())
    ).is_success
    raw, resource_list = await fetch(client, "/topics/dataset1/resourcelist.xml")
    valid(raw, resource_list)
    assert [e.loc for e in resource_list.entries] == [
        "http://example.com/a",
        "http://example.com/c",
        "http://example.com/d",
    ]
    by_loc = {e.loc: e for e in resource_list.entries}
    assert by_loc["http://example.com/a"].lastmod == t1
    assert by_loc["http://example.com/a"].length == len("http://example.com/a")
    assert by_loc["http://example.com/c"].hashes == posted.entries[2].hashes
    assert resource_list.md.at == t3
    _, change_list = await fetch(client, "/topics/dataset1/changelist.xml")
    assert [(e.loc, e.change) for e in change_list.entries] == [
        ("http://example.com/a", "updated"),
        ("http://example.com/b", "deleted"),
        ("http://example.com/d", "created"),
    ]

    # A topic with history is never seeded again, older or newer: replacing its state would
    # drop resources without the deletions its followers need (docs/hub.md). Nothing written.
    before = await dump(redis_url, prefix)
    for again_at in (t3 - timedelta(seconds=1), datetime.now(UTC).replace(microsecond=0)):
        again = baseline(again_at, [("http://example.com/z", None, MD5["a"], 1)])
        reply = await client.post("/topics/dataset1/baseline", content=again, headers=auth())
        assert reply.status_code == 409, reply.text
        assert reply.json()["error"] == "topic-has-history"
        assert await dump(redis_url, prefix) == before


async def test_baseline_from_the_future_is_rejected(
    hub: RunningHub, client: httpx.AsyncClient, redis_url: str, prefix: str
) -> None:
    """A baseline's ``at`` is a change time like any other: one far ahead of the hub's clock
    would make every later change 409 (docs/hub.md: future-change-time)."""
    now = datetime.now(UTC)
    assert (
        await client.post(
            "/topics/dataset1/changes",
            content=change_fragment(("http://example.com/a", "created", iso(now))),
            headers=auth(),
        )
    ).is_success
    before = await dump(redis_url, prefix)
    body = baseline(now + timedelta(days=365), [("http://example.com/a", None, MD5["a"], 1)])
    reply = await client.post("/topics/dataset1/baseline", content=body, headers=auth())
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"] == "future-change-time"
    assert await dump(redis_url, prefix) == before
    # The topic still takes ordinary changes.
    later = change_fragment(("http://example.com/b", "created", iso(datetime.now(UTC))))
    assert (await client.post("/topics/dataset1/changes", content=later, headers=auth())).is_success
