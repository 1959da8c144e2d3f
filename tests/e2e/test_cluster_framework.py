"""Framework notifications on a real Redis Cluster: the events of a rotation are written by
the rotation script (their stream shares the topic's slot), the configuration's at startup,
and the push process reads every topic's events with its pipelined round (one command
cannot name streams of several slots)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from rspush.hub.server import bind, running_hub
from rspush.protocol import ZERO, FrameworkFrame, TopicRequest
from rspush.subscriber.push import push_changes
from tests.e2e.test_cluster import cluster_url
from tests.support.fragments import auth, change_fragment
from tests.support.hubs import make_settings
from tests.support.waiting import TIMEOUT_SCALE

__all__ = ["cluster_url"]


@pytest.mark.timeout(240)
async def test_a_rotation_reaches_a_framework_subscriber_on_a_cluster(cluster_url: str) -> None:
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = make_settings(
        cluster_url, "clfw", base, framework={"push_interval_s": 0.05}, changelist_max_entries=2
    )
    async with running_hub(settings, sock=sock) as hub:
        assert hub.push_url is not None and hub.push is not None
        assert hub.hub.store.is_cluster
        # Startup: each topic's Capability List and the Source Description, per topic.
        for topic in ("dataset1", "dataset2"):
            recorded = await hub.hub.store.framework_events_after_each({topic: ZERO}, count=10)
            assert {e.change.capability for e in recorded[topic]} >= {"description"}
        frames: list[FrameworkFrame] = []
        subscribed = asyncio.Event()

        async def watch() -> None:
            stream = push_changes(hub.push_url, [TopicRequest(topic="dataset2")], framework=True)
            async for item in stream:
                if isinstance(item, FrameworkFrame):
                    frames.append(item)
                    if any(c.capability == "changelist" for c in item.changes):
                        return
                elif isinstance(item, dict) and item.get("type") == "subscribed":
                    subscribed.set()

        watcher = asyncio.create_task(watch())
        async with asyncio.timeout(20 * TIMEOUT_SCALE):
            await subscribed.wait()
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            body = change_fragment(
                ("http://example.com/a", "created", "2026-01-01T10:00:00Z"),
                ("http://example.com/b", "created", "2026-01-01T10:00:01Z"),
            )
            reply = await client.post(
                "/topics/dataset2/changes", content=body, headers=auth("token-of-source-b")
            )
            assert reply.status_code == 202, reply.text
        async with asyncio.timeout(20 * TIMEOUT_SCALE):
            await watcher
        rotation = [c for f in frames for c in f.changes if c.capability == "changelist"]
        assert [(c.change.value, c.loc) for c in rotation] == [
            ("updated", f"{base}/topics/dataset2/changelists/0.xml"),
            ("created", f"{base}/topics/dataset2/changelist.xml"),
        ]
        assert all(f.topic == "dataset2" for f in frames)
