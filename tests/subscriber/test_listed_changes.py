"""A Change List's entries as changes (``changelists.dated_changes``), which turns each entry
into a change inline, gives what ``changes.from_entry`` gives for the same entry — every
field, the placing of entries without a time, the entries it cannot place — on lists parsed
by the real parser. The oracle is the loop over ``from_entry`` it replaced. Changes and
resource states built through their slots (``listed_change``, ``new_state``) are the ones
their dataclasses build, and as frozen."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime

import pytest

from rspush.resourcesync import Capability, Document, parse_document
from rspush.subscriber.changelists import PLACED, Unplaced, dated_changes
from rspush.subscriber.changes import (
    ChangeType,
    Channel,
    ResourceChange,
    from_entry,
    listed_change,
)
from rspush.subscriber.decide import ResourceState, new_state

HEAD = (
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/">'
)
ENTRIES = [
    # 1.1: datetime, hash, length, type, a link
    '<url><loc>http://x/a</loc><rs:md change="updated" datetime="2026-01-01T00:00:01Z" '
    'hash="md5:1e0a sha-256:abcd" length="7" type="text/plain"/>'
    '<rs:ln rel="collection" href="http://x/c"/></url>',
    # 1.0: lastmod only; a deletion with no time at all (placed)
    "<url><loc>http://x/b</loc><lastmod>2026-01-01T00:00:02Z</lastmod>"
    '<rs:md change="created"/></url>',
    '<url><loc>http://x/c</loc><rs:md change="deleted"/></url>',
    # both times: datetime wins
    "<url><loc>http://x/d</loc><lastmod>2026-01-01T00:00:09Z</lastmod>"
    '<rs:md change="updated" datetime="2026-01-01T00:00:03Z"/></url>',
    # no rs:md (as a Resource List entry), no change attribute
    "<url><loc>http://x/e</loc><lastmod>2026-01-01T00:00:04Z</lastmod></url>",
    '<url><loc>http://x/f</loc><rs:md datetime="2026-01-01T00:00:05Z" length="0"/></url>',
    "<url><loc>http://x/g</loc></url>",
    # a change type nobody knows, with and without a time
    '<url><loc>http://x/h</loc><rs:md change="moved" datetime="2026-01-01T00:00:06Z"/></url>',
    '<url><loc>http://x/i</loc><rs:md change="moved"/></url>',
    '<url><loc>http://x/j</loc><rs:md change="updated" datetime="2026-01-01T00:00:07Z"/></url>',
]


def oracle(document: Document, channel: Channel) -> tuple[list[ResourceChange], list[Unplaced]]:
    md = document.md
    placed_by = md.from_ or md.until or md.at
    changes: list[ResourceChange] = []
    unplaced: list[Unplaced] = []
    for entry in document.entries:
        change = from_entry(entry, channel, default_time=placed_by)
        if change is not None:
            if entry.change_time is None:
                change.extra[PLACED] = True
            placed_by = change.time
            changes.append(change)
            continue
        kind = entry.md.change if entry.md is not None else None
        known = kind is None or kind in {c.value for c in ChangeType}
        unplaced.append(
            Unplaced(entry.loc, ChangeType(kind or "updated") if known else ChangeType.UPDATED, "")
        )
    return changes, unplaced


def change_list(md: str, entries: list[str]) -> Document:
    body = f'{HEAD}<rs:md capability="changelist" {md}/>{"".join(entries)}</urlset>'
    document = parse_document(body.encode())
    assert document.md.capability == Capability.CHANGELIST
    return document


def fields(change: ResourceChange) -> tuple[object, ...]:
    return (
        change.uri,
        change.change,
        change.time,
        change.channel,
        change.length,
        change.hashes,
        change.media_type,
        change.links,
        change.position,
        change.epoch,
        change.extra,
        change.hash_text,
    )


@pytest.mark.parametrize(
    "md",
    ['from="2026-01-01T00:00:00Z"', 'at="2026-01-01T00:00:00Z"', ""],
    ids=["from", "at only", "nothing to place by"],
)
@pytest.mark.parametrize("start", range(len(ENTRIES)))
def test_each_entry_becomes_the_change_from_entry_makes(md: str, start: int) -> None:
    # every rotation: each entry first (nothing before it to place by) and after the others
    document = change_list(md, ENTRIES[start:] + ENTRIES[:start])
    changes, unplaced = dated_changes(document, Channel.ARCHIVE)
    expected, expected_unplaced = oracle(document, Channel.ARCHIVE)
    assert [fields(c) for c in changes] == [fields(c) for c in expected]
    assert [(u.uri, u.change) for u in unplaced] == [(u.uri, u.change) for u in expected_unplaced]
    assert all(isinstance(c.time, datetime) for c in changes)


def test_the_inputs_reach_every_case() -> None:
    changes, unplaced = dated_changes(change_list("", ENTRIES), Channel.POLL)
    placed = [c.uri for c in changes if c.extra.get(PLACED)]
    assert placed == ["http://x/c", "http://x/g"]
    assert [u.uri for u in unplaced] == ["http://x/h", "http://x/i"]
    assert {c.change for c in changes} == set(ChangeType)
    assert changes[0].hash_text == "md5:1e0a sha-256:abcd" and changes[0].links


def test_a_change_built_through_its_slots_is_the_dataclass_one() -> None:
    document = change_list('from="2026-01-01T00:00:00Z"', ENTRIES)
    for entry in document.entries[:4]:
        md = entry.md
        assert md is not None
        values = (
            entry.loc,
            ChangeType.UPDATED,
            entry.change_time or datetime(2026, 1, 1, tzinfo=UTC),
            Channel.POLL,
            md.length,
            md.hash,
            md.type,
            entry.links,
        )
        built, made = listed_change(*values), ResourceChange(*values)
        assert built == made and repr(built) == repr(made)
        assert fields(built) == fields(made)
        assert built.extra == {} and built.extra is not listed_change(*values).extra
        with pytest.raises(FrozenInstanceError):
            built.uri = "http://x/other"  # type: ignore[misc]


def test_a_state_built_through_its_slots_is_the_dataclass_one() -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    for values in [
        ("http://x/a", when, "updated", 3, "md5:1e0a", "a"),
        ("http://x/b", when, "deleted", None, None, None),
    ]:
        built, made = new_state(*values), ResourceState(*values)  # type: ignore[arg-type]
        assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
        assert built.hashes == made.hashes
        with pytest.raises(FrozenInstanceError):
            built.path = "elsewhere"  # type: ignore[misc]
