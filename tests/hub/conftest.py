"""Hub test fixtures: a real Redis-compatible server (the same embedded valkey-server binary
the hub runs, or RSPUSH_TEST_REDIS_URL), a fresh key prefix per test, real hubs on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import redis

from rspush.hub.embedded import EmbeddedRedis
from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Limits, Settings, Source, Topic
from rspush.resourcesync.w3cdt import format_w3c_datetime
from tests.conftest import TIMEOUT_SCALE

TOKEN_A = "token-of-source-a"
TOKEN_B = "token-of-source-b"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    configured = os.environ.get("RSPUSH_TEST_REDIS_URL")
    if configured:
        yield configured
        return
    with EmbeddedRedis(tmp_path_factory.mktemp("redis")) as server:
        yield server.url


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    value = f"t{uuid.uuid4().hex[:12]}"
    yield value
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{value}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def make_settings(redis_url: str, prefix: str, base_url: str, **limits: object) -> Settings:
    return Settings(
        hub={"base_url": base_url},
        topics=[Topic(name="dataset1"), Topic(name="dataset2")],
        sources=[
            Source(
                name="a",
                token_sha256=hashlib.sha256(TOKEN_A.encode()).hexdigest(),
                topics=["dataset1"],
            ),
            Source(
                name="b",
                token_sha256=hashlib.sha256(TOKEN_B.encode()).hexdigest(),
                topics=["dataset2"],
            ),
        ],
        limits=Limits(**limits),  # type: ignore[arg-type]
        redis_url=redis_url,
        redis_prefix=prefix,
        push={"port": 0},  # every hub in a test run gets its own free push port
        rotation_interval_s=0.05,
        lease_ttl_s=1.0,
    )


HubFactory = Callable[..., AbstractAsyncContextManager[RunningHub]]


@pytest.fixture
def hub_factory(redis_url: str, prefix: str) -> HubFactory:
    """``async with hub_factory(**limits) as running:`` — a hub on 127.0.0.1, port 0."""

    @asynccontextmanager
    async def start(**limits: object) -> AsyncIterator[RunningHub]:
        sock = bind("127.0.0.1", 0)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with running_hub(make_settings(redis_url, prefix, base, **limits), sock=sock) as h:
            yield h

    return start


@pytest.fixture
async def hub(hub_factory: HubFactory) -> AsyncIterator[RunningHub]:
    async with hub_factory() as running:
        yield running


@pytest.fixture
async def client(hub: RunningHub) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=hub.url, timeout=30) as http:
        yield http


def change_fragment(*changes: tuple[str, str, str], capability: str = "changelist") -> bytes:
    """A fragment of (loc, change, datetime) triples."""
    urls = "".join(
        f'<url><loc>{loc}</loc><rs:md change="{change}" datetime="{when}"'
        f' length="{len(loc)}" type="text/plain"/></url>'
        for loc, change, when in changes
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="{capability}"/>{urls}</urlset>'
    ).encode()


def auth(token: str = TOKEN_A) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/xml"}


def spec_dir() -> Path:
    from tests.conftest import _find_spec

    return _find_spec()


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def eventually(
    predicate: Callable[[], Awaitable[bool]], timeout: float = 10, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` (scaled) seconds."""
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class Times:
    """Strictly increasing change times, an hour in the past (within the hub's tolerance),
    ``step`` apart unless a call asks for another step."""

    def __init__(self, step: timedelta = timedelta(milliseconds=1)) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
        self.step = step

    def next(self, step: timedelta | None = None) -> str:
        self.now += self.step if step is None else step
        return format_w3c_datetime(self.now)
