"""Change frames, both formats, with one encoder and one decoder each (docs/protocol.md,
"Change frames").

A frame is a batch of changes of one topic. JSON: ``{"type": "changes", "topic", "epoch",
"from", "until", "changes": [...]}`` with the position first in every change. XML: a standard
change notification (notification spec §3: a ``<urlset>`` whose ``rs:md`` has
``capability="change-notification"`` and ``from``/``until``), with ``rsp:topic`` and
``rsp:epoch`` on the document's ``rs:md`` and ``rsp:position`` on each change's ``rs:md``.
Encoders splice the per-change JSON and XML the hub stored at ingest, so a batch is encoded
once per format and the same bytes go to every subscriber.

Framework frames (version 2, docs/protocol.md "Framework frames") carry a framework
notification (Framework Notification §3) of one topic, whatever the format: ``{"type":
"framework", "topic", "position", "notification": "<urlset …>"}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rspush.resourcesync import FrameworkChange, framework_changes, parse_document
from rspush.resourcesync.namespaces import RS_NS, SITEMAP_NS
from rspush.resourcesync.w3cdt import format_w3c_datetime, from_us

from .changes import PushedChange, change_fields
from .closing import ProtocolError
from .messages import ControlMessage, control, decode_control
from .names import RSPUSH_NS
from .positions import Position

MAX_FRAME_BYTES = 4 * 1024 * 1024
"""No frame of the hub is larger (UTF-8 bytes of its payload): clients may refuse a larger
one (the agent does). The hub splits a batch whose encoded frame would pass it."""
FRAME_ENVELOPE_BYTES = 4 * 1024
"""Room a frame needs besides its changes: the XML or JSON head with the topic (at most 64
characters), the epoch and two datetimes, and the position each change gets."""
MAX_CHANGE_BYTES = MAX_FRAME_BYTES - FRAME_ENVELOPE_BYTES
"""The largest change (its stored JSON or XML form) that fits a frame on its own."""

REQUIRED_FIELDS = ("position", "loc", "change", "datetime")
"""What every change of a frame carries (the other fields are optional)."""


def json_frame(
    topic: str, epoch: str, start: datetime, until: datetime, changes: Sequence[PushedChange]
) -> bytes:
    """A batch as one JSON text frame; each change gets its position."""
    body = ",".join('{"position":"' + str(c.position) + '",' + c.json[1:] for c in changes)
    head = control(
        "changes",
        topic=topic,
        epoch=epoch,
        **{"from": format_w3c_datetime(start), "until": format_w3c_datetime(until)},
    )
    return (head[:-1] + ',"changes":[' + body + "]}").encode()


def xml_frame(
    topic: str, epoch: str, start: datetime, until: datetime, changes: Sequence[PushedChange]
) -> bytes:
    """A batch as a standard change notification (notification spec §3), with
    ``rsp:topic``/``rsp:epoch`` on the document ``rs:md`` and ``rsp:position`` per change."""
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n',
        f'<urlset xmlns="{SITEMAP_NS}" xmlns:rs="{RS_NS}" xmlns:rsp="{RSPUSH_NS}">\n',
        f'  <rs:md capability="change-notification" from="{format_w3c_datetime(start)}" '
        f'until="{format_w3c_datetime(until)}" rsp:topic="{topic}" rsp:epoch="{epoch}"/>\n',
    ]
    for change in changes:
        parts.append(change.xml.replace("<rs:md ", f'<rs:md rsp:position="{change.position}" ', 1))
    parts.append("</urlset>\n")
    return "".join(parts).encode()


FrameEncoder = Callable[[str, str, datetime, datetime, Sequence[PushedChange]], bytes]
FRAME_ENCODERS: dict[str, FrameEncoder] = {"json": json_frame, "xml": xml_frame}
"""The encoder of each format a subscribe message may ask for."""


@dataclass(frozen=True, slots=True)
class EncodedFrame:
    """One frame as sent, with the position and time of its last change: where a
    subscription stands once the frame is sent."""

    data: bytes
    last: Position
    until: datetime


def encode_frames(
    encode: FrameEncoder,
    topic: str,
    epoch: str,
    start: datetime,
    until: datetime,
    changes: Sequence[PushedChange],
    *,
    max_bytes: int = MAX_FRAME_BYTES,
) -> list[EncodedFrame]:
    """A batch as frames of at most ``max_bytes`` each: one frame, the same bytes as
    ``encode`` gives, when it fits; else the batch halved, recursively, each part's ``until``
    the time of its last change and the next part's ``from`` that same time, so consecutive
    frames stay contiguous. A single change larger than ``max_bytes`` (bigger than
    :data:`MAX_CHANGE_BYTES`) still gets a frame of its own: the caller decides."""
    frame = encode(topic, epoch, start, until, changes)
    if len(frame) <= max_bytes or len(changes) <= 1:
        return [EncodedFrame(frame, changes[-1].position, until)]
    half = len(changes) // 2
    middle = from_us(changes[half - 1].time_us)
    return [
        *encode_frames(encode, topic, epoch, start, middle, changes[:half], max_bytes=max_bytes),
        *encode_frames(encode, topic, epoch, middle, until, changes[half:], max_bytes=max_bytes),
    ]


@dataclass(frozen=True, slots=True)
class ChangesFrame:
    """A decoded frame: its topic, epoch, interval (``from``/``until`` as sent, None when
    absent) and its changes, each a JSON object in the form of the JSON frames (``position``
    first, then the fields of :func:`~rspush.protocol.changes.change_fields`)."""

    topic: str
    epoch: str
    start: str | None
    until: str | None
    changes: list[dict[str, Any]]


def decode_json_frame(message: dict[str, Any]) -> ChangesFrame:
    """A decoded JSON ``changes`` message as a :class:`ChangesFrame`."""
    changes = message["changes"]
    if not isinstance(changes, list):
        raise ProtocolError("changes frame: 'changes' must be a list")
    for item in changes:
        if not isinstance(item, dict) or not all(
            isinstance(item.get(name), str) for name in REQUIRED_FIELDS
        ):
            raise ProtocolError(f"changes frame: a change lacks one of {REQUIRED_FIELDS}")
    return ChangesFrame(
        topic=message["topic"],
        epoch=message["epoch"],
        start=message.get("from"),
        until=message.get("until"),
        changes=changes,
    )


def decode_xml_frame(frame: str | bytes) -> ChangesFrame:
    """An XML frame (a change notification) as a :class:`ChangesFrame` whose changes have
    the same fields, in the same form, as the JSON frame's would. Raises
    :class:`~rspush.resourcesync.DocumentError` for a document that does not parse."""
    document = parse_document(frame.encode() if isinstance(frame, str) else frame)
    md = document.md
    changes = []
    for entry in document.entries:
        entry_md = entry.md
        if entry_md is None or entry_md.datetime is None or entry_md.change is None:
            raise ProtocolError(f"entry {entry.loc}: no rs:md change/datetime")
        position = entry_md.extra.get(f"{{{RSPUSH_NS}}}position", "")
        changes.append(
            {"position": position, **change_fields(entry, entry_md.change, entry_md.datetime)}
        )
    return ChangesFrame(
        topic=md.extra.get(f"{{{RSPUSH_NS}}}topic", ""),
        epoch=md.extra.get(f"{{{RSPUSH_NS}}}epoch", ""),
        start=None if md.from_ is None else format_w3c_datetime(md.from_),
        until=None if md.until is None else format_w3c_datetime(md.until),
        changes=changes,
    )


def framework_frame(topic: str, position: Position, notification: bytes) -> bytes:
    """A framework notification of ``topic`` as one JSON text frame; ``position`` is the
    topic's framework event position of its last change."""
    return control(
        "framework", topic=topic, position=str(position), notification=notification.decode()
    ).encode()


@dataclass(frozen=True, slots=True)
class FrameworkFrame:
    """A decoded framework frame: the topic, the position of its last event, the
    notification as sent and the changes it announces."""

    topic: str
    position: Position
    notification: str
    changes: list[FrameworkChange]


def decode_framework_frame(message: dict[str, Any]) -> FrameworkFrame:
    """A decoded JSON ``framework`` message as a :class:`FrameworkFrame`. Raises
    :class:`ProtocolError` (or :class:`~rspush.resourcesync.DocumentError`) for one that is
    not a framework notification."""
    notification = message.get("notification")
    topic = message.get("topic")
    position = message.get("position")
    if not (isinstance(notification, str) and isinstance(topic, str) and isinstance(position, str)):
        raise ProtocolError("framework frame: topic, position and notification must be strings")
    try:
        changes = framework_changes(parse_document(notification.encode()))
    except ValueError as exc:
        raise ProtocolError(f"framework frame: {exc}") from exc
    return FrameworkFrame(topic, Position.parse(position), notification, changes)


def decode_frame(
    frame: str | bytes,
) -> ChangesFrame | FrameworkFrame | ControlMessage | dict[str, Any]:
    """Any frame the hub sends: changes (JSON or XML), framework notifications, or a control
    message (typed; a kind this version does not know comes back as its JSON object).
    Raises ValueError (among them :class:`ProtocolError`), KeyError or
    :class:`~rspush.resourcesync.DocumentError` for a frame that is not protocol."""
    if isinstance(frame, bytes) or frame.startswith("<"):
        return decode_xml_frame(frame)
    message = json.loads(frame)
    if not isinstance(message, dict):
        raise ProtocolError("a frame must be a JSON object")
    if message.get("type") == "changes":
        return decode_json_frame(message)
    if message.get("type") == "framework":
        return decode_framework_frame(message)
    return decode_control(message)
