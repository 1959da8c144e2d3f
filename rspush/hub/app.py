"""The hub's HTTP edge (Starlette): ingest endpoints, the materialised documents, health and
metrics. Handlers only translate: what a post means goes to :mod:`.service`, documents come
from :mod:`.documents` and are answered by :mod:`.serving`, and every
:class:`.errors.HubError` becomes a JSON answer in :func:`error_response`, the one place that
knows HTTP statuses.

Ingest endpoints:

- ``POST /topics/{topic}/changes`` — a Change List fragment or change notification;
  ``202`` with a JSON receipt ``{"accepted", "first", "last", "epoch"}``.
- ``POST /topics/{topic}/baseline`` — a Resource List taken as the state at its ``at`` of a
  topic without history (no change events); ``202`` with ``{"seeded", "at", "epoch"}``;
  ``409 topic-has-history`` on a topic with state or changes.
- ``POST /hub`` — the change-notification spec's way (§4.1): ``Content-Type:
  application/xml`` and ``Link: <topic URI>; rel="self", <hub URI>; rel="hub"``; ``200``.
  With ``Content-Type: application/x-www-form-urlencoded`` it is a WebSub subscription
  request instead (:mod:`.websub`, docs/websub.md): ``202``, then verification.

All need ``Authorization: Bearer <token>`` (401 without a valid one, 403 for a topic the
Source may not post to). An ``Idempotency-Key`` header makes a retry return the first receipt
without writing again. Errors of posts are JSON ``{"error", "message", "violations": [...]}``;
errors of reads are ``{"error", "message"}``. A post whose changes the topic already holds
(duplicates) is answered ``200`` with ``"accepted": 0``.

Every document of a private topic, and its topic URI, needs a subscriber's bearer token
(:func:`.auth.authorise_read`); the Source Description lists private topics only to their
subscribers. ``/metrics`` and ``/status`` (the operator page, :mod:`.status`) need the
``[hub] metrics_token_sha256`` token when one is set. No answer names the store's internals
(sockets, paths, versions): they go to the log.

Why one module of this size: the route table and its handlers are read together, with
:class:`Hub`, which builds and starts the parts those handlers use; every handler only
translates between HTTP and :mod:`.service`, :mod:`.documents`, :mod:`.status` or
:mod:`.websub`, so nothing here is logic that a smaller module could test on its own.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rspush.resourcesync import MAX_ENTRIES
from rspush.resourcesync.w3cdt import to_us

from .auth import authorise_read, bearer, readable_private_topics, token_matches
from .bodies import BodyBudget, BodyReader
from .bridges.runner import Bridges
from .compressed import GzipCache
from .documents import DocumentService, Served
from .errors import (
    STORE_UNAVAILABLE_MESSAGE,
    Code,
    HubError,
    NotFound,
    StoreUnavailable,
    Unauthenticated,
)
from .framework import FrameworkPolicy, announce_configuration
from .materialise import Urls
from .metrics import HubMetrics
from .rotation import RotationPolicy, Rotator
from .service import IngestService
from .serving import XML, DateHeader, serve
from .settings import Settings
from .status import TopicRef, collect, render_html, render_json
from .store import TopicStore
from .websub.form import FORM_MEDIA_TYPE
from .websub.service import WebSubHub

log = logging.getLogger("rspush.hub")

_LINK = re.compile(r'<([^>]*)>\s*;\s*rel\s*=\s*"?([^";,]+)"?')

HTTP_STATUS: dict[Code, int] = {
    Code.UNAUTHENTICATED: 401,
    Code.FORBIDDEN: 403,
    Code.NOT_FOUND: 404,
    Code.UNKNOWN_TOPIC: 404,
    Code.BODY_TOO_LARGE: 413,
    Code.BODY_TIMEOUT: 408,
    Code.BODY_INCOMPLETE: 400,
    Code.SERVER_BUSY: 503,
    Code.BAD_IDEMPOTENCY_KEY: 400,
    Code.CONTENT_TYPE: 415,
    Code.LINK_HEADER: 400,
    Code.UNSAFE_XML: 400,
    Code.DOCUMENT_TOO_LARGE: 413,
    Code.MALFORMED_XML: 400,
    Code.WRONG_NAMESPACE: 400,
    Code.NOT_RESOURCESYNC: 400,
    Code.INVALID_DOCUMENT: 400,
    Code.WRONG_CAPABILITY: 400,
    Code.EMPTY: 400,
    Code.TOO_MANY_ENTRIES: 413,
    Code.ENTRY_TOO_LARGE: 413,
    Code.FUTURE_CHANGE_TIME: 400,
    Code.FORWARD_ORDER: 400,
    Code.CHANGE_TIME_BACKWARDS: 409,
    Code.CONFLICTING_CHANGE: 409,
    Code.TOPIC_HAS_HISTORY: 409,
    # draft-ietf-httpapi-idempotency-key-header §2.7: a key reused with another payload.
    Code.IDEMPOTENCY_KEY_REUSED: 422,
    Code.STORE_UNAVAILABLE: 503,
    Code.BAD_SUBSCRIPTION: 400,
}
"""The HTTP status of every error code."""

RETRY_AFTER_S = 1
"""``Retry-After`` of a ``server-busy`` refusal: bodies in progress finish within seconds."""
# Refusals that leave the request body unread: the connection cannot carry another request
# (RFC 9112 §9.6: close rather than read and discard what the client may still send).
_CLOSE_AFTER = frozenset({Code.BODY_TOO_LARGE, Code.BODY_TIMEOUT, Code.SERVER_BUSY})


class Hub:
    """Everything one hub process holds, built from settings at startup."""

    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        *,
        push_url: str | None = None,
        deliver_websub: bool = True,
    ) -> None:
        self.settings = settings
        self.deliver_websub = deliver_websub
        """Whether this process delivers WebSub notifications (with ``--workers``, the push
        workers do, so deliveries never share an event loop with ingest)."""
        self.push_url = push_url
        self.started_monotonic = time.monotonic()
        self.push_connections: Callable[[], int] | None = None
        """Sockets held by this process's push server, once it runs (the status page)."""
        self.redis = redis
        self.store = TopicStore(redis, prefix=settings.redis_prefix)
        self.metrics = HubMetrics()
        self.metrics.declare_topics([t.name for t in settings.topics])
        self.ingest = IngestService(settings, self.store, self.metrics)
        limits = settings.limits
        # A budget smaller than one body would refuse every body of the largest allowed size.
        self.body_budget = BodyBudget(max(limits.body_budget_bytes, limits.max_body_bytes))
        names = [t.name for t in settings.topics]
        private = frozenset(t.name for t in settings.topics if t.private)
        self.documents = DocumentService(
            self.store,
            settings.hub.base_url,
            names,
            index_lists=settings.limits.index_lists,
            described_by=settings.hub.description,
            topic_descriptions={t.name: t.description for t in settings.topics},
            push_url=push_url,
            private=private,
            framework=settings.framework.enabled,
        )
        compression = settings.compression
        self.gzip = (
            GzipCache(
                level=compression.level,
                immutable_level=compression.immutable_level,
                max_bytes=compression.cache_bytes,
            )
            if compression.enabled
            else None
        )
        """Gzipped documents; None when compression is turned off."""
        self.bridges = Bridges(
            settings.bridges,
            self.ingest,
            self.store,
            self.metrics,
            lease_ttl_s=settings.lease_ttl_s,
        )
        self.rotator = Rotator(
            self.store,
            settings.hub.base_url,
            names,
            RotationPolicy(
                max_entries=limits.changelist_max_entries,
                max_age_s=limits.changelist_max_age_s,
                retention_s=limits.retention_s,
            ),
            interval_s=settings.rotation_interval_s,
            lease_ttl_s=settings.lease_ttl_s,
            on_closed=lambda topic: self.metrics.rotations.labels(topic).inc(),
            framework=FrameworkPolicy(
                resourcelist_interval_s=settings.framework.resourcelist_interval_s,
                max_events=settings.framework.max_events,
                max_entries=MAX_ENTRIES,
            )
            if settings.framework.enabled
            else None,
        )
        self.websub = (
            WebSubHub(settings, self.store, self.metrics) if settings.websub.enabled else None
        )

    async def start(self) -> None:
        now_us = to_us(datetime.now(UTC))
        for topic in self.settings.topics:
            await self.store.ensure_topic(topic.name, now_us=now_us)
        if self.settings.framework.enabled:
            await announce_configuration(
                self.store,
                self.documents,
                [t.name for t in self.settings.topics],
                max_events=self.settings.framework.max_events,
                now=datetime.now(UTC),
            )
        self.rotator.start()
        self.bridges.start()
        if self.websub is not None and self.deliver_websub:
            self.websub.start()

    async def stop(self) -> None:
        if self.websub is not None:
            await self.websub.stop()
        await self.bridges.stop()
        await self.rotator.stop()


def build_app(hub: Hub) -> Starlette:
    settings = hub.settings
    limits = settings.limits
    base_url = settings.hub.base_url

    def timed(
        route: str, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def wrapper(request: Request) -> Response:
            started = time.perf_counter()
            try:
                return await handler(request)
            finally:
                hub.metrics.latency.labels(route).observe(time.perf_counter() - started)

        return wrapper

    async def error_response(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HubError)  # registered for HubError only
        status = HTTP_STATUS[exc.code]
        # RFC 6750 §3: a 401 names the scheme the client must use.
        headers: dict[str, str] = {}
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="rspush"'
        if exc.code is Code.SERVER_BUSY:
            headers["Retry-After"] = str(RETRY_AFTER_S)
        if exc.code in _CLOSE_AFTER:
            headers["Connection"] = "close"
        body = exc.as_json()
        if request.method == "POST":  # the ingest endpoints: counted, with violations
            hub.metrics.rejected.labels(exc.code).inc()
        else:
            del body["violations"]
        return JSONResponse(body, status_code=status, headers=headers)

    def body_reader(request: Request) -> BodyReader:
        """The request body within the size cap, the deadline and the shared budget."""
        return BodyReader(
            request.stream,
            request.headers.get("content-length"),
            max_bytes=limits.max_body_bytes,
            timeout_s=limits.body_timeout_s,
            budget=hub.body_budget,
            on_disconnect=ClientDisconnect,
        )

    def token(request: Request) -> str | None:
        return bearer(request.headers.get("authorization"))

    def receipt_status(receipt: dict[str, object]) -> int:
        """202: changes were accepted; 200 when the topic already held all of them."""
        return 200 if receipt.get("accepted") == 0 else 202

    async def ingested(
        request: Request, action: Callable[..., Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """What a post means, from the ingest service; the body's budget released after."""
        body = body_reader(request)
        try:
            return await action(
                token=token(request),
                topic=request.path_params["topic"],
                idempotency_key=request.headers.get("idempotency-key"),
                body=body,
            )
        finally:
            body.release()

    async def post_changes(request: Request) -> Response:
        receipt = await ingested(request, hub.ingest.changes)
        return JSONResponse(receipt, status_code=receipt_status(receipt))

    async def post_baseline(request: Request) -> Response:
        return JSONResponse(await ingested(request, hub.ingest.baseline), status_code=202)

    async def post_hub(request: Request) -> Response:
        """Change notification spec §4.1: the topic comes from the Link rel="self". A form
        (``application/x-www-form-urlencoded``) is a WebSub subscription request instead
        (§4.2, WebSub §5.1): ``202 Accepted``, then verification of intent."""
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type == FORM_MEDIA_TYPE and hub.websub is not None:
            body = body_reader(request)
            try:
                await hub.websub.request(await body(), token(request))
            finally:
                body.release()
            return Response(status_code=202)
        links = {
            rel.strip(): href.strip()
            for href, rel in _LINK.findall(", ".join(request.headers.getlist("link")))
        }
        body = body_reader(request)
        try:
            receipt = await hub.ingest.notify(
                token=token(request),
                media_type=request.headers.get("content-type", "").split(";")[0].strip(),
                links=links,
                idempotency_key=request.headers.get("idempotency-key"),
                body=body,
            )
        finally:
            body.release()
        return JSONResponse(receipt, status_code=200)

    def document(
        build: Callable[[Request, str], Awaitable[Served]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            topic = request.path_params["topic"]
            authorise_read(settings, topic, token(request))
            served = await build(request, topic)
            return await serve(
                request,
                served,
                base_url=base_url,
                topic=topic,
                push_url=hub.push_url,
                gzip=hub.gzip,
                private=is_private(topic),
            )

        return handler

    def is_private(topic: str) -> bool:
        config = settings.topic(topic)
        return config is not None and config.private

    async def well_known(request: Request) -> Response:
        readable = readable_private_topics(settings, token(request))
        served = hub.documents.source_description(readable)
        return await serve(
            request,
            served,
            base_url=base_url,
            topic=None,
            push_url=hub.push_url,
            gzip=hub.gzip,
            private=bool(readable),
        )

    def topic_uri_response(request: Request, *, framework: bool) -> Response:
        """Notification spec §4.1 and framework notification §4.1: 200, application/xml,
        Link self + hub; no content."""
        topic = request.path_params["topic"]
        authorise_read(settings, topic, token(request))
        if settings.topic(topic) is None or (framework and not settings.framework.enabled):
            raise NotFound(f"no topic {topic!r}", topic=topic)
        urls = Urls(base_url, topic)
        self_uri = urls.framework_topic_uri if framework else urls.topic_uri
        return Response(
            b"",
            media_type=XML,
            headers={
                "Link": f'<{self_uri}>; rel="self", <{urls.hub}>; rel="hub", '
                f'<{urls.capability_list}>; rel="resourcesync"',
                "Content-Length": "0",
            },
        )

    async def topic_uri(request: Request) -> Response:
        return topic_uri_response(request, framework=False)

    async def framework_topic_uri(request: Request) -> Response:
        return topic_uri_response(request, framework=True)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        try:
            await hub.store.ping()
        except (StoreUnavailable, OSError) as exc:
            # Unauthenticated: the reason (socket path, server text) goes to the log only.
            log.warning("readyz: store unavailable: %s", exc)
            body = {
                "status": "unavailable",
                "error": Code.STORE_UNAVAILABLE,
                "message": STORE_UNAVAILABLE_MESSAGE,
            }
            return JSONResponse(body, 503)
        return JSONResponse({"status": "ready"})

    def require_metrics_token(request: Request, route: str) -> None:
        required = settings.hub.metrics_token_sha256
        if required is not None and not token_matches(token(request), required):
            raise Unauthenticated(f"{route} needs 'Authorization: Bearer <metrics token>'")

    async def metrics(request: Request) -> Response:
        require_metrics_token(request, "/metrics")
        if hub.websub is not None:
            with contextlib.suppress(StoreUnavailable):
                hub.metrics.websub_subscriptions.set(await hub.store.subscription_count())
        for topic in hub.documents.topics:
            try:
                hub.metrics.stream_length.labels(topic).set(await hub.store.stream_length(topic))
            except StoreUnavailable:
                break
        return Response(hub.metrics.render(), media_type="text/plain; version=0.0.4")

    async def status(request: Request) -> Response:
        """The operator page: HTML, or JSON for ``Accept: application/json``.

        Without a metrics token configured, private topics are listed only to their
        subscribers, as in the Source Description. With one, the page needs it, and its holder
        sees every topic: one bearer cannot be both tokens, and /metrics already shows that
        holder every topic's series."""
        require_metrics_token(request, "/status")
        if settings.hub.metrics_token_sha256 is not None:
            readable = frozenset(t.name for t in settings.topics)
        else:
            readable = readable_private_topics(settings, token(request))
        topics = [
            TopicRef(t.name, t.private)
            for t in settings.topics
            if not t.private or t.name in readable
        ]
        data = await collect(
            hub.store,
            hub.metrics.view(),
            topics,
            started_monotonic=hub.started_monotonic,
            now_us=to_us(datetime.now(UTC)),
            push_connections=hub.push_connections,
            bridges={b.topic: b.kind for b in settings.bridges},
        )
        headers = {"Cache-Control": "no-store", "Vary": "Accept, Authorization"}
        accept = request.headers.get("accept", "")
        if "application/json" in accept and "text/html" not in accept:
            return Response(render_json(data), media_type="application/json", headers=headers)
        return Response(render_html(data), media_type="text/html", headers=headers)

    docs = hub.documents

    async def cap(request: Request, topic: str) -> Served:
        return docs.capability_list(topic)

    async def open_cl(request: Request, topic: str) -> Served:
        return await docs.open_change_list(topic)

    async def closed_cl(request: Request, topic: str) -> Served:
        return await docs.closed_change_list(topic, int(request.path_params["number"]))

    async def cl_index(request: Request, topic: str) -> Served:
        return await docs.change_list_index(topic)

    async def archive(request: Request, topic: str) -> Served:
        return await docs.change_list_archive(topic, request.path_params.get("number"))

    async def rl(request: Request, topic: str) -> Served:
        return await docs.resource_list(topic, request.path_params.get("number"))

    routes = [
        Route("/.well-known/resourcesync", timed("source-description", well_known)),
        Route("/hub", timed("hub", post_hub), methods=["POST"]),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        Route("/status", status),
        Route("/topics/{topic}", topic_uri, methods=["GET", "HEAD"]),
        Route("/topics/{topic}/framework", framework_topic_uri, methods=["GET", "HEAD"]),
        Route("/topics/{topic}/changes", timed("changes", post_changes), methods=["POST"]),
        Route("/topics/{topic}/baseline", timed("baseline", post_baseline), methods=["POST"]),
        Route("/topics/{topic}/capabilitylist.xml", timed("capabilitylist", document(cap))),
        Route("/topics/{topic}/changelist.xml", timed("changelist", document(open_cl))),
        Route(
            "/topics/{topic}/changelists/{number:int}.xml",
            timed("closed-changelist", document(closed_cl)),
        ),
        Route(
            "/topics/{topic}/changelist-index.xml", timed("changelist-index", document(cl_index))
        ),
        Route("/topics/{topic}/changelist-archive.xml", timed("archive", document(archive))),
        Route(
            "/topics/{topic}/changelist-archive/{number:int}.xml",
            timed("archive", document(archive)),
        ),
        Route("/topics/{topic}/resourcelist.xml", timed("resourcelist", document(rl))),
        Route("/topics/{topic}/resourcelist/{number:int}.xml", timed("resourcelist", document(rl))),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await hub.start()
        try:
            yield
        finally:
            await hub.stop()

    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HubError: error_response},
        middleware=[Middleware(DateHeader)],
    )
