"""Notification channels: what a ``hub.topic`` URI names and how its notifications are made.

A topic URI is ``{base}/topics/{topic}`` followed by its channel's suffix. Each channel
(:class:`Channel`) says which Redis stream holds its events, how a row of it is decoded, how
big an event is when batched and how a batch becomes a notification body. The subscription
and delivery machinery only ever goes through a channel, so another kind of notification
(the framework notifications of ``{base}/topics/{topic}/framework``) is one more entry in
:data:`CHANNELS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rspush.protocol import Position
from rspush.resourcesync import Capability, Change, FrameworkChange, framework_notification
from rspush.resourcesync import serialise as serialise_document
from rspush.resourcesync.w3cdt import from_us, to_us

from ..keys import TopicKeys
from ..materialise import Urls
from ..store import FrameworkEvent, StreamEntry, TopicStore, decode_framework_row, decode_stream_row
from .batches import Interval, change_notification, history_moved


class ChannelEvent(Protocol):
    """What delivery needs of an event: where it is in its stream and when it happened."""

    @property
    def position(self) -> Position: ...

    @property
    def time_us(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Channel:
    name: str
    suffix: str
    """What follows ``{base}/topics/{topic}`` in the channel's topic URI."""
    stream_key: Callable[[TopicKeys], str]
    decode: Callable[[Any], Any]
    """A stream row (id, fields) as an event (a :class:`ChannelEvent`)."""
    size: Callable[[Any], int]
    """An event's bytes in a notification (for the size bound of a batch)."""
    build: Callable[[Urls, Interval, Sequence[Any]], bytes]
    """The notification body of a batch of events covering an interval."""
    trimmed: Callable[[TopicStore, str], Awaitable[tuple[Position, int] | None]]
    """How far retention removed the topic's stream: (last removed position, its time)."""
    moved: Callable[[Urls, Interval], bytes]
    """The notification telling a subscriber that the events of an interval left the
    stream before reaching it, and where they are now."""


def _changes_body(urls: Urls, span: Interval, events: Sequence[StreamEntry]) -> bytes:
    return change_notification(urls.capability_list, span, (e.xml for e in events))


def _changes_stream(keys: TopicKeys) -> str:
    return keys.stream


async def _changes_trimmed(store: TopicStore, topic: str) -> tuple[Position, int] | None:
    meta = await store.push_meta(topic)
    if meta.trimmed is None or meta.trimmed_time is None:
        return None
    return meta.trimmed, to_us(meta.trimmed_time)


def _changes_moved(urls: Urls, span: Interval) -> bytes:
    return history_moved(urls.capability_list, urls.change_list_archive, span)


CHANGES = Channel(
    name="changes",
    suffix="",
    stream_key=_changes_stream,
    decode=decode_stream_row,
    size=lambda event: len(event.xml),
    build=_changes_body,
    trimmed=_changes_trimmed,
    moved=_changes_moved,
)
"""Change notifications (notification spec §3) of the topic's change stream."""


def _framework_body(urls: Urls, span: Interval, events: Sequence[FrameworkEvent]) -> bytes:
    # Framework notification §3, from/until the delivery's interval (contiguous per
    # subscriber, as for change notifications), up to the topic's Capability List.
    return _framework_body_of(urls, span, [e.change for e in events])


async def _framework_trimmed(store: TopicStore, topic: str) -> tuple[Position, int] | None:
    # The framework stream is bounded by MAXLEN ~ alone (no trim record in the topic meta):
    # the stream itself says what it lost; a stream id's first part is its time in ms.
    removed = await store.trim_mark(store.keys(topic).framework)
    return None if removed is None else (removed, removed.ms * 1000)


def _framework_moved(urls: Urls, span: Interval) -> bytes:
    # The framework events of ``span`` are gone: what they announced is all in the current
    # Capability List, announced as updated so the subscriber reads it again.
    change = FrameworkChange(
        loc=urls.capability_list,
        change=Change.UPDATED,
        capability=Capability.CAPABILITYLIST.value,
        time=from_us(span.until_us),
        index=None,
    )
    return _framework_body_of(urls, span, [change])


def _framework_body_of(urls: Urls, span: Interval, changes: Sequence[FrameworkChange]) -> bytes:
    document = framework_notification(
        changes, start=from_us(span.from_us), until=from_us(span.until_us), up=urls.capability_list
    )
    return serialise_document(document)


FRAMEWORK = Channel(
    name="framework",
    suffix="/framework",
    stream_key=lambda keys: keys.framework,
    decode=decode_framework_row,
    # One <url> with rs:md and perhaps an index link: its loc and links plus the markup.
    size=lambda event: 400 + 2 * len(event.change.loc),
    build=_framework_body,
    trimmed=_framework_trimmed,
    moved=_framework_moved,
)
"""Framework notifications (framework notification spec §3) of the topic's framework
stream (:mod:`rspush.hub.framework`): rotations, Resource List, Capability List and Source
Description changes."""

CHANNELS: Mapping[str, Channel] = {channel.name: channel for channel in (CHANGES, FRAMEWORK)}
"""Every channel, by name."""


def topic_uri(base_url: str, topic: str, channel: Channel) -> str:
    return f"{base_url}/topics/{topic}{channel.suffix}"


def resolve(base_url: str, uri: str, topics: Sequence[str]) -> tuple[str, Channel] | None:
    """The (topic, channel) a ``hub.topic`` URI names on this hub, or None."""
    prefix = f"{base_url}/topics/"
    if not uri.startswith(prefix):
        return None
    rest = uri[len(prefix) :]
    for channel in CHANNELS.values():
        name = rest[: len(rest) - len(channel.suffix)] if channel.suffix else rest
        if channel.suffix and not rest.endswith(channel.suffix):
            continue
        if name in topics:
            return name, channel
    return None
