"""HTTP answers for the materialised documents: validators, caching, conditional requests
and content coding.

Every document is served with an ``ETag`` (the topic's epoch and version), ``Cache-Control``
(``immutable`` for closed Change Lists) and, once its second is over, ``Last-Modified``; a
matching ``If-None-Match`` or ``If-Modified-Since`` gets ``304`` (RFC 9110 §13.1).

A client that accepts gzip (:mod:`.negotiation`) gets the document with ``Content-Encoding:
gzip`` from :class:`.compressed.GzipCache`. The gzipped bytes are another representation with
their own strong ``ETag`` (the identity one with ``-gzip`` added inside the quotes, as RFC
9110 §8.8.3.3's example does), so a cache or a client holding either copy revalidates it with
its own tag; ``Vary: Accept-Encoding`` is on every document answer, 304s included (RFC 9110
§12.5.5, §15.4.5). A 304 is decided before anything is compressed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rspush.protocol import PUSH_REL

from .compressed import GzipCache
from .documents import Served
from .materialise import Urls
from .negotiation import Coding, choose

XML = "application/xml"
SETTLE = timedelta(seconds=1)


async def serve(
    request: Request,
    served: Served,
    *,
    base_url: str,
    topic: str | None,
    push_url: str | None,
    gzip: GzipCache | None,
    private: bool = False,
) -> Response:
    """``served`` as the answer to ``request``: 200 with the body (gzipped when the client
    accepts it and ``gzip`` is given), or 304.

    ``private``: the answer depends on the request's token, so shared caches must not keep
    it (RFC 9111 §5.2.2.7) and it varies by ``Authorization``."""
    coding = Coding.IDENTITY
    if gzip is not None and served.body:
        coding = choose(request.headers.get("accept-encoding"))
    etag = served.etag if coding is Coding.IDENTITY else coded_etag(served.etag, coding)
    headers = {"ETag": etag}
    links = []
    if topic is not None:
        capability_list = Urls(base_url, topic).capability_list
        links.append(f'<{capability_list}>; rel="resourcesync"')
    if push_url is not None:
        # The push endpoint, so rs-subscribe needs only the Source's URL (docs/protocol.md).
        links.append(f'<{push_url}>; rel="{PUSH_REL}"')
    if links:
        headers["Link"] = ", ".join(links)
    if served.last_modified is not None and _settled(served.last_modified):
        headers["Last-Modified"] = format_datetime(served.last_modified, usegmt=True)
    if served.immutable:
        scope = "private" if private else "public"
        headers["Cache-Control"] = f"{scope}, max-age=31536000, immutable"
    else:
        headers["Cache-Control"] = "private, no-cache" if private else "no-cache"
    if gzip is not None:
        headers["Vary"] = "Accept-Encoding, Authorization" if private else "Accept-Encoding"
    elif private:
        headers["Vary"] = "Authorization"
    if _not_modified(request, etag, served.last_modified):
        return Response(status_code=304, headers=headers)
    body = served.body
    if coding is Coding.GZIP:
        assert gzip is not None
        body = await gzip.get(request.url.path, etag, served.body, immutable=served.immutable)
        headers["Content-Encoding"] = coding.value
    return Response(body, media_type=XML, headers=headers)


def coded_etag(etag: str, coding: Coding) -> str:
    """The strong ETag of the ``coding`` representation: ``"v"`` becomes ``"v-gzip"``."""
    return f'{etag[:-1]}-{coding.value}"'


def _not_modified(request: Request, etag: str, last_modified: datetime | None) -> bool:
    """RFC 9110 §13.1: If-None-Match decides when present; else If-Modified-Since."""
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None:
        return etag in _etags(if_none_match) or if_none_match.strip() == "*"
    since = request.headers.get("if-modified-since")
    if since is None or last_modified is None:
        return False
    try:
        moment = parsedate_to_datetime(since)
    except (TypeError, ValueError):
        return False
    # HTTP dates have whole seconds; a Last-Modified is only ever sent once its second is
    # over (_settled), so no later change can share the second it names.
    return _settled(last_modified) and last_modified.replace(microsecond=0) <= moment


def _settled(modified: datetime) -> bool:
    """True once the whole second of ``modified`` has passed. Versions are stamped by the
    Redis server's clock: with a remote Redis, keep the two clocks in sync (NTP)."""
    return datetime.now(UTC) - modified.replace(microsecond=0) >= SETTLE


def _etags(header: str | None) -> set[str]:
    if not header:
        return set()
    return {part.strip().removeprefix("W/") for part in header.split(",")}


class DateHeader:
    """ASGI middleware: every response's ``Date`` is taken when the response starts.

    The server's own ``Date`` (uvicorn's, turned off in :mod:`.server`) is refreshed by its
    main loop about once a second and lags further when the loop is busy, so it could name a
    second before a ``Last-Modified`` this module sent — which RFC 9110 §8.8.2.1 forbids, and
    which makes caches distrust the document's date."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def dated(message: Message) -> None:
            if message["type"] == "http.response.start":
                now = format_datetime(datetime.now(UTC), usegmt=True).encode()
                message = {**message, "headers": [*message.get("headers", []), (b"date", now)]}
            await send(message)

        await self.app(scope, receive, dated)
