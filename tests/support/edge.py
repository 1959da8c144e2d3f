"""Helpers of the HTTP-edge hardening tests: a hub with private topics, subscribers and a
second Source on one topic; the app's own route list; a loopback TCP proxy that can lose the
hub's answer after the hub committed (or answer 503 itself)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from redis.asyncio import Redis
from starlette.routing import Route

from rspush.hub.app import Hub, build_app
from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Settings, Source, Subscriber, Topic
from tests.support.hubs import make_settings

TOKEN_C = "token-of-source-c"
"""A second Source of dataset1."""
MIRROR_1 = "token-of-mirror-1"
"""A subscriber of the private topic dataset1."""
MIRROR_2 = "token-of-mirror-2"
"""A subscriber of dataset2 only."""
METRICS_TOKEN = "token-of-the-scraper"
PRIVATE = "dataset1"
PUBLIC = "dataset2"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def edge_settings(
    redis_url: str, prefix: str, base: str, *, metrics_token: bool = False, **limits: object
) -> Settings:
    """dataset1 private (subscriber mirror-1), dataset2 public; Sources a (dataset1 and
    dataset2), b (dataset2) and c (dataset1)."""
    settings = make_settings(redis_url, prefix, base, **limits)
    source_a = settings.sources[0].model_copy(update={"topics": [PRIVATE, PUBLIC]})
    return settings.model_copy(
        update={
            "hub": settings.hub.model_copy(
                update={"metrics_token_sha256": _sha(METRICS_TOKEN) if metrics_token else None}
            ),
            "topics": [Topic(name=PRIVATE, private=True), Topic(name=PUBLIC)],
            "sources": [
                source_a,
                settings.sources[1],
                Source(name="c", token_sha256=_sha(TOKEN_C), topics=[PRIVATE]),
            ],
            "subscribers": [
                Subscriber(name="mirror-1", token_sha256=_sha(MIRROR_1), topics=[PRIVATE]),
                Subscriber(name="mirror-2", token_sha256=_sha(MIRROR_2), topics=[PUBLIC]),
            ],
        }
    )


@asynccontextmanager
async def edge_hub(
    redis_url: str, prefix: str, **options: object
) -> AsyncIterator[tuple[RunningHub, httpx.AsyncClient]]:
    """A hub on loopback with :func:`edge_settings`, and an HTTP client for it."""
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = edge_settings(redis_url, prefix, base, **options)  # type: ignore[arg-type]
    async with (
        running_hub(settings, sock=sock) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
    ):
        yield running, http


def stamped(*locs: str) -> bytes:
    """A fragment of changes without times: the hub stamps them."""
    urls = "".join(f'<url><loc>{loc}</loc><rs:md change="updated"/></url>' for loc in locs)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="changelist"/>{urls}</urlset>'
    ).encode()


def app_routes() -> list[tuple[str, frozenset[str]]]:
    """Every (path template, methods) the hub's app routes, read from the app itself, so a
    route added later is covered by the tests iterating over it."""
    settings = edge_settings("redis://127.0.0.1:1", "unused", "http://hub.example")
    app = build_app(Hub(settings, Redis.from_url("redis://127.0.0.1:1")))
    found = []
    for route in app.routes:
        assert isinstance(route, Route), route
        found.append((route.path, frozenset(route.methods or ())))
    return found


def concrete(template: str, topic: str) -> str:
    """A path of ``template`` for ``topic`` (numbered parts: the first one)."""
    return template.replace("{topic}", topic).replace("{number:int}", "0")


@dataclass
class LossyProxy:
    """A loopback TCP proxy to ``port``. The first ``drop`` connections forward the request,
    wait for the first bytes of the hub's answer (so the hub has committed) and then cut the
    connection without passing them on; the next ``refuse`` connections get a 503 from the
    proxy itself; later ones pass through."""

    port: int
    drop: int = 0
    refuse: int = 0
    dropped: int = 0
    refused: int = 0
    connections: int = 0
    url: str = ""

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.refuse and not self.drop:
                self.refuse -= 1
                self.refused += 1
                await reader.read(65536)
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                    b"connection: close\r\n\r\n"
                )
                await writer.drain()
                writer.close()
                return
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
            upward = asyncio.create_task(_pump(reader, up_writer))
            try:
                if self.drop:
                    self.drop -= 1
                    answer = await up_reader.read(65536)
                    assert answer, "the hub closed without answering"
                    self.dropped += 1
                    writer.transport.abort()
                else:
                    await _pump(up_reader, writer)
            finally:
                upward.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await upward
                up_writer.close()
        except OSError:
            writer.transport.abort()
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[LossyProxy]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            yield self
        finally:
            server.close()
            await server.wait_closed()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until the end of ``reader``, then close ``writer`` (the other side sees it)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
