"""Gzipped Source documents: a ``.xml.gz`` body (recognised by its magic bytes) and a
document sent with ``Content-Encoding: gzip``; a gzip bomb is refused with a clear error."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from rspush.remote.reader import DocumentReader
from rspush.subscriber.errors import SourceError
from tests.support.agents import converged, running_agent
from tests.support.origin import running_origin
from tests.support.static_source import (
    T0,
    T1,
    StaticSource,
    capability_list,
    changed,
    config_for,
    listed,
    urlset,
)


class EncodingSource(StaticSource):
    """Sends the documents in :attr:`encoded` gzipped with ``Content-Encoding: gzip``."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.encoded: set[str] = set()

    async def _get(self, request: Request) -> Response:
        reply = await super()._get(request)
        if request.scope["path"] in self.encoded and reply.status_code == 200:
            body = gzip.compress(reply.body)
            headers = {"Content-Encoding": "gzip", "ETag": reply.headers["etag"]}
            return Response(body, media_type="application/xml", headers=headers)
        return reply


async def test_gzipped_resource_list_and_change_list_are_mirrored(tmp_path: Path) -> None:
    async with running_origin(EncodingSource) as source:
        capability_list(
            source, {"resourcelist": "/resourcelist.xml.gz", "changelist": "/changelist.xml"}
        )
        source.put("/a.txt", b"alpha")
        source.put_document(
            "/resourcelist.xml.gz",
            gzip.compress(urlset("resourcelist", listed(source, "/a.txt", b"alpha", T0), at=T0)),
            "application/gzip",
        )
        source.encoded.add("/changelist.xml")
        source.put_document("/changelist.xml", urlset("changelist", from_=T0))
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)
            source.put("/b.txt", b"bravo")
            source.put_document(
                "/changelist.xml",
                urlset("changelist", changed(source, "/b.txt", "created", T1, b"bravo"), from_=T0),
            )
            await converged(source, dest)
            assert source.uri("/b.txt") in {e["uri"] for e in run.applied("poll")}


def zeros_gzipped(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1024 * 1024)
    return b"".join(packer.compress(chunk) for _ in range(size // len(chunk))) + packer.flush()


@pytest.mark.parametrize("how", ["body", "content-encoding"])
async def test_a_gzip_bomb_is_refused(how: str) -> None:
    async with running_origin(EncodingSource) as source:
        if how == "body":
            source.put_document("/bomb.xml.gz", zeros_gzipped(40 * 1024 * 1024), "application/gzip")
        else:
            source.encoded.add("/bomb.xml")
            source.put_document("/bomb.xml", bytes(40 * 1024 * 1024))
        path = "/bomb.xml.gz" if how == "body" else "/bomb.xml"
        async with httpx.AsyncClient() as client:
            with pytest.raises(SourceError, match="decompression bomb"):
                await DocumentReader(client).get(source.uri(path))
