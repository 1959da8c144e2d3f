"""Framework frames on the WebSocket push channel (protocol version 2): sent to clients that
ask, in both formats, XSD-valid notifications; never to a version 1 client (the previous
client behaviour) nor to a version 2 client that does not ask."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from rspush.hub.server import RunningHub
from rspush.protocol import FrameworkFrame, Subscribe, TopicRequest, decode_frame
from rspush.resourcesync import FrameworkChange, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from tests.support.fragments import Times
from tests.support.hubs import HubFactory
from tests.support.push import Client, batch, post, subscribed
from tests.support.waiting import eventually


def v2(fmt: str = "json", *, framework: bool = True) -> str:
    return Subscribe(
        type="subscribe",
        version=2,
        format=fmt,  # type: ignore[arg-type]
        framework=framework,
        topics=[TopicRequest(topic="dataset1")],
    ).encode()


def framework_frames(client: Client) -> list[dict[str, Any]]:
    return client.control("framework")


def rotations(client: Client) -> list[FrameworkChange]:
    """The Change List changes of every framework frame the client received, decoded."""
    found = []
    for frame in framework_frames(client):
        decoded = decode_frame(json.dumps(frame))
        assert isinstance(decoded, FrameworkFrame)
        found += [c for c in decoded.changes if c.capability == "changelist"]
    return found


@pytest.mark.parametrize("fmt", ["json", "xml"])
async def test_a_rotation_reaches_clients_that_asked_and_no_other(
    hub_factory: HubFactory, fmt: str
) -> None:
    async with hub_factory(changelist_max_entries=2) as running:
        assert running.push_url is not None
        hub: RunningHub = running
        async with (
            httpx.AsyncClient(base_url=hub.url) as http,
            subscribed(running.push_url, raw=v2(fmt)) as asking,
            subscribed(running.push_url, fmt=fmt) as version_1,
            subscribed(running.push_url, raw=v2(fmt, framework=False)) as not_asking,
        ):
            times = Times()
            await post(http, batch(times, "a", 2))
            await eventually(lambda: rotations(asking), what="the rotation's framework frame")
            # Frames go out in order per connection: a framework frame sent to the others
            # would come before this change's frame.
            await post(http, batch(times, "b", 1))
            for client in (asking, version_1, not_asking):
                await eventually(
                    lambda c=client: len(c.changes()) == 3,  # type: ignore[misc]
                    what="every change",
                )
            assert framework_frames(version_1) == []
            assert framework_frames(not_asking) == []
            assert not any(m["type"] == "framework" for m in version_1.messages)

            for frame in framework_frames(asking):
                assert frame["topic"] == "dataset1"
                notification = frame["notification"].encode()
                assert schema_errors(notification) == []
                assert validate(parse_document(notification)) == []
            base = hub.hub.settings.hub.base_url
            changes = rotations(asking)
            assert [(c.change.value, c.loc) for c in changes] == [
                ("updated", f"{base}/topics/dataset1/changelists/0.xml"),
                ("created", f"{base}/topics/dataset1/changelist.xml"),
            ]
            assert {c.index for c in changes} == {f"{base}/topics/dataset1/changelist-index.xml"}


async def test_a_version_1_subscribe_is_answered_as_before(hub_factory: HubFactory) -> None:
    """The previous client's exact message: subscribed, then only change frames."""
    async with hub_factory() as running:
        assert running.push_url is not None
        raw = json.dumps({"type": "subscribe", "version": 1, "topics": [{"topic": "dataset1"}]})
        async with subscribed(running.push_url, raw=raw) as client:
            assert [m["type"] for m in client.messages] == ["subscribed"]
            assert set(client.messages[0]) == {"type", "topic", "epoch", "position"}


async def test_framework_frames_need_a_hub_that_records_them(hub_factory: HubFactory) -> None:
    """With [framework] enabled = false the hub accepts the request and sends none."""
    async with hub_factory(framework={"enabled": False}, changelist_max_entries=1) as running:
        assert running.push_url is not None
        async with (
            httpx.AsyncClient(base_url=running.url) as http,
            subscribed(running.push_url, raw=v2()) as client,
        ):
            await post(http, batch(Times(), "a", 2))
            await eventually(lambda: len(client.changes()) == 2, what="the changes")
            await eventually(lambda: running.hub.rotator.rotations >= 1, what="a rotation")
            assert running.push is not None and running.push.framework is None
            assert framework_frames(client) == []
