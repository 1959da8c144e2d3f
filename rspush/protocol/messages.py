"""The hub's control messages, as typed values with one encoder and one decoder each
(docs/protocol.md, "Subscribing", "History insufficient" and "Errors and closing").

Every control message is a compact JSON object whose ``type`` names its kind. ``as_dict`` is
the message as on the wire (field order included), ``encode`` its text, ``from_dict`` reads
it back from a decoded JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime

from .closing import ProtocolError
from .positions import Position

HistoryReason = Literal["trimmed", "epoch-changed"]
_REASONS: tuple[HistoryReason, ...] = ("trimmed", "epoch-changed")


def compact_json(message: dict[str, Any]) -> str:
    """The JSON text of every message the hub sends: no insignificant whitespace."""
    return json.dumps(message, separators=(",", ":"))


def control(kind: str, **fields: Any) -> str:
    """A JSON message of type ``kind`` with ``fields`` in the given order."""
    return compact_json({"type": kind, **fields})


def _text(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise ProtocolError(f"{data.get('type')} message: {name!r} must be a string")
    return value


def _optional_text(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    return None if value is None else _text(data, name)


def _optional_position(data: dict[str, Any], name: str) -> Position | None:
    text = _optional_text(data, name)
    return None if text is None else Position.parse(text)


@dataclass(frozen=True, slots=True)
class Subscribed:
    """A topic's subscription is registered: every change after ``position`` follows."""

    topic: str
    epoch: str
    position: Position

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "subscribed",
            "topic": self.topic,
            "epoch": self.epoch,
            "position": str(self.position),
        }

    def encode(self) -> str:
        return compact_json(self.as_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Subscribed:
        return cls(
            topic=_text(data, "topic"),
            epoch=_text(data, "epoch"),
            position=Position.parse(_text(data, "position")),
        )


@dataclass(frozen=True, slots=True)
class HistoryInsufficient:
    """The stream no longer holds the resume point (``trimmed``) or is another life of the
    topic (``epoch-changed``): catch up from the Change List Archive, then resume.

    ``oldest``: the first change the stream still holds (None when it is empty). ``after``:
    the position after which it holds every change (the last trimmed one, ``0-0`` if none
    was; None from a hub that does not say), ``after_time`` that change's time."""

    topic: str
    reason: HistoryReason
    epoch: str
    oldest: Position | None
    after: Position | None
    after_time: datetime | None
    archive: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "history-insufficient",
            "topic": self.topic,
            "reason": self.reason,
            "epoch": self.epoch,
            "oldest": None if self.oldest is None else str(self.oldest),
            "after": None if self.after is None else str(self.after),
            "after_time": None if self.after_time is None else format_w3c_datetime(self.after_time),
            "archive": self.archive,
        }

    def encode(self) -> str:
        return compact_json(self.as_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HistoryInsufficient:
        reason = _text(data, "reason")
        if reason not in _REASONS:
            raise ProtocolError(f"history-insufficient message: unknown reason {reason!r}")
        after_time = _optional_text(data, "after_time")
        return cls(
            topic=_text(data, "topic"),
            reason="trimmed" if reason == "trimmed" else "epoch-changed",
            epoch=_optional_text(data, "epoch") or "",
            oldest=_optional_position(data, "oldest"),
            after=_optional_position(data, "after"),
            after_time=None if after_time is None else parse_w3c_datetime(after_time),
            archive=_text(data, "archive"),
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    """The ``error`` message sent before a refusing close: ``error`` is the kind
    (``protocol-error``, ``unauthorised``, ``unknown-topic``), ``message`` says why."""

    error: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"type": "error", "error": self.error, "message": self.message}

    def encode(self) -> str:
        return compact_json(self.as_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Refusal:
        return cls(error=_text(data, "error"), message=_text(data, "message"))


ControlMessage = Subscribed | HistoryInsufficient | Refusal
_DECODERS: dict[str, Callable[[dict[str, Any]], ControlMessage]] = {
    "subscribed": Subscribed.from_dict,
    "history-insufficient": HistoryInsufficient.from_dict,
    "error": Refusal.from_dict,
}


def decode_control(data: dict[str, Any]) -> ControlMessage | dict[str, Any]:
    """A decoded JSON control message as its typed value; a kind this version does not know
    is returned as it came, so a newer hub's extra messages pass through."""
    kind = data.get("type")
    decode = _DECODERS.get(kind) if isinstance(kind, str) else None
    return data if decode is None else decode(data)
