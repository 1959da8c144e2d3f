"""One change as the push channel carries it (docs/protocol.md, "Change frames").

The JSON form of a change holds the fields of its ``<url>`` entry in a change notification
(notification spec §3): ``loc``, ``change``, ``datetime`` always; ``lastmod``, ``hash``,
``length``, ``type``, ``encoding`` and ``links`` when the Source gave them. The hub computes
it once, at ingest, and keeps it with the entry's XML; a frame adds the position.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rspush.resourcesync import Entry
from rspush.resourcesync.w3cdt import format_w3c_datetime

from .positions import Position


def change_fields(entry: Entry, change: str, moment: datetime) -> dict[str, Any]:
    """The fields of one change in the order the JSON form lists them, without its
    position: the same from a posted entry (hub) as from a pushed XML entry (client). They
    are the JSON form read back, so the two cannot differ."""
    fields: dict[str, Any] = json.loads(change_json(entry, change, moment))
    return fields


def change_json(entry: Entry, change: str, moment: datetime) -> str:
    """The JSON object of one change, without its position (added when it is pushed)."""
    lastmod = None if entry.lastmod is None else format_w3c_datetime(entry.lastmod)
    return change_json_with(entry, change, format_w3c_datetime(moment), lastmod)


def change_json_with(
    entry: Entry, change: str, datetime_text: str, lastmod_text: str | None
) -> str:
    """:func:`change_json` with the change's datetime and lastmod already formatted (the
    entry's own ``lastmod`` is not read).

    Written member by member rather than through a dict and an encoder (the hub writes one
    per change it accepts); each value is encoded as ``json.dumps(…, ensure_ascii=False,
    separators=(",", ":"))`` encodes it."""
    md = entry.md
    text = f'{{"loc":{_json(entry.loc)},"change":{_json(change)},"datetime":{_json(datetime_text)}'
    if lastmod_text is not None:
        text += f',"lastmod":{_json(lastmod_text)}'
    if md is not None:
        if md.hash:
            text += f',"hash":{_json(" ".join([str(h) for h in md.hash]))}'
        if md.length is not None:
            text += f',"length":{_json(md.length)}'
        if md.type is not None:
            text += f',"type":{_json(md.type)}'
        if md.encoding is not None:
            text += f',"encoding":{_json(md.encoding)}'
    if entry.links:
        links = [link.model_dump(mode="json", exclude_defaults=True) for link in entry.links]
        text += f',"links":{_json(links)}'
    return text + "}"


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_STRING = json.encoder.encode_basestring  # what _COMPACT writes a string with


def _json(value: object) -> str:
    if type(value) is str:
        return _STRING(value)
    if type(value) is int:
        return repr(value)
    return _COMPACT.encode(value)


@dataclass(frozen=True, slots=True)
class PushedChange:
    """What a frame is built from, per change: its position and time, its ``<url>`` entry
    (XML) and its JSON form (:func:`change_json`)."""

    position: Position
    time_us: int
    xml: str
    json: str
