"""Change frames: the shared decoder reads back exactly what the encoders write, in both
formats, with every optional field of a change. Pure: no sockets, no Redis."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rspush.protocol import (
    FRAME_ENCODERS,
    REQUIRED_FIELDS,
    ChangesFrame,
    Position,
    ProtocolError,
    PushedChange,
    change_fields,
    change_json,
    decode_frame,
    decode_xml_frame,
    json_frame,
    xml_frame,
)
from rspush.resourcesync import Change, DocumentError, Entry, HashValue, Link, Metadata
from rspush.resourcesync.serialiser import serialise_entry
from rspush.resourcesync.w3cdt import to_us

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 10, 5, 0, 250000, tzinfo=UTC)


def _entries() -> list[tuple[Entry, Change, datetime]]:
    full = Entry(
        loc="http://example.com/res1.html",
        lastmod=T0,
        md=Metadata(
            change=Change.CREATED,
            datetime=T0,
            hash=(HashValue(algorithm="md5", digest="1584abdf8ebdc9802ac0c6a7402c03b6"),),
            length=8876,
            type="text/html",
            encoding="gzip",
        ),
        links=(Link(rel="alternate", href="http://example.com/res1.pdf", type="application/pdf"),),
    )
    gone = Entry(
        loc="http://example.com/a?x=1&y=<2>", md=Metadata(change=Change.DELETED, datetime=T1)
    )
    return [(full, Change.CREATED, T0), (gone, Change.DELETED, T1)]


def _pushed() -> list[PushedChange]:
    return [
        PushedChange(
            position=Position(1795305518802, i),
            time_us=to_us(moment),
            xml=serialise_entry(entry),
            json=change_json(entry, change, moment),
        )
        for i, (entry, change, moment) in enumerate(_entries())
    ]


def _expected() -> list[dict[str, object]]:
    return [
        {"position": f"1795305518802-{i}", **change_fields(entry, change, moment)}
        for i, (entry, change, moment) in enumerate(_entries())
    ]


def test_change_json_fields() -> None:
    (full, change, moment), _ = _entries()
    assert json.loads(change_json(full, change, moment)) == {
        "loc": "http://example.com/res1.html",
        "change": "created",
        "datetime": "2026-01-01T10:00:00Z",
        "lastmod": "2026-01-01T10:00:00Z",
        "hash": "md5:1584abdf8ebdc9802ac0c6a7402c03b6",
        "length": 8876,
        "type": "text/html",
        "encoding": "gzip",
        "links": [
            {"rel": "alternate", "href": "http://example.com/res1.pdf", "type": "application/pdf"}
        ],
    }


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_frames_decode_to_what_was_encoded(fmt: str) -> None:
    frame = FRAME_ENCODERS[fmt]("dataset1", "e1", T0, T1, _pushed())
    decoded = decode_frame(frame.decode())
    assert isinstance(decoded, ChangesFrame)
    assert (decoded.topic, decoded.epoch) == ("dataset1", "e1")
    assert (decoded.start, decoded.until) == ("2026-01-01T10:00:00Z", "2026-01-01T10:05:00.25Z")
    assert decoded.changes == _expected()
    assert all(list(change)[:4] == list(REQUIRED_FIELDS) for change in decoded.changes)


def test_both_formats_decode_alike() -> None:
    changes = _pushed()
    from_json = decode_frame(json_frame("t", "e", T0, T1, changes).decode())
    from_xml = decode_frame(xml_frame("t", "e", T0, T1, changes))  # bytes are XML too
    assert from_json == from_xml


@pytest.mark.parametrize(
    "text",
    [
        '{"type":"changes","topic":"t","epoch":"e","changes":[{"loc":"x"}]}',
        '{"type":"changes","topic":"t","epoch":"e","changes":{}}',
        '{"type":"changes","topic":"t","epoch":"e","changes":["x"]}',
    ],
)
def test_malformed_json_frames(text: str) -> None:
    with pytest.raises(ProtocolError):
        decode_frame(text)


def test_json_frame_without_topic() -> None:
    with pytest.raises(KeyError):
        decode_frame('{"type":"changes","epoch":"e","changes":[]}')


def test_xml_entry_without_change_is_malformed() -> None:
    frame = xml_frame("t", "e", T0, T1, _pushed()).decode()
    broken = frame.replace('change="deleted" ', "", 1)
    with pytest.raises(ProtocolError, match="no rs:md change/datetime"):
        decode_xml_frame(broken)


def test_xml_that_does_not_parse() -> None:
    with pytest.raises(DocumentError):
        decode_frame("<urlset")
