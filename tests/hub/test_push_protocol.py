"""The push protocol module on its own (docs/protocol.md): positions, subscribe messages,
frames and close reasons. Pure: no sockets, no Redis."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rspush.protocol import (
    BASE_VERSION,
    PROTOCOL_VERSION,
    RSPUSH_NS,
    ZERO,
    CloseCode,
    Position,
    ProtocolError,
    PushedChange,
    change_json,
    close_reason,
    control,
    json_frame,
    parse_subscribe,
    xml_frame,
)
from rspush.resourcesync import (
    Change,
    DocumentType,
    Entry,
    HashValue,
    Metadata,
    Severity,
    parse_document,
    parse_w3c_datetime,
    validate,
)
from rspush.resourcesync.schema import schema_errors
from rspush.resourcesync.serialiser import serialise_entry
from rspush.resourcesync.w3cdt import to_us

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 10, 5, tzinfo=UTC)
T2 = datetime(2026, 1, 1, 10, 7, 30, 250000, tzinfo=UTC)


# --- positions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000000-0", Position(1700000000000, 0)),
        ("1795305518802-17", Position(1795305518802, 17)),
        ("0-0", ZERO),
        ("42", Position(42, 0)),  # a bare millisecond part, as Redis accepts
    ],
)
def test_position_parse(text: str, expected: Position) -> None:
    assert Position.parse(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "-", "-1", "1-", "a-0", "1-b", "1-2-3", " 1-0", "1-0 ", "+1-0", "1.5-0", "١-٠", "1_0-0"],
)
def test_position_parse_rejects(text: str) -> None:
    with pytest.raises(ProtocolError, match="stream id"):
        Position.parse(text)


def test_position_str_round_trips() -> None:
    for position in (ZERO, Position(1, 2), Position(1795305518802, 12345)):
        assert Position.parse(str(position)) == position
    assert str(Position(1795305518802, 1)) == "1795305518802-1"


def test_positions_are_ordered_numerically() -> None:
    # Numbers, not strings: "9-0" < "10-0" and "5-9" < "5-10".
    texts = ["10-0", "9-0", "5-10", "5-9", "0-0", "10-1", "1795305518802-0"]
    ordered = sorted(Position.parse(t) for t in texts)
    assert [str(p) for p in ordered] == [
        "0-0",
        "5-9",
        "5-10",
        "9-0",
        "10-0",
        "10-1",
        "1795305518802-0",
    ]
    assert Position(1, 99) < Position(2, 0)
    assert Position(3, 1) > Position(3, 0)
    assert ZERO <= Position(0, 0) < Position(0, 1)
    assert max(Position(7, 1), Position(6, 100)) == Position(7, 1)


# --- subscribe messages ------------------------------------------------------------------


def test_parse_subscribe_defaults() -> None:
    message = parse_subscribe('{"type":"subscribe","topics":[{"topic":"dataset1"}]}')
    # A message naming no version is version 1: no framework frames (docs/protocol.md).
    assert message.version == BASE_VERSION == 1
    assert message.framework is False
    assert message.format == "json"
    assert message.token is None
    [topic] = message.topics
    assert topic.topic == "dataset1"
    assert topic.resume_position is None
    assert topic.resume_since is None


def test_parse_subscribe_full() -> None:
    raw = json.dumps(
        {
            "type": "subscribe",
            "version": 1,
            "format": "xml",
            "token": "secret",
            "topics": [
                {"topic": "dataset1", "position": "1795305518802-1", "epoch": "a0a1"},
                {"topic": "dataset2", "since": "2026-01-01T10:00:00Z"},
                {"topic": "dataset3"},
            ],
        }
    ).encode()  # bytes are accepted too
    message = parse_subscribe(raw)
    assert message.format == "xml"
    assert message.token == "secret"
    first, second, third = message.topics
    assert first.resume_position == Position(1795305518802, 1)
    assert first.epoch == "a0a1"
    assert second.resume_since == T0
    assert second.resume_position is None
    assert third.resume_position is None and third.resume_since is None


def _subscribe(**fields: object) -> str:
    return json.dumps({"type": "subscribe", "topics": [{"topic": "dataset1"}], **fields})


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ("", "bad subscribe message"),
        ("not json", "bad subscribe message"),
        ("[]", "bad subscribe message"),
        ('{"type":"subscribe"}', "topics"),
        (_subscribe(type="unsubscribe"), "type"),
        (_subscribe(topics=[]), "topics"),
        (_subscribe(topics=[{"topic": f"t{i}"} for i in range(257)]), "topics"),
        (_subscribe(topics=[{}]), "topics.0.topic"),
        (_subscribe(topics=[{"topic": "dataset1", "position": "yesterday"}]), "position"),
        (_subscribe(topics=[{"topic": "dataset1", "since": "yesterday"}]), "since"),
        (_subscribe(topics=[{"topic": "dataset1", "colour": "red"}]), "colour"),
        (_subscribe(format="csv"), "format"),
        (_subscribe(extra=1), "extra"),
        (_subscribe(version=PROTOCOL_VERSION + 1), f"protocol version {PROTOCOL_VERSION + 1}"),
        (_subscribe(framework=True), "framework frames need protocol version 2"),
        (_subscribe(topics=[{"topic": "dataset1"}, {"topic": "dataset1"}]), "twice"),
    ],
)
def test_parse_subscribe_errors(raw: str, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        parse_subscribe(raw)


def test_parse_subscribe_accepts_256_topics() -> None:
    message = parse_subscribe(_subscribe(topics=[{"topic": f"t{i}"} for i in range(256)]))
    assert len(message.topics) == 256


def test_control_messages_are_compact_json() -> None:
    text = control("subscribed", topic="dataset1", epoch="e", position="1-0")
    assert " " not in text
    assert json.loads(text) == {
        "type": "subscribed",
        "topic": "dataset1",
        "epoch": "e",
        "position": "1-0",
    }


def test_close_codes() -> None:
    assert CloseCode.SHUTDOWN == 1001
    assert CloseCode.TRY_AGAIN_LATER == 1013  # RFC 6455 §7.4.1's registered "try again later"
    standard = (CloseCode.SHUTDOWN, CloseCode.TRY_AGAIN_LATER)
    assert [c.value for c in CloseCode if c not in standard] == [
        4000,
        4001,
        4002,
        4003,
        4004,
    ]


# --- frames ------------------------------------------------------------------------------


def _pushed(position: Position, entry: Entry, change: str, moment: datetime) -> PushedChange:
    return PushedChange(
        position=position,
        time_us=to_us(moment),
        xml=serialise_entry(entry),
        json=change_json(entry, change, moment),
    )


def _changes() -> list[PushedChange]:
    first = Entry(
        loc="http://example.com/res1.html",
        md=Metadata(
            change=Change.CREATED,
            datetime=T0,
            hash=(HashValue(algorithm="md5", digest="1584abdf8ebdc9802ac0c6a7402c03b6"),),
            length=8876,
            type="text/html",
        ),
    )
    second = Entry(
        loc="http://example.com/a?x=1&y=<2>",
        md=Metadata(change=Change.UPDATED, datetime=T1, length=14599, type="application/pdf"),
    )
    third = Entry(
        loc="http://example.com/gone",
        md=Metadata(change=Change.DELETED, datetime=T2),
    )
    return [
        _pushed(Position(1795305518802, 0), first, "created", T0),
        _pushed(Position(1795305518802, 1), second, "updated", T1),
        _pushed(Position(1795305519000, 0), third, "deleted", T2),
    ]


def test_json_frame() -> None:
    start = datetime(2026, 1, 1, 9, 59, tzinfo=UTC)
    frame = json_frame("dataset1", "a0a14df1ce2c790e", start, T2, _changes())
    assert isinstance(frame, bytes)
    message = json.loads(frame)
    assert message["type"] == "changes"
    assert message["topic"] == "dataset1"
    assert message["epoch"] == "a0a14df1ce2c790e"
    assert message["from"] == "2026-01-01T09:59:00Z"
    assert parse_w3c_datetime(message["until"]) == T2
    assert message["changes"] == [
        {
            "position": "1795305518802-0",
            "loc": "http://example.com/res1.html",
            "change": "created",
            "datetime": "2026-01-01T10:00:00Z",
            "hash": "md5:1584abdf8ebdc9802ac0c6a7402c03b6",
            "length": 8876,
            "type": "text/html",
        },
        {
            "position": "1795305518802-1",
            "loc": "http://example.com/a?x=1&y=<2>",
            "change": "updated",
            "datetime": "2026-01-01T10:05:00Z",
            "length": 14599,
            "type": "application/pdf",
        },
        {
            "position": "1795305519000-0",
            "loc": "http://example.com/gone",
            "change": "deleted",
            "datetime": message["changes"][2]["datetime"],
        },
    ]
    assert parse_w3c_datetime(message["changes"][2]["datetime"]) == T2
    # The position comes first in every change object (cheap to find for a reader).
    assert all(next(iter(change)) == "position" for change in message["changes"])


def test_json_frame_single_change() -> None:
    [one] = _changes()[:1]
    message = json.loads(json_frame("dataset2", "e", T0, T0, [one]))
    assert message["from"] == message["until"] == "2026-01-01T10:00:00Z"
    assert [c["position"] for c in message["changes"]] == ["1795305518802-0"]


def test_xml_frame_is_a_valid_change_notification() -> None:
    start = datetime(2026, 1, 1, 9, 59, tzinfo=UTC)
    frame = xml_frame("dataset1", "a0a14df1ce2c790e", start, T2, _changes())
    assert isinstance(frame, bytes)
    document = parse_document(frame)
    assert document.type is DocumentType.CHANGE_NOTIFICATION
    assert document.capability == "change-notification"
    assert [v for v in validate(document) if v.severity is Severity.ERROR] == []
    assert validate(document) == []
    assert schema_errors(frame) == []
    assert document.md.from_ == start
    assert document.md.until == T2
    assert document.md.extra == {
        f"{{{RSPUSH_NS}}}topic": "dataset1",
        f"{{{RSPUSH_NS}}}epoch": "a0a14df1ce2c790e",
    }
    assert [e.loc for e in document.entries] == [
        "http://example.com/res1.html",
        "http://example.com/a?x=1&y=<2>",
        "http://example.com/gone",
    ]
    assert [e.change for e in document.entries] == ["created", "updated", "deleted"]
    assert [e.change_time for e in document.entries] == [T0, T1, T2]
    positions = []
    for entry in document.entries:
        assert entry.md is not None
        positions.append(entry.md.extra[f"{{{RSPUSH_NS}}}position"])
    assert positions == ["1795305518802-0", "1795305518802-1", "1795305519000-0"]
    first = document.entries[0]
    assert first.md is not None and first.md.length == 8876 and first.md.type == "text/html"


def test_xml_and_json_frames_agree() -> None:
    changes = _changes()
    xml_doc = parse_document(xml_frame("dataset1", "e", T0, T2, changes))
    message = json.loads(json_frame("dataset1", "e", T0, T2, changes))
    assert [
        (e.md.extra[f"{{{RSPUSH_NS}}}position"], e.loc, e.change, e.change_time)
        for e in xml_doc.entries
        if e.md is not None
    ] == [
        (c["position"], c["loc"], c["change"], parse_w3c_datetime(c["datetime"]))
        for c in message["changes"]
    ]
    assert parse_w3c_datetime(message["from"]) == xml_doc.md.from_
    assert parse_w3c_datetime(message["until"]) == xml_doc.md.until


# --- close reasons -----------------------------------------------------------------------


def test_close_reason_holds_the_resume_positions() -> None:
    resume = {"dataset1": Position(1795305518802, 1), "dataset2": ZERO}
    reason = close_reason(resume)
    assert json.loads(reason) == {"dataset1": "1795305518802-1", "dataset2": "0-0"}
    assert close_reason({}) == "{}"


def test_close_reason_respects_the_123_byte_limit() -> None:
    # Each topic costs len(name) + len(position) + 6 bytes ("":"",) in the compact JSON.
    fits = {f"t{i}": Position(1795305518802, i) for i in range(4)}
    assert len(close_reason(fits).encode()) <= 123
    assert json.loads(close_reason(fits)) == {k: str(v) for k, v in fits.items()}

    too_many = {f"topic-{i}": Position(1795305518802, i) for i in range(10)}
    reason = close_reason(too_many)
    assert len(reason.encode()) <= 123
    with pytest.raises(json.JSONDecodeError):
        json.loads(reason)
    assert "resume" in reason


def test_close_reason_boundary() -> None:
    # {"<name>":"1795305518802-1"} is len(name) + 22 bytes.
    exactly = {"x" * 101: Position(1795305518802, 1)}
    assert len(close_reason(exactly).encode()) == 123
    assert json.loads(close_reason(exactly)) == {"x" * 101: "1795305518802-1"}
    over = {"x" * 102: Position(1795305518802, 1)}
    assert not close_reason(over).startswith("{")
    assert len(close_reason(over).encode()) <= 123
