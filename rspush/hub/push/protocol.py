"""The push protocol, version 1 (docs/protocol.md): messages, positions, frames, close codes.

Sans-I/O: parses client messages, builds server messages and change frames as bytes. The
asyncio layer (:mod:`hub.push.server`) only moves them. Shared by the hub and by
``rs-subscribe`` (:mod:`subscriber.push`), so both ends agree by construction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rspush.resourcesync.namespaces import RS_NS, SITEMAP_NS
from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime

PROTOCOL_VERSION = 1
# Link relation advertising the WebSocket endpoint (a URI, as RFC 8288 §2.1.2 allows for
# extension relations): in Capability Lists (rs:ln on the change-notification entry) and in
# HTTP Link headers. The WebSub rel="hub" keeps pointing at the HTTP hub URI.
PUSH_REL = "urn:rspush:websocket"
# Namespace of the position/topic/epoch attributes added to pushed XML notifications
# (Z39.99 §7 allows attributes in other namespaces).
RSPUSH_NS = "urn:rspush:1"


class CloseCode(IntEnum):
    """WebSocket close codes (4000-4999 are for applications, RFC 6455 §7.4.2)."""

    SHUTDOWN = 1001  # going away: reconnect (to this or another hub) and resume
    TRY_AGAIN_LATER = 1013  # the hub could not reach Redis: back off and resume
    PROTOCOL_ERROR = 4000
    UNAUTHORISED = 4001
    SLOW_CONSUMER = 4002
    HISTORY_INSUFFICIENT = 4003
    UNKNOWN_TOPIC = 4004


class ProtocolError(ValueError):
    """A client message that is not valid protocol; closes with PROTOCOL_ERROR."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A Redis stream id ``ms-seq``: totally ordered, so seams can be de-duplicated."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> Position:
        ms, sep, seq = text.partition("-")
        if not (ms.isascii() and ms.isdigit() and (not sep or (seq.isascii() and seq.isdigit()))):
            raise ProtocolError(f"position {text!r} is not a stream id like 1700000000000-0")
        return cls(int(ms), int(seq or 0))

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"

    def predecessor(self) -> Position:
        """The greatest position before this one: resuming *after* it replays this one."""
        if self.seq > 0:
            return Position(self.ms, self.seq - 1)
        return Position(self.ms - 1, MAX_SEQ) if self.ms > 0 else self


MAX_SEQ = 2**64 - 1
"""A stream id's sequence part is an unsigned 64-bit integer."""

ZERO = Position(0, 0)


class TopicRequest(BaseModel):
    """One topic of a subscribe message, with an optional resume point."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str
    position: str | None = None
    epoch: str | None = None
    since: str | None = None

    @field_validator("position")
    @classmethod
    def _position(cls, value: str | None) -> str | None:
        if value is not None:
            Position.parse(value)
        return value

    @field_validator("since")
    @classmethod
    def _since(cls, value: str | None) -> str | None:
        if value is not None:
            parse_w3c_datetime(value)
        return value

    @property
    def resume_position(self) -> Position | None:
        return None if self.position is None else Position.parse(self.position)

    @property
    def resume_since(self) -> datetime | None:
        return None if self.since is None else parse_w3c_datetime(self.since)


class Subscribe(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["subscribe"]
    version: int = PROTOCOL_VERSION
    format: Literal["json", "xml"] = "json"
    token: str | None = None
    topics: Annotated[list[TopicRequest], Field(min_length=1, max_length=256)]


def parse_subscribe(raw: str | bytes) -> Subscribe:
    try:
        message = Subscribe.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ProtocolError(f"bad subscribe message: {where}: {first.get('msg')}") from exc
    if message.version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {message.version}; this hub speaks 1")
    if len({t.topic for t in message.topics}) != len(message.topics):
        raise ProtocolError("a topic is listed twice")
    return message


def control(kind: str, **fields: Any) -> str:
    """A JSON control message (subscribed, history-insufficient, error)."""
    return json.dumps({"type": kind, **fields}, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class PushedChange:
    """What the feed holds per change: its position, time and both encodings."""

    position: Position
    time_us: int
    xml: str
    json: str


def json_frame(
    topic: str, epoch: str, start: datetime, until: datetime, changes: list[PushedChange]
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
    topic: str, epoch: str, start: datetime, until: datetime, changes: list[PushedChange]
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


FRAME_ENCODERS = {"json": json_frame, "xml": xml_frame}


def close_reason(resume: dict[str, Position]) -> str:
    """The close reason: the resume positions when they fit the 123-byte limit."""
    text = json.dumps({t: str(p) for t, p in resume.items()}, separators=(",", ":"))
    return text if len(text.encode()) <= 123 else "resume from your last received positions"
