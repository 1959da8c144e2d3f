"""Interop with the reference client: ``resync-sync`` (resync 2.0.1, a test dependency) mirrors
a Source from OUR HUB's pull documents, as any plain ResourceSync Destination would.

The Source's resources live on a loopback :class:`Origin`; :func:`publish` changes them and
posts the change to the hub; ``resync-sync`` runs as a subprocess (the hub keeps serving in
this test's event loop) with the origin's URL mapped onto a temporary directory.

What resync 2.0.1 needs to follow the hub:

- ``--capabilitylist <hub>/topics/dataset1/capabilitylist.xml`` for the baseline: it reads
  the Resource List named there. Without it, resync looks for documents on the origin.
- ``--changelist-uri <hub>/topics/dataset1/changelist.xml`` for an incremental sync: resync
  never reads a Capability List in incremental mode, it appends ``changelist.xml`` to the
  mapped URI (the origin) unless told otherwise.
- ``--delete`` for deletions to reach the mirror.
- its own working directory: it keeps its state in ``./.resync-client-status.cfg``.

resync exits 0 after a fatal error, so every run also checks its output for ``FatalError``.
Its ``--checksum``/``--hash`` options cannot be used (2.0.1 crashes with them, and would not
check anything: ``prune_hashes`` drops exactly the hashes the Source gives), so hashes are
checked here with resync's own parser and hasher, in process. It cannot read a Change List
Index (its ChangeList rejects index entries, which have no ``change``) and ``--dryrun`` still
records the incremental timestamp.
"""

from __future__ import annotations

import asyncio
import io
import re
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from resync import ChangeList, ResourceList
from resync.hashes import Hashes

from rspush.hub.server import RunningHub
from rspush.resourcesync import MAX_ENTRIES, parse_document
from rspush.subscriber.agent import AgentConfig
from tests.support.agents import converged, mirror_files, running_agent
from tests.support.hubs import HubFactory
from tests.support.origin import Origin, publish, running_origin
from tests.support.resync_source import (
    CAPABILITY_LIST,
    CHANGE_LIST,
    RESOURCE_LIST,
    SOURCE_DESCRIPTION,
    ResyncSource,
)
from tests.support.waiting import TIMEOUT_SCALE, eventually

RESYNC_SYNC = Path(sys.executable).parent / "resync-sync"
RUN_TIMEOUT_S = 60
TOPIC = "dataset1"


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    async with running_origin() as running:
        yield running


class Resync:
    """``resync-sync`` mirroring ``origin`` into ``tmp/mirror``, its state in ``tmp/state``
    (outside the mirror, so the mirror holds resources only)."""

    def __init__(self, origin: Origin, tmp: Path) -> None:
        self.origin = origin
        self.mirror = tmp / "mirror"
        self.state = tmp / "state"
        self.mirror.mkdir()
        self.state.mkdir()

    async def run(self, *args: str) -> str:
        """Run ``resync-sync ARGS <origin>=<mirror>``; return its output (stdout + stderr).
        Fails on a non-zero exit or a ``FatalError`` (which resync reports with exit 0)."""
        process = await asyncio.create_subprocess_exec(
            str(RESYNC_SYNC),
            *args,
            f"{self.origin.url}={self.mirror}",
            cwd=self.state,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(RUN_TIMEOUT_S * TIMEOUT_SCALE):
                out, _ = await process.communicate()
        finally:
            if process.returncode is None:
                process.kill()
                await process.communicate()
        output = out.decode()
        assert process.returncode == 0, output
        assert "FatalError" not in output, output
        assert "Traceback" not in output, output
        return output

    def mirrored(self) -> dict[str, bytes]:
        """The mirror's files by origin path (``/a/b.txt``)."""
        return {
            "/" + file.relative_to(self.mirror).as_posix(): file.read_bytes()
            for file in self.mirror.rglob("*")
            if file.is_file()
        }


@pytest.fixture
def resync(origin: Origin, tmp_path: Path) -> Resync:
    return Resync(origin, tmp_path)


def topic_url(hub: RunningHub, document: str) -> str:
    return f"{hub.url}/topics/{TOPIC}/{document}"


def statuses(output: str) -> list[str]:
    """resync's ``Status: ...`` lines: for an incremental run the first is the plan (its last
    always says NO CHANGES: 2.0.1 logs the result without ``in_sync``)."""
    return re.findall(r"^Status:\s+([A-Z ]+?) \(", output, re.MULTILINE)


# -- the fixture: a Source resync itself writes, resync itself can mirror ---------------------


@pytest.mark.timeout(120)
async def test_resync_mirrors_the_resync_written_source(origin: Origin, resync: Resync) -> None:
    """Proves ``resync_source`` builds a Source resync accepts: discovery from
    /.well-known/resourcesync, a baseline, an incremental sync from its Change List, and an
    audit that finds the mirror in sync."""
    source = ResyncSource(
        origin, {"/a.txt": b"alpha\n", "/b.txt": b"bravo\n", "/deep/c.bin": bytes(range(256))}
    )
    output = await resync.run("--baseline")
    assert statuses(output)[-1] == "SYNCED", output
    assert resync.mirrored() == origin.resources
    assert len(origin.resources) == 3
    # Discovered from the well-known URI, as the spec's discovery describes (Z39.99 §8).
    assert origin.requests[SOURCE_DESCRIPTION] == 1
    assert origin.requests[CAPABILITY_LIST] == 1
    assert origin.requests[RESOURCE_LIST] == 1

    source.add_change_list(
        [
            ("/a.txt", "updated", b"alpha, second version\n"),
            ("/b.txt", "deleted", None),
            ("/new.txt", "created", b"new\n"),
        ]
    )
    output = await resync.run("--incremental", "--delete")
    assert statuses(output)[0] == "CHANGES APPLIED", output
    assert resync.mirrored() == origin.resources
    assert origin.resources.keys() == {"/a.txt", "/deep/c.bin", "/new.txt"}
    assert origin.requests[CHANGE_LIST] == 1
    assert origin.requests["/deep/c.bin"] == 1, "an unchanged resource was fetched again"

    output = await resync.run("--audit")
    assert statuses(output) == ["IN SYNC"], output


# -- resync-sync following our hub --------------------------------------------------------------


async def baseline_and_changes(
    hub: RunningHub, client: httpx.AsyncClient, origin: Origin, resync: Resync
) -> dict[str, int]:
    """Publish five resources, mirror them with a baseline from the hub, publish an update,
    a deletion, a creation and another update; return the GET counts after the baseline."""
    await publish(
        client,
        TOPIC,
        origin,
        [
            ("/a.txt", "created", b"alpha\n"),
            ("/b.txt", "created", b"bravo\n"),
            ("/c.txt", "created", b"charlie\n"),
            ("/deep/d.bin", "created", bytes(range(256))),
        ],
    )
    await publish(client, TOPIC, origin, [("/e.txt", "created", b"echo\n")])

    output = await resync.run(
        "--baseline", "--capabilitylist", topic_url(hub, "capabilitylist.xml")
    )
    assert statuses(output)[-1] == "SYNCED", output
    assert len(resync.mirrored()) == 5
    assert resync.mirrored() == origin.resources
    assert set(origin.requests) == set(origin.resources), "resync read a document on the origin"
    before = dict(origin.requests)

    await publish(
        client,
        TOPIC,
        origin,
        [
            ("/a.txt", "updated", b"alpha, second version\n"),
            ("/b.txt", "deleted", None),
            ("/f.txt", "created", b"foxtrot\n"),
        ],
    )
    await publish(client, TOPIC, origin, [("/c.txt", "updated", b"charlie, again\n")])
    return before


@pytest.mark.timeout(120)
async def test_resync_mirrors_the_hub_baseline_then_incremental(
    hub: RunningHub, client: httpx.AsyncClient, origin: Origin, resync: Resync
) -> None:
    before = await baseline_and_changes(hub, client, origin, resync)

    output = await resync.run(
        "--incremental", "--delete", "--changelist-uri", topic_url(hub, "changelist.xml")
    )
    assert statuses(output)[0] == "CHANGES APPLIED", output
    assert resync.mirrored() == origin.resources
    assert resync.mirrored().keys() == {"/a.txt", "/c.txt", "/deep/d.bin", "/e.txt", "/f.txt"}
    fetched = {path for path, count in origin.requests.items() if count > before.get(path, 0)}
    # What changed, and nothing older than the baseline. /e.txt, the last change before it,
    # is at resync's stored timestamp, and resync applies changes at or after that time.
    assert fetched - {"/e.txt"} == {"/a.txt", "/c.txt", "/f.txt"}
    assert origin.requests["/deep/d.bin"] == 1


@pytest.mark.timeout(120)
async def test_resync_audit_finds_a_hub_baseline_in_sync(
    hub: RunningHub, client: httpx.AsyncClient, origin: Origin, resync: Resync
) -> None:
    """The hub's Resource List gives every resource a lastmod; resync stamps the mirror's
    files with it, so an audit right after the baseline compares equal (time and length)."""
    await publish(
        client, TOPIC, origin, [("/a.txt", "created", b"alpha\n"), ("/b", "created", b"b")]
    )
    await publish(client, TOPIC, origin, [("/a.txt", "updated", b"alpha 2\n")])
    await resync.run("--baseline", "--capabilitylist", topic_url(hub, "capabilitylist.xml"))
    output = await resync.run("--audit", "--capabilitylist", topic_url(hub, "capabilitylist.xml"))
    assert statuses(output) == ["IN SYNC"], output
    assert "same=2," in output

    origin.put("/b", b"B")  # changed on the origin, not yet told to the hub: still in sync
    await publish(client, TOPIC, origin, [("/c", "created", b"c")])
    output = await resync.run("--audit", "--capabilitylist", topic_url(hub, "capabilitylist.xml"))
    assert statuses(output) == ["NOT IN SYNC"], output
    assert "to create=1," in output


@pytest.mark.timeout(120)
async def test_resync_audit_finds_a_hub_incremental_in_sync(
    hub: RunningHub, client: httpx.AsyncClient, origin: Origin, resync: Resync
) -> None:
    """The same audit passes against the resync-written Source (see the first test)."""
    await baseline_and_changes(hub, client, origin, resync)
    await resync.run(
        "--incremental", "--delete", "--changelist-uri", topic_url(hub, "changelist.xml")
    )
    assert resync.mirrored() == origin.resources
    output = await resync.run("--audit", "--capabilitylist", topic_url(hub, "capabilitylist.xml"))
    assert statuses(output) == ["IN SYNC"], output


@pytest.mark.timeout(120)
async def test_resync_reads_the_hubs_hashes_lengths_and_times(
    hub: RunningHub, client: httpx.AsyncClient, origin: Origin, resync: Resync
) -> None:
    """resync's own parser and hasher (in process) agree with the hub's hex ``md5:`` hashes
    and lengths (Z39.99 §7) for what it mirrored, and read every change time (§12.1)."""
    await baseline_and_changes(hub, client, origin, resync)
    await resync.run(
        "--incremental", "--delete", "--changelist-uri", topic_url(hub, "changelist.xml")
    )

    reply = await client.get(f"/topics/{TOPIC}/resourcelist.xml")
    resources = ResourceList()
    resources.parse(fh=io.BytesIO(reply.content))
    assert len(resources) == len(origin.resources) == 5
    for resource in resources:
        path = resource.uri.removeprefix(origin.url)
        file = resync.mirror / path.lstrip("/")
        assert resource.md5 == Hashes(["md5"], str(file)).md5, path
        assert resource.length == file.stat().st_size, path
        assert resource.timestamp is not None, path

    reply = await client.get(f"/topics/{TOPIC}/changelist.xml")
    changes = ChangeList()
    changes.parse(fh=io.BytesIO(reply.content))
    assert [c.change for c in changes] == ["created"] * 5 + [
        "updated",
        "deleted",
        "created",
        "updated",
    ]
    times = [c.ts_datetime for c in changes]
    assert None not in times
    assert times == sorted(times) and len(set(times)) == len(times)
    assert [c.md5 is None for c in changes] == [c.change == "deleted" for c in changes]


@pytest.mark.timeout(120)
async def test_resync_catches_up_across_a_rotation_list_by_list(
    hub_factory: HubFactory, origin: Origin, resync: Resync
) -> None:
    """After a rotation the changes since resync's baseline span a closed Change List and the
    open one. resync reads one Change List per run and cannot read a Change List Index (its
    ChangeList rejects the index's entries: no ``change``), so a resync user follows the
    lists the hub's index names (§12.2), one incremental run each, in order: the closed
    list's ``until`` is the open list's ``from``, so nothing falls between them."""
    async with (
        hub_factory(changelist_max_entries=3) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
    ):
        await publish(http, TOPIC, origin, [("/a.txt", "created", b"alpha\n")])
        await resync.run("--baseline", "--capabilitylist", topic_url(running, "capabilitylist.xml"))
        assert resync.mirrored() == origin.resources

        await publish(
            http,
            TOPIC,
            origin,
            [("/b.txt", "created", b"bravo\n"), ("/a.txt", "updated", b"alpha 2\n")],
        )

        async def rotated() -> bool:
            return running.hub.rotator.rotations >= 1

        await eventually(rotated, what="the first Change List to close at 3 entries")
        await publish(http, TOPIC, origin, [("/c.txt", "created", b"charlie\n")])

        reply = await http.get(f"/topics/{TOPIC}/changelist-index.xml")
        assert reply.status_code == 200
        lists = [entry.loc for entry in parse_document(reply.content).entries]
        assert lists == [
            topic_url(running, "changelists/0.xml"),
            topic_url(running, "changelist.xml"),
        ]

        for change_list in lists:
            output = await resync.run("--incremental", "--changelist-uri", change_list)
            assert statuses(output)[0] == "CHANGES APPLIED", output
        assert resync.mirrored() == origin.resources
        assert resync.mirrored().keys() == {"/a.txt", "/b.txt", "/c.txt"}


@pytest.mark.timeout(300)
async def test_resync_reads_the_hubs_resource_list_index(
    hub: RunningHub, client: httpx.AsyncClient, origin: Origin, resync: Resync
) -> None:
    """Past 50,000 resources the hub serves a Resource List Index (§10.2, a
    ``<sitemapindex>``) over two parts; resync reads the index and both parts."""
    count = MAX_ENTRIES + 1
    batch = 10_000  # the hub's default max_entries_per_request
    for start in range(0, count, batch):
        await publish(
            client,
            TOPIC,
            origin,
            [(f"/r/{i}", "created", b"%d" % i) for i in range(start, min(start + batch, count))],
        )
    reply = await client.get(f"/topics/{TOPIC}/resourcelist.xml")
    assert reply.content.count(b"<sitemap>") == 2, reply.text[:2000]

    output = await resync.run("--audit", "--capabilitylist", topic_url(hub, "capabilitylist.xml"))
    assert statuses(output) == ["NOT IN SYNC"], output
    assert f"to create={count}," in output, output


# -- rs-subscribe and resync side by side ----------------------------------------------------


def agent_config(source_url: str, origin: Origin, dest: Path, **options: object) -> AgentConfig:
    return AgentConfig(
        source_url=source_url,
        dest=dest,
        maps=[(origin.url + "/", "")],
        poll_interval=0.1,
        backoff_initial=0.1,
        backoff_max=0.5,
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.timeout(120)
async def test_rs_subscribe_mirrors_a_source_written_by_resync(
    origin: Origin, tmp_path: Path
) -> None:
    """A plain, pull-only Source (documents by resync, no push channel): rs-subscribe finds it
    from the bare origin URL, baselines from its Resource List, then polls its Change List."""
    source = ResyncSource(
        origin, {"/a.txt": b"alpha\n", "/b.txt": b"bravo\n", "/deep/c.bin": bytes(range(256))}
    )
    dest = tmp_path / "rs-mirror"
    async with running_agent(agent_config(origin.url, origin, dest)) as run:
        await converged(origin, dest)
        assert run.agent.endpoints is not None and run.agent.endpoints.push_url is None
        await eventually(lambda: run.agent.channel == "poll", "polling the pull-only Source")
        source.add_change_list(
            [
                ("/a.txt", "updated", b"alpha, second version\n"),
                ("/b.txt", "deleted", None),
                ("/new.txt", "created", b"new\n"),
            ]
        )
        await converged(origin, dest)
        source.add_change_list([("/new.txt", "updated", b"new, again\n")])
        await converged(origin, dest)
    assert {e["channel"] for e in run.applied()} == {"baseline", "poll"}
    # Different URIs are applied concurrently: compare as a set.
    assert {(e["uri"], e["change"]) for e in run.applied("poll")} == {
        (origin.uri("/a.txt"), "updated"),
        (origin.uri("/b.txt"), "deleted"),
        (origin.uri("/new.txt"), "created"),
        (origin.uri("/new.txt"), "updated"),
    }
    assert origin.requests["/deep/c.bin"] == 1, "an unchanged resource was fetched again"


@pytest.mark.timeout(120)
async def test_resync_and_rs_subscribe_end_with_identical_mirrors(
    hub: RunningHub, client: httpx.AsyncClient, origin: Origin, resync: Resync, tmp_path: Path
) -> None:
    """The same hub, two Destinations: resync-sync (baseline, then incremental, from the pull
    documents) and rs-subscribe (baseline, then push) end byte-identical."""
    dest = tmp_path / "rs-mirror"
    # The agent starts on the empty topic, whose documents already say "as of now": the
    # Source's changes must be dated after that (the origin's clock is an hour behind by
    # default), or the agent rightly takes them as covered by its empty baseline.
    origin.clock.now = datetime.now(UTC).replace(microsecond=0)
    async with running_agent(agent_config(hub.url, origin, dest, topic=TOPIC)) as run:
        await baseline_and_changes(hub, client, origin, resync)
        await resync.run(
            "--incremental", "--delete", "--changelist-uri", topic_url(hub, "changelist.xml")
        )
        await converged(origin, dest)
        assert run.applied("push"), "rs-subscribe followed the changes by push"
    assert mirror_files(dest) == resync.mirrored() == origin.resources
