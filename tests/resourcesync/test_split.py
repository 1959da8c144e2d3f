"""Splitting entries into Sitemap-sized documents plus the index Z39.99 §10.2/§12.2 require."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rspush.resourcesync import (
    MAX_ENTRIES,
    Document,
    DocumentType,
    Entry,
    Link,
    Metadata,
    SplitResult,
    serialise,
    split_entries,
    validate,
)
from rspush.resourcesync.schema import schema_errors
from tests.support.strategies import documents, uris

T0 = datetime(2024, 1, 1, tzinfo=UTC)
UP = "http://example.com/dataset1/capabilitylist.xml"
INDEX = "http://example.com/dataset1/resourcelist-index.xml"


def part_url(number: int) -> str:
    return f"http://example.com/dataset1/part{number}.xml"


def resource_entries(count: int) -> list[Entry]:
    return [
        Entry(
            loc=f"http://example.com/res{n}?a=1&b=<{n}>",
            lastmod=T0 - timedelta(days=n),
            md=Metadata(hash=f"md5:{n:032x}", length=n, type="text/html"),
        )
        for n in range(count)
    ]


def change_entries(count: int) -> list[Entry]:
    changes = ("created", "updated", "deleted")
    return [
        Entry(
            loc=f"http://example.com/res{n}",
            md=Metadata(change=changes[n % 3], datetime=T0 + timedelta(minutes=10 * n + 5)),
        )
        for n in range(count)
    ]


RL_MD = Metadata(capability="resourcelist", at=T0, completed=T0 + timedelta(minutes=5))


def split(entries: list[Entry], md: Metadata, **kwargs: object) -> SplitResult:
    options: dict[str, object] = {"up": UP, "part_url": part_url, "index_url": INDEX}
    options.update(kwargs)
    return split_entries(entries, md=md, **options)  # type: ignore[arg-type]


def assert_valid(document: Document) -> None:
    assert validate(document) == []
    assert schema_errors(serialise(document)) == []


def assert_split_invariants(
    result: SplitResult,
    entries: list[Entry],
    md: Metadata,
    *,
    up: str | None,
    index_url: str,
    max_entries: int,
    max_bytes: int,
) -> None:
    """What every split must satisfy, whatever its input."""
    parts, index = result.parts, result.index
    # Nothing lost, nothing reordered.
    assert [e for part in parts for e in part.entries] == list(entries)
    for part in parts:
        assert part.root == "urlset"
        assert part.md.capability == md.capability
        assert len(part.entries) <= max_entries
        # A part may only exceed the byte limit when one entry alone does.
        assert len(serialise(part)) <= max_bytes or len(part.entries) == 1
        if up is not None:
            assert part.link("up") == Link(rel="up", href=up)
        assert_valid(part)

    if index is None:
        assert len(parts) == 1
        assert parts[0].link("index") is None
        return

    assert len(parts) >= 2
    assert index.root == "sitemapindex"
    assert index.md.capability == md.capability
    assert index.type is not DocumentType.UNKNOWN and index.is_index
    if up is not None:
        assert index.link("up") == Link(rel="up", href=up)
    assert index.link("index") is None
    assert len(index.entries) == len(parts)
    for part in parts:
        assert part.link("index") == Link(rel="index", href=index_url)
    assert_valid(index)

    if md.from_ is not None:
        # Change documents: consecutive, gap-free, non-overlapping intervals.
        assert parts[0].md.from_ == md.from_
        assert parts[-1].md.until == md.until
        for before, after in zip(parts, parts[1:], strict=False):
            assert before.md.until is not None
            assert before.md.until == after.md.from_
        for part, entry in zip(parts, index.entries, strict=True):
            assert entry.md is not None
            assert (entry.md.from_, entry.md.until) == (part.md.from_, part.md.until)
    else:
        # Snapshot documents: every part and the index carry the snapshot's at/completed.
        for document in (*parts, index):
            assert (document.md.at, document.md.completed) == (md.at, md.completed)
        for entry in index.entries:
            assert entry.md is not None
            assert (entry.md.at, entry.md.completed) == (md.at, md.completed)


# --- examples -------------------------------------------------------------------------------


def test_under_the_limits_one_part_and_no_index() -> None:
    entries = resource_entries(5)

    result = split(entries, RL_MD, max_entries=5)

    assert result.index is None
    (part,) = result.parts
    assert part == Document(md=RL_MD, links=(Link(rel="up", href=UP),), entries=tuple(entries))
    assert_valid(part)


def test_no_entries_is_one_empty_part() -> None:
    result = split([], RL_MD)
    assert result.index is None
    (part,) = result.parts
    assert part.entries == ()
    assert_valid(part)


def test_resource_list_split_by_count() -> None:
    entries = resource_entries(10)

    result = split(entries, RL_MD, max_entries=3)

    assert [len(p.entries) for p in result.parts] == [3, 3, 3, 1]
    assert result.index is not None
    assert result.index.type is DocumentType.RESOURCE_LIST_INDEX
    assert [e.loc for e in result.index.entries] == [part_url(n) for n in range(4)]
    for part in result.parts:
        assert part.type is DocumentType.RESOURCE_LIST
        assert part.md.at == T0
    assert_split_invariants(
        result, entries, RL_MD, up=UP, index_url=INDEX, max_entries=3, max_bytes=10**9
    )


@pytest.mark.parametrize("until", [T0 + timedelta(days=1), None], ids=["closed", "open"])
def test_change_list_parts_cover_consecutive_intervals(until: datetime | None) -> None:
    md = Metadata(capability="changelist", from_=T0, until=until)
    entries = change_entries(7)

    result = split(entries, md, max_entries=3)

    parts = result.parts
    assert [len(p.entries) for p in parts] == [3, 3, 1]
    assert [(p.md.from_, p.md.until) for p in parts] == [
        (T0, entries[3].change_time),
        (entries[3].change_time, entries[6].change_time),
        (entries[6].change_time, until),
    ]
    assert result.index is not None
    assert result.index.type is DocumentType.CHANGE_LIST_INDEX
    assert (result.index.md.from_, result.index.md.until) == (T0, until)
    assert_split_invariants(
        result, entries, md, up=UP, index_url=INDEX, max_entries=3, max_bytes=10**9
    )


def test_change_list_entries_without_a_change_time_stay_inside_their_part() -> None:
    # 1.1 allows a change with neither datetime nor lastmod (Example 19). When one opens a
    # part, that part still starts at or before it and the previous part's changes must still
    # lie inside the previous part's interval.
    md = Metadata(capability="changelist", from_=T0)
    entries = change_entries(4)
    entries[2] = Entry(loc="http://example.com/undated", md=Metadata(change="updated"))

    result = split(entries, md, max_entries=2)

    assert [len(p.entries) for p in result.parts] == [2, 2]
    assert_split_invariants(
        result, entries, md, up=UP, index_url=INDEX, max_entries=2, max_bytes=10**9
    )


def test_split_by_bytes() -> None:
    entries = resource_entries(40)
    max_bytes = 2_000

    result = split(entries, RL_MD, max_bytes=max_bytes)

    assert len(result.parts) > 3
    assert all(len(serialise(part)) <= max_bytes for part in result.parts)
    assert_split_invariants(
        result, entries, RL_MD, up=UP, index_url=INDEX, max_entries=MAX_ENTRIES, max_bytes=max_bytes
    )


def test_split_by_bytes_with_a_long_index_url() -> None:
    # The index link every part gains counts against the byte limit too.
    index_url = "http://example.com/dataset1/" + "i" * 400 + "/resourcelist-index.xml"
    entries = resource_entries(40)
    max_bytes = 2_000

    result = split(entries, RL_MD, max_bytes=max_bytes, index_url=index_url)

    assert len(result.parts) > 3
    assert [len(serialise(part)) for part in result.parts if len(serialise(part)) > max_bytes] == []


def test_extra_links_go_on_every_part_and_the_index() -> None:
    archives = Link(rel="archives", href="http://example.com/dataset1/resourcelist-archive.xml")

    result = split(resource_entries(4), RL_MD, max_entries=2, links=[archives])

    assert result.index is not None
    for document in (*result.parts, result.index):
        assert document.link("archives") == archives
        assert document.link("up") == Link(rel="up", href=UP)


def test_without_up_no_up_link_is_invented() -> None:
    result = split(resource_entries(4), RL_MD, max_entries=2, up=None)
    assert result.index is not None
    for document in (*result.parts, result.index):
        assert document.link("up") is None


def test_max_entries_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        split(resource_entries(2), RL_MD, max_entries=0)


def test_the_sitemap_limit_is_the_default() -> None:
    entry = Entry(loc="http://example.com/res")
    entries = [entry] * (MAX_ENTRIES + 1)

    result = split(entries, RL_MD)

    assert [len(p.entries) for p in result.parts] == [MAX_ENTRIES, 1]
    assert result.index is not None
    assert validate(result.parts[0]) == []


# --- properties -----------------------------------------------------------------------------

SPLITTABLE = [
    DocumentType.RESOURCE_LIST,
    DocumentType.CHANGE_LIST,
    DocumentType.RESOURCE_DUMP,
    DocumentType.CHANGE_DUMP,
]


@pytest.mark.parametrize("kind", SPLITTABLE, ids=str)
@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_split_keeps_its_invariants(kind: DocumentType, data: st.DataObject) -> None:
    document = data.draw(documents(kind, min_entries=1, max_entries=10), label="document")
    max_entries = data.draw(st.integers(min_value=1, max_value=6), label="max_entries")
    max_bytes = data.draw(st.integers(min_value=1_000, max_value=8_000), label="max_bytes")
    index_url = data.draw(uris, label="index_url")
    up = document.link("up")
    entries = list(document.entries)

    result = split_entries(
        entries,
        md=document.md,
        up=None if up is None else up.href,
        part_url=lambda n: f"http://example.com/part{n}.xml",
        index_url=index_url,
        max_entries=max_entries,
        max_bytes=max_bytes,
    )

    assert_split_invariants(
        result,
        entries,
        document.md,
        up=None if up is None else up.href,
        index_url=index_url,
        max_entries=max_entries,
        max_bytes=max_bytes,
    )
