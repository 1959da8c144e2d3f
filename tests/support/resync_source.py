"""A plain, pull-only ResourceSync Source written by the reference library ``resync``.

Every document is ``resync``'s own ``as_xml()`` output, served by an :class:`Origin` beside
the resources, at the places ``resync-sync`` looks by default:

    /.well-known/resourcesync   Source Description (Z39.99 §8)
    /capabilitylist.xml         Capability List (§9): resourcelist, changelist
    /resourcelist.xml           Resource List (§10): lastmod, length, hex md5 hash
    /changelist.xml             Change List (§12), once there are changes

So a test can check our agent against a Source it did not write, and ``resync-sync
--baseline`` against this fixture proves the fixture is a Source ``resync`` accepts.

``resync`` 2.0.1 writes ``hash="md5:…"`` with whatever digest string it is given; this Source
gives it hex digests, as the spec's examples have them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from resync import CapabilityList, ChangeList, Resource, ResourceList, SourceDescription

from tests.support.origin import RESOURCE_TYPE, Change, Origin

SOURCE_DESCRIPTION = "/.well-known/resourcesync"
CAPABILITY_LIST = "/capabilitylist.xml"
RESOURCE_LIST = "/resourcelist.xml"
CHANGE_LIST = "/changelist.xml"


class ResyncSource:
    """The Source's state (path -> (content, lastmod)), its Change List so far, and the
    documents ``resync`` writes for them, kept up to date on the origin."""

    def __init__(self, origin: Origin, resources: Mapping[str, bytes]) -> None:
        """Serve ``resources`` (path -> content) on ``origin``, each with its own lastmod
        from ``origin.clock``, and the Resource List, Capability List and Source
        Description describing them."""
        self.origin = origin
        self.state: dict[str, tuple[bytes, str]] = {}
        self.changes: list[Resource] = []
        """Every change so far, in order: one Change List from the first Resource List's
        ``at`` (resync's incremental mode reads one Change List only)."""
        for path, content in resources.items():
            origin.put(path, content)
            self.state[path] = (content, origin.clock.next())
        self.since = origin.clock.next()
        """The first Resource List's ``at``, the Change List's ``from``."""
        self._write_resource_list(self.since)
        origin.put_document(SOURCE_DESCRIPTION, self.source_description_xml())
        origin.put_document(CAPABILITY_LIST, self.capability_list_xml())

    def uri(self, document: str) -> str:
        return self.origin.uri(document)

    def add_change_list(self, changes: Iterable[Change]) -> bytes:
        """Apply each (path, change, content) on the origin, add them to the Change List
        (``rs:md`` change, datetime, and for created/updated length and hash), serve it and
        the updated Resource List; return the Change List."""
        for path, change, content in changes:
            when = self.origin.clock.next()
            entry = Resource(uri=self.origin.uri(path), change=change, datetime=when)
            if change == "deleted":
                self.origin.delete(path)
                del self.state[path]
            else:
                if content is None:
                    raise ValueError(f"{change} {path}: content is required")
                self.origin.put(path, content)
                self.state[path] = (content, when)
                # As resync's own Change Lists have it (write_change_list copies the
                # Resource List entry): lastmod beside the change time.
                entry.lastmod = when
                entry.length = len(content)
                entry.md5 = hashlib.md5(content).hexdigest()
                entry.mime_type = RESOURCE_TYPE
            self.changes.append(entry)
        # Z39.99 §12.1: from = where this list starts; entries in forward chronological order.
        change_list = ChangeList(
            md={"from": self.since},
            ln=[{"rel": "up", "href": self.uri(CAPABILITY_LIST)}],
        )
        change_list.add(self.changes)
        xml = _xml(change_list)
        self.origin.put_document(CHANGE_LIST, xml)
        self._write_resource_list(self.changes[-1].datetime if self.changes else self.since)
        self.origin.put_document(CAPABILITY_LIST, self.capability_list_xml())
        return xml

    def source_description_xml(self) -> bytes:
        description = SourceDescription()
        description.add_capability_list(self.uri(CAPABILITY_LIST))
        return _xml(description)

    def capability_list_xml(self) -> bytes:
        capabilities = CapabilityList(ln=[{"rel": "up", "href": self.uri(SOURCE_DESCRIPTION)}])
        capabilities.add_capability(name="resourcelist", uri=self.uri(RESOURCE_LIST))
        if self.changes:
            capabilities.add_capability(name="changelist", uri=self.uri(CHANGE_LIST))
        return _xml(capabilities)

    def _write_resource_list(self, at: str) -> None:
        resource_list = ResourceList(
            md={"at": at}, ln=[{"rel": "up", "href": self.uri(CAPABILITY_LIST)}]
        )
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
        self.origin.put_document(RESOURCE_LIST, _xml(resource_list))


def _xml(document: Any) -> bytes:
    """resync's own serialisation (``as_xml()``, a str with an XML declaration), as UTF-8."""
    text: str = document.as_xml()
    return text.encode()
