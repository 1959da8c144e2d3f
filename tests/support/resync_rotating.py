"""A pull-only ResourceSync Source whose Change Lists rotate, every document written by the
reference library ``resync`` 2.0.1 and served by a static web server (ETag, ``304``) on
loopback. Imports neither the hub nor the subscriber.

Layout (Z39.99 §8–§12, archives spec §5)::

    /.well-known/resourcesync     Source Description
    /capabilitylist.xml           resourcelist, changelist, changelist-archive
    /resourcelist.xml             the Resource List at the start (``at``)
    /changelist.xml               the open Change List (``from``, no ``until``) — or, with
                                  ``index=True``, a Change List Index naming every list
    /changelist-open.xml          the open list, when there is an index
    /changelist-NNNN.xml          closed lists (``from``…``until``)
    /changelist-archive.xml       the Change List Archive naming the closed lists

:meth:`RotatingSource.rotate` closes the open list (its entries move to a new
``changelist-NNNN.xml`` with an ``until``) and opens an empty one where the open list was:
what makes a client that polls one URL by time lose the closed list's last entries.
``spec_version="1.0"`` writes ResourceSync 1.0 lists (no ``rs:md@datetime``; deletions carry
no time at all); ``timeless=True`` writes 1.1 lists whose entries give no time either.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from resync import CapabilityList, ChangeList, Resource, ResourceList, SourceDescription
from resync.archives import ChangeListArchive
from resync.list_base import ListBase

from tests.support.etag_origin import StaticSource
from tests.support.origin import RESOURCE_TYPE

SOURCE_DESCRIPTION = "/.well-known/resourcesync"
CAPABILITY_LIST = "/capabilitylist.xml"
RESOURCE_LIST = "/resourcelist.xml"
CHANGE_LIST = "/changelist.xml"
OPEN_LIST = "/changelist-open.xml"
ARCHIVE = "/changelist-archive.xml"


@dataclass
class _List:
    path: str
    start: str
    until: str | None = None
    entries: list[Resource] = field(default_factory=list)


class RotatingSource:
    """The Source's resources and lists; every change is served at once."""

    def __init__(
        self,
        origin: StaticSource,
        resources: dict[str, bytes],
        *,
        spec_version: str = "1.1",
        timeless: bool = False,
        index: bool = False,
    ) -> None:
        self.origin = origin
        self.spec_version = spec_version
        self.timeless = timeless
        self.index = index
        self.state: dict[str, bytes] = {}
        self.log: list[tuple[str, str]] = []
        """Every change so far, in order: (URI, change)."""
        for path, content in resources.items():
            origin.put(path, content)
            self.state[path] = content
        self.at = origin.clock.next()
        self.closed: list[_List] = []
        self.open = _List(OPEN_LIST if index else CHANGE_LIST, self.at)
        self._write_resource_list()
        origin.put_document(SOURCE_DESCRIPTION, self._xml(self._source_description()))
        self.publish()

    def uri(self, path: str) -> str:
        return self.origin.uri(path)

    def change(
        self, path: str, change: str, content: bytes | None = None, *, publish: bool = True
    ) -> None:
        """Apply one change on the origin and add it to the open list (served at once
        unless ``publish`` is False: :meth:`publish` serves a batch)."""
        when = self.origin.clock.next()
        entry = Resource(uri=self.uri(path), change=change)
        timed = not self.timeless and (self.spec_version == "1.1" or change != "deleted")
        if timed:
            entry.datetime = when
        if change == "deleted":
            self.origin.delete(path)
            del self.state[path]
        else:
            assert content is not None
            self.origin.put(path, content)
            self.state[path] = content
            if timed:
                entry.lastmod = when
            entry.length = len(content)
            entry.md5 = hashlib.md5(content).hexdigest()
            entry.mime_type = RESOURCE_TYPE
        self.open.entries.append(entry)
        self.log.append((self.uri(path), change))
        if publish:
            self.publish()

    def rotate(self, *, publish: bool = True) -> None:
        """Close the open list into the archive (and index) and open an empty one."""
        until = self.origin.clock.next()
        number = len(self.closed) + 1
        closed = _List(f"/changelist-{number:04d}.xml", self.open.start, until, self.open.entries)
        self.closed.append(closed)
        self.origin.put_document(closed.path, self._xml(self._change_list(closed)))
        self.open = _List(self.open.path, until)
        if publish:
            self.publish()

    def forget_history(self) -> None:
        """Drop every closed list (a Source that lost its archive)."""
        self.closed.clear()
        self.publish()

    # --- documents ----------------------------------------------------------------------

    def publish(self) -> None:
        """Serve the lists, the archive, the index and the Capability List as they are."""
        self.origin.put_document(self.open.path, self._xml(self._change_list(self.open)))
        archive = ChangeListArchive(
            md={"from": self.at}, ln=[{"rel": "up", "href": self.uri(CAPABILITY_LIST)}]
        )
        for closed in self.closed:
            archive.add(self._listed(closed))
        self.origin.put_document(ARCHIVE, self._xml(archive))
        if self.index:
            # A Change List Index (§12.2): resync's ChangeList refuses entries without a
            # change, so its base list class writes the <sitemapindex>.
            index = ListBase(
                resources=[],
                md={"from": self.at},
                ln=[{"rel": "up", "href": self.uri(CAPABILITY_LIST)}],
                capability_name="changelist",
            )
            index.sitemapindex = True
            for listed in [*self.closed[-2:], self.open]:  # older lists live in the archive
                index.add(self._listed(listed))
            self.origin.put_document(CHANGE_LIST, self._xml(index))
        capabilities = CapabilityList(ln=[{"rel": "up", "href": self.uri(SOURCE_DESCRIPTION)}])
        capabilities.add_capability(name="resourcelist", uri=self.uri(RESOURCE_LIST))
        capabilities.add_capability(name="changelist", uri=self.uri(CHANGE_LIST))
        capabilities.add_capability(name="changelist-archive", uri=self.uri(ARCHIVE))
        self.origin.put_document(CAPABILITY_LIST, self._xml(capabilities))

    def _listed(self, listed: _List) -> Resource:
        md: dict[str, str] = {"md_from": listed.start}
        if listed.until is not None:
            md["md_until"] = listed.until
        return Resource(uri=self.uri(listed.path), **md)

    def _change_list(self, listed: _List) -> ChangeList:
        md = {"from": listed.start}
        if listed.until is not None:
            md["until"] = listed.until
        change_list = ChangeList(
            md=md,
            ln=[{"rel": "up", "href": self.uri(CAPABILITY_LIST)}],
            spec_version=self.spec_version,
        )
        change_list.add(listed.entries)
        return change_list

    def _write_resource_list(self) -> None:
        resource_list = ResourceList(
            md={"at": self.at}, ln=[{"rel": "up", "href": self.uri(CAPABILITY_LIST)}]
        )
        for path, content in sorted(self.state.items()):
            resource_list.add(
                Resource(
                    uri=self.uri(path),
                    lastmod=self.at,
                    length=len(content),
                    md5=hashlib.md5(content).hexdigest(),
                    mime_type=RESOURCE_TYPE,
                )
            )
        self.origin.put_document(RESOURCE_LIST, self._xml(resource_list))

    def _source_description(self) -> SourceDescription:
        description = SourceDescription()
        description.add_capability_list(self.uri(CAPABILITY_LIST))
        return description

    @staticmethod
    def _xml(document: Any) -> bytes:
        text: str = document.as_xml()
        return text.encode()
