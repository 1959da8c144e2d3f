"""Baselines from a static Source on the loopback origin: a Resource Dump (Z39.99 §11) of ZIP
packages with manifests — the agent takes the dump, verifies every member, and fetches from
the Source only what the dump got wrong — and a Resource List split under an index (§10.2).

Then what a baseline leaves: a rerun after an interrupted rebaseline deletes what the Source
dropped, a Resource List without any time is mirrored, and two agents sharing a destination
keep each other's downloads."""

from __future__ import annotations

import asyncio
import io
import zipfile
from pathlib import Path, PurePosixPath

from rspush.subscriber.agent import Agent, AgentConfig
from rspush.subscriber.appliers import FilesystemApplier
from rspush.subscriber.changes import ChangeType, ResourceChange
from rspush.subscriber.checkpoint import list_topics
from tests.support.agents import mirror_files
from tests.support.origin import Origin, running_origin
from tests.support.static_source import (
    NS,
    T0,
    T1,
    capability_list,
    config_for,
    md,
    running_source,
    serve_resource_list,
    time_of,
)
from tests.support.waiting import TIMEOUT_SCALE, eventually

AT = "2026-11-01T10:00:00Z"


def package(origin: Origin, members: dict[str, bytes], damaged: str | None = None) -> bytes:
    """A ZIP with a manifest; the member ``damaged`` holds other bytes than it announces."""
    urls = []
    for path, content in members.items():
        urls.append(
            f"<url><loc>{origin.uri(path)}</loc><lastmod>{AT}</lastmod>"
            f'<rs:md {md(content)} path="{path}"/></url>'
        )
    manifest = (
        f'<urlset {NS}><rs:md capability="resourcedump-manifest" at="{AT}"/>'
        + "".join(urls)
        + "</urlset>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.xml", manifest)
        for path, content in members.items():
            archive.writestr(path.lstrip("/"), b"damaged!" if path == damaged else content)
    return buffer.getvalue()


def serve_source(origin: Origin, resources: dict[str, bytes], damaged: str | None) -> None:
    for path, content in resources.items():
        origin.put(path, content)
    paths = sorted(resources)
    halves = [paths[: len(paths) // 2], paths[len(paths) // 2 :]]
    dump_urls = []
    for number, half in enumerate(halves):
        zipped = package(origin, {p: resources[p] for p in half}, damaged)
        origin.put_document(f"/dump/part{number}.zip", zipped, "application/zip")
        dump_urls.append(
            f"<url><loc>{origin.uri(f'/dump/part{number}.zip')}</loc>"
            f'<rs:md {md(zipped)} type="application/zip"/></url>'
        )
    origin.put_document(
        "/resourcedump.xml",
        (
            f'<urlset {NS}><rs:md capability="resourcedump" at="{AT}"/>'
            f'<rs:ln rel="up" href="{origin.uri("/capabilitylist.xml")}"/>'
            + "".join(dump_urls)
            + "</urlset>"
        ).encode(),
    )
    listed = "".join(
        f"<url><loc>{origin.uri(p)}</loc><lastmod>{AT}</lastmod><rs:md {md(c)}/></url>"
        for p, c in sorted(resources.items())
    )
    origin.put_document(
        "/resourcelist.xml",
        (
            f'<urlset {NS}><rs:md capability="resourcelist" at="{AT}"/>'
            f'<rs:ln rel="up" href="{origin.uri("/capabilitylist.xml")}"/>{listed}</urlset>'
        ).encode(),
    )
    origin.put_document(
        "/capabilitylist.xml",
        (
            f'<urlset {NS}><rs:md capability="capabilitylist"/>'
            f"<url><loc>{origin.uri('/resourcelist.xml')}</loc>"
            '<rs:md capability="resourcelist"/></url>'
            f"<url><loc>{origin.uri('/resourcedump.xml')}</loc>"
            '<rs:md capability="resourcedump"/></url></urlset>'
        ).encode(),
    )


RESOURCES = {
    "/a.txt": b"alpha\n",
    "/b/c.txt": b"charlie\n" * 100,
    "/d.bin": bytes(range(256)) * 4,
    "/e.txt": b"echo\n",
}


async def baseline(origin: Origin, dest: Path, **options: object) -> Agent:
    config = AgentConfig(
        source_url=origin.uri("/capabilitylist.xml"),
        dest=dest,
        maps=[(origin.url + "/", "")],
        **options,  # type: ignore[arg-type]
    )
    agent = Agent(config)
    await agent.run(baseline_only=True)
    return agent


async def test_baseline_from_a_resource_dump(tmp_path: Path) -> None:
    async with running_origin() as origin:
        serve_source(origin, RESOURCES, damaged=None)
        agent = await baseline(origin, tmp_path / "mirror")
        assert mirror_files(tmp_path / "mirror") == RESOURCES
        assert all(origin.requests[p] == 0 for p in RESOURCES), "resources came from the dump"
        assert origin.requests["/dump/part0.zip"] == origin.requests["/dump/part1.zip"] == 1
        assert agent.mirror is not None and agent.mirror.stats["applied"] == len(RESOURCES)


async def test_a_dump_member_that_fails_verification_is_fetched_from_the_source(
    tmp_path: Path,
) -> None:
    async with running_origin() as origin:
        serve_source(origin, RESOURCES, damaged="/e.txt")
        await baseline(origin, tmp_path / "mirror")
        # The damaged member is never written; the Source's own copy (verified against the
        # same manifest entry) is.
        assert mirror_files(tmp_path / "mirror") == RESOURCES
        assert origin.requests["/e.txt"] == 1
        assert all(origin.requests[p] == 0 for p in RESOURCES if p != "/e.txt")


async def test_no_dump_takes_the_resource_list(tmp_path: Path) -> None:
    async with running_origin() as origin:
        serve_source(origin, RESOURCES, damaged=None)
        await baseline(origin, tmp_path / "mirror", use_dump=False)
        assert mirror_files(tmp_path / "mirror") == RESOURCES
        assert origin.requests["/dump/part0.zip"] == 0
        assert all(origin.requests[p] == 1 for p in RESOURCES)


async def test_baseline_from_a_resource_list_index(tmp_path: Path) -> None:
    """Parts with different ``at``: incremental sync must start at the earliest."""
    async with running_origin() as origin:
        for path, content in RESOURCES.items():
            origin.put(path, content)
        paths = sorted(RESOURCES)
        ats = ["2026-11-01T10:00:05Z", "2026-11-01T10:00:01Z"]
        parts = []
        for number, (half, at) in enumerate(zip([paths[:2], paths[2:]], ats, strict=True)):
            listed = "".join(
                f"<url><loc>{origin.uri(p)}</loc><lastmod>{AT}</lastmod>"
                f"<rs:md {md(RESOURCES[p])}/></url>"
                for p in half
            )
            origin.put_document(
                f"/resourcelist-{number}.xml",
                (
                    f'<urlset {NS}><rs:md capability="resourcelist" at="{at}"/>'
                    f'<rs:ln rel="index" href="{origin.uri("/resourcelist-index.xml")}"/>'
                    f"{listed}</urlset>"
                ).encode(),
            )
            parts.append(
                f"<sitemap><loc>{origin.uri(f'/resourcelist-{number}.xml')}</loc></sitemap>"
            )
        origin.put_document(
            "/resourcelist-index.xml",
            (
                f'<sitemapindex {NS}><rs:md capability="resourcelist" at="{ats[0]}"/>'
                + "".join(parts)
                + "</sitemapindex>"
            ).encode(),
        )
        origin.put_document(
            "/capabilitylist.xml",
            (
                f'<urlset {NS}><rs:md capability="capabilitylist"/>'
                f"<url><loc>{origin.uri('/resourcelist-index.xml')}</loc>"
                '<rs:md capability="resourcelist"/></url></urlset>'
            ).encode(),
        )
        agent = await baseline(origin, tmp_path / "mirror")
        assert mirror_files(tmp_path / "mirror") == RESOURCES
        [(state, counts)] = list_topics(agent.config.state_path)
        assert counts["resources"] == len(RESOURCES)
        assert state.baseline_at is not None
        assert state.baseline_at.isoformat() == "2026-11-01T10:00:01+00:00"


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
    """A rebaseline stopped after its first write, then run again to the end, deletes what
    the Source dropped meanwhile."""
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


async def test_resource_list_without_any_time_is_mirrored(tmp_path: Path) -> None:
    """A Resource List without ``at`` and entries without ``lastmod`` are mirrored in full."""
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


async def test_agents_sharing_a_destination_keep_each_others_downloads(tmp_path: Path) -> None:
    """Two agents (two state files) on one destination: the second one's start does not
    remove the first one's download in flight."""
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
            await eventually(lambda: "/big.txt" in source.waiting, "agent one's download to start")
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


class StopAfterFirstDeletion(FilesystemApplier):
    """Applies like the default applier, and stops the agent right after the first deletion
    (a stop during a rebaseline's deletion pass)."""

    agent: Agent | None = None

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        await super().apply(change, relative, content)
        if change.change == ChangeType.DELETED:
            assert self.agent is not None
            self.agent.stop()


async def test_a_rebaseline_stopped_while_deleting_is_not_recorded_as_done(
    tmp_path: Path,
) -> None:
    """Stopping drops the queued deletions; the baseline must then stay incomplete (else the
    next run would follow the Change Lists from its `at`, and the files the Source dropped
    would stay in the mirror), and the next run finishes it."""
    many = {f"/r{n:03d}.txt": b"r" for n in range(200)}
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml"})
        serve_resource_list(source, {"/a.txt": b"alpha", **many}, at=T0, lastmod=T0)
        dest = tmp_path / "mirror"
        config = config_for(source, dest)
        await Agent(config).run(baseline_only=True)
        assert len(mirror_files(dest)) == 201

        serve_resource_list(source, {"/a.txt": b"alpha"}, at=T1, lastmod=T1)
        applier = StopAfterFirstDeletion(dest)
        interrupted = Agent(config, applier=applier)
        applier.agent = interrupted
        await interrupted.run(baseline_only=True)
        assert len(mirror_files(dest)) > 1, "the deletions were not interrupted"
        [(state, _)] = list_topics(config.state_path)
        assert state.baseline_at != time_of(T1)

        await Agent(config).run(baseline_only=True)
        assert mirror_files(dest) == {"/a.txt": b"alpha"}
