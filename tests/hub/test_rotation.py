"""Change List rotation at small sizes and ages, the archive it builds, retention, and HTTP
caching of what it produces: a real hub on loopback and a real Redis; every wait is on a
condition with a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from redis.asyncio import Redis

from rspush.hub.ingest import ChangeRecord, IngestPlan
from rspush.hub.materialise import Urls
from rspush.hub.rotation import RotationPolicy, Rotator, rotate_once
from rspush.hub.server import RunningHub, redis_client
from rspush.hub.store import ListedChanges, StreamEntry, TopicStore
from rspush.resourcesync import Document, DocumentType, Entry, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from rspush.resourcesync.w3cdt import to_us
from tests.support.fragments import auth, change_fragment, iso
from tests.support.hubs import HubFactory
from tests.support.waiting import TIMEOUT_SCALE, eventually

TOPIC = "/topics/dataset1"


class Clock:
    def __init__(self) -> None:
        self.last = datetime.now(UTC) - timedelta(minutes=1)

    def take(self, n: int) -> list[datetime]:
        start = max(datetime.now(UTC) - timedelta(seconds=30), self.last + timedelta(seconds=1))
        times = [start + timedelta(milliseconds=10 * i) for i in range(n)]
        self.last = times[-1]
        return times


async def post_changes(
    client: httpx.AsyncClient, clock: Clock, sizes: list[int], tag: str = "r"
) -> list[tuple[str, datetime]]:
    """Post requests of the given sizes; the (loc, time) of every change, in order."""
    posted: list[tuple[str, datetime]] = []
    for number, size in enumerate(sizes):
        times = clock.take(size)
        changes = [(f"http://example.com/{tag}{number}-{i}", t) for i, t in enumerate(times)]
        body = change_fragment(*[(loc, "created", iso(t)) for loc, t in changes])
        reply = await client.post(f"{TOPIC}/changes", content=body, headers=auth())
        assert reply.status_code == 202, reply.text
        posted += changes
    return posted


def path(url: str) -> str:
    return urlsplit(url).path


async def get_doc(client: httpx.AsyncClient, url: str) -> tuple[httpx.Response, Document]:
    reply = await client.get(path(url))
    assert reply.status_code == 200, (url, reply.text)
    assert reply.headers["content-type"].split(";")[0] == "application/xml"
    document = parse_document(reply.content)
    assert validate(document) == [], url
    assert schema_errors(reply.content) == [], url
    return reply, document


async def archive_size(client: httpx.AsyncClient) -> int:
    reply = await client.get(f"{TOPIC}/changelist-archive.xml")
    return len(parse_document(reply.content).entries)


async def everything(client: httpx.AsyncClient) -> tuple[Document, list[Document], Document]:
    """The archive, every closed list it names (in order) and the open list."""
    _, archive = await get_doc(client, f"{TOPIC}/changelist-archive.xml")
    closed = [(await get_doc(client, item.loc))[1] for item in archive.entries]
    _, open_list = await get_doc(client, f"{TOPIC}/changelist.xml")
    return archive, closed, open_list


def changes_of(documents: list[Document]) -> list[tuple[str, datetime | None]]:
    return [(e.loc, e.md.datetime if e.md else None) for d in documents for e in d.entries]


def assert_gap_free(archive: Document, closed: list[Document], open_list: Document) -> None:
    items: list[Entry] = list(archive.entries)
    assert [path(e.loc) for e in items] == [
        f"{TOPIC}/changelists/{n}.xml" for n in range(len(items))
    ]
    for item, document in zip(items, closed, strict=True):
        assert item.md is not None
        assert document.type is DocumentType.CHANGE_LIST
        assert (document.md.from_, document.md.until) == (item.md.from_, item.md.until)
        assert document.md.from_ is not None and document.md.until is not None
        assert document.md.from_ <= document.md.until
        assert document.entries, "an empty Change List was closed"
        # Every change inside its list's interval; until is its last change's time.
        times = [e.md.datetime for e in document.entries if e.md]
        assert all(document.md.from_ <= t <= document.md.until for t in times if t)
        assert times[-1] == document.md.until
    for before, after in zip(closed, closed[1:], strict=False):
        assert before.md.until == after.md.from_
    assert open_list.md.until is None
    if closed:
        assert open_list.md.from_ == closed[-1].md.until


@pytest.mark.timeout(60)
async def test_rotation_by_size_builds_a_gap_free_immutable_archive(
    hub_factory: HubFactory,
) -> None:
    clock = Clock()
    async with (
        hub_factory(changelist_max_entries=5) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as client,
    ):
        posted = await post_changes(client, clock, [4, 6, 3, 7, 3])
        assert len(posted) == 23

        async def four_closed() -> bool:
            return await archive_size(client) == 4

        await eventually(four_closed, what="4 closed Change Lists")

        archive, closed, open_list = await everything(client)
        assert archive.type is DocumentType.CHANGE_LIST_ARCHIVE
        assert [len(c.entries) for c in closed] == [5, 5, 5, 5]
        assert len(open_list.entries) == 3
        assert_gap_free(archive, closed, open_list)
        assert closed[0].md.from_ == posted[0][1]
        # The union of all lists is everything accepted, in order, once each.
        assert changes_of([*closed, open_list]) == posted

        # Closed lists are immutable and cacheable forever.
        first_seen: dict[int, tuple[str, bytes]] = {}
        for number in range(4):
            url = f"{TOPIC}/changelists/{number}.xml"
            reply, _ = await get_doc(client, url)
            etag = reply.headers["etag"]
            assert "immutable" in reply.headers["cache-control"]
            assert "max-age=31536000" in reply.headers["cache-control"]
            assert (
                f'<{running.url}{TOPIC}/capabilitylist.xml>; rel="resourcesync"'
                in reply.headers["link"]
            )
            again = await client.get(url)
            assert (again.headers["etag"], again.content) == (etag, reply.content)
            cached = await client.get(url, headers={"If-None-Match": etag})
            assert cached.status_code == 304 and cached.content == b""
            assert cached.headers["etag"] == etag
            assert (await client.get(url, headers={"If-None-Match": '"other"'})).status_code == 200
            first_seen[number] = (etag, reply.content)
        assert (await client.get(f"{TOPIC}/changelists/4.xml")).status_code == 404

        # The Change List Index: the closed lists of the period, then the open one.
        _, index = await get_doc(client, f"{TOPIC}/changelist-index.xml")
        assert index.type is DocumentType.CHANGE_LIST_INDEX
        assert [path(e.loc) for e in index.entries] == [
            *(f"{TOPIC}/changelists/{n}.xml" for n in range(4)),
            f"{TOPIC}/changelist.xml",
        ]
        spans = [(e.md.from_, e.md.until) for e in index.entries if e.md]
        assert spans == [(c.md.from_, c.md.until) for c in closed] + [(open_list.md.from_, None)]

        # The other documents validate too, and the Capability List points at the archive.
        for url in (
            "/.well-known/resourcesync",
            f"{TOPIC}/capabilitylist.xml",
            f"{TOPIC}/resourcelist.xml",
        ):
            await get_doc(client, url)
        _, capabilities = await get_doc(client, f"{TOPIC}/capabilitylist.xml")
        advertised = {e.md.capability: path(e.loc) for e in capabilities.entries if e.md}
        assert advertised["changelist-archive"] == f"{TOPIC}/changelist-archive.xml"

        # More changes: more lists; the closed ones never change.
        posted += await post_changes(client, clock, [8], tag="s")

        async def six_closed() -> bool:
            # The rotator counts a list once its round is over (after the close and trim).
            return await archive_size(client) == 6 and running.hub.rotator.rotations == 6

        await eventually(six_closed, what="6 closed Change Lists")
        archive, closed, open_list = await everything(client)
        assert_gap_free(archive, closed, open_list)
        assert changes_of([*closed, open_list]) == posted
        for number, (etag, body) in first_seen.items():
            reply = await client.get(f"{TOPIC}/changelists/{number}.xml")
            assert (reply.headers["etag"], reply.content) == (etag, body)
        metrics = (await client.get("/metrics")).text
        assert 'rspush_rotations_total{topic="dataset1"} 6.0' in metrics
        assert running.hub.rotator.rotations == 6


@pytest.mark.timeout(60)
async def test_rotation_by_age(hub_factory: HubFactory) -> None:
    clock = Clock()
    async with (
        hub_factory(changelist_max_age_s=0.2) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as client,
    ):
        posted = await post_changes(client, clock, [2])

        def closed(count: int) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                return (
                    await archive_size(client) == count and running.hub.rotator.rotations == count
                )

            return check

        await eventually(closed(1), what="the open list to close by age")
        archive, lists, open_list = await everything(client)
        assert changes_of(lists) == posted
        assert open_list.entries == ()
        assert_gap_free(archive, lists, open_list)

        posted += await post_changes(client, clock, [1, 2], tag="b")
        await eventually(closed(2), what="a second list to close by age")
        archive, lists, open_list = await everything(client)
        assert_gap_free(archive, lists, open_list)
        assert changes_of([*lists, open_list]) == posted
        # An empty open list is never closed, however old it gets.
        assert all(lists)
        assert running.hub.rotator.rotations == 2


@pytest.mark.timeout(60)
async def test_retention_trims_only_what_is_in_closed_lists(
    hub_factory: HubFactory, redis_url: str, prefix: str
) -> None:
    clock = Clock()
    stream = f"{prefix}:{{dataset1}}:changes"
    redis = Redis.from_url(redis_url)
    try:
        async with (
            hub_factory(changelist_max_entries=5, retention_s=0) as running,
            httpx.AsyncClient(base_url=running.url, timeout=30) as client,
        ):
            posted = await post_changes(client, clock, [7, 5])

            def trimmed_to(length: int, lists: int) -> Callable[[], Awaitable[bool]]:
                async def check() -> bool:
                    return (
                        await archive_size(client) == lists
                        and await redis.xlen(stream) == length
                        and running.hub.rotator.rotations == lists
                    )

                return check

            await eventually(trimmed_to(2, 2), what="rotation and trimming")
            archive, closed, open_list = await everything(client)
            assert_gap_free(archive, closed, open_list)
            # The stream holds only the open list; the closed lists still hold the rest.
            assert [e.loc for e in open_list.entries] == [loc for loc, _ in posted[10:]]
            assert changes_of([*closed, open_list]) == posted
            rows: Any = await redis.xrange(stream)
            assert [row[1][b"loc"].decode() for row in rows] == [loc for loc, _ in posted[10:]]

            posted += await post_changes(client, clock, [3], tag="t")
            await eventually(trimmed_to(0, 3), what="the next rotation and trim")
            archive, closed, open_list = await everything(client)
            assert_gap_free(archive, closed, open_list)
            assert open_list.entries == ()
            assert changes_of(closed) == posted
            # The Resource List does not depend on the stream either.
            _, resources = await get_doc(client, f"{TOPIC}/resourcelist.xml")
            assert sorted(e.loc for e in resources.entries) == sorted(loc for loc, _ in posted)
            assert running.hub.rotator.rotations == 3
    finally:
        await redis.aclose()


async def last_modified(client: httpx.AsyncClient, url: str) -> str:
    """The Last-Modified of ``url`` once it has one (a hub may leave it out while the
    document changed within the current second: HTTP dates have whole seconds)."""
    found: list[str] = []

    async def has_it() -> bool:
        reply = await client.get(url)
        assert reply.status_code == 200
        if "last-modified" in reply.headers:
            found.append(reply.headers["last-modified"])
            # RFC 9110 §8.8.2.1: never later than the response's own Date.
            sent = parsedate_to_datetime(reply.headers["date"])
            assert parsedate_to_datetime(found[-1]) <= sent
        return bool(found)

    await eventually(has_it, what=f"a Last-Modified on {url}")
    return found[-1]


async def test_open_list_and_resource_list_answer_if_modified_since(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    """Last-Modified beside the ETag: 304 for an unchanged document, 200 once it changed."""
    when = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0)
    body = change_fragment(("http://example.com/a", "created", iso(when)))
    assert (await client.post(f"{TOPIC}/changes", content=body, headers=auth())).is_success
    for url in (f"{TOPIC}/resourcelist.xml", f"{TOPIC}/changelist.xml"):
        modified = await last_modified(client, url)
        cached = await client.get(url, headers={"If-Modified-Since": modified})
        assert cached.status_code == 304, url
        # If-None-Match wins over If-Modified-Since (RFC 9110 §13.1.3).
        fresh = await client.get(
            url, headers={"If-Modified-Since": modified, "If-None-Match": '"other"'}
        )
        assert fresh.status_code == 200, url
    later = change_fragment(("http://example.com/b", "created", iso(when + timedelta(seconds=5))))
    assert (await client.post(f"{TOPIC}/changes", content=later, headers=auth())).is_success
    for url in (f"{TOPIC}/resourcelist.xml", f"{TOPIC}/changelist.xml"):
        reply = await client.get(url, headers={"If-Modified-Since": format_datetime(when, True)})
        assert reply.status_code == 200, url


async def test_if_modified_since_never_hides_a_change_in_the_same_second(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    """Change times have microseconds, HTTP dates whole seconds: a second change within the
    second of the first must not be answered 304 to a client holding the first version."""
    first = (datetime.now(UTC) - timedelta(seconds=10)).replace(microsecond=100_000)
    body = change_fragment(("http://example.com/a", "created", iso(first)))
    assert (await client.post(f"{TOPIC}/changes", content=body, headers=auth())).is_success
    held = {
        url: await last_modified(client, url)
        for url in (f"{TOPIC}/resourcelist.xml", f"{TOPIC}/changelist.xml")
    }
    second = first + timedelta(milliseconds=500)
    body = change_fragment(("http://example.com/b", "created", iso(second)))
    assert (await client.post(f"{TOPIC}/changes", content=body, headers=auth())).is_success
    for url, modified in held.items():
        reply = await client.get(url, headers={"If-Modified-Since": modified})
        assert reply.status_code == 200, (url, modified)
        assert b"http://example.com/b" in reply.content


@pytest.mark.timeout(60)
async def test_if_modified_since_sees_a_rotation(hub_factory: HubFactory) -> None:
    """Closing the open Change List changes it (its entries move to the archive, its from
    moves on) without any new change: a client holding the old one must not get 304."""
    async with (
        hub_factory(changelist_max_age_s=1.5) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as client,
    ):
        await post_changes(client, Clock(), [2])
        modified = await last_modified(client, f"{TOPIC}/changelist.xml")
        held = await client.get(f"{TOPIC}/changelist.xml")
        assert len(parse_document(held.content).entries) == 2
        assert await archive_size(client) == 0, "rotated before the test could look"

        async def rotated() -> bool:
            return await archive_size(client) == 1

        await eventually(rotated, what="the open list to close by age")
        reply = await client.get(f"{TOPIC}/changelist.xml", headers={"If-Modified-Since": modified})
        assert reply.status_code == 200
        assert parse_document(reply.content).entries == ()


@pytest.mark.timeout(60)
async def test_rotator_stops_whenever_it_is_stopped(redis_url: str, prefix: str) -> None:
    """``Hub.stop`` cancels the rotation task and waits for it. It must end even when the
    cancellation lands inside a Redis command (a hub that cannot stop hangs SIGTERM, and
    every test that starts one)."""
    redis = redis_client(redis_url)
    store = TopicStore(redis, prefix=prefix)
    policy = RotationPolicy(max_entries=5, max_age_s=3600, retention_s=3600)
    stuck: list[int] = []
    try:
        for attempt in range(60):
            rotator = Rotator(
                store,
                "http://127.0.0.1:1",
                ["dataset1", "dataset2"],
                policy,
                interval_s=0.001,
                lease_ttl_s=1.0,
            )
            rotator.start()
            await asyncio.sleep(0.0003 * (attempt % 10))
            stopper = asyncio.create_task(rotator.stop())
            done, _ = await asyncio.wait({stopper}, timeout=1 * TIMEOUT_SCALE)
            if not done:
                stuck.append(attempt)
                # Clean up: each further cancel is another chance for the task to end.
                while not stopper.done():
                    stopper.cancel()
                    await asyncio.wait({stopper}, timeout=0.05)
                break
            stopper.result()
    finally:
        await redis.aclose()
    assert not stuck, f"Rotator.stop() did not return within 1 s (attempt {stuck[0]})"


@pytest.mark.timeout(60)
async def test_the_changes_a_rotation_leaves_keep_their_age(redis: Redis, prefix: str) -> None:
    """A rotation that closes a full list but leaves later changes open dates the open list
    from when the first of those was accepted (its stream id), not from the rotation: else
    every rotation by size would restart the age limit's clock for the changes it left."""
    store = TopicStore(redis, prefix=prefix)
    topic = "aged"
    start = to_us(datetime.now(UTC))
    records = [
        ChangeRecord(start + n, f"http://example.com/{n}", "created", "<url/>", "<url/>", "{}")
        for n in range(70)
    ]
    await store.append(
        topic, IngestPlan(records), now_us=start, idempotency_key=None, idempotency_ttl_s=60
    )
    assert await store.acquire_lease(topic, "tok", 60_000)
    policy = RotationPolicy(max_entries=50, max_age_s=3600, retention_s=3600)
    later = datetime.now(UTC) + timedelta(minutes=30)  # the rotation runs long after
    closed = await rotate_once(
        store, Urls("http://hub.example", topic), topic, token="tok", now=later, policy=policy
    )
    assert closed is not None and closed.count == 50
    meta = await store.meta(topic)
    assert meta.open_count == 20
    first_left = (await store.open_entries(topic, meta.open_start, limit=1))[0]
    assert meta.open_since_us == first_left.position.ms * 1000
    assert meta.open_since_us < to_us(later) - 60_000_000


async def test_listed_is_the_open_entries_as_a_list_needs_them(redis: Redis, prefix: str) -> None:
    """The lean read a rotation and the open Change List use (count, first and last ids, the
    last time, the entries' XML in one string) says what the full stream read says, and
    honours its limit and its exclusive start."""
    store = TopicStore(redis, prefix=prefix)
    topic = "listed"
    start = to_us(datetime.now(UTC))
    records = [
        ChangeRecord(
            start + n, f"http://example.com/{n}", "updated", f"<url>{n}é</url>", None, "{}"
        )
        for n in range(30)
    ]
    await store.append(
        topic, IngestPlan(records), now_us=start, idempotency_key=None, idempotency_ttl_s=60
    )
    meta = await store.meta(topic)
    full = await store.open_entries(topic, meta.open_start)

    def expected(entries: list[StreamEntry]) -> ListedChanges:
        xml = "".join(e.xml for e in entries).encode()
        return ListedChanges(len(entries), entries[0].id, entries[-1].id, entries[-1].time_us, xml)

    assert await store.listed(topic, meta.open_start) == expected(full)
    assert (await store.listed(topic, meta.open_start)).xml.startswith(b"<url>0\xc3\xa9</url>")  # type: ignore[union-attr]
    assert await store.listed(topic, meta.open_start, limit=5) == expected(full[:5])
    assert await store.listed(topic, full[9].id) == expected(full[10:])
    assert await store.listed(topic, full[-1].id) is None
    assert await store.closed_count(topic) == 0
