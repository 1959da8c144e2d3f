"""The documents the hub materialises from what it stores: URL scheme, Source Description,
Capability List, Change Lists and their index and archive, Resource Lists split under an
index; each valid against the spec."""

from __future__ import annotations

from datetime import UTC, datetime

from rspush.hub import materialise as m
from rspush.resourcesync import Document, DocumentType, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from rspush.resourcesync.w3cdt import to_us
from tests.support.ingest import fragment, plan, url

BASE = "http://hub.example.org"


def test_url_scheme() -> None:
    urls = m.Urls(BASE, "dataset1")
    topic = f"{BASE}/topics/dataset1"
    assert urls.source_description == f"{BASE}/.well-known/resourcesync"
    assert urls.hub == f"{BASE}/hub"
    assert urls.topic_uri == topic
    assert urls.capability_list == f"{topic}/capabilitylist.xml"
    assert urls.change_list == f"{topic}/changelist.xml"
    assert urls.closed_change_list(7) == f"{topic}/changelists/7.xml"
    assert urls.change_list_index == f"{topic}/changelist-index.xml"
    assert urls.change_list_archive == f"{topic}/changelist-archive.xml"
    assert urls.change_list_archive_part(2) == f"{topic}/changelist-archive/2.xml"
    assert urls.resource_list == f"{topic}/resourcelist.xml"
    assert urls.resource_list_part(3) == f"{topic}/resourcelist/3.xml"


def check(body: bytes, kind: DocumentType) -> Document:
    doc = parse_document(body)
    assert doc.type is kind
    assert validate(doc) == []
    assert schema_errors(body) == []
    return doc


def test_source_description_and_capability_list() -> None:
    sd = check(
        m.source_description(BASE, ["a", "b"], "http://e.org/about"),
        DocumentType.SOURCE_DESCRIPTION,
    )
    assert [e.loc for e in sd.entries] == [
        f"{BASE}/topics/a/capabilitylist.xml",
        f"{BASE}/topics/b/capabilitylist.xml",
    ]
    assert sd.link("describedby") is not None
    urls = m.Urls(BASE, "a")
    cap = check(m.capability_list(urls), DocumentType.CAPABILITY_LIST)
    by_capability = {e.md.capability: e for e in cap.entries if e.md}
    assert set(by_capability) == {
        "resourcelist",
        "changelist",
        "changelist-archive",
        "change-notification",
    }
    notification = by_capability["change-notification"]
    assert notification.loc == urls.topic_uri
    hub_link = notification.link("hub")
    assert hub_link is not None and hub_link.href == urls.hub
    up = cap.link("up")
    assert up is not None and up.href == urls.source_description


def test_change_list_from_fragments() -> None:
    urls = m.Urls(BASE, "a")
    doc = fragment(
        url("http://e.org/x", "created", "2026-03-01T10:00:00Z")
        + url("http://e.org/y", "deleted", "2026-03-01T10:00:05Z")
    )
    records = plan(doc).records
    start = datetime(2026, 3, 1, 9, tzinfo=UTC)
    until = datetime(2026, 3, 1, 10, 0, 5, tzinfo=UTC)
    open_list = check(
        m.change_list(
            urls, start=start, until=None, entries="".join(r.entry_xml for r in records).encode()
        ),
        DocumentType.CHANGE_LIST,
    )
    assert (open_list.md.from_, open_list.md.until) == (start, None)
    assert [(e.loc, e.change) for e in open_list.entries] == [
        ("http://e.org/x", "created"),
        ("http://e.org/y", "deleted"),
    ]
    assert {ln.rel: ln.href for ln in open_list.links} == {
        "up": urls.capability_list,
        "index": urls.change_list_index,
        "archives": urls.change_list_archive,
    }
    closed = check(
        m.change_list(
            urls, start=start, until=until, entries="".join(r.entry_xml for r in records).encode()
        ),
        DocumentType.CHANGE_LIST,
    )
    assert closed.md.until == until
    empty = check(
        m.change_list(urls, start=start, until=None, entries=b""), DocumentType.CHANGE_LIST
    )
    assert empty.entries == ()


def spans(n: int) -> list[m.ClosedSpan]:
    t0 = to_us(datetime(2026, 3, 1, tzinfo=UTC))
    hour = 3_600_000_000
    return [m.span(i, t0 + i * hour, t0 + (i + 1) * hour) for i in range(n)]


def test_change_list_index_lists_closed_lists_then_the_open_one() -> None:
    urls = m.Urls(BASE, "a")
    recent = spans(3)
    open_from = recent[-1].until
    index = check(
        m.change_list_index(urls, recent=recent, open_from=open_from),
        DocumentType.CHANGE_LIST_INDEX,
    )
    assert [e.loc for e in index.entries] == [
        urls.closed_change_list(0),
        urls.closed_change_list(1),
        urls.closed_change_list(2),
        urls.change_list,
    ]
    assert index.entries[-1].md is not None and index.entries[-1].md.from_ == open_from
    assert index.md.from_ == recent[0].start
    only_open = check(
        m.change_list_index(urls, recent=[], open_from=open_from), DocumentType.CHANGE_LIST_INDEX
    )
    assert [e.loc for e in only_open.entries] == [urls.change_list]


def test_change_list_archive_is_gap_free_and_splits_past_the_limit() -> None:
    urls = m.Urls(BASE, "a")
    main, parts = m.change_list_archive(urls, spans(3))
    assert parts == {}
    archive = check(main, DocumentType.CHANGE_LIST_ARCHIVE)
    entries = [e.md for e in archive.entries]
    assert all(md is not None for md in entries)
    assert [e.loc for e in archive.entries] == [urls.closed_change_list(i) for i in range(3)]
    for before, after in zip(archive.entries, archive.entries[1:], strict=False):
        assert before.md is not None and after.md is not None
        assert before.md.until == after.md.from_

    main, parts = m.change_list_archive(urls, spans(5), max_entries=2)
    index = parse_document(main)
    assert index.is_index
    assert validate(index) == [] and schema_errors(main) == []
    assert [e.loc for e in index.entries] == [urls.change_list_archive_part(i) for i in range(3)]
    listed = []
    for number in range(3):
        part = check(parts[number], DocumentType.CHANGE_LIST_ARCHIVE)
        listed += [e.loc for e in part.entries]
    assert listed == [urls.closed_change_list(i) for i in range(5)]


def test_resource_list_sorted_and_split_under_an_index() -> None:
    urls = m.Urls(BASE, "a")
    at = datetime(2026, 3, 1, tzinfo=UTC)
    state = {f"http://e.org/{c}": f"<url><loc>http://e.org/{c}</loc></url>" for c in "edcba"}
    main, parts = m.resource_list(urls, at=at, state=state)
    assert parts == {}
    doc = check(main, DocumentType.RESOURCE_LIST)
    assert [e.loc for e in doc.entries] == [f"http://e.org/{c}" for c in "abcde"]
    assert doc.md.at == at
    main, parts = m.resource_list(urls, at=at, state=state, max_entries=2)
    index = parse_document(main)
    assert index.is_index and index.md.at == at
    assert validate(index) == [] and schema_errors(main) == []
    assert [e.loc for e in index.entries] == [urls.resource_list_part(i) for i in range(3)]
    locs = [e.loc for n in range(3) for e in check(parts[n], DocumentType.RESOURCE_LIST).entries]
    assert locs == [f"http://e.org/{c}" for c in "abcde"]
    empty = check(m.resource_list(urls, at=at, state={})[0], DocumentType.RESOURCE_LIST)
    assert empty.entries == ()
