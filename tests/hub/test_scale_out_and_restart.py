"""Several hubs on one Redis, a killed lease holder, and restarts (of the hub and of the Redis
server): real hubs on loopback — in this process and as an ``rs-hub serve`` child process —
and real Redis servers. Waits are on conditions with timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from redis.asyncio import Redis

from rspush.hub.auth import token_sha256
from rspush.hub.embedded import EmbeddedRedis
from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Settings
from rspush.resourcesync import Document, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from tests.support.fragments import TOKEN_A, TOKEN_B, auth, change_fragment, iso
from tests.support.hubs import make_settings
from tests.support.waiting import TIMEOUT_SCALE, eventually

TOPIC = "/topics/dataset1"
PUSH_URL = "ws://127.0.0.1:9/"  # what every hub of one deployment advertises
LEASE_TTL_S = 1.0  # make_settings


class Clock:
    def __init__(self) -> None:
        self.last = datetime.now(UTC) - timedelta(minutes=1)

    def take(self, n: int) -> list[datetime]:
        start = max(datetime.now(UTC) - timedelta(seconds=30), self.last + timedelta(seconds=1))
        times = [start + timedelta(milliseconds=i) for i in range(n)]
        self.last = times[-1]
        return times


async def post(
    client: httpx.AsyncClient, clock: Clock, size: int, tag: str
) -> tuple[httpx.Response, list[str]]:
    locs = [f"http://example.com/{tag}-{i}" for i in range(size)]
    body = change_fragment(
        *[(loc, "created", iso(t)) for loc, t in zip(locs, clock.take(size), strict=True)]
    )
    return await client.post(f"{TOPIC}/changes", content=body, headers=auth()), locs


def settings_for(redis_url: str, prefix: str, base: str, **limits: object) -> Settings:
    settings = make_settings(redis_url, prefix, base, **limits)
    return settings.model_copy(update={"push": settings.push.model_copy(update={"url": PUSH_URL})})


@asynccontextmanager
async def shared_hub(
    redis_url: str,
    prefix: str,
    base: str | None = None,
    sock: socket.socket | None = None,
    **limits: object,
) -> AsyncIterator[RunningHub]:
    """A hub on 127.0.0.1:0 named ``base`` (default: its own address), as behind a load
    balancer: every hub of one deployment has the same base URL."""
    sock = sock or bind("127.0.0.1", 0)
    base = base or f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with running_hub(settings_for(redis_url, prefix, base, **limits), sock=sock) as hub:
        yield hub


async def documents(client: httpx.AsyncClient) -> dict[str, tuple[bytes, str, str | None]]:
    """Body, ETag and Last-Modified of every document, the closed lists included.

    Last-Modified is only sent once its second is over (hub/serving.py ``_settled``), so whether
    it is there depends on timing: it is compared only through ``same_dates``."""
    paths = [
        "/.well-known/resourcesync",
        f"{TOPIC}/capabilitylist.xml",
        f"{TOPIC}/changelist.xml",
        f"{TOPIC}/changelist-index.xml",
        f"{TOPIC}/changelist-archive.xml",
        f"{TOPIC}/resourcelist.xml",
        "/topics/dataset2/changelist.xml",
        "/topics/dataset2/resourcelist.xml",
    ]
    archive = parse_document((await client.get(f"{TOPIC}/changelist-archive.xml")).content)
    paths += [urlsplit(e.loc).path for e in archive.entries]
    out = {}
    for path in paths:
        reply = await client.get(path)
        assert reply.status_code == 200, (path, reply.text)
        assert schema_errors(reply.content) == [], path
        assert validate(parse_document(reply.content)) == [], path
        out[path] = (reply.content, reply.headers["etag"], reply.headers.get("last-modified"))
    return out


def same_documents(
    before: dict[str, tuple[bytes, str, str | None]],
    after: dict[str, tuple[bytes, str, str | None]],
) -> bool:
    """Same bodies and ETags; the same Last-Modified wherever both responses carry one."""
    if before.keys() != after.keys():
        return False
    for path, (body, etag, modified) in before.items():
        body2, etag2, modified2 = after[path]
        if (body, etag) != (body2, etag2):
            return False
        if modified is not None and modified2 is not None and modified != modified2:
            return False
    return True


async def listed_changes(client: httpx.AsyncClient) -> list[str]:
    """Every change in the closed lists (archive order) and then the open list. Read again
    if a list was closed meanwhile (the reads are several requests)."""
    while True:
        archive = await client.get(f"{TOPIC}/changelist-archive.xml")
        docs: list[Document] = []
        for item in parse_document(archive.content).entries:
            docs.append(parse_document((await client.get(urlsplit(item.loc).path)).content))
        docs.append(parse_document((await client.get(f"{TOPIC}/changelist.xml")).content))
        if (await client.get(f"{TOPIC}/changelist-archive.xml")).content == archive.content:
            break
    for before, after in zip(docs, docs[1:], strict=False):
        assert before.md.until == after.md.from_  # gap-free
    return [e.loc for d in docs for e in d.entries]


async def archive_size(client: httpx.AsyncClient) -> int:
    reply = await client.get(f"{TOPIC}/changelist-archive.xml")
    return len(parse_document(reply.content).entries)


async def closed_numbers(redis: Redis, prefix: str) -> list[int]:
    return [
        json.loads(raw)["n"] for raw in await redis.lrange(f"{prefix}:{{dataset1}}:closed", 0, -1)
    ]


async def lease_holder(redis: Redis, prefix: str) -> str | None:
    value: Any = await redis.get(f"{prefix}:{{dataset1}}:lease")
    return None if value is None else value.decode()


# --- two hubs on one Redis ---------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_two_hubs_serve_the_same_documents_and_one_rotates(
    redis_url: str, prefix: str
) -> None:
    clock = Clock()
    redis = Redis.from_url(redis_url)
    async with AsyncExitStack() as outer:
        outer.push_async_callback(redis.aclose)
        first_stack = AsyncExitStack()
        outer.push_async_callback(first_stack.aclose)
        first = await first_stack.enter_async_context(
            shared_hub(redis_url, prefix, changelist_max_entries=5)
        )

        async def first_holds_lease() -> bool:
            return await lease_holder(redis, prefix) == first.hub.rotator.token

        await eventually(first_holds_lease, what="the first hub to take the lease")
        second = await outer.enter_async_context(
            shared_hub(redis_url, prefix, first.url, changelist_max_entries=5)
        )
        a = await outer.enter_async_context(httpx.AsyncClient(base_url=first.url, timeout=30))
        b = await outer.enter_async_context(httpx.AsyncClient(base_url=second.url, timeout=30))

        # A post to one is visible on the other at once (no waiting: same Redis).
        posted: list[str] = []
        for number in range(6):
            here, there = (a, b) if number % 2 == 0 else (b, a)
            reply, locs = await post(here, clock, 2 if number < 5 else 3, f"p{number}")
            assert reply.status_code == 202, reply.text
            posted += locs
            resources = parse_document((await there.get(f"{TOPIC}/resourcelist.xml")).content)
            assert set(locs) <= {e.loc for e in resources.entries}
            assert set(locs) <= set(await listed_changes(there))
        assert len(posted) == 13

        async def two_closed() -> bool:
            # A rotator counts a list once its round is over (after the close and trim).
            rotations = first.hub.rotator.rotations + second.hub.rotator.rotations
            return rotations == 2 and await archive_size(b) == 2 and await archive_size(a) == 2

        await eventually(two_closed, what="2 closed Change Lists")
        assert await listed_changes(a) == await listed_changes(b) == posted

        # Byte-identical documents with identical validators from both processes.
        from_a, from_b = await documents(a), await documents(b)
        assert same_documents(from_a, from_b)

        # Exactly one of them rotated; every list was closed once.
        assert (first.hub.rotator.rotations, second.hub.rotator.rotations) == (2, 0)
        assert await closed_numbers(redis, prefix) == [0, 1]
        assert await lease_holder(redis, prefix) == first.hub.rotator.token

        # The lease holder goes away: the other one takes over rotation within the lease TTL.
        await first_stack.aclose()
        gone = time.monotonic()
        reply, locs = await post(b, clock, 5, "after")
        assert reply.status_code == 202
        posted += locs

        async def three_closed() -> bool:
            return await archive_size(b) == 3 and second.hub.rotator.rotations == 1

        await eventually(three_closed, timeout=LEASE_TTL_S + 2, what="the other hub to rotate")
        assert time.monotonic() - gone < (LEASE_TTL_S + 2) * TIMEOUT_SCALE
        assert second.hub.rotator.rotations == 1
        assert await lease_holder(redis, prefix) == second.hub.rotator.token
        assert await closed_numbers(redis, prefix) == [0, 1, 2]
        assert await listed_changes(b) == posted


CONFIG = """
redis_url = "{redis_url}"
redis_prefix = "{prefix}"
host = "127.0.0.1"
port = 0
rotation_interval_s = 0.05
lease_ttl_s = {lease_ttl}

[hub]
base_url = "{base}"

[push]
port = 0
url = "{push_url}"

[limits]
changelist_max_entries = 5

[[topics]]
name = "dataset1"

[[topics]]
name = "dataset2"

[[sources]]
name = "a"
token_sha256 = "{token_a}"
topics = ["dataset1"]

[[sources]]
name = "b"
token_sha256 = "{token_b}"
topics = ["dataset2"]
"""


SERVING = r"serving \S+ on (http://127\.0\.0\.1:\d+)"


def rs_hub() -> list[str]:
    script = Path(sys.executable).parent / "rs-hub"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from rspush.hub.cli import app; app()"]


@pytest.mark.timeout(60)
async def test_a_killed_lease_holder_process_is_replaced_within_the_lease_ttl(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """``rs-hub serve`` in a child process holds the lease; SIGKILL leaves its lease behind
    (no clean release); the hub in this process takes over once the lease expires."""
    clock = Clock()
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = tmp_path / "hub.toml"
    config.write_text(
        CONFIG.format(
            redis_url=redis_url,
            prefix=prefix,
            lease_ttl=LEASE_TTL_S,
            base=base,
            push_url=PUSH_URL,
            token_a=token_sha256(TOKEN_A),
            token_b=token_sha256(TOKEN_B),
        )
    )
    log_path = tmp_path / "child.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSPUSH_")}
    redis = Redis.from_url(redis_url)
    with log_path.open("wb") as log:
        child = subprocess.Popen(
            # One process: SIGKILL ends the whole hub at once (workers would first stop).
            [*rs_hub(), "serve", "--config", str(config), "--workers", "1"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env,
        )
    try:

        async def child_holds_lease() -> bool:
            assert child.poll() is None, log_path.read_text()
            return await lease_holder(redis, prefix) is not None

        async def child_serving() -> bool:
            assert child.poll() is None, log_path.read_text()
            return re.search(SERVING, log_path.read_text()) is not None

        await eventually(child_holds_lease, timeout=30, what="the child hub to take the lease")
        await eventually(child_serving, timeout=30, what="the child hub to log its address")
        found = re.search(SERVING, log_path.read_text())
        assert found is not None
        child_url = found.group(1)
        child_token = await lease_holder(redis, prefix)

        async with AsyncExitStack() as stack:
            running = await stack.enter_async_context(
                shared_hub(redis_url, prefix, base, sock, changelist_max_entries=5)
            )
            ours = await stack.enter_async_context(
                httpx.AsyncClient(base_url=running.url, timeout=30)
            )
            theirs = await stack.enter_async_context(
                httpx.AsyncClient(base_url=child_url, timeout=30)
            )
            posted: list[str] = []
            for number in range(2):
                reply, locs = await post(ours, clock, 5, f"c{number}")
                assert reply.status_code == 202, reply.text
                posted += locs

            async def closed(count: int, ours_closed: int = 0) -> bool:
                return (
                    await archive_size(ours) == count
                    and running.hub.rotator.rotations == ours_closed
                )

            await eventually(lambda: closed(2), what="the child to close 2 lists")
            assert running.hub.rotator.rotations == 0
            assert await lease_holder(redis, prefix) == child_token
            # Two processes, the same bytes.
            assert same_documents(await documents(ours), await documents(theirs))

            child.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            await asyncio.to_thread(child.wait, 10)
            # Its lease outlives it, until the TTL expires.
            reply, locs = await post(ours, clock, 5, "c-after")
            assert reply.status_code == 202, reply.text
            posted += locs
            await eventually(
                lambda: closed(3, 1), timeout=LEASE_TTL_S + 3, what="this hub to take over"
            )
            took = time.monotonic() - killed
            assert took < (LEASE_TTL_S + 1.5) * TIMEOUT_SCALE, took
            assert running.hub.rotator.rotations == 1
            assert await lease_holder(redis, prefix) == running.hub.rotator.token
            assert await closed_numbers(redis, prefix) == [0, 1, 2]
            assert await listed_changes(ours) == posted
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        if child.stderr is not None:
            child.stderr.close()
        await redis.aclose()
        sock.close()


# --- restarts ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_restarting_the_hub_changes_no_document(redis_url: str, prefix: str) -> None:
    clock = Clock()
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    posted: list[str] = []
    async with (
        shared_hub(redis_url, prefix, base, changelist_max_entries=5) as first,
        httpx.AsyncClient(base_url=first.url, timeout=30) as client,
    ):
        for number, size in enumerate((4, 4, 5)):
            reply, locs = await post(client, clock, size, f"r{number}")
            assert reply.status_code == 202, reply.text
            posted += locs

        async def two_closed() -> bool:
            return await archive_size(client) == 2

        await eventually(two_closed, what="2 closed lists")
        before = await documents(client)
    async with (
        shared_hub(redis_url, prefix, base, changelist_max_entries=5) as second,
        httpx.AsyncClient(base_url=second.url, timeout=30) as client,
    ):
        after = await documents(client)
        assert same_documents(before, after)
        assert await listed_changes(client) == posted


@pytest.mark.timeout(60)
async def test_a_crashed_redis_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """appendfsync always: every 202 the hub gave is in the AOF before the reply, so a hard
    kill of the server (no shutdown, no final fsync) loses none of them."""
    data = tmp_path / "r"
    prefix = "crash"
    clock = Clock()
    acked: list[tuple[dict[str, Any], list[str]]] = []
    failed: list[list[str]] = []
    server = EmbeddedRedis(data, appendfsync="always")
    url = await asyncio.to_thread(server.start)
    try:
        async with (
            shared_hub(url, prefix, changelist_max_entries=10) as running,
            httpx.AsyncClient(base_url=running.url, timeout=30) as client,
        ):
            base = running.url
            enough = asyncio.Event()

            async def poster() -> None:
                number = 0
                while len(failed) < 3:
                    try:
                        reply, locs = await post(client, clock, 3, f"k{number}")
                    except httpx.HTTPError:
                        failed.append([])
                        continue
                    number += 1
                    if reply.status_code == 202:
                        acked.append((reply.json(), locs))
                        if len(acked) >= 30:
                            enough.set()
                    else:
                        assert reply.status_code == 503, reply.text
                        assert reply.json()["error"] == "store-unavailable"
                        failed.append(locs)

            task = asyncio.create_task(poster())
            await asyncio.wait_for(enough.wait(), 30 * TIMEOUT_SCALE)
            await asyncio.to_thread(server.kill)  # while posts are in flight
            await asyncio.wait_for(task, 30 * TIMEOUT_SCALE)
            assert (await client.get("/readyz")).status_code == 503
    finally:
        server.kill()

    restarted = EmbeddedRedis(data, appendfsync="always")
    url = await asyncio.to_thread(restarted.start)
    try:
        async with (
            shared_hub(url, prefix, base) as running,
            httpx.AsyncClient(base_url=running.url, timeout=30) as client,
        ):
            assert (await client.get("/readyz")).status_code == 200
            listed = await listed_changes(client)
            expected = [loc for _, locs in acked for loc in locs]
            # Every acknowledged change, once, in acceptance order.
            present = [loc for loc in listed if loc in set(expected)]
            assert present == expected
            assert len(listed) == len(set(listed))
            # A request that was not acknowledged is all there or not there at all.
            for locs in failed:
                assert set(locs) <= set(listed) or set(locs).isdisjoint(listed), locs
            # The receipts' stream positions and epoch survived too.
            redis = Redis.from_url(url)
            try:
                meta: Any = await redis.hgetall(f"{prefix}:{{dataset1}}:meta")
                assert {r["epoch"] for r, _ in acked} == {meta[b"epoch"].decode()}
                stream = f"{prefix}:{{dataset1}}:changes"
                for receipt, locs in acked:
                    rows: Any = await redis.xrange(
                        stream, min=receipt["first"], max=receipt["last"]
                    )
                    assert [row[1][b"loc"].decode() for row in rows] == locs
            finally:
                await redis.aclose()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(restarted.stop)
