"""The streaming parser: entries handed out as they are read, extensions kept, versions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from rspush.resourcesync import (
    Document,
    Entry,
    Metadata,
    parse_chunks,
    parse_document,
    serialise,
    stream_document,
    validate,
)
from rspush.resourcesync.models import Link


def change_list(n: int) -> bytes:
    entries = tuple(
        Entry(
            loc=f"http://example.com/res{i}",
            md=Metadata(change="updated", datetime=datetime(2024, 1, 1, 0, 0, i % 60, tzinfo=UTC)),
        )
        for i in range(n)
    )
    document = Document(
        md=Metadata(capability="changelist", from_=datetime(2024, 1, 1, tzinfo=UTC)),
        links=(Link(rel="up", href="http://example.com/capabilitylist.xml"),),
        entries=tuple(sorted(entries, key=lambda e: e.change_time or datetime.min)),
    )
    return serialise(document)


def test_stream_hands_out_entries_before_the_input_is_consumed() -> None:
    data = change_list(2000)
    size = 1024
    consumed = 0

    def chunks() -> Iterator[bytes]:
        nonlocal consumed
        for start in range(0, len(data), size):
            consumed += 1
            yield data[start : start + size]

    stream = stream_document(chunks())
    first = next(stream)
    assert first.loc.startswith("http://example.com/res")
    assert stream.head is not None
    assert stream.head.md.capability == "changelist"
    total_chunks = -(-len(data) // size)
    assert consumed < total_chunks / 10  # streaming, not read-everything-then-iterate
    rest = list(stream)
    assert len(rest) == 1999
    assert consumed == total_chunks
    assert stream.size == len(data)


def test_parse_chunks_equals_parse_document() -> None:
    data = change_list(300)
    pieces = [data[i : i + 7] for i in range(0, len(data), 7)]  # splits inside tags
    assert parse_chunks(pieces) == parse_document(data)


def test_version_detection() -> None:
    assert parse_document(change_list(3)).version == "1.1"  # rs:md@datetime
    as_10 = change_list(3).replace(b' datetime="', b' modified="')
    assert parse_document(as_10).version == "1.0"


def test_change_time_prefers_datetime_then_lastmod() -> None:
    data = b"""<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
      xmlns:rs="http://www.openarchives.org/rs/terms/">
      <rs:ln rel="up" href="http://example.com/cl.xml"/>
      <rs:md capability="changelist" from="2013-01-03T00:00:00Z"/>
      <url><loc>http://example.com/a</loc><lastmod>2000-01-01T01:01:00Z</lastmod>
        <rs:md change="created" datetime="2013-01-03T11:00:00+01:00"/></url>
      <url><loc>http://example.com/b</loc><lastmod>2013-01-03T13:00:00Z</lastmod>
        <rs:md change="updated"/></url>
      <url><loc>http://example.com/c</loc><rs:md change="deleted"/></url>
    </urlset>"""
    document = parse_document(data)
    assert [e.change_time for e in document.entries] == [
        datetime(2013, 1, 3, 10, 0, tzinfo=UTC),
        datetime(2013, 1, 3, 13, 0, tzinfo=UTC),
        None,
    ]
    assert validate(document) == []


def test_foreign_attributes_survive_and_foreign_elements_are_ignored() -> None:
    data = b"""<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
      xmlns:rs="http://www.openarchives.org/rs/terms/" xmlns:x="http://example.org/ext"
      xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
      <rs:ln rel="up" href="http://example.com/cl.xml"/>
      <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z" x:batch="7"/>
      <url><loc>http://example.com/a?x=1&amp;y=2</loc>
        <image:image><image:loc>http://example.com/a.png</image:loc></image:image>
        <rs:md length="10" x:note="kept"/></url>
    </urlset>"""
    document = parse_document(data)
    assert document.problems == ()
    assert document.md.extra == {"{http://example.org/ext}batch": "7"}
    entry = document.entries[0]
    assert entry.loc == "http://example.com/a?x=1&y=2"
    assert entry.md is not None and entry.md.extra == {"{http://example.org/ext}note": "kept"}
    again = parse_document(serialise(document))
    assert again == document
    assert again.entries[0].md is not None
    assert again.entries[0].md.extra == {"{http://example.org/ext}note": "kept"}


def test_empty_urlset_is_a_valid_open_change_list() -> None:
    data = b"""<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
      xmlns:rs="http://www.openarchives.org/rs/terms/">
      <rs:ln rel="up" href="http://example.com/cl.xml"/>
      <rs:md capability="changelist" from="2013-01-03T00:00:00Z"/></urlset>"""
    document = parse_document(data)
    assert document.entries == ()
    assert validate(document) == []
    from rspush.resourcesync.schema import schema_errors

    assert schema_errors(data) == []
    assert schema_errors(data.replace(b'from="2013-01-03T00:00:00Z"', b'from="yesterday"'))
