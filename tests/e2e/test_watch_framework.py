"""``rs-subscribe watch --framework``, the console script in a subprocess against a real hub:
a rotation prints as a framework line; a hub without the channel is a usage error."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.test_watch import Times, post, run_watch, watching
from tests.support.hubs import HubFactory


@pytest.mark.timeout(60)
async def test_watch_prints_a_rotation(hub_factory: HubFactory) -> None:
    async with (
        hub_factory(changelist_max_entries=2) as hub,
        httpx.AsyncClient(base_url=hub.url) as client,
    ):
        times = Times()
        async with watching(hub.url, "--topic", "dataset1", "--framework") as watch:
            await watch.subscribed()
            await post(
                client,
                [
                    ("http://example.com/a", "created", times.next()),
                    ("http://example.com/b", "created", times.next()),
                ],
            )
            lines = []
            # Two change lines and, in some order after the first, framework lines until
            # the rotation's shows up.
            while not any(
                c["capability"] == "changelist"
                for line in lines
                if line.get("type") == "framework"
                for c in line["changes"]
            ):
                lines += await watch.lines(1)
    # A change line may carry "type" too (the resource's media type): framework lines are
    # the ones whose type is "framework".
    changes = [line for line in lines if line.get("type") != "framework"]
    assert [c["loc"] for c in changes] == ["http://example.com/a", "http://example.com/b"]
    rotation = [
        c
        for line in lines
        if line.get("type") == "framework"
        for c in line["changes"]
        if c["capability"] == "changelist"
    ]
    topic = f"{hub.hub.settings.hub.base_url}/topics/dataset1"
    assert [(c["change"], c["loc"]) for c in rotation] == [
        ("updated", f"{topic}/changelists/0.xml"),
        ("created", f"{topic}/changelist.xml"),
    ]
    assert {c["index"] for c in rotation} == {f"{topic}/changelist-index.xml"}
    assert all("datetime" in c for c in rotation)


@pytest.mark.timeout(60)
async def test_watch_framework_needs_the_channel(hub_factory: HubFactory) -> None:
    async with hub_factory(framework={"enabled": False}) as hub:
        status, out, err = await run_watch(hub.url, "--topic", "dataset1", "--framework")
    assert status == 2
    assert out == ""
    assert "advertises no framework-notification channel" in err
