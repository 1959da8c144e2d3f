"""The hub's HTTP edge (Starlette): ingest endpoints, the materialised documents, health and
metrics. Handlers only move bytes: checks live in :mod:`hub.ingest`, storage in
:mod:`hub.store`, documents in :mod:`hub.documents`.

Ingest endpoints:

- ``POST /topics/{topic}/changes`` — a Change List fragment or change notification;
  ``202`` with a JSON receipt ``{"accepted", "first", "last", "epoch"}``.
- ``POST /topics/{topic}/baseline`` — a Resource List taken as the topic's state at its
  ``at`` (no change events); ``202`` with ``{"seeded", "at", "epoch"}``.
- ``POST /hub`` — the change-notification spec's way (§4.1): ``Content-Type:
  application/xml`` and ``Link: <topic URI>; rel="self", <hub URI>; rel="hub"``; ``200``.

All need ``Authorization: Bearer <token>`` (401 without a valid one, 403 for a topic the
Source may not post to). An ``Idempotency-Key`` header makes a retry return the first receipt
without writing again. Errors are JSON: ``{"error", "message", "violations": [...]}``.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime

from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rspush.protocol import PUSH_REL
from rspush.resourcesync.w3cdt import to_us

from .auth import bearer, find_source
from .documents import DocumentService, NotFound, Served
from .ingest import IngestError, parse_fragment, plan_changes, plan_seed
from .materialise import Urls
from .metrics import HubMetrics
from .rotation import RotationPolicy, Rotator
from .settings import Settings
from .store import TopicStore

XML = "application/xml"
STAMP_RETRIES = 5
SETTLE = timedelta(seconds=1)
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,200}")
_LINK = re.compile(r'<([^>]*)>\s*;\s*rel\s*=\s*"?([^";,]+)"?')


class Hub:
    """Everything one hub process holds, built from settings at startup."""

    def __init__(self, settings: Settings, redis: Redis, *, push_url: str | None = None) -> None:
        self.settings = settings
        self.push_url = push_url
        self.redis = redis
        self.store = TopicStore(redis, prefix=settings.redis_prefix)
        self.metrics = HubMetrics()
        self.metrics.declare_topics([t.name for t in settings.topics])
        names = [t.name for t in settings.topics]
        self.documents = DocumentService(
            self.store,
            settings.hub.base_url,
            names,
            index_lists=settings.limits.index_lists,
            described_by=settings.hub.description,
            topic_descriptions={t.name: t.description for t in settings.topics},
            push_url=push_url,
        )
        limits = settings.limits
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
        )

    async def start(self) -> None:
        now_us = to_us(datetime.now(UTC))
        for topic in self.settings.topics:
            await self.store.ensure_topic(topic.name, now_us=now_us)
        self.rotator.start()

    async def stop(self) -> None:
        await self.rotator.stop()


def build_app(hub: Hub) -> Starlette:
    settings = hub.settings
    limits = settings.limits

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

    def reject(error: IngestError) -> JSONResponse:
        hub.metrics.rejected.labels(error.code).inc()
        # RFC 6750 §3: a 401 names the scheme the client must use.
        headers = {"WWW-Authenticate": 'Bearer realm="rspush"'} if error.status == 401 else None
        return JSONResponse(error.as_json(), status_code=error.status, headers=headers)

    def authorise(request: Request, topic: str) -> None:
        token = bearer(request.headers.get("authorization"))
        if token is None:
            raise IngestError(401, "unauthenticated", "missing 'Authorization: Bearer <token>'")
        source = find_source(settings.sources, token)
        if source is None:
            raise IngestError(401, "unauthenticated", "unknown token")
        if settings.topic(topic) is None:
            raise IngestError(404, "unknown-topic", f"no topic {topic!r} on this hub")
        if topic not in source.topics:
            raise IngestError(
                403, "forbidden", f"source {source.name!r} may not post to topic {topic!r}"
            )

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise IngestError(
                413, "body-too-large", f"body is {declared} bytes; limit {limits.max_body_bytes}"
            )
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limits.max_body_bytes:
                raise IngestError(
                    413, "body-too-large", f"body exceeds the limit of {limits.max_body_bytes}"
                )
        return bytes(body)

    def idempotency_key(request: Request) -> str | None:
        key = request.headers.get("idempotency-key")
        if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
            raise IngestError(
                400, "bad-idempotency-key", "Idempotency-Key: 1-200 printable ASCII characters"
            )
        return key

    async def ingest(request: Request, topic: str, *, seed: bool) -> dict[str, object]:
        authorise(request, topic)
        key = idempotency_key(request)
        body = await read_body(request)
        document = parse_fragment(body, max_bytes=limits.max_body_bytes)
        now = datetime.now(UTC)
        try:
            if seed:
                seed_plan = plan_seed(
                    document,
                    max_entries=1_000_000,
                    now=now,
                    future_tolerance=timedelta(seconds=limits.future_tolerance_s),
                )
                receipt, replayed = await hub.store.seed(
                    topic,
                    seed_plan,
                    now_us=to_us(now),
                    idempotency_key=key,
                    idempotency_ttl_s=limits.idempotency_ttl_s,
                )
            else:
                for attempt in range(STAMP_RETRIES):
                    plan = plan_changes(
                        document,
                        now=now,
                        max_entries=limits.max_entries_per_request,
                        future_tolerance=timedelta(seconds=limits.future_tolerance_s),
                    )
                    try:
                        receipt, replayed = await hub.store.append(
                            topic,
                            plan,
                            now_us=to_us(now),
                            idempotency_key=key,
                            idempotency_ttl_s=limits.idempotency_ttl_s,
                        )
                        break
                    except IngestError as error:
                        # Hub-stamped times can lose a race with a concurrent request:
                        # stamp again (the hub chose those times) and retry.
                        if error.status != 409 or not plan.stamped or attempt + 1 == STAMP_RETRIES:
                            raise
                        now = datetime.now(UTC)
                if not replayed:
                    hub.metrics.accepted.labels(topic).inc(len(plan.records))
        except RedisError as exc:
            raise IngestError(503, "store-unavailable", f"Redis: {exc}") from exc
        receipt["topic"] = topic
        receipt["replayed"] = replayed
        return receipt

    async def post_changes(request: Request) -> Response:
        try:
            receipt = await ingest(request, request.path_params["topic"], seed=False)
        except IngestError as error:
            return reject(error)
        return JSONResponse(receipt, status_code=202)

    async def post_baseline(request: Request) -> Response:
        try:
            receipt = await ingest(request, request.path_params["topic"], seed=True)
        except IngestError as error:
            return reject(error)
        return JSONResponse(receipt, status_code=202)

    async def post_hub(request: Request) -> Response:
        """Change notification spec §4.1: the topic comes from the Link rel="self"."""
        try:
            content_type = request.headers.get("content-type", "").split(";")[0].strip()
            if content_type != XML:
                raise IngestError(415, "content-type", "Content-Type must be application/xml")
            links = {
                rel.strip(): href.strip()
                for href, rel in _LINK.findall(", ".join(request.headers.getlist("link")))
            }
            self_uri = links.get("self")
            prefix = f"{settings.hub.base_url}/topics/"
            if self_uri is None or links.get("hub") != f"{settings.hub.base_url}/hub":
                raise IngestError(
                    400,
                    "link-header",
                    f'Link header needs <topic URI>; rel="self" and '
                    f'<{settings.hub.base_url}/hub>; rel="hub"',
                )
            if not self_uri.startswith(prefix):
                raise IngestError(404, "unknown-topic", f"{self_uri} is not a topic of this hub")
            receipt = await ingest(request, self_uri.removeprefix(prefix).rstrip("/"), seed=False)
        except IngestError as error:
            return reject(error)
        return JSONResponse(receipt, status_code=200)

    def serve(request: Request, served: Served, topic: str | None) -> Response:
        headers = {"ETag": served.etag}
        links = []
        if topic is not None:
            capability_list = Urls(settings.hub.base_url, topic).capability_list
            links.append(f'<{capability_list}>; rel="resourcesync"')
        if hub.push_url is not None:
            # The push endpoint, so rs-subscribe needs only the Source's URL (protocol.md).
            links.append(f'<{hub.push_url}>; rel="{PUSH_REL}"')
        if links:
            headers["Link"] = ", ".join(links)
        if served.last_modified is not None and _settled(served.last_modified):
            headers["Last-Modified"] = format_datetime(served.last_modified, usegmt=True)
        headers["Cache-Control"] = (
            "public, max-age=31536000, immutable" if served.immutable else "no-cache"
        )
        if _not_modified(request, served):
            return Response(status_code=304, headers=headers)
        return Response(served.body, media_type=XML, headers=headers)

    def document(
        build: Callable[[Request, str], Awaitable[Served]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            topic = request.path_params["topic"]
            try:
                served = await build(request, topic)
            except NotFound as exc:
                return JSONResponse({"error": "not-found", "message": str(exc)}, 404)
            except RedisError as exc:
                return JSONResponse({"error": "store-unavailable", "message": str(exc)}, 503)
            return serve(request, served, topic)

        return handler

    async def well_known(request: Request) -> Response:
        return serve(request, hub.documents.source_description(), None)

    async def topic_uri(request: Request) -> Response:
        """Notification spec §4.1: 200, application/xml, Link self + hub; no content."""
        topic = request.path_params["topic"]
        if settings.topic(topic) is None:
            return JSONResponse({"error": "not-found", "message": f"no topic {topic!r}"}, 404)
        urls = Urls(settings.hub.base_url, topic)
        return Response(
            b"",
            media_type=XML,
            headers={
                "Link": f'<{urls.topic_uri}>; rel="self", <{urls.hub}>; rel="hub", '
                f'<{urls.capability_list}>; rel="resourcesync"',
                "Content-Length": "0",
            },
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        try:
            await hub.redis.ping()
        except (RedisError, OSError) as exc:
            return JSONResponse({"status": "unavailable", "redis": str(exc)}, 503)
        return JSONResponse({"status": "ready"})

    async def metrics(request: Request) -> Response:
        for topic in hub.documents.topics:
            try:
                hub.metrics.stream_length.labels(topic).set(await hub.store.stream_length(topic))
            except RedisError:
                break
        return Response(hub.metrics.render(), media_type="text/plain; version=0.0.4")

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
        Route("/topics/{topic}", topic_uri, methods=["GET", "HEAD"]),
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

    return Starlette(routes=routes, lifespan=lifespan)


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
