"""One change as the agent handles it, whichever channel brought it.

A Resource List entry (baseline), a pushed change and a Change List entry (poll, archive) all
become a :class:`ResourceChange`: URI, change type, change time, what the Source says about
the content (length, hashes), and the links filters look at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from rspush.resourcesync import Entry, Link
from rspush.resourcesync.hashes import HashSyntaxError, HashValue, format_hashes, parse_hashes
from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime


class Channel(StrEnum):
    BASELINE = "baseline"
    PUSH = "push"
    POLL = "poll"
    ARCHIVE = "archive"
    AUDIT = "audit"
    RETRY = "retry"
    """A change that failed, tried again (it never moves the watermark)."""


class ChangeType(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class ResourceChange:
    uri: str
    change: ChangeType
    time: datetime
    channel: Channel
    length: int | None = None
    hashes: tuple[HashValue, ...] = ()
    media_type: str | None = None
    links: tuple[Link, ...] = ()
    position: str | None = None
    epoch: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def hash_text(self) -> str | None:
        """The ``hash`` attribute as the Source gave it (any encoding), None without one."""
        hashes = self.hashes
        if len(hashes) == 1:  # nearly always: one value, written as is (no list, no join)
            value = hashes[0]
            return f"{value.algorithm}:{value.digest}"
        return format_hashes(hashes) if hashes else None

    @property
    def key(self) -> tuple[str, datetime, str]:
        """What apply is idempotent on: URI, change datetime, change type."""
        return (self.uri, self.time, self.change)

    def identity_json(self) -> dict[str, Any]:
        """The fields that say which change this is (URI, type, time, channel, position):
        what an agent event carries of it."""
        data: dict[str, Any] = {
            "uri": self.uri,
            "change": str(self.change),
            "time": format_w3c_datetime(self.time),
            "channel": str(self.channel),
        }
        if self.position is not None:
            data["position"] = self.position
        return data

    def as_json(self) -> dict[str, Any]:
        data = self.identity_json()
        if self.length is not None:
            data["length"] = self.length
        if self.hashes:
            data["hash"] = self.hash_text
        if self.media_type is not None:
            data["type"] = self.media_type
        return data


_new = object.__new__
(
    _set_uri,
    _set_change,
    _set_time,
    _set_channel,
    _set_length,
    _set_hashes,
    _set_media_type,
    _set_links,
    _set_position,
    _set_epoch,
    _set_extra,
) = (getattr(ResourceChange, f).__set__ for f in ResourceChange.__dataclass_fields__)


def listed_change(
    uri: str,
    change: ChangeType,
    time: datetime,
    channel: Channel,
    length: int | None,
    hashes: tuple[HashValue, ...],
    media_type: str | None,
    links: tuple[Link, ...],
) -> ResourceChange:
    """``ResourceChange(uri, change, time, channel, length, hashes, media_type, links)``, the
    same change, for the lists' tens of thousands: its fields set through their slots, not
    one ``object.__setattr__`` call per field by name as a frozen dataclass's ``__init__``
    does (half the cost). Still frozen: only this sets them."""
    made: ResourceChange = _new(ResourceChange)
    _set_uri(made, uri)
    _set_change(made, change)
    _set_time(made, time)
    _set_channel(made, channel)
    _set_length(made, length)
    _set_hashes(made, hashes)
    _set_media_type(made, media_type)
    _set_links(made, links)
    _set_position(made, None)
    _set_epoch(made, None)
    _set_extra(made, {})
    return made


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a change: ``applied`` (verified and written, checkpoint committed) or
    ``failed`` (``reason`` says why; nothing was written)."""

    change: ResourceChange
    event: str
    at: datetime
    reason: str | None = None


def from_entry(
    entry: Entry, channel: Channel, *, default_time: datetime | None = None
) -> ResourceChange | None:
    """A Resource List entry (no ``change``: it is the resource's current state, applied as
    ``created``) or a Change List entry. None when the entry has no usable time."""
    return entry_change(entry, channel, default_time)


def entry_change(
    entry: Entry, channel: Channel, default_time: datetime | None, placed: str | None = None
) -> ResourceChange | None:
    """:func:`from_entry`; with ``placed``, a change that took ``default_time`` (the entry
    gave none) has that key set in its ``extra``. Runs for every entry of every list an agent
    reads: the entry's ``md`` is looked at once (its properties would each look again) and
    the change is built through its slots."""
    md = entry.md
    hashes: tuple[HashValue, ...]
    change = ChangeType.CREATED  # a Resource List entry: the resource's current state
    if md is None:
        when, length, hashes, media_type = entry.lastmod, None, (), None
    else:
        if md.change is not None:
            known = CHANGE_TYPES.get(md.change)  # a dict: no Enum() per entry
            if known is None:
                return None  # a change type we do not know: never guess
            change = known
        when = md.datetime if md.datetime is not None else entry.lastmod
        length, hashes, media_type = md.length, md.hash, md.type
    time = when if when is not None else default_time
    if time is None:
        return None
    made = listed_change(entry.loc, change, time, channel, length, hashes, media_type, entry.links)
    if when is None and placed is not None:
        made.extra[placed] = True
    return made


def from_push(data: dict[str, Any], *, epoch: str) -> ResourceChange:
    """A change as the hub pushes it (docs/protocol.md, JSON frames)."""
    hashes: tuple[HashValue, ...] = ()
    if data.get("hash"):
        try:
            hashes = parse_hashes(data["hash"])
        except HashSyntaxError:
            hashes = ()
    links = tuple(Link.model_validate(link) for link in data.get("links", ()))
    return ResourceChange(
        uri=data["loc"],
        change=ChangeType(data["change"]),
        time=parse_w3c_datetime(data["datetime"]),
        channel=Channel.PUSH,
        length=data.get("length"),
        hashes=hashes,
        media_type=data.get("type"),
        links=links,
        position=data["position"],
        epoch=epoch,
    )


CHANGE_TYPES: dict[str | None, ChangeType] = {c.value: c for c in ChangeType}
"""Change types by their value (``rs:md@change``): a dict, no ``ChangeType()`` per entry."""
