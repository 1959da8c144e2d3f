"""Bounds of the push contract: positions are unsigned 64-bit pairs, and no frame passes
MAX_FRAME_BYTES (a batch is split, contiguously). Pure: no sockets, no Redis."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from rspush.protocol import (
    FRAME_ENCODERS,
    MAX_CHANGE_BYTES,
    MAX_FRAME_BYTES,
    MAX_SUBSCRIBE_BYTES,
    MAX_TOPICS,
    Position,
    ProtocolError,
    PushedChange,
    decode_frame,
    encode_frames,
    parse_subscribe,
)
from rspush.resourcesync.w3cdt import format_w3c_datetime, to_us

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "99999999999999999999999-0",
        "18446744073709551616-0",
        "0-18446744073709551616",
        "1-" + "9" * 5000,
        "9" * 5000,
    ],
)
def test_out_of_range_positions_are_protocol_errors(text: str) -> None:
    with pytest.raises(ProtocolError, match="out of range"):
        Position.parse(text)


def test_the_largest_positions_parse() -> None:
    top = 2**64 - 1
    assert Position.parse(f"{top}-{top}") == Position(top, top)
    assert Position.parse(f"{top}") == Position(top, 0)


def test_subscribe_with_out_of_range_position_is_refused() -> None:
    raw = json.dumps(
        {
            "type": "subscribe",
            "topics": [{"topic": "t", "position": "99999999999999999999999-0", "epoch": "e"}],
        }
    )
    with pytest.raises(ProtocolError, match="out of range"):
        parse_subscribe(raw)


def test_a_subscribe_of_max_topics_fits_the_client_message_bound() -> None:
    top = 2**64 - 1
    topics = [
        {
            "topic": f"{i:03d}" + "t" * 61,
            "position": f"{top}-{top}",
            "epoch": "a0a14df1ce2c790e",
            "since": "2026-01-01T10:00:00.123456Z",
        }
        for i in range(MAX_TOPICS)
    ]
    raw = json.dumps({"type": "subscribe", "token": "x" * 256, "topics": topics})
    assert len(raw.encode()) < MAX_SUBSCRIBE_BYTES
    assert len(parse_subscribe(raw).topics) == MAX_TOPICS


def _changes(count: int, loc_bytes: int) -> list[PushedChange]:
    out = []
    for i in range(count):
        moment = T0 + timedelta(milliseconds=i)
        loc = f"http://example.com/{i}/" + "x" * loc_bytes
        when = format_w3c_datetime(moment)
        out.append(
            PushedChange(
                position=Position(to_us(moment) // 1000, i),
                time_us=to_us(moment),
                xml=f'<url><loc>{loc}</loc><rs:md change="created" datetime="{when}"/></url>',
                json=json.dumps({"loc": loc, "change": "created", "datetime": when}),
            )
        )
    return out


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_a_batch_that_fits_is_one_frame_with_the_encoders_bytes(fmt: str) -> None:
    changes = _changes(1000, 200)
    until = T0 + timedelta(milliseconds=999)
    frames = encode_frames(FRAME_ENCODERS[fmt], "t", "e", T0, until, changes)
    assert [f.data for f in frames] == [FRAME_ENCODERS[fmt]("t", "e", T0, until, changes)]
    assert frames[0].last == changes[-1].position and frames[0].until == until


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_a_batch_past_the_bound_is_split_into_contiguous_frames(fmt: str) -> None:
    # 1,000 changes of ~10 KB: ~10 MB in one frame, past the 4 MiB bound.
    changes = _changes(1000, 10_000)
    until = T0 + timedelta(milliseconds=999)
    assert len(FRAME_ENCODERS[fmt]("t", "e", T0, until, changes)) > MAX_FRAME_BYTES
    frames = encode_frames(FRAME_ENCODERS[fmt], "t", "e", T0, until, changes)
    assert len(frames) > 1
    assert all(len(f.data) <= MAX_FRAME_BYTES for f in frames)
    decoded = [decode_frame(f.data if fmt == "xml" else f.data.decode()) for f in frames]
    positions = [c["position"] for d in decoded for c in d.changes]  # type: ignore[union-attr]
    assert positions == [str(c.position) for c in changes]
    assert decoded[0].start == format_w3c_datetime(T0)  # type: ignore[union-attr]
    for previous, frame in zip(decoded, decoded[1:], strict=False):
        assert frame.start == previous.until  # type: ignore[union-attr]
    assert decoded[-1].until == format_w3c_datetime(until)  # type: ignore[union-attr]
    assert frames[-1].last == changes[-1].position


def test_the_largest_change_fits_a_frame_alone() -> None:
    (change,) = _changes(1, 0)
    loc_room = MAX_CHANGE_BYTES - len(change.xml.encode())
    (big,) = _changes(1, loc_room)
    assert len(big.xml.encode()) <= MAX_CHANGE_BYTES + 20
    for fmt in ("json", "xml"):
        topic = "t" * 64
        (frame,) = encode_frames(FRAME_ENCODERS[fmt], topic, "a" * 16, T0, T0, [big])
        assert len(frame.data) <= MAX_FRAME_BYTES
