"""``rs-subscribe run`` (a real process) mirroring Sources whose documents the reference
library ``resync`` 2.0.1 writes, as Sources in the wild publish them — each to a clean
``rs-subscribe audit``:

* ResourceSync 1.0 lists: ``<lastmod>`` only, deletions with no time at all;
* a first Change List without ``from`` (resync-simulator's, when its oldest change is a
  deletion);
* gzipped Resource List and Change List (``.xml.gz``);
* Change Lists rotated between polls: each round closes the open list into the Change List
  Archive and opens a new one at a new URL.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest
from resync import CapabilityList, ChangeList, Resource, ResourceList
from resync.archives import ChangeListArchive

from tests.support.agents import mirror_files
from tests.support.cli import rs_subscribe, running
from tests.support.origin import RESOURCE_TYPE, Change, Origin, running_origin

SCENARIOS = ["1.0-timeless-deletions", "first-list-without-from", "gzipped", "rotating"]


class WrittenByResync:
    """A pull-only Source: state, its changes, and resync's documents for them."""

    def __init__(self, origin: Origin, scenario: str, resources: dict[str, bytes]) -> None:
        self.origin = origin
        self.scenario = scenario
        self.gz = ".gz" if scenario == "gzipped" else ""
        self.state: dict[str, tuple[bytes, str]] = {}
        for path, content in resources.items():
            origin.put(path, content)
            self.state[path] = (content, origin.clock.next())
        self.since = origin.clock.next()
        self.lists: list[tuple[str, str, str | None, list[Resource]]] = []
        """(path, from, until, entries) of every Change List, oldest first."""
        self._open(self.since)
        self._publish()

    def _open(self, start: str) -> None:
        path = f"/changelists/{len(self.lists)}.xml" if self.scenario == "rotating" else ""
        self.lists.append((path or f"/changelist.xml{self.gz}", start, None, []))

    def change(self, changes: list[Change]) -> None:
        entries = self.lists[-1][3]
        for path, change, content in changes:
            when = self.origin.clock.next()
            if self.scenario == "1.0-timeless-deletions":
                entry = Resource(uri=self.origin.uri(path), change=change)
                if change != "deleted":
                    entry.lastmod = when  # 1.0: the change time is the lastmod
            else:
                entry = Resource(uri=self.origin.uri(path), change=change, datetime=when)
            if change == "deleted":
                self.origin.delete(path)
                del self.state[path]
            else:
                assert content is not None
                self.origin.put(path, content)
                self.state[path] = (content, when)
                entry.lastmod = when
                entry.length = len(content)
                entry.md5 = hashlib.md5(content).hexdigest()
            entries.append(entry)
        if self.scenario == "rotating":
            # Close the open list and open the next: the agent's next poll finds its list
            # gone from the Capability List and walks the archive to the new one.
            until = self.origin.clock.next()
            path, start, _, entries = self.lists[-1]
            self.lists[-1] = (path, start, until, entries)
            self._open(until)
        self._publish()

    def _publish(self) -> None:
        for path, start, until, entries in self.lists:
            md = {"from": start}
            if self.scenario == "first-list-without-from" and path == self.lists[0][0]:
                md = {}
            if until is not None:
                md["until"] = until
            change_list = ChangeList(md=md)
            change_list.add(entries)
            self._put(path, change_list.as_xml())
        resource_list = ResourceList(md={"at": self.origin.clock.next()})
        for path, (content, lastmod) in sorted(self.state.items()):
            resource_list.add(
                Resource(
                    uri=self.origin.uri(path),
                    lastmod=lastmod,
                    length=len(content),
                    md5=hashlib.md5(content).hexdigest(),
                    mime_type=RESOURCE_TYPE,
                )
            )
        self._put(f"/resourcelist.xml{self.gz}", resource_list.as_xml())
        capabilities = CapabilityList()
        capabilities.add_capability(
            name="resourcelist", uri=self.origin.uri(f"/resourcelist.xml{self.gz}")
        )
        capabilities.add_capability(name="changelist", uri=self.origin.uri(self.lists[-1][0]))
        if self.scenario == "rotating":
            archive = ChangeListArchive()
            for path, start, until, _ in self.lists[:-1]:
                archive.add(Resource(uri=self.origin.uri(path), md_from=start, md_until=until))
            self._put("/changelist-archive.xml", archive.as_xml())
            capabilities.add_capability(
                name="changelist-archive", uri=self.origin.uri("/changelist-archive.xml")
            )
        self._put("/capabilitylist.xml", capabilities.as_xml())

    def _put(self, path: str, xml: str) -> None:
        body = xml.encode()
        if path.endswith(".gz"):
            self.origin.put_document(path, gzip.compress(body), "application/gzip")
        else:
            self.origin.put_document(path, body)


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_rs_subscribe_mirrors_a_resync_written_source(tmp_path: Path, scenario: str) -> None:
    async with running_origin() as origin:
        source = WrittenByResync(
            origin, scenario, {"/a.txt": b"alpha", "/b.txt": b"bravo", "/c.txt": b"charlie"}
        )
        dest = tmp_path / "mirror"
        common = ("--dest", str(dest), "--map", f"{origin.url}/=")
        url = origin.uri("/capabilitylist.xml")
        async with running(tmp_path, url, *common, "--poll-interval", "0.1") as agent:
            await agent.until(lambda: mirror_files(dest) == origin.resources, "the baseline")
            rounds: list[list[Change]] = [
                [("/b.txt", "deleted", None), ("/a.txt", "updated", b"alpha 2")],
                [("/d.txt", "created", b"delta"), ("/c.txt", "deleted", None)],
                [("/a.txt", "deleted", None), ("/e.txt", "created", b"echo")],
            ]
            for changes in rounds:
                source.change(changes)
                await agent.until(
                    lambda: mirror_files(dest) == origin.resources, f"the changes {changes}"
                )
            assert mirror_files(dest) == {"/d.txt": b"delta", "/e.txt": b"echo"}
            assert await agent.stop() == 0, agent.log
            assert not [e for e in agent.events if e["event"] in ("failed", "rebaseline")]
        code, out, err = await rs_subscribe("audit", url, *common)
        assert code == 0, (out, err)
