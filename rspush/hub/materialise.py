"""The standard pull documents, built from what the store holds: pure functions, no I/O.

URLs (all under the hub's ``base_url``; :class:`Urls`):

    /.well-known/resourcesync                       Source Description (Z39.99 §8)
    /topics/{t}/capabilitylist.xml                  Capability List (§9)
    /topics/{t}/changelist.xml                      the open Change List (§12.1)
    /topics/{t}/changelists/{n}.xml                 closed Change List n (immutable)
    /topics/{t}/changelist-index.xml                Change List Index of the period (§12.2)
    /topics/{t}/changelist-archive.xml              Change List Archive (archives §5),
                                                    an index past 50,000 closed lists
    /topics/{t}/changelist-archive/{k}.xml          its parts
    /topics/{t}/resourcelist.xml                    Resource List, an index past 50,000
    /topics/{t}/resourcelist/{k}.xml                its parts
    /topics/{t}                                     the change-notification topic URI
    /topics/{t}/framework                           the framework-notification topic URI
    /hub                                            the hub URI (notification spec §4.1)

Stored entries are already serialised ``<url>`` elements, so a Change List is its head, the
stored fragments and its tail: no re-parsing, no model per entry on the serving path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rspush.protocol import PUSH_REL
from rspush.resourcesync import Capability, Document, Entry, Link, Metadata, split_entries
from rspush.resourcesync.namespaces import MAX_ENTRIES
from rspush.resourcesync.serialiser import serialise, serialise_head, serialise_tail
from rspush.resourcesync.w3cdt import from_us


@dataclass(frozen=True, slots=True)
class Urls:
    base: str
    topic: str

    @property
    def source_description(self) -> str:
        return f"{self.base}/.well-known/resourcesync"

    @property
    def hub(self) -> str:
        return f"{self.base}/hub"

    @property
    def topic_uri(self) -> str:
        return f"{self.base}/topics/{self.topic}"

    @property
    def framework_topic_uri(self) -> str:
        """Framework notification §4.1/§5: the topic URI of the set's framework channel
        (a channel apart from the change-notification one, as §4 requires)."""
        return f"{self.topic_uri}/framework"

    @property
    def capability_list(self) -> str:
        return f"{self.topic_uri}/capabilitylist.xml"

    @property
    def change_list(self) -> str:
        return f"{self.topic_uri}/changelist.xml"

    def closed_change_list(self, number: int) -> str:
        return f"{self.topic_uri}/changelists/{number}.xml"

    @property
    def change_list_index(self) -> str:
        return f"{self.topic_uri}/changelist-index.xml"

    @property
    def change_list_archive(self) -> str:
        return f"{self.topic_uri}/changelist-archive.xml"

    def change_list_archive_part(self, number: int) -> str:
        return f"{self.topic_uri}/changelist-archive/{number}.xml"

    @property
    def resource_list(self) -> str:
        return f"{self.topic_uri}/resourcelist.xml"

    def resource_list_part(self, number: int) -> str:
        return f"{self.topic_uri}/resourcelist/{number}.xml"


@dataclass(frozen=True, slots=True)
class ClosedSpan:
    """What the index and archive need to know of a closed Change List."""

    number: int
    start: datetime
    until: datetime


def source_description(base: str, topics: Sequence[str], described_by: str | None) -> bytes:
    links = (Link(rel="describedby", href=described_by),) if described_by else ()
    entries = tuple(
        Entry(
            loc=Urls(base, topic).capability_list,
            md=Metadata(capability=Capability.CAPABILITYLIST),
        )
        for topic in topics
    )
    return serialise(
        Document(md=Metadata(capability=Capability.DESCRIPTION), links=links, entries=entries)
    )


def capability_list(
    urls: Urls,
    *,
    described_by: str | None = None,
    push_url: str | None = None,
    framework: bool = False,
) -> bytes:
    links = [Link(rel="up", href=urls.source_description)]
    if described_by:
        links.insert(0, Link(rel="describedby", href=described_by))
    entries: tuple[Entry, ...] = (
        Entry(loc=urls.resource_list, md=Metadata(capability=Capability.RESOURCELIST)),
        Entry(loc=urls.change_list, md=Metadata(capability=Capability.CHANGELIST)),
        Entry(
            loc=urls.change_list_archive,
            md=Metadata(capability=Capability.CHANGELIST_ARCHIVE),
        ),
        # Change notification spec §5: the topic URI in <loc>, the hub in rs:ln rel="hub";
        # the WebSocket push endpoint beside it under its own relation (docs/protocol.md).
        Entry(
            loc=urls.topic_uri,
            md=Metadata(capability=Capability.CHANGE_NOTIFICATION),
            links=(Link(rel="hub", href=urls.hub),)
            + ((Link(rel=PUSH_REL, href=push_url),) if push_url else ()),
        ),
    )
    if framework:
        # Framework notification §5 (Example 8): the framework topic URI in <loc>, the hub in
        # rs:ln rel="hub"; the WebSocket endpoint, which carries framework frames too
        # (docs/protocol.md), under its own relation.
        entries += (
            Entry(
                loc=urls.framework_topic_uri,
                md=Metadata(capability=Capability.FRAMEWORK_NOTIFICATION),
                links=(Link(rel="hub", href=urls.hub),)
                + ((Link(rel=PUSH_REL, href=push_url),) if push_url else ()),
            ),
        )
    return serialise(
        Document(
            md=Metadata(capability=Capability.CAPABILITYLIST),
            links=tuple(links),
            entries=entries,
        )
    )


def change_list(
    urls: Urls,
    *,
    start: datetime,
    until: datetime | None,
    entries: bytes,
) -> bytes:
    """An open (``until`` None) or closed Change List around its ``<url>`` entries, stored
    XML (UTF-8) in order."""
    head = Document(
        md=Metadata(capability=Capability.CHANGELIST, from_=start, until=until),
        links=(
            Link(rel="up", href=urls.capability_list),
            Link(rel="index", href=urls.change_list_index),
            # Archives spec §2.2: core documents may link to their archive.
            Link(rel="archives", href=urls.change_list_archive),
        ),
    )
    return b"".join([serialise_head(head).encode(), entries, serialise_tail(head).encode()])


def change_list_index(urls: Urls, *, recent: Sequence[ClosedSpan], open_from: datetime) -> bytes:
    """§12.2: the recent closed lists, then the open one (forward chronological order)."""
    entries = [
        Entry(
            loc=urls.closed_change_list(span.number),
            md=Metadata(from_=span.start, until=span.until),
        )
        for span in recent
    ]
    entries.append(Entry(loc=urls.change_list, md=Metadata(from_=open_from)))
    start = recent[0].start if recent else open_from
    return serialise(
        Document(
            root="sitemapindex",
            md=Metadata(capability=Capability.CHANGELIST, from_=start),
            links=(
                Link(rel="up", href=urls.capability_list),
                Link(rel="archives", href=urls.change_list_archive),
            ),
            entries=tuple(entries),
        )
    )


def change_list_archive(
    urls: Urls, spans: Sequence[ClosedSpan], *, max_entries: int = MAX_ENTRIES
) -> tuple[bytes, dict[int, bytes]]:
    """Archives §5: every closed Change List with its from/until, in order.

    Returns the document served at the archive URL (a ``<sitemapindex>`` past
    ``max_entries``) and the parts by number (empty when one list was enough).
    """
    entries = [
        Entry(
            loc=urls.closed_change_list(span.number),
            md=Metadata(from_=span.start, until=span.until),
        )
        for span in spans
    ]
    result = split_entries(
        entries,
        md=Metadata(capability=Capability.CHANGELIST_ARCHIVE),
        up=urls.capability_list,
        part_url=urls.change_list_archive_part,
        index_url=urls.change_list_archive,
        max_entries=max_entries,
    )
    if result.index is None:
        return serialise(result.parts[0]), {}
    return serialise(result.index), {
        number: serialise(part) for number, part in enumerate(result.parts)
    }


def resource_list(
    urls: Urls,
    *,
    at: datetime,
    state: dict[str, str],
    max_entries: int = MAX_ENTRIES,
) -> tuple[bytes, dict[int, bytes]]:
    """§10.1/§10.2: the current state, sorted by URI, split under an index past the limit."""
    locs = sorted(state)
    # No `completed`: the state is read atomically, so the snapshot is exactly `at`.
    md = Metadata(capability=Capability.RESOURCELIST, at=at)
    if len(locs) <= max_entries:
        head = Document(md=md, links=(Link(rel="up", href=urls.capability_list),))
        body = [state[loc] for loc in locs]
        return "".join([serialise_head(head), *body, serialise_tail(head)]).encode(), {}
    parts: dict[int, bytes] = {}
    index_entries = []
    part_links = (
        Link(rel="up", href=urls.capability_list),
        Link(rel="index", href=urls.resource_list),
    )
    for number, start in enumerate(range(0, len(locs), max_entries)):
        head = Document(md=md, links=part_links)
        body = [state[loc] for loc in locs[start : start + max_entries]]
        parts[number] = "".join([serialise_head(head), *body, serialise_tail(head)]).encode()
        index_entries.append(Entry(loc=urls.resource_list_part(number), md=Metadata(at=at)))
    index = Document(
        root="sitemapindex",
        md=md,
        links=(Link(rel="up", href=urls.capability_list),),
        entries=tuple(index_entries),
    )
    return serialise(index), parts


def span(number: int, from_time_us: int, until_time_us: int) -> ClosedSpan:
    return ClosedSpan(number=number, start=from_us(from_time_us), until=from_us(until_time_us))
