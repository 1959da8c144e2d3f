"""A Source whose Change List has no ``from`` (§12.1 requires one; resync-simulator's first
list lacks it when its oldest change is a deletion) cannot show that its lists reach back:
the agent rebaselines at most once per ``rebaseline_interval``, says what is wrong with the
list, and meanwhile follows the changes the list does hold."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.support.agents import converged, mirror_files, running_agent
from tests.support.static_source import (
    T0,
    T2,
    StaticSource,
    capability_list,
    changed,
    config_for,
    running_source,
    serve_resource_list,
    urlset,
)
from tests.support.waiting import TIMEOUT_SCALE, eventually


def no_from_list(source: StaticSource, versions: int) -> bytes:
    """A closed list without ``from``: one update of /b.txt per version, times increasing."""
    entries = "".join(
        changed(source, "/b.txt", "updated", f"2026-01-02T00:00:{n:02d}Z", b"bravo" * n)
        for n in range(1, versions + 1)
    )
    return urlset("changelist", entries, until=T2)


async def test_a_list_without_from_is_followed_without_rebaselining_at_every_poll(
    tmp_path: Path,
) -> None:
    async with running_source() as source:
        capability_list(
            source, {"resourcelist": "/resourcelist.xml", "changelist": "/changelist.xml"}
        )
        serve_resource_list(source, {"/a.txt": b"alpha", "/b.txt": b"bravo"}, at=T0, lastmod=T0)
        source.put_document("/changelist.xml", no_from_list(source, 1))
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)
            # The list changes at every poll, as a live Source's does.
            for versions in range(2, 8):
                source.put("/b.txt", b"bravo" * versions)
                source.put_document("/changelist.xml", no_from_list(source, versions))
                await eventually(
                    lambda v=versions: mirror_files(dest).get("/b.txt") == b"bravo" * v,  # type: ignore[misc]
                    f"version {versions} of /b.txt followed from the list",
                )
            assert run.agent.rebaselines == 0
            assert source.requests["/resourcelist.xml"] == 1
            assert not [e for e in run.events if e["event"] == "rebaseline"]
            assert not run.task.done()


async def test_rebaselines_are_bounded_by_the_interval_and_say_why(tmp_path: Path) -> None:
    interval = 0.5 * TIMEOUT_SCALE
    async with running_source() as source:
        capability_list(
            source, {"resourcelist": "/resourcelist.xml", "changelist": "/changelist.xml"}
        )
        serve_resource_list(source, {"/a.txt": b"alpha", "/b.txt": b"bravo"}, at=T0, lastmod=T0)
        source.put_document("/changelist.xml", no_from_list(source, 1))
        dest = tmp_path / "mirror"
        config = config_for(source, dest, rebaseline_interval=interval)
        started = time.monotonic()
        async with running_agent(config) as run:
            versions = 1
            while run.agent.rebaselines < 2:
                versions += 1
                source.put("/b.txt", b"bravo" * versions)
                source.put_document("/changelist.xml", no_from_list(source, versions))
                await asyncio.sleep(0.05)  # pace the Source's changes, not a wait on the agent
                assert time.monotonic() - started < 20 * TIMEOUT_SCALE, "no rebaseline"
            elapsed = time.monotonic() - started
            assert run.agent.rebaselines <= elapsed / interval + 1
            reasons = [e["reason"] for e in run.events if e["event"] == "rebaseline"]
            assert reasons and all("gives no 'from'" in r for r in reasons), reasons
