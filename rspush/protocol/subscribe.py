"""The client's one message, ``subscribe`` (docs/protocol.md, "Subscribing"): the topics,
each with an optional resume point (a position with its epoch, or a ``since`` time), the
frame format, a token for private topics and (version 2) whether to send framework frames."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from rspush.resourcesync.w3cdt import parse_w3c_datetime

from .closing import ProtocolError
from .names import BASE_VERSION, FRAMEWORK_VERSION, PROTOCOL_VERSION, SUPPORTED_VERSIONS
from .positions import Position

MAX_TOPICS = 256
MAX_SUBSCRIBE_BYTES = 64 * 1024
"""The largest message a client may send: a subscribe naming :data:`MAX_TOPICS` topics, each
with a position, an epoch and a time, fits it; the hub closes on a larger one (1009)."""


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
    """The subscribe message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["subscribe"]
    version: int = BASE_VERSION
    format: Literal["json", "xml"] = "json"
    token: str | None = None
    topics: Annotated[list[TopicRequest], Field(min_length=1, max_length=MAX_TOPICS)]
    framework: StrictBool = False
    """Version 2: send framework frames of the subscribed topics too."""

    def encode(self) -> str:
        """The message as a client sends it: topics without their unset fields, the token
        only when there is one."""
        message: dict[str, Any] = {
            "type": self.type,
            "version": self.version,
            "format": self.format,
            "topics": [t.model_dump(exclude_none=True) for t in self.topics],
        }
        if self.token is not None:
            message["token"] = self.token
        if self.framework:
            message["framework"] = True
        return json.dumps(message)


def parse_subscribe(raw: str | bytes) -> Subscribe:
    """Decode and check a subscribe message; :class:`ProtocolError` says what is wrong."""
    try:
        message = Subscribe.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ProtocolError(f"bad subscribe message: {where}: {first.get('msg')}") from exc
    if message.version not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            f"protocol version {message.version}; this hub speaks "
            f"{', '.join(str(v) for v in sorted(SUPPORTED_VERSIONS))} (up to {PROTOCOL_VERSION})"
        )
    if message.framework and message.version < FRAMEWORK_VERSION:
        raise ProtocolError(
            f"framework frames need protocol version {FRAMEWORK_VERSION}; "
            f"the message names {message.version}"
        )
    if len({t.topic for t in message.topics}) != len(message.topics):
        raise ProtocolError("a topic is listed twice")
    return message
