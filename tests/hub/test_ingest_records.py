"""Property: the one-pass builder of change records writes exactly what copying the entry's
model and serialising each form would (the definition below): the Change List entry with its
datetime (and lastmod unless deleted), the Resource List entry, and the push JSON — for
entries with and without lastmod, metadata, foreign attributes, links and escapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from rspush.hub.ingest import _record, plan_seed
from rspush.protocol import change_json
from rspush.resourcesync import Change, Entry, Link, Metadata, parse_document
from rspush.resourcesync.serialiser import serialise_entry

BASE = datetime(2026, 1, 1, tzinfo=UTC)
moments = st.integers(0, 10**12).map(lambda us: BASE + timedelta(microseconds=us))
texts = st.text(alphabet='ab&<>"\n\té', min_size=1, max_size=8)
hashes = st.lists(st.sampled_from(["md5:1e0d5cb8ef6ba40c99b14c0237be735e", "sha-256:ab"]))
metadata = st.builds(
    Metadata,
    change=st.none() | st.sampled_from(list(Change)),
    datetime=st.none() | moments,
    hash=hashes.map(lambda h: " ".join(h) or ()),
    length=st.none() | st.integers(0, 10**9),
    type=st.none() | texts,
    encoding=st.none() | texts,
    path=st.none() | texts,
    extra=st.dictionaries(st.just("{http://example.org/x}note"), texts, max_size=1),
)
links = st.lists(
    st.builds(Link, rel=st.sampled_from(["alternate", "duplicate"]), href=texts), max_size=2
)
entries = st.builds(
    Entry,
    loc=texts.map(lambda t: "http://example.com/" + t),
    lastmod=st.none() | moments,
    changefreq=st.none() | st.just("daily"),
    priority=st.none() | st.sampled_from([0.0, 0.5, 1.0]),
    md=st.none() | metadata,
    links=links.map(tuple),
)


def _state_entry(entry: Entry, moment: datetime) -> Entry:
    kept = None
    if entry.md is not None:
        kept = entry.md.model_copy(update={"change": None, "datetime": None})
        if kept == Metadata():
            kept = None
    return Entry.model_construct(
        loc=entry.loc,
        lastmod=entry.lastmod or moment,
        changefreq=entry.changefreq,
        priority=entry.priority,
        md=kept,
        links=entry.links,
    )


def defined(entry: Entry, moment: datetime) -> tuple[str, str | None, str]:
    """The three forms by their definition: model copies, each serialised."""
    md = entry.md or Metadata()
    change = md.change or Change.UPDATED
    update: dict[str, object] = {"md": md.model_copy(update={"datetime": moment})}
    if change != Change.DELETED and entry.lastmod is None:
        update["lastmod"] = moment
    stored = entry.model_copy(update=update)
    state = None if change == Change.DELETED else serialise_entry(_state_entry(entry, moment))
    return serialise_entry(stored), state, change_json(stored, change, moment)


@settings(max_examples=300, deadline=None)
@given(entries, moments)
def test_records_are_built_as_defined(entry: Entry, moment: datetime) -> None:
    record = _record(entry, moment)
    assert (record.entry_xml, record.state_xml, record.entry_json) == defined(entry, moment)


def test_seeded_state_is_the_resource_list_entry() -> None:
    body = (
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        b'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        b'<rs:md capability="resourcelist" at="2026-01-02T00:00:00Z"/>'
        b"<url><loc>http://example.com/a</loc>"
        b'<rs:md hash="md5:1e0d5cb8ef6ba40c99b14c0237be735e" length="8"/></url>'
        b"<url><loc>http://example.com/b</loc><lastmod>2026-01-01T00:00:00Z</lastmod></url>"
        b"</urlset>"
    )
    document = parse_document(body)
    plan = plan_seed(document, max_entries=10)
    at = datetime(2026, 1, 2, tzinfo=UTC)
    assert plan.state == {
        e.loc: serialise_entry(_state_entry(e, e.lastmod or at)) for e in document.entries
    }
