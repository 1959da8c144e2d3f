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
    position: the same from a posted entry (hub) as from a pushed XML entry (client)."""
    lastmod = None if entry.lastmod is None else format_w3c_datetime(entry.lastmod)
    return change_fields_with(entry, change, format_w3c_datetime(moment), lastmod)


def change_fields_with(
    entry: Entry, change: str, datetime_text: str, lastmod_text: str | None
) -> dict[str, Any]:
    """:func:`change_fields` with the change's datetime and lastmod already formatted (the
    entry's own ``lastmod`` is not read)."""
    md = entry.md
    data: dict[str, Any] = {"loc": entry.loc, "change": change, "datetime": datetime_text}
    if lastmod_text is not None:
        data["lastmod"] = lastmod_text
    if md is not None:
        if md.hash:
            data["hash"] = " ".join(str(h) for h in md.hash)
        for name in ("length", "type", "encoding"):
            value = getattr(md, name)
            if value is not None:
                data[name] = value
    if entry.links:
        data["links"] = [
            link.model_dump(mode="json", exclude_defaults=True) for link in entry.links
        ]
    return data


def change_json(entry: Entry, change: str, moment: datetime) -> str:
    """The JSON object of one change, without its position (added when it is pushed)."""
    return json.dumps(
        change_fields(entry, change, moment), separators=(",", ":"), ensure_ascii=False
    )


def change_json_with(
    entry: Entry, change: str, datetime_text: str, lastmod_text: str | None
) -> str:
    """:func:`change_json` with the datetime and lastmod already formatted."""
    return _COMPACT.encode(change_fields_with(entry, change, datetime_text, lastmod_text))


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class PushedChange:
    """What a frame is built from, per change: its position and time, its ``<url>`` entry
    (XML) and its JSON form (:func:`change_json`)."""

    position: Position
    time_us: int
    xml: str
    json: str
