"""Pure-logic unit tests of the hub: no event loop, no Redis, no sockets, no clock
(``now`` is passed in). Ingest planning, the rotation decisions, the materialised documents,
authentication, settings and the Redis key names."""

from __future__ import annotations

import hashlib
import os
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from redis.crc import key_slot

from rspush.hub import materialise as m
from rspush.hub.app import HTTP_STATUS
from rspush.hub.auth import bearer, find_source, new_token, token_sha256
from rspush.hub.errors import IngestError
from rspush.hub.ingest import (
    IngestPlan,
    parse_fragment,
    plan_changes,
    plan_seed,
)
from rspush.hub.keys import TopicKeys
from rspush.hub.rotation import RotationPolicy, entries_to_close, trim_floor
from rspush.hub.settings import Settings, Source, load_settings
from rspush.hub.store import TopicMeta
from rspush.resourcesync import Document, DocumentType, Severity, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from rspush.resourcesync.w3cdt import from_us, to_us

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TOLERANCE = timedelta(seconds=300)
RS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def fragment(urls: str, *, md: str = 'capability="changelist"', root: str = "urlset") -> Document:
    body = f'<?xml version="1.0" encoding="UTF-8"?><{root} {RS}><rs:md {md}/>{urls}</{root}>'
    return parse_fragment(body.encode(), max_bytes=1_000_000)


def url(loc: str, change: str | None = "updated", when: str | None = None, extra: str = "") -> str:
    attrs = "".join(
        f' {name}="{value}"'
        for name, value in (("change", change), ("datetime", when))
        if value is not None
    )
    return f"<url><loc>{loc}</loc><rs:md{attrs}{extra}/></url>"


def plan(document: Document, *, now: datetime = NOW, max_entries: int = 100) -> IngestPlan:
    return plan_changes(document, now=now, max_entries=max_entries, future_tolerance=TOLERANCE)


def rejected(excinfo: pytest.ExceptionInfo[IngestError]) -> tuple[int, str, str]:
    return HTTP_STATUS[excinfo.value.code], excinfo.value.code, excinfo.value.message


# --- hub.ingest: plan_changes -------------------------------------------------------------


def test_plan_keeps_every_change_time_and_publishes_it_as_datetime() -> None:
    doc = fragment(
        url("http://e.org/a", "created", "2026-03-01T10:00:00Z", ' length="3" type="text/plain"')
        + url("http://e.org/b", "updated", "2026-03-01T10:00:00.250001Z")
        + url("http://e.org/a", "deleted", "2026-03-01T11:00:00Z")
    )
    result = plan(doc)
    assert [(r.loc, r.change) for r in result.records] == [
        ("http://e.org/a", "created"),
        ("http://e.org/b", "updated"),
        ("http://e.org/a", "deleted"),
    ]
    assert [from_us(r.time_us) for r in result.records] == [
        datetime(2026, 3, 1, 10, tzinfo=UTC),
        datetime(2026, 3, 1, 10, 0, 0, 250001, tzinfo=UTC),
        datetime(2026, 3, 1, 11, tzinfo=UTC),
    ]
    assert not result.stamped
    assert result.first_time_us < result.last_time_us
    # The stored <url> is a Change List entry carrying its time; deletions leave the state.
    stored = parse_document(
        f'<urlset {RS}><rs:md capability="changelist" from="2026-03-01T00:00:00Z"/>'
        f"{''.join(r.entry_xml for r in result.records)}</urlset>".encode()
    )
    assert [v for v in validate(stored) if v.severity is Severity.ERROR] == []
    assert [e.md.datetime for e in stored.entries if e.md] == [
        from_us(r.time_us) for r in result.records
    ]
    assert result.records[0].state_xml is not None
    assert 'length="3"' in result.records[0].state_xml
    assert "change=" not in result.records[0].state_xml
    assert result.records[2].state_xml is None


def test_plan_takes_lastmod_as_the_time_of_a_1_0_fragment() -> None:
    doc = fragment(
        "<url><loc>http://e.org/a</loc><lastmod>2026-03-01T09:00:00Z</lastmod>"
        '<rs:md change="created"/></url>'
    )
    (record,) = plan(doc).records
    assert from_us(record.time_us) == datetime(2026, 3, 1, 9, tzinfo=UTC)


def test_plan_stamps_changes_without_time_with_now() -> None:
    doc = fragment(url("http://e.org/a", "created") + url("http://e.org/b", "created"))
    result = plan(doc)
    assert result.stamped
    assert [r.time_us for r in result.records] == [to_us(NOW), to_us(NOW)]


def test_plan_accepts_a_change_notification_with_from_until() -> None:
    doc = fragment(
        url("http://e.org/a", "created", "2026-03-01T10:00:00Z"),
        md='capability="change-notification" from="2026-03-01T09:00:00Z" '
        'until="2026-03-01T10:30:00Z"',
    )
    assert len(plan(doc).records) == 1


def test_plan_rejects_a_change_going_back_within_the_fragment() -> None:
    doc = fragment(
        url("http://e.org/a", "created", "2026-03-01T10:00:00Z")
        + url("http://e.org/b", "created", "2026-03-01T09:59:59Z")
    )
    with pytest.raises(IngestError) as excinfo:
        plan(doc)
    error = excinfo.value
    assert HTTP_STATUS[error.code] == 400
    # The validator's forward-order rule (Z39.99 §12.1) names the entry.
    assert error.code == "forward-order" or [(v.rule, v.entry) for v in error.violations] == [
        ("forward-order", 1)
    ]


def test_plan_rejects_a_stamped_change_after_a_later_timed_one() -> None:
    doc = fragment(
        url("http://e.org/a", "created", "2026-03-01T12:01:00Z") + url("http://e.org/b", "created")
    )
    with pytest.raises(IngestError) as excinfo:
        plan(doc)
    assert excinfo.value.code == "forward-order"
    assert "hub stamped it" in excinfo.value.message


def test_plan_future_tolerance_boundary() -> None:
    at_limit = (NOW + TOLERANCE).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert len(plan(fragment(url("http://e.org/a", "created", at_limit))).records) == 1
    beyond = (NOW + TOLERANCE + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with pytest.raises(IngestError) as excinfo:
        plan(
            fragment(
                url("http://e.org/a", "created", "2026-03-01T10:00:00Z")
                + url("http://e.org/b", "created", beyond)
            )
        )
    status, code, message = rejected(excinfo)
    assert (status, code) == (400, "future-change-time")
    assert message.startswith("entry 1:")


def test_plan_limits_entries_per_request() -> None:
    urls = "".join(url(f"http://e.org/{i}", "created", "2026-03-01T10:00:00Z") for i in range(4))
    assert len(plan(fragment(urls), max_entries=4).records) == 4
    with pytest.raises(IngestError) as excinfo:
        plan(fragment(urls), max_entries=3)
    assert rejected(excinfo)[:2] == (413, "too-many-entries")


@pytest.mark.parametrize(
    ("md", "root"),
    [
        ('capability="resourcelist" at="2026-03-01T10:00:00Z"', "urlset"),
        ('capability="changelist" from="2026-03-01T10:00:00Z"', "sitemapindex"),
        ('capability="changedump" from="2026-03-01T10:00:00Z"', "urlset"),
    ],
)
def test_plan_rejects_other_capabilities(md: str, root: str) -> None:
    entry = "sitemap" if root == "sitemapindex" else "url"
    doc = fragment(f"<{entry}><loc>http://e.org/a</loc></{entry}>", md=md, root=root)
    with pytest.raises(IngestError) as excinfo:
        plan(doc)
    assert rejected(excinfo)[:2] == (400, "wrong-capability")


def test_plan_rejects_an_empty_fragment() -> None:
    with pytest.raises(IngestError) as excinfo:
        plan(fragment(""))
    assert rejected(excinfo)[:2] == (400, "empty")


def test_plan_names_the_rule_and_the_entry_of_a_violation() -> None:
    doc = fragment(
        url("http://e.org/a", "created", "2026-03-01T10:00:00Z")
        + url("http://e.org/b", "modified", "2026-03-01T10:00:01Z")
    )
    with pytest.raises(IngestError) as excinfo:
        plan(doc)
    assert rejected(excinfo)[:2] == (400, "invalid-document")
    body = excinfo.value.as_json()
    violations = body["violations"]
    assert isinstance(violations, list)
    assert [(v["rule"], v["entry"]) for v in violations] == [("change-value", 1)]


def test_plan_rejects_a_change_without_change_attribute() -> None:
    with pytest.raises(IngestError) as excinfo:
        plan(fragment(url("http://e.org/a", None, "2026-03-01T10:00:00Z")))
    violations = excinfo.value.violations
    assert [(v.rule, v.entry) for v in violations] == [("change-missing", 0)]


@pytest.mark.parametrize(
    ("body", "status", "word"),
    [
        (b"<urlset", 400, "malformed"),
        (
            b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            b"<urlset>&x;</urlset>",
            400,
            "unsafe",
        ),
        (b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.8"/>', 400, "namespace"),
        (b"<foo/>", 400, "resource"),
        (b"<urlset " + RS.encode() + b">" + b" " * 2000 + b"</urlset>", 413, "large"),
    ],
)
def test_parse_fragment_translates_document_errors(body: bytes, status: int, word: str) -> None:
    with pytest.raises(IngestError) as excinfo:
        parse_fragment(body, max_bytes=1024)
    assert HTTP_STATUS[excinfo.value.code] == status
    assert word in excinfo.value.code


def test_microseconds_round_trip_exactly() -> None:
    for moment in (
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 0, 0, 999_999, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ):
        assert from_us(to_us(moment)) == moment
    assert to_us(datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)) == 1_000_001
    # Exact as a Lua number (store.py) for any time the hub accepts (now + tolerance).
    assert to_us(datetime(2200, 1, 1, tzinfo=UTC)) < 2**53


# --- hub.ingest: plan_seed ----------------------------------------------------------------


def test_plan_seed_takes_the_list_as_state_at_its_at() -> None:
    doc = fragment(
        "<url><loc>http://e.org/a</loc><lastmod>2026-02-01T00:00:00Z</lastmod>"
        '<rs:md hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6" length="8876"/></url>'
        '<url><loc>http://e.org/b</loc><rs:md length="1"/></url>',
        md='capability="resourcelist" at="2026-02-02T00:00:00Z"',
    )
    seed = plan_seed(doc, max_entries=10)
    assert seed.at_us == to_us(datetime(2026, 2, 2, tzinfo=UTC))
    assert sorted(seed.state) == ["http://e.org/a", "http://e.org/b"]
    assert "<lastmod>2026-02-01T00:00:00Z</lastmod>" in seed.state["http://e.org/a"]
    assert 'hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6"' in seed.state["http://e.org/a"]
    # No lastmod: the resource is as of the list's at.
    assert "<lastmod>2026-02-02T00:00:00Z</lastmod>" in seed.state["http://e.org/b"]


def test_plan_seed_rejects_change_lists_and_lists_without_at() -> None:
    with pytest.raises(IngestError) as excinfo:
        plan_seed(fragment(url("http://e.org/a", "created")), max_entries=10)
    assert rejected(excinfo)[:2] == (400, "wrong-capability")
    no_at = fragment("<url><loc>http://e.org/a</loc></url>", md='capability="resourcelist"')
    with pytest.raises(IngestError) as excinfo:
        plan_seed(no_at, max_entries=10)
    assert excinfo.value.code == "invalid-document"
    assert [v.rule for v in excinfo.value.violations] == ["time-at-missing"]


def test_plan_seed_limits_entries() -> None:
    doc = fragment(
        "<url><loc>http://e.org/a</loc></url><url><loc>http://e.org/b</loc></url>",
        md='capability="resourcelist" at="2026-02-02T00:00:00Z"',
    )
    with pytest.raises(IngestError) as excinfo:
        plan_seed(doc, max_entries=1)
    assert rejected(excinfo)[:2] == (413, "too-many-entries")


# --- hub.rotation: entries_to_close, trim_floor ------------------------------------------


def meta(
    *,
    open_count: int,
    open_from_us: int | None = 1,
    open_since: datetime | None = None,
    open_start: str = "0-0",
) -> TopicMeta:
    return TopicMeta(
        epoch="e",
        created_us=1,
        last_us=None,
        open_from_us=open_from_us,
        open_since_us=None if open_since is None else to_us(open_since),
        open_start=open_start,
        open_count=open_count,
        version=1,
        state_at_us=None,
    )


POLICY = RotationPolicy(max_entries=5, max_age_s=60, retention_s=3600)


@pytest.mark.parametrize(
    ("open_count", "age_s", "expected"),
    [
        (0, 1000, 0),  # nothing open: nothing to close, however old
        (4, 10, 0),  # neither full nor old
        (5, 0, 5),  # full
        (12, 0, 5),  # a burst: close one full list at a time
        (3, 60, 3),  # old enough: close what there is
        (3, 59.9, 0),
    ],
)
def test_entries_to_close(open_count: int, age_s: float, expected: int) -> None:
    since = NOW - timedelta(seconds=age_s)
    assert entries_to_close(meta(open_count=open_count, open_since=since), NOW, POLICY) == expected


def test_entries_to_close_needs_a_from_and_a_first_change_time() -> None:
    assert entries_to_close(meta(open_count=9, open_from_us=None), NOW, POLICY) == 0
    # Without open_since the age is unknown: only the size rule applies.
    assert entries_to_close(meta(open_count=3, open_since=None), NOW, POLICY) == 0
    assert entries_to_close(meta(open_count=5, open_since=None), NOW, POLICY) == 5


def test_trim_floor_never_passes_the_open_list() -> None:
    now_ms = to_us(NOW) // 1000
    # Nothing closed yet: never trim.
    assert trim_floor("0-0", NOW, 0) is None
    # Retention 0: everything closed goes (the first id kept is the one after the last closed).
    last_closed = f"{now_ms - 5}-3"
    assert trim_floor(last_closed, NOW, 0) == f"{now_ms - 5}-4"
    # A window: entries older than it go, even if closed later ones stay.
    assert trim_floor(f"{now_ms - 5}-3", NOW, 3600) == f"{now_ms - 3_600_000}-0"
    # Closed long ago, window shorter than that: only up to the closed boundary.
    old = f"{now_ms - 10_000_000}-0"
    assert trim_floor(old, NOW, 60) == f"{now_ms - 10_000_000}-1"
    # A window reaching before the epoch: nothing to trim.
    assert trim_floor(f"{now_ms}-0", NOW, to_us(NOW) / 1e6 + 10) is None


# --- hub.materialise ----------------------------------------------------------------------

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
        m.change_list(urls, start=start, until=None, fragments=(r.entry_xml for r in records)),
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
        m.change_list(urls, start=start, until=until, fragments=(r.entry_xml for r in records)),
        DocumentType.CHANGE_LIST,
    )
    assert closed.md.until == until
    empty = check(
        m.change_list(urls, start=start, until=None, fragments=()), DocumentType.CHANGE_LIST
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


# --- hub.auth -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Basic YTpi", None),
        ("abc", None),
        ("Token abc", None),
    ],
)
def test_bearer(header: str | None, token: str | None) -> None:
    assert bearer(header) == token


def test_find_source_by_token_digest() -> None:
    sources = [
        Source(name="a", token_sha256=token_sha256("tok-a"), topics=["t1"]),
        Source(name="b", token_sha256=token_sha256("tok-b").upper(), topics=["t2"]),
    ]
    assert token_sha256("x") == hashlib.sha256(b"x").hexdigest()
    found_a, found_b = find_source(sources, "tok-a"), find_source(sources, "tok-b")
    assert found_a is not None and found_a.name == "a"
    assert found_b is not None and found_b.name == "b"  # upper-case digest normalised
    assert find_source(sources, "tok-c") is None
    assert find_source(sources, "") is None
    assert find_source([], "tok-a") is None


def test_new_token_is_random_and_matches_its_digest() -> None:
    token, digest = new_token()
    other, _ = new_token()
    assert token != other
    assert len(token) >= 40
    assert set(token) <= set(string.ascii_letters + string.digits + "-_")
    assert digest == token_sha256(token)


# --- hub.settings -------------------------------------------------------------------------

CONFIG = """
redis_prefix = "from-file"
[hub]
base_url = "http://file.example:8080/"
[[topics]]
name = "dataset1"
[[sources]]
name = "museum"
token_sha256 = "{digest}"
topics = ["dataset1"]
[limits]
changelist_max_entries = 500
retention_s = 60
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.upper().startswith("RSPUSH_"):
            monkeypatch.delenv(name)
    path = tmp_path / "hub.toml"
    path.write_text(CONFIG.format(digest=token_sha256("t").upper()))
    return path


def test_load_settings_from_toml(config: Path) -> None:
    settings = load_settings(config)
    assert settings.hub.base_url == "http://file.example:8080"  # trailing slash dropped
    assert [t.name for t in settings.topics] == ["dataset1"]
    assert settings.sources[0].token_sha256 == token_sha256("t")
    assert settings.limits.changelist_max_entries == 500
    assert settings.limits.retention_s == 60
    assert settings.limits.max_body_bytes == 10 * 1024 * 1024  # a default
    assert settings.redis_prefix == "from-file"
    assert settings.redis_url is None


def test_env_beats_the_file_and_options_beat_env(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSPUSH_HUB__BASE_URL", "https://env.example")
    monkeypatch.setenv("RSPUSH_REDIS_PREFIX", "from-env")
    monkeypatch.setenv("RSPUSH_REDIS_URL", "redis://env:6379/0")
    monkeypatch.setenv("RSPUSH_LIMITS__RETENTION_S", "5")
    monkeypatch.setenv("RSPUSH_APPENDFSYNC", "always")
    settings = load_settings(config)
    assert settings.hub.base_url == "https://env.example"
    assert settings.redis_prefix == "from-env"
    assert settings.redis_url == "redis://env:6379/0"
    assert settings.limits.retention_s == 5
    assert settings.appendfsync == "always"
    overridden = load_settings(config, redis_url="redis://cli:1/0", port=0, host=None)
    assert overridden.redis_url == "redis://cli:1/0"
    assert overridden.port == 0
    assert overridden.host == "127.0.0.1"  # None options do not override


def test_load_settings_errors(config: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")
    text = config.read_text()
    for bad in (
        text.replace('name = "dataset1"', 'name = "bad name"', 1),
        text.replace('topics = ["dataset1"]', 'topics = ["other"]'),
        text.replace("changelist_max_entries = 500", "changelist_max_entries = 50001"),
        text.replace('"http://file.example:8080/"', '"ftp://file.example"'),
        text.replace(token_sha256("t").upper(), "not-hex"),
        text + '\n[[topics]]\nname = "dataset1"\n',
        "unknown_setting = 1\n" + text,
    ):
        config.write_text(bad)
        with pytest.raises(ValidationError):
            load_settings(config)


def test_settings_without_a_file_are_the_defaults(config: Path) -> None:
    settings = load_settings(None)
    assert settings == Settings()
    assert settings.limits.changelist_max_entries <= 50_000


# --- hub.keys -----------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["dataset1", "a", "x.y_z-9"])
def test_every_key_of_a_topic_shares_one_hash_slot(topic: str) -> None:
    keys = TopicKeys("rs", topic)
    names = [
        keys.stream,
        keys.meta,
        keys.state,
        keys.closed,
        keys.closed_list(0),
        keys.closed_list(12345),
        keys.idempotency("some-key{with}braces"),
        keys.lease,
    ]
    assert len(set(names)) == len(names)
    assert all(name.startswith(f"rs:{{{topic}}}:") for name in names)
    assert len({key_slot(name.encode()) for name in names}) == 1


def test_prefixes_and_topics_do_not_collide() -> None:
    a, b = TopicKeys("rs", "dataset1"), TopicKeys("rs2", "dataset1")
    c = TopicKeys("rs", "dataset2")
    assert a.stream != b.stream != c.stream
    assert key_slot(a.meta.encode()) == key_slot(b.meta.encode())  # the slot is the topic's
    assert a.closed_list(1) != a.closed_list(11)
