"""Running a hub process: Redis (embedded or given), the app, uvicorn, clean shutdown.

Why one module of this size: the start order (data dir lock, ports bound, Redis, the HTTP and
push servers, or the worker processes) and the stop order are one sequence, read and changed
in one place; the worker processes themselves are in :mod:`.workers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast

import uvicorn
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster

from .advertise import Announcement, advertised, is_wildcard, reachable_host, url_host
from .app import Hub, build_app
from .connections import (
    REDIS_MAX_CONNECTIONS,
    connection_cap,
    guarded_protocol,
    limit_flood_logging,
    open_file_limit,
)
from .embedded import DataDirLock, EmbeddedRedis
from .metrics import HubMetrics
from .push.server import PushServer
from .settings import Settings
from .store import TopicStore
from .websub.service import WebSubHub

log = logging.getLogger("rspush.hub")
STARTUP_TIMEOUT_S = 30.0


@dataclass
class RunningHub:
    hub: Hub
    url: str
    """Where this process listens (may differ from base_url behind a proxy)."""
    push_url: str | None = None
    """Where its WebSocket push endpoint listens (None when push is disabled)."""
    push: PushServer | None = None
    listening_on_wildcard: bool = False
    base_url_configured: bool = True

    def announcement(self) -> Announcement:
        """Where this process listens and the URLs its documents name."""
        settings = self.hub.settings
        return Announcement(
            http=self.url,
            push=self.push_url,
            base_url=settings.hub.base_url,
            push_url=self.hub.push_url,
            wildcard=self.listening_on_wildcard,
            base_url_configured=self.base_url_configured,
        )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; port 0 picks a free one (read it back from getsockname)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP. Without it Nagle + delayed ACKs add ~40 ms to
    # request/response exchanges and to push tails (measured: docs/benchmarks.md).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


CLUSTER_SCHEME = "redis+cluster://"
REDIS_POOL_TIMEOUT_S = 20.0


def redis_client(url: str) -> Redis:
    """A client for ``redis://``, ``rediss://``, ``unix://`` or, for a Redis Cluster,
    ``redis+cluster://host:port`` (any node; the client discovers the rest).

    The hub uses only commands that RedisCluster routes by key — Lua scripts whose keys share
    one topic's hash slot, streams, hashes, strings — so it is typed as the plain client.
    """
    if url.startswith(CLUSTER_SCHEME):
        cluster = RedisCluster.from_url("redis://" + url.removeprefix(CLUSTER_SCHEME))
        return cast(Redis, cluster)
    # A blocking pool: a burst of subscribers (every client reconnecting after a restart)
    # waits for a connection instead of failing; each topic's feed holds one for XREAD BLOCK.
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=REDIS_MAX_CONNECTIONS,
        timeout=REDIS_POOL_TIMEOUT_S,
        health_check_interval=30,
    )
    return Redis.from_pool(pool)  # the client owns the pool: aclose() disconnects it


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the hub process owns SIGINT/SIGTERM (it must
    also stop the embedded server), and tests run several hubs in one process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def running_hub(
    settings: Settings,
    *,
    sock: socket.socket | None = None,
    push_sock: socket.socket | None = None,
    serve_push: bool = True,
    deliver_websub: bool = True,
) -> AsyncIterator[RunningHub]:
    """Serve ``settings`` until the block exits. Redis must be reachable at
    ``settings.redis_url`` (the CLI starts the embedded server before calling this).

    ``serve_push=False``: HTTP only (an HTTP worker of ``--workers``); the documents then
    advertise ``[push] port``, which another process serves. ``deliver_websub=False``:
    WebSub subscriptions are taken here but delivered by other processes."""
    redis_url = settings.redis_url
    if redis_url is None:
        raise ValueError("running_hub needs settings.redis_url (start EmbeddedRedis first)")
    sock = sock or bind(settings.host, settings.port)
    if serve_push and settings.push.enabled and push_sock is None:
        push_sock = bind(settings.host, settings.push.port)
    if serve_push:
        push_port = push_sock.getsockname()[1] if push_sock is not None else None
    else:
        push_port = settings.push.port if settings.push.enabled else None
    bound_host, bound_port = sock.getsockname()[:2]
    base_url_configured = "base_url" in settings.hub.model_fields_set
    settings = advertised(settings, bound_host, bound_port, push_port)
    redis = redis_client(redis_url)
    hub = Hub(
        settings,
        redis,
        push_url=None if push_port is None else settings.push.url,
        deliver_websub=deliver_websub,
    )
    limits = settings.limits
    limit_flood_logging()
    config = uvicorn.Config(
        build_app(hub),
        log_level="warning",
        lifespan="on",
        access_log=False,
        date_header=False,  # the app dates each response itself (serving.DateHeader)
        timeout_graceful_shutdown=5,
        # The httptools protocol with deadlines on reading requests, a bound on a request's
        # head and a connection cap (:mod:`.connections`).
        http=guarded_protocol(
            header_timeout_s=limits.header_timeout_s,
            body_timeout_s=limits.body_timeout_s,
            max_connections=connection_cap(
                limits.max_connections,
                open_file_limit(),
                redis_connections=REDIS_MAX_CONNECTIONS,
            ),
        ),
        timeout_keep_alive=limits.keepalive_timeout_s,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="rspush-http")
    running: RunningHub | None = None
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()  # raises the startup error
                    raise RuntimeError("hub stopped during startup")
                await asyncio.sleep(0.01)
        host = reachable_host(bound_host)
        running = RunningHub(
            hub=hub,
            url=f"http://{url_host(host)}:{bound_port}",
            listening_on_wildcard=is_wildcard(bound_host),
            base_url_configured=base_url_configured,
        )
        if not serve_push and push_port is not None:
            running.push_url = f"ws://{url_host(host)}:{push_port}/"
        elif push_sock is not None:
            push = PushServer(
                settings,
                redis,
                on_sent=hub.metrics.sent,
                on_slow=lambda topic: hub.metrics.slow_closes.labels(topic).inc(),
                on_subscribers=lambda topic, n: hub.metrics.subscribers.labels(topic).set(n),
            )
            await push.start(push_sock)
            hub.metrics.push_connections.set_function(lambda: push.connections)
            hub.push_connections = lambda: push.connections
            running.push = push
            running.push_url = f"ws://{url_host(host)}:{push_port}/"
        yield running
    finally:
        if running is not None and running.push is not None:
            await running.push.stop()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await redis.aclose()
        sock.close()
        if push_sock is not None:
            push_sock.close()


@dataclass
class RunningPush:
    """A push-only process (a push worker of ``--workers``)."""

    push: PushServer
    metrics: HubMetrics


@asynccontextmanager
async def running_push(
    settings: Settings, push_sock: socket.socket, *, deliver_websub: bool = False
) -> AsyncIterator[RunningPush]:
    """Serve the WebSocket push endpoint of ``settings`` on ``push_sock`` (already advertised
    settings: documents are another process's business) until the block exits.
    ``deliver_websub``: also deliver WebSub notifications (a push worker of ``--workers``:
    fan-out, WebSocket or WebSub, stays off the event loops that take ingest)."""
    assert settings.redis_url is not None
    redis = redis_client(settings.redis_url)
    metrics = HubMetrics()
    metrics.declare_topics([t.name for t in settings.topics])
    push = PushServer(
        settings,
        redis,
        on_sent=metrics.sent,
        on_slow=lambda topic: metrics.slow_closes.labels(topic).inc(),
        on_subscribers=lambda topic, n: metrics.subscribers.labels(topic).set(n),
    )
    # Deliveries get a connection pool of their own: the push feeds hold pooled connections
    # in blocking reads, and neither kind of fan-out may starve the other of connections.
    websub_redis = (
        redis_client(settings.redis_url) if deliver_websub and settings.websub.enabled else None
    )
    websub = (
        WebSubHub(settings, TopicStore(websub_redis, prefix=settings.redis_prefix), metrics)
        if websub_redis is not None
        else None
    )
    try:
        await push.start(push_sock)
        if websub is not None:
            websub.start()
        yield RunningPush(push, metrics)
    finally:
        if websub is not None:
            await websub.stop()
        if websub_redis is not None:
            await websub_redis.aclose()
        await push.stop()
        await redis.aclose()


class ListenError(Exception):
    """A listener could not be bound; the message names it, its address and the option that
    moves it."""


def listen(what: str, host: str, port: int, option: str) -> socket.socket:
    """:func:`bind`, or a :class:`ListenError` a person can act on."""
    try:
        return bind(host, port)
    except OSError as exc:
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise ListenError(
            f"cannot listen for {what} on {url_host(host)}:{port} ({reason}): "
            f"choose another port with {option}",
        ) from exc


async def serve_forever(
    settings: Settings,
    announce: Callable[[Announcement], None] | None = None,
    *,
    workers: int = 1,
) -> None:
    """``rs-hub serve``: serve until SIGINT/SIGTERM; stop everything cleanly. With
    ``workers`` > 1 the app and the push server run in worker processes (:mod:`.workers`),
    started in step 4 and stopped first.

    Start-up order, each step before anything the next one starts, so that a refusal leaves
    nothing behind and touches nothing of another hub's:

    1. with the embedded server: the data dir's lock (:class:`DataDirBusyError` if another
       hub holds it) — one hub, hence one server and one AOF, per data dir;
    2. the HTTP and push listening sockets (:class:`ListenError` naming the port's option);
    3. the embedded server (a leftover one of a killed hub is stopped first);
    4. the app and the push server.

    Shutdown runs in reverse: app, embedded server, sockets, lock last.
    """
    async with contextlib.AsyncExitStack() as stack:
        embedded: EmbeddedRedis | None = None
        if settings.redis_url is None:
            stack.enter_context(DataDirLock(settings.data_dir))
        sock = listen("HTTP", settings.host, settings.port, "--port (or port in the config)")
        stack.callback(sock.close)
        push_sock: socket.socket | None = None
        if settings.push.enabled:
            push_sock = listen(
                "push",
                settings.host,
                settings.push.port,
                "--push-port (or [push] port in the config)",
            )
            stack.callback(push_sock.close)
        if settings.redis_url is None:
            embedded = EmbeddedRedis(settings.data_dir / "redis", appendfsync=settings.appendfsync)
            stack.push_async_callback(asyncio.to_thread, embedded.stop)
            await _start_embedded(embedded)
            settings = settings.model_copy(update={"redis_url": embedded.url})
            log.info(
                "embedded server started: %s (appendfsync %s)", embedded.url, settings.appendfsync
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if workers > 1:
            await _serve_workers(settings, workers, sock, push_sock, stop, embedded, announce)
            return
        async with running_hub(settings, sock=sock, push_sock=push_sock) as running:
            log.warning(
                "rspush hub serving %s on %s, push on %s (topics: %s)",
                running.hub.settings.hub.base_url,
                running.url,
                running.push_url or "-",
                ", ".join(t.name for t in settings.topics) or "none",
            )
            if announce is not None:
                announce(running.announcement())
            await _supervise(stop, embedded)


async def _serve_workers(
    settings: Settings,
    count: int,
    sock: socket.socket,
    push_sock: socket.socket | None,
    stop: asyncio.Event,
    embedded: EmbeddedRedis | None,
    announce: Callable[[Announcement], None] | None,
) -> None:
    """Serve with ``count`` worker processes until ``stop``; :class:`.workers.WorkerDied`
    if they keep dying."""
    from .workers import Workers, announcement

    pool = Workers(settings, count, sock, push_sock)
    try:
        await pool.start()
        shown = announcement(settings, sock, push_sock)
        log.warning(
            "rspush hub serving %s on %s, push on %s (topics: %s; workers: %s)",
            shown.base_url,
            shown.http,
            shown.push or "-",
            ", ".join(t.name for t in settings.topics) or "none",
            ", ".join(pool.roles),
        )
        if announce is not None:
            announce(shown)

        async def embedded_alive() -> None:
            if embedded is not None and not stop.is_set() and not embedded.running:
                log.error("embedded server exited; restarting it")
                await _start_embedded(embedded)

        await pool.supervise(stop, embedded_alive)
    finally:
        await pool.stop()


async def _start_embedded(embedded: EmbeddedRedis) -> None:
    """Spawn on this (the main) thread: the server's parent-death signal follows the thread
    that started it. Wait for it elsewhere: it may replay a long AOF."""
    embedded.spawn()
    await asyncio.to_thread(embedded.wait_ready)


async def _supervise(stop: asyncio.Event, embedded: EmbeddedRedis | None) -> None:
    """Wait for a stop signal; restart the embedded server if it dies (its AOF restores it)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await stop.wait()
        if embedded is not None and not stop.is_set() and not embedded.running:
            log.error("embedded server exited; restarting it")
            await _start_embedded(embedded)
