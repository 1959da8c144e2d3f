"""Network failures at every stage of the agent's life are waited out, never fatal: a push
handshake answered 502 by a proxy or cut before its ``101``, a hub that is not up yet when the
agent starts, a hub restarted under a running agent, a Resource List answering 503. Only a
configuration error (nothing ResourceSync at the URL given) ends the run.

Everything runs on loopback: a static Source (the loopback origin), raw TCP servers for the
broken push endpoints, and real hubs on the embedded Redis-compatible server.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosedError, InvalidMessage, InvalidURI

from rspush.hub.server import bind, running_hub
from rspush.subscriber.agent import Agent, AgentConfig
from rspush.subscriber.errors import DiscoveryError
from rspush.subscriber.push import PushError, RefusedError
from rspush.subscriber.push_failures import push_failure
from tests.support.agents import Running, converged, running_agent
from tests.support.hubs import make_settings
from tests.support.origin import publish, running_origin
from tests.support.raw_servers import RawServer, Reply, bad_gateway, close_at_once
from tests.support.static_source import (
    T0,
    T1,
    StaticSource,
    capability_list,
    changed,
    config_for,
    running_source,
    serve_resource_list,
    urlset,
)
from tests.support.waiting import TIMEOUT_SCALE, eventually

QUICK = {"poll_interval": 0.1, "backoff_initial": 0.1, "backoff_max": 0.5}


def pull_source(source: StaticSource, push: str | None) -> None:
    """A Source with a Resource List (one resource), an empty open Change List and, when
    given, a push endpoint."""
    capability_list(
        source,
        {"resourcelist": "/resourcelist.xml", "changelist": "/changelist.xml"},
        push=push,
    )
    serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
    source.put_document("/changelist.xml", urlset("changelist", "", from_=T0))


def still_running(run: Running) -> None:
    if run.task.done():
        error = None if run.task.cancelled() else run.task.exception()
        raise AssertionError(f"the agent ended: {error!r}")


@pytest.mark.parametrize(
    "reply", [bad_gateway, close_at_once], ids=["502-to-the-upgrade", "closed-before-101"]
)
async def test_a_failed_push_handshake_means_polling_and_trying_again(
    reply: Reply, tmp_path: Path
) -> None:
    broken = RawServer(reply)
    async with running_source() as source, broken.running() as endpoint:
        pull_source(source, push="ws://" + endpoint.removeprefix("http://") + "/")
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await eventually(
                lambda: broken.requests >= 3 or run.task.done(), "three push handshakes"
            )
            still_running(run)
            assert b"upgrade: websocket" in broken.heads[0].lower()
            # Meanwhile the agent polls: a change in the open Change List is applied.
            source.put("/b.txt", b"bravo")
            source.put_document(
                "/changelist.xml",
                urlset("changelist", changed(source, "/b.txt", "created", T1, b"bravo"), from_=T0),
            )
            await converged(source, dest)
            assert source.uri("/b.txt") in {e["uri"] for e in run.applied("poll")}
            still_running(run)


async def test_a_resource_list_answering_503_is_read_again_after_a_delay(tmp_path: Path) -> None:
    async with running_source() as source:
        pull_source(source, push=None)
        source.unavailable["/resourcelist.xml"] = 2
        dest = tmp_path / "mirror"
        agent = Agent(config_for(source, dest))
        async with asyncio.timeout(20 * TIMEOUT_SCALE):
            await agent.run(baseline_only=True)
        assert source.requests["/resourcelist.xml"] == 3
        await converged(source, dest)


async def test_nothing_resourcesync_at_the_url_is_a_configuration_error(tmp_path: Path) -> None:
    async with running_source() as source:  # serves nothing: every candidate answers 404
        config = AgentConfig(source_url=source.url, dest=tmp_path / "mirror", **QUICK)  # type: ignore[arg-type]
        with pytest.raises(DiscoveryError, match="no ResourceSync"):
            async with asyncio.timeout(20 * TIMEOUT_SCALE):
                await Agent(config).run()


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on (connections are refused until a hub binds them); distinct,
    as the probes are held open together."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


@asynccontextmanager
async def hub_on(
    redis_url: str, prefix: str, port: int, push_port: int = 0
) -> AsyncIterator[httpx.AsyncClient]:
    """A hub on 127.0.0.1:``port`` (its push endpoint on ``push_port``, 0: any); a client of
    it while the block lasts."""
    base = f"http://127.0.0.1:{port}"
    settings = make_settings(redis_url, prefix, base)
    sock, push_sock = bind("127.0.0.1", port), bind("127.0.0.1", push_port)
    async with (
        running_hub(settings, sock=sock, push_sock=push_sock),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        yield http


def discovery_retries(records: list[logging.LogRecord]) -> int:
    return sum(1 for r in records if r.getMessage().startswith("discovery:"))


def baselined(run: Running) -> bool:
    mirror = run.agent.mirror
    state = None if mirror is None else mirror.checkpoint.state()
    return state is not None and state.baseline_at is not None


async def test_an_agent_started_before_its_hub_baselines_once_the_hub_is_up(
    redis_url: str, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rs_subscribe")
    [port] = free_ports(1)
    dest = tmp_path / "mirror"
    async with running_origin() as origin:
        config = AgentConfig(
            source_url=f"http://127.0.0.1:{port}",
            dest=dest,
            topic="dataset1",
            maps=[(origin.url + "/", "")],
            **QUICK,  # type: ignore[arg-type]
        )
        async with running_agent(config) as run:
            await eventually(
                lambda: discovery_retries(caplog.records) >= 2 or run.task.done(),
                "discovery to be retried",
            )
            still_running(run)
            async with hub_on(redis_url, prefix, port) as http:
                await publish(http, "dataset1", origin, [("/a.txt", "created", b"alpha")])
                await eventually(lambda: baselined(run) or run.task.done(), "the baseline")
                still_running(run)
                await converged(origin, dest)
                await eventually(lambda: run.agent.channel == "push", "the push subscription")


async def test_a_hub_restarted_under_a_running_agent(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    port, push_port = free_ports(2)
    dest = tmp_path / "mirror"
    async with running_origin() as origin, AsyncExitStack() as first_hub:
        http = await first_hub.enter_async_context(hub_on(redis_url, prefix, port, push_port))
        await publish(http, "dataset1", origin, [("/a.txt", "created", b"alpha")])
        config = AgentConfig(
            source_url=f"http://127.0.0.1:{port}",
            dest=dest,
            topic="dataset1",
            maps=[(origin.url + "/", "")],
            **QUICK,  # type: ignore[arg-type]
        )
        async with running_agent(config) as run:
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            await converged(origin, dest)
            await first_hub.aclose()  # the hub goes away, push and documents alike
            await eventually(lambda: run.agent.channel == "poll" or run.task.done(), "polling")
            still_running(run)
            async with hub_on(redis_url, prefix, port, push_port) as again:
                await publish(again, "dataset1", origin, [("/b.txt", "created", b"bravo")])
                await converged(origin, dest)
                await eventually(
                    lambda: run.agent.channel == "push" or run.task.done(), "push again", 30
                )
                await publish(again, "dataset1", origin, [("/c.txt", "created", b"charlie")])
                await converged(origin, dest)
                still_running(run)
            assert {e["uri"] for e in run.applied("push")} >= {origin.uri("/c.txt")}


@pytest.mark.parametrize(
    "failure",
    [
        OSError("connection refused"),
        TimeoutError(),
        EOFError(),
        InvalidMessage("did not receive a valid HTTP response"),
        InvalidURI("ws://[", "not a valid URI"),
        ConnectionClosedError(None, None),
    ],
    ids=lambda failure: type(failure).__name__,
)
def test_every_way_a_push_channel_fails_is_a_push_error(failure: Exception) -> None:
    mapped = push_failure(failure, "ws://127.0.0.1:9/")
    assert isinstance(mapped, PushError)
    assert not isinstance(mapped, RefusedError)


def test_errors_that_are_not_channel_failures_pass_through() -> None:
    assert push_failure(ValueError("a bug"), "ws://127.0.0.1:9/") is None
    assert push_failure(RefusedError("unauthorised: no"), "ws://127.0.0.1:9/") is None
