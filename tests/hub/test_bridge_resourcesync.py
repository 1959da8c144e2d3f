"""The ResourceSync bridge against a real pull-only Source: documents written by ``resync``
2.0.1, served by a static web server (ETag, 304) on loopback, Change Lists rotating between
polls (archive and index layouts), with and without entry times, ResourceSync 1.0 and 1.1."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from rspush.hub.bridges.base import BridgeError, BridgeStep
from rspush.hub.bridges.http import BridgeHttp
from rspush.hub.bridges.resourcesync import ResourceSyncBridge
from rspush.hub.settings import BridgeConfig
from rspush.resourcesync import Entry
from rspush.resourcesync.w3cdt import parse_w3c_datetime
from tests.support.etag_origin import running_source
from tests.support.resync_rotating import (
    CAPABILITY_LIST,
    CHANGE_LIST,
    OPEN_LIST,
    RESOURCE_LIST,
    SOURCE_DESCRIPTION,
    RotatingSource,
)
from tests.support.waiting import eventually

RESOURCES = {f"/r/{n}.txt": f"resource {n}".encode() for n in range(5)}


class Follower:
    """The bridge driven like the framework drives it: ``more`` → again at once; the
    checkpoint kept; every entry recorded."""

    def __init__(self, bridge: ResourceSyncBridge) -> None:
        self.bridge = bridge
        self.checkpoint: str | None = None
        self.baseline: list[Entry] = []
        self.changes: list[Entry] = []
        self.problems: list[str] = []
        self.regressions: list[str] = []

    async def poll(self, limit: int = 10_000) -> list[Entry]:
        """One poll: steps until the bridge has nothing more at once; the new changes."""
        before = len(self.changes)
        for _ in range(limit):
            step = await self.bridge.step(self.checkpoint)
            if step is None:
                break
            self._record(step)
            if not step.more:
                break
        return self.changes[before:]

    def _record(self, step: BridgeStep) -> None:
        (self.baseline if step.baseline else self.changes).extend(step.changes)
        self.problems += step.notes
        self.regressions += step.regressions
        self.checkpoint = step.checkpoint

    @property
    def log(self) -> list[tuple[str, str]]:
        return [(e.loc, (e.md.change if e.md else None) or "updated") for e in self.changes]


@asynccontextmanager
async def following(url: str, max_entries: int = 1000) -> AsyncIterator[Follower]:
    """A bridge of ``url`` built as the runner builds it (its config, its HTTP client)."""
    config = BridgeConfig(topic="t", kind="resourcesync", url=url, max_changes_per_step=max_entries)
    http = BridgeHttp(timeout_s=config.timeout_s, max_bytes=config.max_bytes)
    try:
        yield Follower(ResourceSyncBridge(config, http))
    finally:
        await http.aclose()


def time_of(text: str) -> object:
    return parse_w3c_datetime(text)


def content(n: int) -> bytes:
    return f"version {n}".encode()


async def test_baseline_republishes_the_resource_list_exactly() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        async with following(origin.url + "/") as follower:
            assert await follower.poll() == []
    assert [e.loc for e in follower.baseline] == sorted(origin.uri(p) for p in RESOURCES)
    assert follower.bridge.synced_through is not None
    for entry in follower.baseline:
        body = RESOURCES[entry.loc.removeprefix(origin.url)]
        assert entry.length == len(body)
        assert [str(h) for h in entry.hashes] == [f"md5:{hashlib.md5(body).hexdigest()}"]
        assert entry.md is not None and entry.md.type == "application/octet-stream"
    assert source.log == []


@pytest.mark.parametrize("index", [False, True], ids=["archive", "index"])
async def test_a_list_that_rotates_between_polls_is_read_to_its_end(index: bool) -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES, index=index)
        async with following(source.uri(CAPABILITY_LIST)) as follower:
            await follower.poll()
            source.change("/r/0.txt", "updated", content(1))
            source.change("/new.txt", "created", content(2))
            assert len(await follower.poll()) == 2
            # Between two polls: two more changes, the list closes, one in the new list.
            source.change("/r/1.txt", "updated", content(3))
            source.change("/r/2.txt", "deleted")
            source.rotate()
            source.change("/r/3.txt", "updated", content(4))
            assert len(await follower.poll()) == 3
            # Several rotations at once, one of them empty.
            for n in range(5):
                source.change(f"/more/{n}.txt", "created", content(n))
                source.rotate()
            source.rotate()
            source.change("/more/0.txt", "deleted")
            await follower.poll()
            assert await follower.poll() == []
    assert follower.log == source.log
    assert follower.problems == follower.regressions == []


async def test_entries_keep_the_remotes_hashes_lengths_types_and_times() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        async with following(source.uri("/.well-known/resourcesync")) as follower:
            await follower.poll()
            source.change("/a.txt", "created", b"alpha")
            source.change("/a.txt", "deleted")
            created, deleted = await follower.poll()
    assert created.length == 5 and created.md is not None
    assert [str(h) for h in created.hashes] == [f"md5:{hashlib.md5(b'alpha').hexdigest()}"]
    assert created.md.type == "application/octet-stream"
    assert created.md.datetime is not None and created.change_time == created.md.datetime
    assert deleted.md is not None and deleted.md.change == "deleted"
    assert deleted.change_time is not None and deleted.change_time > created.md.datetime


@pytest.mark.parametrize(
    ("spec_version", "timeless"),
    [("1.0", False), ("1.1", True)],
    ids=["resourcesync-1.0", "1.1-without-times"],
)
async def test_entries_without_times_keep_document_order(spec_version: str, timeless: bool) -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES, spec_version=spec_version, timeless=timeless)
        async with following(origin.url + "/") as follower:
            await follower.poll()
            source.change("/r/0.txt", "deleted")
            source.change("/x.txt", "created", b"x")
            source.change("/x.txt", "deleted")
            await follower.poll()
            source.change("/r/1.txt", "deleted")
            source.rotate()
            source.change("/r/2.txt", "deleted")
            await follower.poll()
            assert await follower.poll() == []
    assert follower.log == source.log
    times = [e.change_time for e in follower.changes]
    assert all(t is not None for t in times)
    assert times == sorted(times)  # type: ignore[type-var]
    assert follower.problems == []


async def test_a_checkpoint_resumes_exactly_in_a_new_bridge() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        for n in range(30):
            source.change(f"/c/{n}.txt", "created", content(n))
            if n % 7 == 6:
                source.rotate()
        seen: list[tuple[str, str]] = []
        checkpoint: str | None = None
        # A new bridge for every step, as after a restart: 4 entries at a time.
        for _ in range(100):
            async with following(source.uri(CAPABILITY_LIST), max_entries=5) as follower:
                follower.checkpoint = checkpoint
                step = await follower.bridge.step(checkpoint)
                # Re-reading from the same checkpoint gives the same entries.
                again = await follower.bridge.step(checkpoint)
            assert (step is None) == (again is None)
            if step is None:
                break
            assert again is not None and again.changes == step.changes
            if not step.baseline:
                seen += [(e.loc, e.md.change if e.md and e.md.change else "") for e in step.changes]
            checkpoint = step.checkpoint
    assert seen == source.log


async def test_an_unchanged_source_costs_conditional_gets_only() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        source.change("/a.txt", "created", b"a")
        async with following(source.uri(CAPABILITY_LIST)) as follower:
            await follower.poll()
            bridge = follower.bridge
            requests, unchanged = bridge.requests, bridge.not_modified
            assert await follower.poll() == []
            asked = bridge.requests - requests
            assert asked > 0 and bridge.not_modified - unchanged == asked
    assert origin.requests[RESOURCE_LIST] == 1


async def test_lost_history_is_reported_not_fatal() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        async with following(source.uri(CAPABILITY_LIST)) as follower:
            await follower.poll()
            source.change("/a.txt", "created", b"a")
            await follower.poll()
            source.change("/b.txt", "created", b"b")
            source.rotate()
            source.change("/c.txt", "created", b"c")
            source.rotate()
            source.forget_history()  # the closed lists, /b.txt among them, are gone
            source.change("/d.txt", "created", b"d")
            new = await follower.poll()
    assert [e.loc for e in new] == [origin.uri("/d.txt")]
    assert any("lost history" in p for p in follower.regressions)


async def test_a_remote_going_back_in_time_is_reported() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        async with following(source.uri(CAPABILITY_LIST)) as follower:
            await follower.poll()
            source.change("/a.txt", "created", b"a")
            await follower.poll()
            # The clock of the Source jumps back a day.
            origin.clock.now = origin.clock.now.replace(year=origin.clock.now.year - 1)
            source.change("/old.txt", "created", b"o")
            assert await follower.poll() == []
    assert len(follower.regressions) == 1 and "went back in time" in follower.regressions[0]


async def test_a_source_found_through_robots_txt_only() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        origin.delete(SOURCE_DESCRIPTION)
        origin.put_document(
            "/robots.txt", f"Sitemap: {source.uri(CHANGE_LIST)}\n".encode(), "text/plain"
        )
        source.change("/a.txt", "created", b"a")
        async with following(origin.url + "/") as follower:
            await follower.poll()
    assert follower.log == source.log


async def test_a_resource_list_larger_than_a_step_becomes_changes_at_its_at() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        source.change("/a.txt", "created", b"a")
        async with following(source.uri(CAPABILITY_LIST), max_entries=2) as follower:
            await follower.poll()
    assert follower.baseline == []
    paged, changes = follower.changes[: len(RESOURCES)], follower.changes[len(RESOURCES) :]
    assert [e.loc for e in paged] == sorted(origin.uri(p) for p in RESOURCES)
    assert {e.md.datetime for e in paged if e.md} == {time_of(source.at)}
    assert all(e.md is not None and e.md.change is None for e in paged)
    assert [(e.loc, e.md.change if e.md else None) for e in changes] == source.log
    assert any("max_changes_per_step" in p for p in follower.problems)


async def test_a_source_that_cannot_answer_is_retried_from_the_same_checkpoint() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        async with following(source.uri(CAPABILITY_LIST)) as follower:
            await follower.poll()
            source.change("/a.txt", "created", b"a")
            origin.unavailable[CAPABILITY_LIST] = 1  # one 503
            with pytest.raises(BridgeError, match="503"):
                await follower.bridge.step(follower.checkpoint)
            assert [e.loc for e in await follower.poll()] == [origin.uri("/a.txt")]


async def test_a_document_over_the_size_cap_is_refused() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES)
        for n in range(40):
            source.change(f"/big/{n}.txt", "created", b"x" * n)
        config = BridgeConfig(
            topic="t", kind="resourcesync", url=source.uri(CAPABILITY_LIST), max_bytes=4096
        )
        http = BridgeHttp(timeout_s=config.timeout_s, max_bytes=config.max_bytes)
        try:
            bridge = ResourceSyncBridge(config, http)
            checkpoint = (await bridge.step(None) or pytest.fail("no baseline")).checkpoint
            with pytest.raises(BridgeError, match="over 4096 bytes"):
                await bridge.step(checkpoint)
        finally:
            await http.aclose()


async def test_a_rotation_between_reading_the_index_and_the_list_is_read_again() -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES, index=True)
        async with following(source.uri(CAPABILITY_LIST)) as follower:
            await follower.poll()
            source.change("/a.txt", "created", b"a")
            # The next poll reads the index, then waits for the open list; meanwhile the
            # Source closes that list and starts a new one at the same URL.
            gate = origin.hold(OPEN_LIST)
            polling = asyncio.create_task(follower.poll())
            await eventually(lambda: OPEN_LIST in origin.waiting, "the held open list")
            source.change("/b.txt", "created", b"b")
            source.rotate()
            source.change("/a.txt", "deleted")
            gate.set()
            await polling
            await follower.poll()
    assert follower.log == source.log
    assert follower.regressions == []
