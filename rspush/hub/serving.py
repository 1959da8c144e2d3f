"""HTTP answers for the materialised documents: validators, caching and conditional requests.

Every document is served with an ``ETag`` (the topic's epoch and version), ``Cache-Control``
(``immutable`` for closed Change Lists) and, once its second is over, ``Last-Modified``; a
matching ``If-None-Match`` or ``If-Modified-Since`` gets ``304`` (RFC 9110 §13.1).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rspush.protocol import PUSH_REL

from .documents import Served
from .materialise import Urls

XML = "application/xml"
SETTLE = timedelta(seconds=1)


def serve(
    request: Request,
    served: Served,
    *,
    base_url: str,
    topic: str | None,
    push_url: str | None,
    private: bool = False,
) -> Response:
    """``served`` as the answer to ``request``: 200 with the body, or 304.

    ``private``: the answer depends on the request's token, so shared caches must not keep
    it (RFC 9111 §5.2.2.7) and it varies by ``Authorization``."""
    headers = {"ETag": served.etag}
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
    if private:
        headers["Vary"] = "Authorization"
    if _not_modified(request, served):
        return Response(status_code=304, headers=headers)
    return Response(served.body, media_type=XML, headers=headers)


def _not_modified(request: Request, served: Served) -> bool:
    """RFC 9110 §13.1: If-None-Match decides when present; else If-Modified-Since."""
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None:
        return served.etag in _etags(if_none_match) or if_none_match.strip() == "*"
    since = request.headers.get("if-modified-since")
    if since is None or served.last_modified is None:
        return False
    try:
        moment = parsedate_to_datetime(since)
    except (TypeError, ValueError):
        return False
    # HTTP dates have whole seconds; a Last-Modified is only ever sent once its second is
    # over (_settled), so no later change can share the second it names.
    return _settled(served.last_modified) and served.last_modified.replace(microsecond=0) <= moment


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
