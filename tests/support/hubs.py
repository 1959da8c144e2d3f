"""Real hubs on loopback, on the session's Redis (:mod:`tests.support.redis`): their
settings, and the ``hub_factory``, ``hub`` and ``client`` fixtures (re-exported by the
conftest of every folder whose tests run a hub)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx
import pytest

from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Limits, Settings, Source, Topic
from tests.support.fragments import TOKEN_A, TOKEN_B


def make_settings(
    redis_url: str,
    prefix: str,
    base_url: str,
    *,
    framework: dict[str, object] | None = None,
    **limits: object,
) -> Settings:
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
        framework=framework or {},
    )


HubFactory = Callable[..., AbstractAsyncContextManager[RunningHub]]


@pytest.fixture
def hub_factory(redis_url: str, prefix: str) -> HubFactory:
    """``async with hub_factory(**limits) as running:`` — a hub on 127.0.0.1, port 0;
    ``framework={...}`` sets its ``[framework]`` section."""

    @asynccontextmanager
    async def start(
        framework: dict[str, object] | None = None, **limits: object
    ) -> AsyncIterator[RunningHub]:
        sock = bind("127.0.0.1", 0)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        settings = make_settings(redis_url, prefix, base, framework=framework, **limits)
        async with running_hub(settings, sock=sock) as h:
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
