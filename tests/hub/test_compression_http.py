"""gzip for every pull document, over real HTTP on loopback: negotiated from Accept-Encoding,
its own strong ETag per coding, conditional requests and HEAD consistent with GET, closed
Change Lists compressed once and served byte-identical after."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest

from rspush.hub.server import RunningHub, bind, running_hub
from rspush.resourcesync import parse_document
from tests.support.fragments import Times, auth, change_fragment
from tests.support.hubs import HubFactory, make_settings
from tests.support.waiting import eventually

TOPIC = "/topics/dataset1"
DOCUMENTS = [
    "/.well-known/resourcesync",
    f"{TOPIC}/capabilitylist.xml",
    f"{TOPIC}/changelist.xml",
    f"{TOPIC}/changelists/0.xml",
    f"{TOPIC}/changelist-index.xml",
    f"{TOPIC}/changelist-archive.xml",
    f"{TOPIC}/resourcelist.xml",
]


@dataclass(frozen=True)
class Raw:
    status: int
    headers: httpx.Headers
    body: bytes
    """As sent: not decoded."""


async def fetch(client: httpx.AsyncClient, path: str, method: str = "GET", **headers: str) -> Raw:
    """One request with exactly ``headers`` (no Accept-Encoding unless given)."""
    request = client.build_request(method, path)
    del request.headers["accept-encoding"]
    for name, value in headers.items():
        request.headers[name.replace("_", "-")] = value
    reply = await client.send(request, stream=True)
    try:
        body = b"".join([chunk async for chunk in reply.aiter_raw()])
    finally:
        await reply.aclose()
    return Raw(reply.status_code, reply.headers, body)


@asynccontextmanager
async def hub_with_history(hub_factory: HubFactory) -> AsyncIterator[httpx.AsyncClient]:
    """A hub whose dataset1 has closed Change Lists, an open one, and state."""
    async with (
        hub_factory(changelist_max_entries=50) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as client,
    ):
        await post_history(client, running)
        yield client


async def post_history(client: httpx.AsyncClient, running: RunningHub) -> None:
    times = Times()
    for batch in range(3):
        changes = [
            (f"http://example.com/resource-{batch}-{i}", "created", times.next()) for i in range(60)
        ]
        reply = await client.post(
            f"{TOPIC}/changes", content=change_fragment(*changes), headers=auth()
        )
        assert reply.status_code == 202, reply.text

    async def settled() -> bool:
        # Rotation runs in the background: wait until it has closed every full list, and
        # until the last version's second is over (only then is Last-Modified sent, so
        # every later answer of this version carries the same validators).
        reply = await client.get(f"{TOPIC}/changelist.xml")
        document = parse_document(reply.content)
        return len(document.entries) < 50 and "last-modified" in reply.headers

    await eventually(settled, what="the history rotated into closed lists, and settled")


@pytest.mark.timeout(60)
async def test_every_document_is_sent_gzipped_only_when_asked(hub_factory: HubFactory) -> None:
    async with hub_with_history(hub_factory) as client:
        for path in DOCUMENTS:
            plain = await fetch(client, path)
            assert plain.status == 200, path
            assert "content-encoding" not in plain.headers, path
            assert "Accept-Encoding" in plain.headers["vary"], path
            assert int(plain.headers["content-length"]) == len(plain.body)
            parse_document(plain.body)

            packed = await fetch(client, path, accept_encoding="gzip, deflate")
            assert packed.status == 200, path
            assert packed.headers["content-encoding"] == "gzip", path
            assert "Accept-Encoding" in packed.headers["vary"], path
            assert int(packed.headers["content-length"]) == len(packed.body), path
            assert gzip.decompress(packed.body) == plain.body, path
            assert packed.headers["etag"] != plain.headers["etag"], path
            assert not packed.headers["etag"].startswith("W/"), "strong, per coding"
            assert packed.headers.get("last-modified") == plain.headers.get("last-modified")

            for refused in ("gzip;q=0", "identity", "", "br"):
                other = await fetch(client, path, accept_encoding=refused)
                assert "content-encoding" not in other.headers, (path, refused)
                assert other.body == plain.body
                assert other.headers["etag"] == plain.headers["etag"]


@pytest.mark.timeout(60)
async def test_conditional_requests_and_head_per_coding(hub_factory: HubFactory) -> None:
    async with hub_with_history(hub_factory) as client:
        for path in DOCUMENTS:
            plain = await fetch(client, path)
            packed = await fetch(client, path, accept_encoding="gzip")
            plain_tag, packed_tag = plain.headers["etag"], packed.headers["etag"]

            # Each coding revalidates with its own tag...
            same = await fetch(client, path, accept_encoding="gzip", if_none_match=packed_tag)
            assert same.status == 304, path
            assert same.body == b""
            assert same.headers["etag"] == packed_tag
            assert "Accept-Encoding" in same.headers["vary"]
            assert (await fetch(client, path, if_none_match=plain_tag)).status == 304, path
            # ...and another coding's tag names another representation: sent in full.
            crossed = await fetch(client, path, accept_encoding="gzip", if_none_match=plain_tag)
            assert crossed.status == 200, path
            assert crossed.body == packed.body
            assert (await fetch(client, path, if_none_match=packed_tag)).status == 200, path
            weak = await fetch(
                client, path, accept_encoding="gzip", if_none_match=f"W/{packed_tag}"
            )
            assert weak.status == 304, "If-None-Match compares weakly (RFC 9110 §13.1.2)"

            modified = packed.headers.get("last-modified")
            if modified is not None:
                for coding in ("gzip", "identity"):
                    since = await fetch(
                        client, path, accept_encoding=coding, if_modified_since=modified
                    )
                    assert since.status == 304, (path, coding)

            for coding, full in (("gzip", packed), ("identity", plain)):
                head = await fetch(client, path, "HEAD", accept_encoding=coding)
                assert head.status == 200
                assert head.body == b""
                for name in ("etag", "content-length", "vary", "content-type"):
                    assert head.headers.get(name) == full.headers.get(name), (path, name)
                assert head.headers.get("content-encoding") == full.headers.get("content-encoding")


@pytest.mark.timeout(60)
async def test_a_closed_change_list_is_compressed_once_and_served_identical(
    hub_factory: HubFactory,
) -> None:
    async with (
        hub_factory(changelist_max_entries=50) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as client,
    ):
        await post_history(client, running)
        cache = running.hub.gzip
        assert cache is not None
        path = f"{TOPIC}/changelists/0.xml"
        first = await fetch(client, path, accept_encoding="gzip")
        compressions = cache.compressions
        for _ in range(5):
            again = await fetch(client, path, accept_encoding="gzip")
            assert again.body == first.body
            assert again.headers["etag"] == first.headers["etag"]
            assert "immutable" in again.headers["cache-control"]
        assert cache.compressions == compressions, "compressed again"
        assert len(first.body) * 3 < len(gzip.decompress(first.body))


@pytest.mark.timeout(60)
async def test_the_open_list_is_recompressed_when_it_changes(hub_factory: HubFactory) -> None:
    async with hub_factory() as running, httpx.AsyncClient(base_url=running.url) as client:
        path = f"{TOPIC}/changelist.xml"
        times = Times()
        seen = set()
        for n in range(3):
            change = (f"http://example.com/r{n}", "created", times.next())
            reply = await client.post(
                f"{TOPIC}/changes", content=change_fragment(change), headers=auth()
            )
            assert reply.status_code == 202
            packed = await fetch(client, path, accept_encoding="gzip")
            document = parse_document(gzip.decompress(packed.body))
            assert len(document.entries) == n + 1
            seen.add(packed.headers["etag"])
        assert len(seen) == 3


@pytest.mark.timeout(60)
async def test_the_topic_uri_has_no_body_to_compress(hub: RunningHub) -> None:
    async with httpx.AsyncClient(base_url=hub.url) as client:
        reply = await fetch(client, TOPIC, accept_encoding="gzip")
        assert reply.status == 200
        assert reply.body == b""
        assert "content-encoding" not in reply.headers


@pytest.mark.timeout(60)
async def test_compression_can_be_turned_off(redis_url: str, prefix: str) -> None:
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = make_settings(redis_url, prefix, base)
    settings.compression.enabled = False
    async with running_hub(settings, sock=sock), httpx.AsyncClient(base_url=base) as client:
        reply = await fetch(client, f"{TOPIC}/changelist.xml", accept_encoding="gzip")
        assert reply.status == 200
        assert "content-encoding" not in reply.headers
        assert "vary" not in reply.headers
        parse_document(reply.body)
