"""The hub on a real Redis Cluster: three valkey-server nodes in cluster mode on loopback.

Every topic's keys share one hash slot, so the Lua scripts run on whichever node owns it;
two topics land on different nodes. Ingest, documents and push must all work; push is read
with the subscriber's own client."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from rspush.hub.embedded import server_binary
from rspush.hub.server import bind, running_hub
from rspush.protocol import TopicRequest
from rspush.resourcesync import parse_document, validate
from rspush.subscriber.push import Change, push_changes
from tests.support.fragments import auth, change_fragment
from tests.support.hubs import make_settings
from tests.support.waiting import TIMEOUT_SCALE, wait_for

NODES = 3


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _wait_ready(predicate: Callable[[], object], what: str) -> None:
    """A node refusing connections while it starts is not ready yet."""
    wait_for(predicate, what, ignoring=(redis.RedisError,))


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = server_binary()
    cli = binary.with_name("valkey-cli")
    # Each node needs a client port and a cluster-bus port; by default the bus is port+10000,
    # which overflows for ephemeral ports above 55535, so both are chosen explicitly.
    chosen = _free_ports(2 * NODES)
    ports, bus_ports = chosen[:NODES], chosen[NODES:]
    processes = []
    for port, bus_port in zip(ports, bus_ports, strict=True):
        folder: Path = tmp_path_factory.mktemp(f"node{port}")
        processes.append(
            subprocess.Popen(
                [
                    str(binary),
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    str(bus_port),
                    "--cluster-config-file",
                    "nodes.conf",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(folder),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        for port in ports:
            _wait_ready(lambda p=port: redis.Redis(port=p).ping(), f"node {port} to answer")
        subprocess.run(
            [str(cli), "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports), "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=120 * TIMEOUT_SCALE,
        )
        _wait_ready(
            lambda: (
                b"cluster_state:ok" in redis.Redis(port=ports[0]).execute_command("CLUSTER", "INFO")
            ),
            "the cluster state to be ok",
        )
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=20)


@pytest.mark.timeout(240)
async def test_ingest_documents_and_push_on_a_cluster(cluster_url: str) -> None:
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = make_settings(cluster_url, "cl", base)
    async with running_hub(settings, sock=sock) as hub:
        assert hub.push_url is not None
        received: list[Change] = []
        subscribed = asyncio.Event()

        async def watch() -> None:
            async for item in push_changes(hub.push_url, [TopicRequest(topic="dataset2")]):
                if isinstance(item, Change):
                    received.append(item)
                    if len(received) == 2:
                        return
                elif item.get("type") == "subscribed":
                    subscribed.set()

        watcher = asyncio.create_task(watch())
        # A live subscription (no resume point) sees what is posted after it is registered.
        async with asyncio.timeout(20 * TIMEOUT_SCALE):
            await subscribed.wait()
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for topic, token in (
                ("dataset1", "token-of-source-a"),
                ("dataset2", "token-of-source-b"),
            ):
                body = change_fragment(
                    ("http://example.com/a", "created", "2026-01-01T10:00:00Z"),
                    ("http://example.com/b", "created", "2026-01-01T10:00:01Z"),
                )
                reply = await client.post(
                    f"/topics/{topic}/changes", content=body, headers=auth(token)
                )
                assert reply.status_code == 202, reply.text
            for topic in ("dataset1", "dataset2"):
                for path in ("changelist.xml", "resourcelist.xml"):
                    reply = await client.get(f"/topics/{topic}/{path}")
                    document = parse_document(reply.content)
                    assert validate(document) == []
                    assert len(document.entries) == 2
        async with asyncio.timeout(20):
            await watcher
        assert [c.loc for c in received] == ["http://example.com/a", "http://example.com/b"]

    # The two topics hash to different slots (so the cluster really spreads them), while each
    # topic's keys share one slot (what the Lua scripts need).
    owners = set()
    node = redis.RedisCluster.from_url(cluster_url.replace("redis+cluster://", "redis://"))
    try:
        for topic in ("dataset1", "dataset2"):
            slots = {node.keyslot(f"cl:{{{topic}}}:{suffix}") for suffix in ("changes", "meta")}
            assert len(slots) == 1
            owners |= slots
    finally:
        node.close()
    assert len(owners) == 2
