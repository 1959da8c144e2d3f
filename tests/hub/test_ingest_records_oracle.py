"""Property: the hub stores, byte for byte, what the earlier generic path wrote
(tests/hub/record_oracle.py): the Change List entry, the Resource List entry and the change
JSON of every change, and the serialiser's entries and ``rs:md``/``rs:ln`` elements — over
entries with every attribute of Table 3 (hashes, length, type, encoding, path, the datetimes,
foreign attributes), rs:ln links, the 1.0 ``<lastmod>`` form, deletions, non-ASCII text and
characters that need escaping, built in code or parsed from XML."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tests.hub.record_oracle as oracle
from rspush.hub.ingest import _record, plan_changes, plan_seed
from rspush.resourcesync import Change, Document, DocumentType, Entry, Metadata, parse_document
from rspush.resourcesync.serialiser import _element, serialise, serialise_entry
from rspush.resourcesync.w3cdt import format_w3c_datetime
from tests.support.strategies import (
    attribute_text,
    documents,
    extras,
    hash_tuples,
    links,
    paths,
    uris,
    utc_datetimes,
)

PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Aware datetimes in UTC and in other zones (the hub's own clock is UTC; entries are
# normalised to UTC by the models, but the writer must not depend on it).
_zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=11))]
)
moments = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=_zones
)
_opt = st.none
texts = attribute_text | st.sampled_from(["é&<>\"'\t\n\r日", "a b", "", "x" * 40])
locs = uris | texts.map(lambda t: "http://example.com/" + t)
_extras = extras | st.just({"{http://www.w3.org/XML/1998/namespace}lang": "fr&<"})
metadata = st.builds(
    Metadata,
    capability=_opt() | texts,
    at=_opt() | utc_datetimes,
    completed=_opt() | utc_datetimes,
    from_=_opt() | utc_datetimes,
    until=_opt() | utc_datetimes,
    change=_opt() | st.sampled_from([*Change, "created"]),
    datetime=_opt() | moments,
    hash=st.just(()) | hash_tuples,
    length=_opt() | st.integers(0, 10**15),
    path=_opt() | paths | texts,
    type=_opt() | texts | st.just("text/html"),
    encoding=_opt() | texts,
    modified=_opt() | moments,
    extra=_extras,
)
entry_links = st.lists(links(st.sampled_from(["alternate", "duplicate"]) | texts), max_size=2)
entries = st.builds(
    Entry,
    loc=locs,
    lastmod=_opt() | moments,
    changefreq=_opt() | texts | st.just("daily"),
    priority=_opt() | st.sampled_from([0.0, 0.125, 0.5, 1.0]),
    md=_opt() | metadata,
    links=entry_links.map(tuple),
)


@st.composite
def entry_and_moment(draw: st.DrawFn) -> tuple[Entry, datetime]:
    """An entry and its change time: its own (1.1 datetime or 1.0 lastmod, the very object
    the planner passes) or the hub's (stamped)."""
    entry = draw(entries)
    own = entry.change_time
    moment = own if own is not None and draw(st.booleans()) else draw(moments)
    return entry, moment


@PROPERTY
@given(entry_and_moment())
def test_records_are_the_oracles(case: tuple[Entry, datetime]) -> None:
    entry, moment = case
    record = _record(entry, moment)
    assert (record.entry_xml, record.state_xml, record.entry_json) == oracle.record(entry, moment)


@PROPERTY
@given(entries, metadata)
def test_serialised_entries_and_elements_are_the_oracles(entry: Entry, md: Metadata) -> None:
    assert serialise_entry(entry) == oracle.serialise_entry(entry)
    assert serialise_entry(entry, "sitemap") == oracle.serialise_entry(entry, "sitemap")
    assert _element("rs:md", md) == oracle.element("rs:md", md)
    for link in entry.links:
        assert _element("rs:ln", link) == oracle.element("rs:ln", link)


@PROPERTY
@given(moments)
def test_datetimes_are_formatted_as_the_oracle(moment: datetime) -> None:
    assert format_w3c_datetime(moment) == oracle.format_w3c_datetime(moment)
    assert format_w3c_datetime(moment.replace(microsecond=0)) == oracle.format_w3c_datetime(
        moment.replace(microsecond=0)
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(DocumentType.CHANGE_LIST, min_entries=1, max_entries=6), moments)
def test_records_of_parsed_fragments_are_the_oracles(document: Document, now: datetime) -> None:
    """Through the parser: the models it builds give the same records as the oracle's."""
    parsed = parse_document(serialise(document))
    latest = max((e.change_time for e in parsed.entries if e.change_time), default=now)
    stamp = max(now, latest)
    times = [e.change_time or stamp for e in parsed.entries]
    assume(times == sorted(times))  # entries the hub stamps come last
    plan = plan_changes(parsed, now=stamp, max_entries=100, future_tolerance=timedelta(0))
    expected = [oracle.record(e, t) for e, t in zip(parsed.entries, times, strict=True)]
    assert [(r.entry_xml, r.state_xml, r.entry_json) for r in plan.records] == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(DocumentType.RESOURCE_LIST, max_entries=6))
def test_seeded_states_are_the_oracles(document: Document) -> None:
    parsed = parse_document(serialise(document))
    plan = plan_seed(parsed, max_entries=100)
    at = parsed.md.at
    assert at is not None
    assert plan.state == {
        e.loc: oracle.state_xml(e, oracle.format_w3c_datetime(e.lastmod or at))
        for e in parsed.entries
    }
