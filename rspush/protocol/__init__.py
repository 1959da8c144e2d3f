"""The rspush push protocol, versions 1 and 2 (docs/protocol.md), sans-I/O.

A WebSocket channel from the hub to Destinations carrying the changes of ResourceSync topics
as change notifications (ResourceSync Change Notification §3) or their compact JSON form,
each change with its stream position so a Destination resumes exactly where it left off;
version 2 adds framework frames (Framework Notification §3) for clients that ask.
This package is the contract both ends share: the hub (``rspush.hub.push``) and the
Destination agent (``rspush.subscriber.push``) import it, never each other. It builds and
reads messages and frames as text and decides where a subscription starts; it does no I/O
(no sockets, no event loop, no Redis, no clock), so everything here is tested without them.

Modules, one job each:

- :mod:`.names`: the protocol version, the link relation of the endpoint ("Finding the
  endpoint") and the namespace of the attributes added to XML frames;
- :mod:`.positions`: stream positions ("Positions and epochs");
- :mod:`.subscribe`: the client's ``subscribe`` message ("Subscribing");
- :mod:`.messages`: the hub's control messages ``subscribed``, ``history-insufficient``,
  ``error`` ("Subscribing", "History insufficient", "Errors and closing");
- :mod:`.changes`: one change in JSON form ("Change frames");
- :mod:`.frames`: change frames, JSON and XML, encoders and decoders ("Change frames"), and
  framework frames ("Framework frames");
- :mod:`.closing`: close codes and the close reason ("Errors and closing");
- :mod:`.resume`: the resume decision ("Subscribing", "History insufficient").
"""

from __future__ import annotations

from .changes import PushedChange, change_fields, change_json, change_json_with
from .closing import MAX_REASON_BYTES, CloseCode, ProtocolError, close_reason
from .frames import (
    FRAME_ENCODERS,
    FRAME_ENVELOPE_BYTES,
    MAX_CHANGE_BYTES,
    MAX_FRAME_BYTES,
    REQUIRED_FIELDS,
    ChangesFrame,
    EncodedFrame,
    FrameEncoder,
    FrameworkFrame,
    decode_frame,
    decode_framework_frame,
    decode_json_frame,
    decode_xml_frame,
    encode_frames,
    framework_frame,
    json_frame,
    xml_frame,
)
from .messages import (
    ControlMessage,
    HistoryInsufficient,
    HistoryReason,
    Refusal,
    Subscribed,
    compact_json,
    control,
    decode_control,
)
from .names import (
    BASE_VERSION,
    FRAMEWORK_VERSION,
    PROTOCOL_VERSION,
    PUSH_REL,
    RSPUSH_NS,
    SUPPORTED_VERSIONS,
)
from .positions import MAX_MS, MAX_SEQ, ZERO, Position
from .resume import Replay, SinceLookup, StreamFacts, check_replay, decide_resume
from .subscribe import MAX_SUBSCRIBE_BYTES, MAX_TOPICS, Subscribe, TopicRequest, parse_subscribe

__all__ = [
    "BASE_VERSION",
    "FRAMEWORK_VERSION",
    "SUPPORTED_VERSIONS",
    "FrameworkFrame",
    "decode_framework_frame",
    "framework_frame",
    "FRAME_ENCODERS",
    "FRAME_ENVELOPE_BYTES",
    "MAX_CHANGE_BYTES",
    "MAX_FRAME_BYTES",
    "MAX_MS",
    "MAX_REASON_BYTES",
    "MAX_SEQ",
    "MAX_SUBSCRIBE_BYTES",
    "MAX_TOPICS",
    "PROTOCOL_VERSION",
    "PUSH_REL",
    "REQUIRED_FIELDS",
    "RSPUSH_NS",
    "ZERO",
    "ChangesFrame",
    "CloseCode",
    "ControlMessage",
    "EncodedFrame",
    "FrameEncoder",
    "HistoryInsufficient",
    "HistoryReason",
    "Position",
    "ProtocolError",
    "PushedChange",
    "Refusal",
    "Replay",
    "SinceLookup",
    "StreamFacts",
    "Subscribe",
    "Subscribed",
    "TopicRequest",
    "change_fields",
    "change_json_with",
    "change_json",
    "check_replay",
    "close_reason",
    "compact_json",
    "control",
    "decode_control",
    "decode_frame",
    "decode_json_frame",
    "decode_xml_frame",
    "decide_resume",
    "encode_frames",
    "json_frame",
    "parse_subscribe",
    "xml_frame",
]
