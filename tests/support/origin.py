"""A loopback HTTP origin for subscriber tests: the server a Source's resources live on.

``async with running_origin() as origin:`` serves whatever the test ``put``s, counts the GETs
per path (so a test can assert a resource was, or was not, fetched), and can serve wrong
bytes on purpose (:meth:`Origin.corrupt`) for hash-mismatch tests. It runs on uvicorn in the
test's own event loop, on a socket bound to 127.0.0.1 port 0, like the hub in
``hub.server.running_hub``; nothing here imports the hub.

:func:`publish` is the other half of a Source: it changes the origin and tells the hub, one
Change List fragment per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.fragments import TOKEN_A, Times, auth
from tests.support.sockets import bind
from tests.support.waiting import TIMEOUT_SCALE

STARTUP_TIMEOUT_S = 10.0
RESOURCE_TYPE = "application/octet-stream"

# (path, change, content): content is what the origin serves after a created/updated change,
# None (or anything: it is ignored) for a deleted one.
Change = tuple[str, str, bytes | None]


@dataclass(frozen=True, slots=True)
class _Served:
    content: bytes
    content_type: str
    document: bool


class Origin:
    """What the origin serves, and what it was asked for."""

    def __init__(self, url: str) -> None:
        self.url = url
        """``http://127.0.0.1:PORT``, no trailing slash."""
        self.requests: Counter[str] = Counter()
        """GETs per path (``/a/b.txt``), whatever the answer was (200 or 404)."""
        self.authorizations: list[str] = []
        """Every ``Authorization`` header the origin was sent (a token must never be)."""
        self.clock = Times()
        """The Source's clock: strictly increasing change times for :func:`publish`."""
        self._served: dict[str, _Served] = {}
        self._corrupt: Counter[str] = Counter()

    def uri(self, path: str) -> str:
        """The full URL of ``path`` (with or without its leading slash)."""
        return self.url + quote(_path(path))

    def put(self, path: str, content: bytes, *, content_type: str = RESOURCE_TYPE) -> None:
        """Serve ``content`` at ``path`` from now on (create or update a resource)."""
        self._served[_path(path)] = _Served(content, content_type, document=False)

    def delete(self, path: str) -> None:
        """Stop serving ``path`` (404 from now on). Deleting what is not there is an error."""
        del self._served[_path(path)]

    def put_document(self, path: str, xml: bytes, content_type: str = "application/xml") -> None:
        """Serve a static document (a Resource List, a Source Description…) at ``path``;
        unlike a resource it is not part of :attr:`resources`."""
        self._served[_path(path)] = _Served(xml, content_type, document=True)

    def corrupt(self, path: str, times: int = 1) -> None:
        """Answer the next ``times`` GETs of ``path`` with wrong bytes: every byte inverted,
        so the length is right and only a hash can tell (an empty body becomes ``b"x"``)."""
        self._corrupt[_path(path)] += times

    @property
    def resources(self) -> dict[str, bytes]:
        """The resources served now (documents excluded), by path."""
        return {path: s.content for path, s in self._served.items() if not s.document}

    async def _get(self, request: Request) -> Response:
        path = request.scope["path"]
        if request.method == "GET":
            self.requests[path] += 1
        if "authorization" in request.headers:
            self.authorizations.append(request.headers["authorization"])
        served = self._served.get(path)
        if served is None:
            return Response(b"not found\n", status_code=404, media_type="text/plain")
        content = served.content
        if request.method == "GET" and self._corrupt[path] > 0:
            self._corrupt[path] -= 1
            content = bytes(b ^ 0xFF for b in content) or b"x"
        return Response(content, media_type=served.content_type)


def _path(path: str) -> str:
    return "/" + path.lstrip("/")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the test process owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


OriginT = TypeVar("OriginT", bound=Origin)


@asynccontextmanager
async def running_origin(kind: type[OriginT] = Origin) -> AsyncIterator[OriginT]:  # type: ignore[assignment]
    """An :class:`Origin` (or a subclass: ``kind``) on 127.0.0.1, a free port; stopped when
    the block exits."""
    sock = bind("127.0.0.1", 0)
    origin = kind(f"http://127.0.0.1:{sock.getsockname()[1]}")
    app = Starlette(routes=[Route("/{path:path}", origin._get, methods=["GET"])])
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=5
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="test-origin")
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S * TIMEOUT_SCALE):
            while not server.started:
                if task.done():
                    task.result()  # raises the startup error
                    raise RuntimeError("origin stopped during startup")
                await asyncio.sleep(0.01)
        yield origin
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


@dataclass(frozen=True)
class Announced:
    """One entry of a Change List fragment, exactly as posted (any loc, no quoting)."""

    loc: str
    change: str
    content: bytes | None = None
    """Gives the entry's ``length`` and hex ``md5:`` hash (§7); None for none (deleted)."""
    datetime: str | None = None
    """``rs:md@datetime``; None: the hub stamps the change with its own clock."""
    links: str = ""
    """``<rs:ln …/>`` elements, as XML."""

    def xml(self) -> str:
        attributes = {"change": self.change}
        if self.datetime is not None:
            attributes["datetime"] = self.datetime
        if self.content is not None:
            attributes["length"] = str(len(self.content))
            attributes["hash"] = "md5:" + hashlib.md5(self.content).hexdigest()
        md = " ".join(f"{name}={quoteattr(value)}" for name, value in attributes.items())
        return f"<url><loc>{escape(self.loc)}</loc><rs:md {md}/>{self.links}</url>"


async def post_fragment(
    http: httpx.AsyncClient, topic: str, entries: Iterable[Announced], *, token: str = TOKEN_A
) -> httpx.Response:
    """POST one Change List fragment of ``entries`` to the hub (``http``'s base URL)."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="changelist"/>{"".join(e.xml() for e in entries)}</urlset>'
    ).encode()
    return await http.post(f"/topics/{topic}/changes", content=body, headers=auth(token))


async def publish(
    http: httpx.AsyncClient,
    topic: str,
    origin: Origin,
    changes: Iterable[Change],
    *,
    token: str = TOKEN_A,
    links: str = "",
) -> dict[str, Any]:
    """Apply each (path, change, content) on ``origin`` and POST them to the hub as ONE
    Change List fragment; return the hub's receipt.

    Each entry has ``rs:md@datetime`` from ``origin.clock`` (strictly increasing across
    calls, Z39.99 §12.1), and for created/updated the ``length`` and the hex ``md5:`` hash of
    the content (§7); ``links`` (``rs:ln`` XML) goes on every entry but deletions.
    """
    entries = []
    for path, change, content in changes:
        if change == "deleted":
            origin.delete(path)
            entries.append(Announced(origin.uri(path), change, None, origin.clock.next()))
            continue
        if content is None:
            raise ValueError(f"{change} {path}: content is required")
        origin.put(path, content)
        entries.append(Announced(origin.uri(path), change, content, origin.clock.next(), links))
    reply = await post_fragment(http, topic, entries, token=token)
    assert reply.status_code == 202, reply.text
    receipt: dict[str, Any] = reply.json()
    return receipt
