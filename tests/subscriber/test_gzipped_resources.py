"""Resources sent with ``Content-Encoding: gzip``: the agent asks for gzip, the length and
hashes the Source announced are checked against the *decoded* bytes (the resource itself,
which is what the mirror holds), and a small gzip body inflating past the size cap is
refused with a clear error after at most the cap."""

from __future__ import annotations

import gzip
import hashlib
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from rspush.resourcesync.hashes import parse_hashes
from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.errors import FetchError, VerificationError
from rspush.subscriber.fetch import Fetcher
from rspush.subscriber.wiring import http_client
from tests.subscriber.test_gzipped_documents import EncodingSource
from tests.support.agents import converged, running_agent
from tests.support.origin import running_origin
from tests.support.static_source import (
    T0,
    T1,
    capability_list,
    changed,
    config_for,
    listed,
    urlset,
)

BODY = b"The resource itself: " + b"compressible text. " * 500


class AskingSource(EncodingSource):
    """Gzips a path in :attr:`encoded` only when the request accepts gzip, and records the
    Accept-Encoding of each GET."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.accepted: list[str | None] = []

    async def _get(self, request: Request) -> Response:
        self.accepted.append(request.headers.get("accept-encoding"))
        if "gzip" not in (request.headers.get("accept-encoding") or ""):
            return await super(EncodingSource, self)._get(request)
        return await super()._get(request)


def announced(uri: str, content: bytes) -> ResourceChange:
    return ResourceChange(
        uri,
        ChangeType.UPDATED,
        datetime(2026, 1, 1, tzinfo=UTC),
        Channel.POLL,
        length=len(content),
        hashes=parse_hashes(
            f"md5:{hashlib.md5(content).hexdigest()} sha-256:{hashlib.sha256(content).hexdigest()}"
        ),
    )


async def test_the_hash_of_the_decoded_resource_is_verified(tmp_path: Path) -> None:
    async with running_origin(EncodingSource) as source, httpx.AsyncClient() as client:
        source.put("/a.txt", BODY)
        source.encoded.add("/a.txt")
        fetched = await Fetcher(client, tmp_path).fetch(announced(source.uri("/a.txt"), BODY))
        assert fetched.path.read_bytes() == BODY
        assert fetched.length == len(BODY)
        # The hash of the gzip bytes on the wire is not the resource's: refused.
        coded = gzip.compress(BODY)
        with pytest.raises(VerificationError, match="length"):
            await Fetcher(client, tmp_path, tries=1).fetch(announced(source.uri("/a.txt"), coded))


async def test_a_gzip_bomb_resource_is_refused_at_the_cap(tmp_path: Path) -> None:
    async with running_origin(EncodingSource) as source, httpx.AsyncClient() as client:
        source.put("/bomb.bin", bytes(32 * 1024 * 1024))  # sent as ~32 KiB of gzip
        source.encoded.add("/bomb.bin")
        fetcher = Fetcher(client, tmp_path / "temp", max_bytes=4 * 1024 * 1024)
        change = ResourceChange(source.uri("/bomb.bin"), ChangeType.UPDATED, T0_TIME, Channel.POLL)
        with pytest.raises(FetchError, match=r"once its Content-Encoding \(gzip\) is decoded"):
            await fetcher.fetch(change)
        assert list((tmp_path / "temp").iterdir()) == [], "the partial file is deleted"


T0_TIME = datetime(2026, 1, 1, tzinfo=UTC)


async def test_the_agent_asks_for_gzip_and_mirrors_the_decoded_bytes(tmp_path: Path) -> None:
    async with running_origin(AskingSource) as source:
        capability_list(source, {"resourcelist": "/rl.xml", "changelist": "/cl.xml"})
        source.put("/a.txt", BODY)
        source.encoded.update({"/a.txt", "/rl.xml", "/cl.xml", "/b.txt"})
        source.put_document(
            "/rl.xml", urlset("resourcelist", listed(source, "/a.txt", BODY, T0), at=T0)
        )
        source.put_document("/cl.xml", urlset("changelist", from_=T0))
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)):
            await converged(source, dest)
            source.put("/b.txt", BODY[::-1])
            source.put_document(
                "/cl.xml",
                urlset(
                    "changelist", changed(source, "/b.txt", "created", T1, BODY[::-1]), from_=T0
                ),
            )
            await converged(source, dest)
        assert (dest / "a.txt").read_bytes() == BODY
        assert (dest / "b.txt").read_bytes() == BODY[::-1]
        assert source.accepted and all("gzip" in (a or "") for a in source.accepted)


async def test_the_agents_client_says_what_it_accepts(tmp_path: Path) -> None:
    async with (
        running_origin(EncodingSource) as source,
        http_client(config_for(source, tmp_path)) as client,
    ):
        assert client.headers["accept-encoding"] == "gzip, deflate"
