"""How a push connection ends: close codes, the close reason and the protocol error
(docs/protocol.md, "Errors and closing")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .positions import Position

MAX_REASON_BYTES = 123
"""A close frame's reason holds at most 123 bytes of UTF-8 (RFC 6455 §5.5.1)."""


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
    """Text that is not valid protocol: a bad client message (the hub closes with
    :attr:`CloseCode.PROTOCOL_ERROR`) or a malformed position or hub message."""


def close_reason(resume: Mapping[str, Position]) -> str:
    """The close reason of a shutdown or slow-consumer close: the resume positions as compact
    JSON when they fit the reason's byte limit, else a plain instruction."""
    text = json.dumps({t: str(p) for t, p in resume.items()}, separators=(",", ":"))
    if len(text.encode()) <= MAX_REASON_BYTES:
        return text
    return "resume from your last received positions"
