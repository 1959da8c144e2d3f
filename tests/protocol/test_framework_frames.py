"""Protocol version 2, pure: the subscribe message asks for framework frames only at version
2 (a version 1 message is byte for byte what it was), and framework frames encode and decode
through the one decoder."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rspush.protocol import (
    BASE_VERSION,
    FRAMEWORK_VERSION,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    FrameworkFrame,
    Position,
    ProtocolError,
    Subscribe,
    TopicRequest,
    decode_frame,
    framework_frame,
    parse_subscribe,
)
from rspush.resourcesync import Change, FrameworkChange, framework_notification, serialise
from rspush.resourcesync.schema import schema_errors

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CHANGES = [
    FrameworkChange(
        "http://hub.example/topics/t/changelists/0.xml",
        Change.UPDATED,
        "changelist",
        T0,
        index="http://hub.example/topics/t/changelist-index.xml",
    ),
    FrameworkChange(
        "http://hub.example/topics/t/changelist.xml",
        Change.CREATED,
        "changelist",
        T0,
        index="http://hub.example/topics/t/changelist-index.xml",
    ),
]


def test_versions() -> None:
    assert BASE_VERSION == 1 and FRAMEWORK_VERSION == PROTOCOL_VERSION == 2
    assert {1, 2} == SUPPORTED_VERSIONS


def test_a_client_that_does_not_ask_sends_the_version_1_message() -> None:
    message = Subscribe(type="subscribe", topics=[TopicRequest(topic="t")])
    assert json.loads(message.encode()) == {
        "type": "subscribe",
        "version": 1,
        "format": "json",
        "topics": [{"topic": "t"}],
    }


def test_asking_for_framework_frames_is_version_2() -> None:
    message = Subscribe(
        type="subscribe", version=2, framework=True, topics=[TopicRequest(topic="t")]
    )
    encoded = message.encode()
    assert json.loads(encoded)["framework"] is True
    parsed = parse_subscribe(encoded)
    assert parsed.version == 2 and parsed.framework
    # Version 2 without the flag: no framework frames, otherwise version 1's behaviour.
    assert not parse_subscribe(encoded.replace('"framework": true', '"framework": false')).framework


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"version": 1, "framework": True}, "framework frames need protocol version 2"),
        ({"version": 3}, "protocol version 3; this hub speaks 1, 2"),
        ({"version": 2, "framework": "yes"}, "framework"),
    ],
)
def test_bad_requests(fields: dict[str, object], match: str) -> None:
    raw = json.dumps({"type": "subscribe", "topics": [{"topic": "t"}], **fields})
    with pytest.raises(ProtocolError, match=match):
        parse_subscribe(raw)


def test_a_framework_frame_round_trips() -> None:
    notification = serialise(framework_notification(CHANGES, start=T0, until=T0))
    data = framework_frame("t", Position(5, 1), notification)
    message = json.loads(data)
    assert list(message) == ["type", "topic", "position", "notification"]
    assert message["type"] == "framework"
    assert schema_errors(message["notification"].encode()) == []
    decoded = decode_frame(data.decode())
    assert isinstance(decoded, FrameworkFrame)
    assert (decoded.topic, decoded.position) == ("t", Position(5, 1))
    assert decoded.changes == CHANGES
    assert decoded.notification == notification.decode()


@pytest.mark.parametrize(
    "message",
    [
        {"type": "framework", "topic": "t", "position": "1-0"},
        {"type": "framework", "topic": "t", "position": "1-0", "notification": 5},
        {
            "type": "framework",
            "topic": "t",
            "position": "1-0",
            # A change notification is not a framework notification.
            "notification": serialise(framework_notification(CHANGES))
            .decode()
            .replace("framework-notification", "change-notification"),
        },
    ],
)
def test_a_broken_framework_frame_is_a_protocol_error(message: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        decode_frame(json.dumps(message))
