"""rs-subscribe and framework notifications, end to end: against a hub that advertises the
channel the agent asks for framework frames and learns of rotations from them, reading no
Change List, index or archive while push is up; against a hub that does not, it subscribes
as a version 1 client and converges as before."""

from __future__ import annotations

from pathlib import Path

import httpx

from rspush.hub.server import RunningHub
from rspush.resourcesync import Change
from tests.e2e.test_agent import config_for
from tests.support.agents import converged, running_agent
from tests.support.hubs import HubFactory
from tests.support.origin import publish, running_origin
from tests.support.waiting import eventually

LIST_ROUTES = ("changelist", "closed-changelist", "changelist-index", "archive", "capabilitylist")


def list_reads(hub: RunningHub) -> dict[str, float]:
    """Requests the hub served per document route (its own metrics, this process)."""
    registry = hub.hub.metrics.registry
    return {
        route: registry.get_sample_value("rspush_request_seconds_count", {"route": route}) or 0.0
        for route in LIST_ROUTES
    }


async def test_the_agent_sees_rotations_in_framework_frames_and_polls_nothing(
    hub_factory: HubFactory, tmp_path: Path
) -> None:
    async with (
        hub_factory(changelist_max_entries=2) as hub,
        httpx.AsyncClient(base_url=hub.url) as client,
        running_origin() as origin,
    ):
        await publish(client, "dataset1", origin, [("/a.txt", "created", b"a")])
        dest = tmp_path / "mirror"
        async with running_agent(config_for(hub, origin, dest)) as run:
            await converged(origin, dest)
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            assert run.agent.endpoints is not None
            assert run.agent.endpoints.framework == f"{hub.url}/topics/dataset1/framework"
            before = list_reads(hub)
            await publish(
                client,
                "dataset1",
                origin,
                [("/b.txt", "created", b"b"), ("/c.txt", "created", b"c")],
            )
            await publish(client, "dataset1", origin, [("/a.txt", "updated", b"a2")])
            await converged(origin, dest)

            def rotation_seen() -> bool:
                return any(
                    c.capability == "changelist" and c.change == Change.CREATED
                    for c in run.agent.framework_changes
                )

            await eventually(rotation_seen, what="the rotation's framework frame")
            closed = [
                c
                for c in run.agent.framework_changes
                if c.capability == "changelist" and c.change == Change.UPDATED
            ]
            assert closed and closed[0].loc.startswith(f"{hub.url}/topics/dataset1/changelists/")
            assert closed[0].index == f"{hub.url}/topics/dataset1/changelist-index.xml"
            # The frame may overtake the rotator's own count (both follow the same script).
            await eventually(lambda: hub.hub.rotator.rotations >= 1, what="the rotation count")
            # Converged and told of the rotation, without one read of a list, index,
            # archive or Capability List.
            assert list_reads(hub) == before
            assert run.agent.channel == "push"


async def test_against_a_hub_without_the_channel_the_agent_is_a_version_1_client(
    hub_factory: HubFactory, tmp_path: Path
) -> None:
    async with (
        hub_factory(framework={"enabled": False}, changelist_max_entries=2) as hub,
        httpx.AsyncClient(base_url=hub.url) as client,
        running_origin() as origin,
    ):
        await publish(client, "dataset1", origin, [("/a.txt", "created", b"a")])
        dest = tmp_path / "mirror"
        async with running_agent(config_for(hub, origin, dest)) as run:
            await converged(origin, dest)
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            assert run.agent.endpoints is not None and run.agent.endpoints.framework is None
            await publish(
                client,
                "dataset1",
                origin,
                [("/b.txt", "created", b"b"), ("/c.txt", "created", b"c")],
            )
            await converged(origin, dest)
            await eventually(lambda: hub.hub.rotator.rotations >= 1, what="a rotation")
            assert list(run.agent.framework_changes) == []
            # The hub's push server saw only version 1 subscriptions: none asked for frames.
            assert hub.push is not None
            feed = hub.push.feeds["dataset1"]
            assert feed.subscriptions and not any(s.framework for s in feed.subscriptions)
