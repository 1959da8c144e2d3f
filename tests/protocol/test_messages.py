"""The hub's control messages and the client's subscribe message: one encoder and one
decoder per kind, the bytes as docs/protocol.md shows them. Pure: no sockets, no Redis."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rspush.protocol import (
    ZERO,
    HistoryInsufficient,
    Position,
    ProtocolError,
    Refusal,
    Subscribe,
    Subscribed,
    TopicRequest,
    decode_control,
    decode_frame,
    parse_subscribe,
)

ARCHIVE = "http://hub.example.org/topics/dataset1/changelist-archive.xml"


def test_subscribed_bytes_and_round_trip() -> None:
    message = Subscribed("dataset1", "a0a14df1ce2c790e", Position(1795305518802, 1))
    text = message.encode()
    assert text == (
        '{"type":"subscribed","topic":"dataset1","epoch":"a0a14df1ce2c790e",'
        '"position":"1795305518802-1"}'
    )
    assert decode_frame(text) == message
    assert message.as_dict() == json.loads(text)


def test_history_insufficient_bytes_and_round_trip() -> None:
    message = HistoryInsufficient(
        topic="dataset1",
        reason="trimmed",
        epoch="a0a14df1ce2c790e",
        oldest=Position(1795305600000, 0),
        after=Position(1795305599000, 3),
        after_time=datetime(2026, 1, 1, 9, 59, 59, tzinfo=UTC),
        archive=ARCHIVE,
    )
    text = message.encode()
    assert text == (
        '{"type":"history-insufficient","topic":"dataset1","reason":"trimmed",'
        '"epoch":"a0a14df1ce2c790e","oldest":"1795305600000-0","after":"1795305599000-3",'
        f'"after_time":"2026-01-01T09:59:59Z","archive":"{ARCHIVE}"}}'
    )
    assert decode_frame(text) == message


def test_history_insufficient_of_an_empty_never_trimmed_stream() -> None:
    message = HistoryInsufficient("t", "epoch-changed", "e", None, ZERO, None, ARCHIVE)
    data = json.loads(message.encode())
    assert data["oldest"] is None and data["after"] == "0-0" and data["after_time"] is None
    assert decode_frame(message.encode()) == message


def test_history_insufficient_from_a_hub_without_after() -> None:
    decoded = decode_control(
        {"type": "history-insufficient", "topic": "t", "reason": "trimmed", "archive": ARCHIVE}
    )
    assert decoded == HistoryInsufficient("t", "trimmed", "", None, None, None, ARCHIVE)


def test_refusal_bytes_and_round_trip() -> None:
    message = Refusal("unknown-topic", "no topic 'nope'")
    text = message.encode()
    assert text == '{"type":"error","error":"unknown-topic","message":"no topic \'nope\'"}'
    assert decode_frame(text) == message


def test_unknown_control_messages_pass_through() -> None:
    assert decode_frame('{"type":"hello","x":1}') == {"type": "hello", "x": 1}
    assert decode_control({"no": "type"}) == {"no": "type"}


@pytest.mark.parametrize(
    "text",
    [
        '{"type":"subscribed","topic":"t","epoch":"e"}',
        '{"type":"subscribed","topic":"t","epoch":"e","position":"later"}',
        '{"type":"subscribed","topic":1,"epoch":"e","position":"1-0"}',
        '{"type":"history-insufficient","topic":"t","reason":"bored","archive":"a"}',
        '{"type":"history-insufficient","topic":"t","reason":"trimmed"}',
        '{"type":"history-insufficient","topic":"t","reason":"trimmed","archive":"a","oldest":"x"}',
        '{"type":"error","error":"unauthorised"}',
        "[1,2]",
    ],
)
def test_malformed_control_messages(text: str) -> None:
    with pytest.raises(ProtocolError):
        decode_frame(text)


def test_subscribe_encodes_as_clients_send_it() -> None:
    topics = [
        TopicRequest(topic="dataset1", position="1795305518802-1", epoch="e"),
        TopicRequest(topic="dataset2"),
    ]
    message = Subscribe(type="subscribe", format="xml", token="secret", topics=topics)
    text = message.encode()
    assert text == (
        '{"type": "subscribe", "version": 1, "format": "xml", "topics": '
        '[{"topic": "dataset1", "position": "1795305518802-1", "epoch": "e"}, '
        '{"topic": "dataset2"}], "token": "secret"}'
    )
    assert parse_subscribe(text) == message
    anonymous = Subscribe(type="subscribe", topics=topics[1:])
    assert "token" not in json.loads(anonymous.encode())
    assert parse_subscribe(anonymous.encode()) == anonymous
