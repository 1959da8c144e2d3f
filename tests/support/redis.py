"""A real Redis-compatible server for the whole session (the same embedded valkey-server
binary the hub runs, or RSPUSH_TEST_REDIS_URL) and a fresh key prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    configured = os.environ.get("RSPUSH_TEST_REDIS_URL")
    if configured:
        yield configured
        return
    # Imported here: a session that never asks for Redis does not load the hub's package.
    from rspush.hub.embedded import EmbeddedRedis

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


@pytest.fixture(name="redis")
async def redis_client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """An asyncio client of the session's Redis."""
    client = redis.asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()
