"""Planning an ingest, without Redis or a clock (``now`` is passed in): a Change List fragment
becomes the changes to store, with their times, or a rejection naming the rule and entry;
a Resource List seeds a topic at its ``at``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rspush.hub.app import HTTP_STATUS
from rspush.hub.errors import IngestError
from rspush.hub.ingest import (
    parse_fragment,
    plan_changes,
    plan_seed,
)
from rspush.protocol import MAX_CHANGE_BYTES
from rspush.resourcesync import Severity, parse_document, validate
from rspush.resourcesync.w3cdt import from_us, to_us
from tests.support.fragments import iso
from tests.support.ingest import NOW, RS, TOLERANCE, fragment, plan, rejected, url

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


def test_plan_rejects_an_entry_too_large_for_one_push_frame() -> None:
    # A frame carries at least one whole change: an entry past that is refused at ingest,
    # not split or dropped later (docs/protocol.md, limits).
    links = "".join(
        f'<rs:ln rel="alternate" href="http://e.org/a/mirror/{i:06d}/with/a/long/path.html"/>'
        for i in range(60_000)
    )
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {RS}><rs:md capability="changelist"/>'
        f'<url><loc>http://e.org/a</loc><rs:md change="created" datetime="2026-03-01T10:00:00Z"/>'
        f"{links}</url></urlset>"
    ).encode()
    assert len(body) > MAX_CHANGE_BYTES
    with pytest.raises(IngestError) as excinfo:
        plan(parse_fragment(body, max_bytes=len(body)))
    assert rejected(excinfo)[:2] == (413, "entry-too-large")
    assert excinfo.value.entry == 0


def test_a_late_stamp_moves_stamped_times_but_not_the_future_bound_of_given_ones() -> None:
    # After a Source dated a change ahead of the clock, the hub stamps later than its clock;
    # the times other Sources give are still bounded by the clock, not by that stamp.
    stamp = NOW + TOLERANCE
    given = iso(NOW + TOLERANCE + timedelta(seconds=1))
    with pytest.raises(IngestError) as excinfo:
        plan_changes(
            fragment(url("http://e.org/a", "created", given)),
            now=NOW,
            stamp=stamp,
            max_entries=10,
            future_tolerance=TOLERANCE,
        )
    assert excinfo.value.code == "future-change-time"
    stamped = plan_changes(
        fragment(url("http://e.org/b", "created")),
        now=NOW,
        stamp=stamp + timedelta(microseconds=1),
        max_entries=10,
        future_tolerance=TOLERANCE,
    )
    assert stamped.first_time_us == to_us(stamp) + 1
