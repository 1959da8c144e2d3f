"""The origin as a static web server (nginx, S3): an ETag on every 200, ``304 Not Modified``
for ``If-None-Match``, and faults on demand. Imports neither the hub nor the subscriber, so
tests of either may serve a Source with it."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import Request
from starlette.responses import Response

from tests.support.origin import Origin, running_origin


class StaticSource(Origin):
    """The origin as a static web server: an ETag on every 200 and ``304 Not Modified`` for
    ``If-None-Match`` (what makes an agent's conditional polls come back empty), plus faults
    on demand."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.unavailable: Counter[str] = Counter()
        """Path -> how many of its next GETs answer 503 (a transient outage)."""
        self.waiting: set[str] = set()
        """Paths whose held GET has arrived and waits for its release."""
        self._held: dict[str, asyncio.Event] = {}

    def hold(self, path: str) -> asyncio.Event:
        """Hold the next GET of ``path`` (it is in :attr:`waiting` meanwhile) until the event
        returned is set."""
        gate = self._held[path] = asyncio.Event()
        return gate

    async def _get(self, request: Request) -> Response:
        path = request.scope["path"]
        if self.unavailable[path] > 0:
            self.unavailable[path] -= 1
            self.requests[path] += 1
            return Response(b"try again later\n", status_code=503, media_type="text/plain")
        gate = self._held.pop(path, None)
        if gate is not None:
            self.waiting.add(path)
            await gate.wait()
        reply = await super()._get(request)
        if reply.status_code != 200:
            return reply
        etag = f'"{hashlib.md5(reply.body).hexdigest()}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag})
        reply.headers["ETag"] = etag
        return reply


@asynccontextmanager
async def running_source() -> AsyncIterator[StaticSource]:
    """:func:`running_origin` serving a :class:`StaticSource`."""
    async with running_origin(StaticSource) as source:
        yield source
