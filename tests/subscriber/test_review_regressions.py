"""Regressions from the code review: one test per bug the reviewer reproduced (/tmp/rv/r*.py),
each asserting what an operator would observe once it is fixed.

Most run the agent in this event loop against a static Source on the loopback origin — served
like nginx or S3 would (ETag, ``304 Not Modified``), with a fault when a test asks for one (a
``503``, a response held until the test releases it). The push channel, where one is needed,
is a scripted endpoint on a real websockets server on 127.0.0.1 (it sends what a broken or
trimming hub would). The command-line cases run the real ``rs-subscribe`` console script.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import sqlite3
import struct
import zipfile
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from rspush.resourcesync.w3cdt import parse_w3c_datetime
from rspush.subscriber.agent import Agent, AgentConfig
from rspush.subscriber.appliers import FilesystemApplier
from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.checkpoint import Checkpoint
from rspush.subscriber.errors import UnmappedURIError
from rspush.subscriber.mapping import UriMap
from rspush.subscriber.mirror import Mirror
from tests.conftest import TIMEOUT_SCALE
from tests.subscriber.agent_helpers import converged, mirror_files, running_agent, until
from tests.subscriber.origin import Origin, running_origin
from tests.subscriber.test_cli_agent import rs_subscribe

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)
T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-02T00:00:00Z"
T2 = "2026-01-03T00:00:00Z"
PUSH_REL = "urn:rspush:websocket"


# --- a static Source ----------------------------------------------------------------------------


class StaticSource(Origin):
    """The origin as a static web server: an ETag on every 200 and ``304 Not Modified`` for
    ``If-None-Match`` (what makes an agent's conditional polls come back empty), plus faults
    on demand."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.unavailable: Counter[str] = Counter()
        """Path -> how many of its next GETs answer 503 (a transient outage)."""
        self.waiting: set[str] = set()
        """Paths whose held GET has arrived and waits for its release."""
        self._held: dict[str, asyncio.Event] = {}

    def hold(self, path: str) -> asyncio.Event:
        """Hold the next GET of ``path`` (it is in :attr:`waiting` meanwhile) until the event
        returned is set."""
        gate = self._held[path] = asyncio.Event()
        return gate

    async def _get(self, request: Request) -> Response:
        path = request.scope["path"]
        if self.unavailable[path] > 0:
            self.unavailable[path] -= 1
            self.requests[path] += 1
            return Response(b"try again later\n", status_code=503, media_type="text/plain")
        gate = self._held.pop(path, None)
        if gate is not None:
            self.waiting.add(path)
            await gate.wait()
        reply = await super()._get(request)
        if reply.status_code != 200:
            return reply
        etag = f'"{hashlib.md5(reply.body).hexdigest()}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag})
        reply.headers["ETag"] = etag
        return reply


@asynccontextmanager
async def running_source() -> AsyncIterator[StaticSource]:
    """:func:`running_origin` serving a :class:`StaticSource`."""
    async with running_origin(StaticSource) as source:
        yield source


def md(content: bytes) -> str:
    return f'length="{len(content)}" hash="md5:{hashlib.md5(content).hexdigest()}"'


def _attributes(attributes: dict[str, str]) -> str:
    # from_="…" → from="…" (a Python keyword)
    return "".join(f' {name.rstrip("_")}="{value}"' for name, value in attributes.items())


def urlset(capability: str, entries: str = "", **attributes: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>'
        f'<rs:md capability="{capability}"{_attributes(attributes)}/>{entries}</urlset>'
    ).encode()


def sitemapindex(capability: str, entries: str, **attributes: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex {NS}>'
        f'<rs:md capability="{capability}"{_attributes(attributes)}/>{entries}</sitemapindex>'
    ).encode()


def listed(source: Origin, path: str, content: bytes, lastmod: str | None = None) -> str:
    """A Resource List entry."""
    when = "" if lastmod is None else f"<lastmod>{lastmod}</lastmod>"
    return f"<url><loc>{source.uri(path)}</loc>{when}<rs:md {md(content)}/></url>"


def changed(source: Origin, path: str, change: str, when: str, content: bytes | None) -> str:
    """A Change List entry."""
    about = "" if content is None else " " + md(content)
    return (
        f"<url><loc>{source.uri(path)}</loc>"
        f'<rs:md change="{change}" datetime="{when}"{about}/></url>'
    )


def capability_list(source: Origin, capabilities: dict[str, str], push: str | None = None) -> None:
    """Serve ``/capabilitylist.xml`` listing capability → path (and a push endpoint)."""
    entries = "".join(
        f'<url><loc>{source.uri(path)}</loc><rs:md capability="{capability}"/></url>'
        for capability, path in capabilities.items()
    )
    if push is not None:
        entries += (
            f'<url><loc>{source.uri("/t")}</loc><rs:md capability="change-notification"/>'
            f'<rs:ln rel="{PUSH_REL}" href="{push}"/></url>'
        )
    source.put_document("/capabilitylist.xml", urlset("capabilitylist", entries))


def serve_resource_list(
    source: Origin, resources: dict[str, bytes], *, at: str | None, lastmod: str | None
) -> None:
    """Serve the resources and ``/resourcelist.xml`` listing exactly them."""
    for path, content in resources.items():
        source.put(path, content)
    entries = "".join(listed(source, p, c, lastmod) for p, c in sorted(resources.items()))
    extra = {} if at is None else {"at": at}
    source.put_document("/resourcelist.xml", urlset("resourcelist", entries, **extra))


def config_for(source: Origin, dest: Path, **options: Any) -> AgentConfig:
    quick = {"poll_interval": 0.1, "backoff_initial": 0.1, "backoff_max": 0.5}
    return AgentConfig(
        source_url=source.uri("/capabilitylist.xml"),
        dest=dest,
        maps=[(source.url + "/", "")],
        **(quick | options),
    )


def time_of(text: str) -> datetime:
    moment = parse_w3c_datetime(text)
    assert moment is not None
    return moment


# --- a scripted push endpoint ---------------------------------------------------------------


class PushEndpoint:
    """Answers the n-th connection's subscribe request with ``script(n)``'s frames; after a
    ``history-insufficient`` it closes (4003, as the hub does), else it keeps the connection
    open until the client leaves."""

    def __init__(self, script: Callable[[int], list[str]]) -> None:
        self.script = script
        self.connections = 0
        self.url = ""

    async def handler(self, ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            await ws.recv()  # the subscribe request
            self.connections += 1
            frames = self.script(self.connections)
            for frame in frames:
                await ws.send(frame)
            if frames and '"history-insufficient"' in frames[-1]:
                await ws.close(4003, "history insufficient")
                return
            await ws.wait_closed()


@asynccontextmanager
async def running_push_endpoint(script: Callable[[int], list[str]]) -> AsyncIterator[PushEndpoint]:
    endpoint = PushEndpoint(script)
    async with serve(endpoint.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        endpoint.url = f"ws://127.0.0.1:{port}/"
        yield endpoint


def subscribed_frame() -> str:
    return json.dumps({"type": "subscribed", "topic": "t", "epoch": "e1", "position": "0-0"})


# --- 1. r9: a Change List Index is polled through its open list ------------------------------


async def test_index_poll_picks_up_changes_in_the_open_child_list(tmp_path: Path) -> None:
    """§12.2: the index stays the same (304) while its open list grows; the agent reads the
    open list anyway."""
    async with running_source() as source:
        capability_list(
            source,
            {"resourcelist": "/resourcelist.xml", "changelist": "/changelist-index.xml"},
        )
        serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
        source.put("/b.txt", b"bravo")
        source.put_document(
            "/changelist-index.xml",
            sitemapindex(
                "changelist",
                f"<sitemap><loc>{source.uri('/cl1.xml')}</loc>"
                f'<rs:md from="{T0}" until="{T1}"/></sitemap>'
                f'<sitemap><loc>{source.uri("/cl2.xml")}</loc><rs:md from="{T1}"/></sitemap>',
            ),
        )
        source.put_document(
            "/cl1.xml",
            urlset(
                "changelist",
                changed(source, "/b.txt", "created", "2026-01-01T12:00:00Z", b"bravo"),
                from_=T0,
                until=T1,
            ),
        )
        source.put_document("/cl2.xml", urlset("changelist", from_=T1))
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)  # a from the baseline, b from the closed list
            polls = source.requests["/changelist-index.xml"]
            await until(
                lambda: source.requests["/changelist-index.xml"] >= polls + 2,
                "two more polls of the unchanged index",
            )
            # The Source appends to its open list, as it does with every change.
            source.put("/c.txt", b"charlie")
            source.put_document(
                "/cl2.xml",
                urlset(
                    "changelist", changed(source, "/c.txt", "created", T2, b"charlie"), from_=T1
                ),
            )
            await converged(source, dest)
            assert source.uri("/c.txt") in {e["uri"] for e in run.applied("poll")}
            assert not run.task.done()


# --- 2. r10: an interrupted rebaseline, then a complete one, deletes what the Source dropped ----


class StopAfterFirstWrite(FilesystemApplier):
    """Writes files like the default applier, and stops the agent right after the first
    (SIGTERM part-way through a baseline)."""

    agent: Agent | None = None

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        await super().apply(change, relative, content)
        assert self.agent is not None
        self.agent.stop()


async def test_rerun_after_an_interrupted_rebaseline_deletes_what_the_source_dropped(
    tmp_path: Path,
) -> None:
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml"})
        serve_resource_list(source, {"/a.txt": b"alpha", "/b.txt": b"bravo"}, at=T0, lastmod=T0)
        dest = tmp_path / "mirror"
        config = config_for(source, dest)
        await Agent(config).run(baseline_only=True)
        assert mirror_files(dest) == {"/a.txt": b"alpha", "/b.txt": b"bravo"}

        # The Source dropped b and added c; a rebaseline is stopped after its first write.
        source.delete("/b.txt")
        serve_resource_list(source, {"/a.txt": b"alpha", "/c.txt": b"charlie"}, at=T1, lastmod=T1)
        applier = StopAfterFirstWrite(dest)
        interrupted = Agent(config, applier=applier)
        applier.agent = interrupted
        await interrupted.run(baseline_only=True)
        assert "/b.txt" in mirror_files(dest), "the rebaseline was not interrupted"

        await Agent(config).run(baseline_only=True)
        assert mirror_files(dest) == {"/a.txt": b"alpha", "/c.txt": b"charlie"}


# --- 3. r1: two updates with one datetime and different bytes: the later one wins ------------


async def test_same_time_update_with_other_bytes_is_applied(tmp_path: Path) -> None:
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml", "changelist": "/cl.xml"})
        serve_resource_list(source, {"/x.txt": b"v0"}, at=T0, lastmod=T0)
        source.put_document("/cl.xml", urlset("changelist", from_=T0))
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)
            source.put("/x.txt", b"v1")
            first = changed(source, "/x.txt", "updated", T1, b"v1")
            source.put_document("/cl.xml", urlset("changelist", first, from_=T0))
            await converged(source, dest)
            assert mirror_files(dest) == {"/x.txt": b"v1"}
            # Later the same second: another update with other bytes, same datetime.
            source.put("/x.txt", b"v2, longer")
            second = changed(source, "/x.txt", "updated", T1, b"v2, longer")
            source.put_document("/cl.xml", urlset("changelist", first + second, from_=T0))
            await converged(source, dest)
            assert mirror_files(dest) == {"/x.txt": b"v2, longer"}
            assert run.agent.mirror is not None
            assert run.agent.mirror.stats["failed"] == 0


# --- 4. r11 insufficient: a transient 503 on the archive during catch-up -----------------------


async def test_catch_up_survives_a_transient_archive_error(tmp_path: Path) -> None:
    async with running_source() as source:

        def script(connection: int) -> list[str]:
            if connection <= 2:  # trimmed: catch up from the archive (twice: see below)
                insufficient = {
                    "type": "history-insufficient",
                    "topic": "t",
                    "reason": "trimmed",
                    "epoch": "e1",
                    "oldest": "6-0",
                    "after": "5-0",
                    "archive": source.uri("/archive.xml"),
                }
                return [json.dumps(insufficient)]
            return [subscribed_frame()]

        async with running_push_endpoint(script) as hub:
            capability_list(
                source,
                {
                    "resourcelist": "/resourcelist.xml",
                    "changelist-archive": "/archive.xml",
                    "changelist": "/cl.xml",
                },
                push=hub.url,
            )
            serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
            source.put("/b.txt", b"bravo")
            source.put_document(
                "/archive.xml",
                urlset(
                    "changelist-archive",
                    f'<url><loc>{source.uri("/cl.xml")}</loc><rs:md from="{T0}"/></url>',
                ),
            )
            source.put_document(
                "/cl.xml",
                urlset("changelist", changed(source, "/b.txt", "created", T1, b"bravo"), from_=T0),
            )
            source.unavailable["/archive.xml"] = 1  # the first catch-up meets a 503
            dest = tmp_path / "mirror"
            async with running_agent(config_for(source, dest)) as run:
                await converged(source, dest)
                await until(lambda: hub.connections >= 3, "the catch-up to be retried")
                await until(lambda: run.agent.channel == "push", "push after the catch-up")
                assert source.requests["/archive.xml"] >= 2  # the 503, then a good read
                assert not run.task.done(), "the agent exited"


# --- 5. r11 badframe: a malformed push frame ---------------------------------------------------


@pytest.mark.parametrize("kind", ["unknown change type", "not JSON"])
async def test_malformed_push_frame_falls_back_to_polling(tmp_path: Path, kind: str) -> None:
    async with running_source() as source:

        def script(connection: int) -> list[str]:
            if kind == "not JSON":
                bad = "this is not JSON"
            else:
                bad = json.dumps(
                    {
                        "type": "changes",
                        "topic": "t",
                        "epoch": "e1",
                        "from": T0,
                        "until": T0,
                        "changes": [
                            {
                                "position": f"{connection}-0",
                                "loc": source.uri("/a.txt"),
                                "change": "moved",
                                "datetime": T0,
                            }
                        ],
                    }
                )
            return [subscribed_frame(), bad]

        async with running_push_endpoint(script) as hub:
            capability_list(
                source, {"resourcelist": "/resourcelist.xml", "changelist": "/cl.xml"}, hub.url
            )
            serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
            source.put_document("/cl.xml", urlset("changelist", from_=T0))
            dest = tmp_path / "mirror"
            async with running_agent(config_for(source, dest)) as run:
                await converged(source, dest)
                await until(lambda: hub.connections >= 2, "a reconnection after the bad frame")
                # The Source changes; only its Change List says so (the push channel is broken).
                source.put("/b.txt", b"bravo")
                source.put_document(
                    "/cl.xml",
                    urlset(
                        "changelist", changed(source, "/b.txt", "created", T1, b"bravo"), from_=T0
                    ),
                )
                await converged(source, dest)
                assert [e["uri"] for e in run.applied("poll")] == [source.uri("/b.txt")]
                assert not run.task.done(), "the agent crashed"


# --- 6. r7: a hostile Resource Dump package ------------------------------------------------


def damaged_package(damage: str) -> bytes:
    """A ZIP whose first central-directory record makes :class:`zipfile.ZipFile` raise
    something other than BadZipFile (what the reviewer's fuzzer found)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.xml", f'<urlset {NS}><rs:md capability="x"/></urlset>')
        archive.writestr("a.txt", b"alpha")
    package = bytearray(buffer.getvalue())
    record = package.index(b"PK\x01\x02")
    if damage == "NotImplementedError":
        # "version needed to extract" 20.0: zipfile refuses versions it does not know.
        package[record + 6 : record + 8] = struct.pack("<H", 200)
    else:
        # The UTF-8 flag on a name that is not UTF-8: UnicodeDecodeError.
        (flags,) = struct.unpack("<H", package[record + 8 : record + 10])
        package[record + 8 : record + 10] = struct.pack("<H", flags | 0x800)
        package[record + 46] = 0xFF
    damaged = bytes(package)
    error = {"NotImplementedError": NotImplementedError, "UnicodeDecodeError": UnicodeDecodeError}
    with pytest.raises(error[damage]):
        zipfile.ZipFile(io.BytesIO(damaged))
    return damaged


@pytest.mark.parametrize("damage", ["NotImplementedError", "UnicodeDecodeError"])
@pytest.mark.parametrize("with_resource_list", [False, True], ids=["dump-only", "and-list"])
async def test_hostile_dump_package(tmp_path: Path, damage: str, with_resource_list: bool) -> None:
    async with running_source() as source:
        package = damaged_package(damage)
        source.put_document("/p.zip", package, "application/zip")
        source.put_document(
            "/resourcedump.xml",
            urlset(
                "resourcedump",
                f"<url><loc>{source.uri('/p.zip')}</loc>"
                f'<rs:md {md(package)} type="application/zip"/></url>',
                at=T0,
            ),
        )
        capabilities = {"resourcedump": "/resourcedump.xml"}
        resources = {"/a.txt": b"alpha", "/b.txt": b"bravo"}
        if with_resource_list:
            capabilities["resourcelist"] = "/resourcelist.xml"
            serve_resource_list(source, resources, at=T0, lastmod=T0)
        capability_list(source, capabilities)
        dest = tmp_path / "mirror"
        code, _, err = await rs_subscribe(
            "baseline",
            source.uri("/capabilitylist.xml"),
            "--dest",
            str(dest),
            "--map",
            f"{source.url}/=",
        )
        assert "Traceback" not in err, err
        if with_resource_list:
            assert code == 0, err
            assert mirror_files(dest) == resources
        else:
            assert code == 1, err
            errors = [line for line in err.splitlines() if line.startswith("rs-subscribe:")]
            assert len(errors) == 1, err
            assert source.uri("/p.zip") in errors[0], err
            assert mirror_files(dest) == {}


# --- 7. r5: a Resource List without `at`, entries without lastmod ----------------------------


async def test_resource_list_without_any_time_is_mirrored(tmp_path: Path) -> None:
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml"})
        resources = {"/a.txt": b"alpha", "/d/b.txt": b"bravo", "/c.txt": b""}
        serve_resource_list(source, resources, at=None, lastmod=None)
        dest = tmp_path / "mirror"
        agent = Agent(config_for(source, dest))
        await agent.run(baseline_only=True)
        assert mirror_files(dest) == resources
        assert agent.mirror is not None
        assert agent.mirror.stats["applied"] == len(resources)


# --- 8. r12: two agents, two state files, one destination --------------------------------------


async def test_agents_sharing_a_destination_keep_each_others_downloads(tmp_path: Path) -> None:
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml"})
        serve_resource_list(source, {"/big.txt": b"x" * 10}, at=T0, lastmod=T0)
        dest = tmp_path / "mirror"
        one = config_for(source, dest, state=tmp_path / "one.sqlite", tries=1)
        two = config_for(source, dest, state=tmp_path / "two.sqlite", tries=1)
        release = source.hold("/big.txt")  # agent one's download stays in flight
        first = Agent(one)
        task = asyncio.create_task(first.run(baseline_only=True))
        try:
            await until(lambda: "/big.txt" in source.waiting, "agent one's download to start")
            assert list(dest.rglob("*.part")), "agent one has a download in flight"
            second = Agent(two)  # starts (clearing its temp files) while one downloads
            await second.run(baseline_only=True)
        finally:
            release.set()
        async with asyncio.timeout(20 * TIMEOUT_SCALE):
            await task
        assert first.mirror is not None and second.mirror is not None
        assert first.mirror.stats["failed"] == 0, dict(first.mirror.stats)
        assert first.mirror.stats["applied"] == second.mirror.stats["applied"] == 1
        assert mirror_files(dest) == {"/big.txt": b"x" * 10}
        assert one.temp_dir != two.temp_dir
        assert one.temp_dir.parent == two.temp_dir.parent == dest / ".rs-subscribe" / "tmp"


# --- 9. r4: stopping abandons the queue ---------------------------------------------------------


class HeldApplier:
    """Holds every apply until released, and remembers which ones started."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = asyncio.Event()

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        self.started.append(change.uri)
        await self.release.wait()


async def test_abandon_applies_only_the_changes_in_flight(tmp_path: Path) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    concurrency, backlog = 4, 500
    applier = HeldApplier()
    with Checkpoint(tmp_path / "state.sqlite", "src", "t") as checkpoint:
        mirror = Mirror(
            checkpoint,
            UriMap.build([("http://s/", "")]),
            applier,
            None,
            concurrency=concurrency,
        )
        uris = [f"http://s/r{i}" for i in range(backlog)]
        for i, uri in enumerate(uris):  # a catch-up backlog
            await mirror.submit(
                ResourceChange(
                    uri, ChangeType.CREATED, base + timedelta(seconds=i), Channel.ARCHIVE
                )
            )
        await until(lambda: len(applier.started) == concurrency, "the first changes to apply")
        mirror.abandon()  # Agent.stop()
        applier.release.set()
        async with asyncio.timeout(5 * TIMEOUT_SCALE):
            await mirror.drain()
        assert applier.started == uris[:concurrency], "queued changes were started"
        assert mirror.stats["applied"] == concurrency
        # The watermark stops before the first abandoned change: the next run gets it again.
        last_applied = base + timedelta(seconds=concurrency - 1)
        assert mirror.watermark.last_time == last_applied
        state = checkpoint.state()
        assert state is not None
        assert state.watermark.last_time == last_applied
        assert checkpoint.resource(uris[concurrency]) is None


# --- 10. r13: a symlinked directory leading out of the destination ----------------------------


async def test_symlinked_directory_is_refused_and_nothing_is_created_outside(
    tmp_path: Path,
) -> None:
    dest, outside = tmp_path / "mirror", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / "link").symlink_to(outside, target_is_directory=True)
    applier = FilesystemApplier(dest)

    def change(path: str) -> tuple[ResourceChange, Path]:
        content = tmp_path / f"{path.replace('/', '_')}.part"
        content.write_bytes(b"x")
        uri = f"http://s/{path}"
        return ResourceChange(uri, ChangeType.CREATED, datetime.now(UTC), Channel.PUSH), content

    inside, content = change("sub/deep/er/f")  # the same depth, no symlink: written
    await applier.apply(inside, PurePosixPath("sub/deep/er/f"), content)
    assert (dest / "sub/deep/er/f").read_bytes() == b"x"

    escaping, content = change("link/deep/er/f")
    with pytest.raises(UnmappedURIError, match="outside"):
        await applier.apply(escaping, PurePosixPath("link/deep/er/f"), content)
    assert list(outside.iterdir()) == []


# --- 11. r16: Change Lists starting after the Resource List's `at` ------------------------------


async def test_no_rebaseline_when_change_lists_start_after_the_resource_list(
    tmp_path: Path,
) -> None:
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml", "changelist": "/cl.xml"})
        serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
        source.put_document("/cl.xml", urlset("changelist", from_=T1))  # starts after T0
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)
            mirror = run.agent.mirror
            assert mirror is not None

            def rebaselined() -> bool:
                return any(e["event"] == "rebaseline" for e in run.events)

            await until(
                lambda: mirror.watermark.last_time == time_of(T1) or rebaselined(),
                "the agent to follow the lists from where they start",
            )
            assert not rebaselined(), [e for e in run.events if e["event"] == "rebaseline"]
            # And it does follow them.
            source.put("/b.txt", b"bravo")
            source.put_document(
                "/cl.xml",
                urlset("changelist", changed(source, "/b.txt", "created", T2, b"bravo"), from_=T1),
            )
            await converged(source, dest)
        assert [e for e in run.events if e["event"] == "rebaseline"] == []
        assert run.agent.rebaselines == 0
        assert source.requests["/resourcelist.xml"] == 1


# --- 12. CLI: unusable --state and --events in one line ----------------------------------------


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rs-subscribe: "), err
    return lines[0]


@pytest.mark.parametrize("kind", ["not SQLite", "empty file", "other SQLite database"])
async def test_status_of_a_file_that_is_no_state_file(tmp_path: Path, kind: str) -> None:
    state = tmp_path / "state.sqlite"
    if kind == "not SQLite":
        state.write_bytes(b"garbage\n")
    elif kind == "empty file":
        state.write_bytes(b"")
    else:
        with contextlib.closing(sqlite3.connect(state)) as db:
            db.execute("CREATE TABLE notes (text)")
            db.commit()
    code, out, err = await rs_subscribe("status", "--state", str(state))
    assert code == 2, (out, err)
    assert "Traceback" not in err
    assert str(state) in _one_line(err)


async def test_run_with_an_unwritable_events_file(tmp_path: Path) -> None:
    events = tmp_path / "no" / "such" / "dir" / "events.jsonl"
    code, out, err = await rs_subscribe(
        "run",
        "http://127.0.0.1:9/capabilitylist.xml",  # never contacted
        "--dest",
        str(tmp_path / "mirror"),
        "--events",
        str(events),
    )
    assert code == 2, (out, err)
    assert "Traceback" not in err
    assert "--events" in _one_line(err)


# --- 13. r2: empty path segments ------------------------------------------------------------


@pytest.mark.parametrize("uri", ["http://s/a//b", "http://s//a/b"])
def test_empty_path_segment_is_refused(uri: str) -> None:
    uri_map = UriMap.build([("http://s/", "")])
    assert uri_map.path_for("http://s/a/b") == PurePosixPath("a/b")
    with pytest.raises(UnmappedURIError, match="empty path segment"):
        uri_map.path_for(uri)
