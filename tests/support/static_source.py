"""A static ResourceSync Source on the loopback origin, and a scripted push endpoint.

The Source is served like nginx or S3 would serve it (ETag, ``304 Not Modified``), with a
fault when a test asks for one (a ``503``, a response held until the test releases it); its
documents are written by the builders here. The push endpoint is a real websockets server on
127.0.0.1 that sends what a test scripts (what a broken or trimming hub would send)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from rspush.resourcesync.w3cdt import parse_w3c_datetime
from rspush.subscriber.agent import AgentConfig
from tests.support.etag_origin import StaticSource, running_source
from tests.support.origin import Origin

__all__ = ["StaticSource", "running_source"]

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


T0 = "2026-01-01T00:00:00Z"


T1 = "2026-01-02T00:00:00Z"


T2 = "2026-01-03T00:00:00Z"


PUSH_REL = "urn:rspush:websocket"


def md(content: bytes) -> str:
    return f'length="{len(content)}" hash="md5:{hashlib.md5(content).hexdigest()}"'


def _attributes(attributes: dict[str, str]) -> str:
    # from_="…" → from="…" (a Python keyword)
    return "".join(f' {name.rstrip("_")}="{value}"' for name, value in attributes.items())


def urlset(capability: str, entries: str = "", **attributes: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>'
        f'<rs:md capability="{capability}"{_attributes(attributes)}/>{entries}</urlset>'
    ).encode()


def sitemapindex(capability: str, entries: str, **attributes: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex {NS}>'
        f'<rs:md capability="{capability}"{_attributes(attributes)}/>{entries}</sitemapindex>'
    ).encode()


def listed(source: Origin, path: str, content: bytes, lastmod: str | None = None) -> str:
    """A Resource List entry."""
    when = "" if lastmod is None else f"<lastmod>{lastmod}</lastmod>"
    return f"<url><loc>{source.uri(path)}</loc>{when}<rs:md {md(content)}/></url>"


def changed(source: Origin, path: str, change: str, when: str, content: bytes | None) -> str:
    """A Change List entry."""
    about = "" if content is None else " " + md(content)
    return (
        f"<url><loc>{source.uri(path)}</loc>"
        f'<rs:md change="{change}" datetime="{when}"{about}/></url>'
    )


def capability_list(source: Origin, capabilities: dict[str, str], push: str | None = None) -> None:
    """Serve ``/capabilitylist.xml`` listing capability → path (and a push endpoint)."""
    entries = "".join(
        f'<url><loc>{source.uri(path)}</loc><rs:md capability="{capability}"/></url>'
        for capability, path in capabilities.items()
    )
    if push is not None:
        entries += (
            f'<url><loc>{source.uri("/t")}</loc><rs:md capability="change-notification"/>'
            f'<rs:ln rel="{PUSH_REL}" href="{push}"/></url>'
        )
    source.put_document("/capabilitylist.xml", urlset("capabilitylist", entries))


def serve_resource_list(
    source: Origin, resources: dict[str, bytes], *, at: str | None, lastmod: str | None
) -> None:
    """Serve the resources and ``/resourcelist.xml`` listing exactly them."""
    for path, content in resources.items():
        source.put(path, content)
    entries = "".join(listed(source, p, c, lastmod) for p, c in sorted(resources.items()))
    extra = {} if at is None else {"at": at}
    source.put_document("/resourcelist.xml", urlset("resourcelist", entries, **extra))


def config_for(source: Origin, dest: Path, **options: Any) -> AgentConfig:
    quick = {"poll_interval": 0.1, "backoff_initial": 0.1, "backoff_max": 0.5}
    return AgentConfig(
        source_url=source.uri("/capabilitylist.xml"),
        dest=dest,
        maps=[(source.url + "/", "")],
        **(quick | options),
    )


def time_of(text: str) -> datetime:
    moment = parse_w3c_datetime(text)
    assert moment is not None
    return moment


class PushEndpoint:
    """Answers the n-th connection's subscribe request with ``script(n)``'s frames; after a
    ``history-insufficient`` it closes (4003, as the hub does), else it keeps the connection
    open until the client leaves."""

    def __init__(self, script: Callable[[int], list[str]]) -> None:
        self.script = script
        self.connections = 0
        self.url = ""

    async def handler(self, ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            await ws.recv()  # the subscribe request
            self.connections += 1
            frames = self.script(self.connections)
            for frame in frames:
                await ws.send(frame)
            if frames and '"history-insufficient"' in frames[-1]:
                await ws.close(4003, "history insufficient")
                return
            await ws.wait_closed()


@asynccontextmanager
async def running_push_endpoint(script: Callable[[int], list[str]]) -> AsyncIterator[PushEndpoint]:
    endpoint = PushEndpoint(script)
    async with serve(endpoint.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        endpoint.url = f"ws://127.0.0.1:{port}/"
        yield endpoint


def subscribed_frame() -> str:
    return json.dumps({"type": "subscribed", "topic": "t", "epoch": "e1", "position": "0-0"})
