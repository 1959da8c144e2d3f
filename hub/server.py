"""Running a hub process: Redis (embedded or given), the app, uvicorn, clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import uvicorn
from redis.asyncio import Redis

from .app import Hub, build_app
from .embedded import EmbeddedRedis
from .settings import Settings

log = logging.getLogger("rspush.hub")
STARTUP_TIMEOUT_S = 30.0


@dataclass
class RunningHub:
    hub: Hub
    url: str
    """Where this process listens (may differ from base_url behind a proxy)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; port 0 picks a free one (read it back from getsockname)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def redis_client(url: str) -> Redis:
    return Redis.from_url(url, health_check_interval=30)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the hub process owns SIGINT/SIGTERM (it must
    also stop the embedded server), and tests run several hubs in one process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def running_hub(
    settings: Settings, *, sock: socket.socket | None = None
) -> AsyncIterator[RunningHub]:
    """Serve ``settings`` until the block exits. Redis must be reachable at
    ``settings.redis_url`` (the CLI starts the embedded server before calling this)."""
    if settings.redis_url is None:
        raise ValueError("running_hub needs settings.redis_url (start EmbeddedRedis first)")
    sock = sock or bind(settings.host, settings.port)
    redis = redis_client(settings.redis_url)
    hub = Hub(settings, redis)
    config = uvicorn.Config(
        build_app(hub),
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="rspush-http")
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()  # raises the startup error
                    raise RuntimeError("hub stopped during startup")
                await asyncio.sleep(0.01)
        host, port = sock.getsockname()[:2]
        yield RunningHub(hub=hub, url=f"http://{_url_host(host)}:{port}")
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await redis.aclose()
        sock.close()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve_forever(settings: Settings) -> None:
    """``rs-hub serve``: start the embedded server when no Redis URL is given; serve until
    SIGINT/SIGTERM; stop everything cleanly."""
    embedded: EmbeddedRedis | None = None
    if settings.redis_url is None:
        embedded = EmbeddedRedis(settings.data_dir / "redis", appendfsync=settings.appendfsync)
        url = await asyncio.to_thread(embedded.start)
        settings = settings.model_copy(update={"redis_url": url})
        log.info("embedded server started: %s (appendfsync %s)", url, settings.appendfsync)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with running_hub(settings) as running:
            log.warning(
                "rspush hub serving %s on %s (topics: %s)",
                settings.hub.base_url,
                running.url,
                ", ".join(t.name for t in settings.topics) or "none",
            )
            await _supervise(stop, embedded)
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)


async def _supervise(stop: asyncio.Event, embedded: EmbeddedRedis | None) -> None:
    """Wait for a stop signal; restart the embedded server if it dies (its AOF restores it)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await stop.wait()
        if embedded is not None and not stop.is_set() and not embedded.running:
            log.error("embedded server exited; restarting it")
            await asyncio.to_thread(embedded.start)
