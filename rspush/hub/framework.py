"""Framework notifications (ResourceSync Framework Notification 1.0.1): which events the hub
records, and the channel a transport carries them on.

Events (one Redis stream per topic, :attr:`.keys.TopicKeys.framework`, about
``[framework] max_events`` long), each one ``<url>`` of a notification (§3):

- a rotation: the closed Change List ``updated`` at its final URI and the new open list
  ``created``, both with ``rel="index"`` to the Change List Index (§2: never about the index
  itself). Recorded by the rotation script in the same atomic step as the rotation, so a
  crash or a replayed call never loses or repeats one;
- the Resource List ``updated``: at most once per ``[framework] resourcelist_interval_s``
  (the lease holder checks at every rotation round; one atomic script decides);
- a topic's Capability List ``created``/``updated`` and the Source Description
  ``created``/``updated`` (the latter on every topic's channel, §2), found at startup by
  comparing what the configuration makes with what the hub recorded when it last ran.

:data:`FRAMEWORK` is the channel as a transport needs it — the WebSocket push
(``rspush.hub.push``) and a WebSub hub alike: its topic URI, its stream key, the events after
a position and the notification document of a batch of them.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rspush.protocol import Position
from rspush.resourcesync import (
    Capability,
    Change,
    FrameworkChange,
    framework_notification,
    serialise,
)
from rspush.resourcesync.w3cdt import to_us

from .documents import DocumentService
from .keys import TopicKeys
from .materialise import Urls
from .store import FrameworkEvent, RotationAnnouncement, TopicStore

log = logging.getLogger("rspush.hub.framework")

CAPABILITY_LIST_FIELD = "fw_caplist"
"""The topic meta field holding the digest of the Capability List last announced."""


@dataclass(frozen=True, slots=True)
class FrameworkChannel:
    """One kind of notification channel, per topic: the framework-notification one."""

    name: str = "framework"

    def topic_uri(self, base_url: str, topic: str) -> str:
        """§4.1: the topic URI Destinations subscribe to (advertised per §5)."""
        return Urls(base_url, topic).framework_topic_uri

    def topic_of(self, base_url: str, uri: str) -> str | None:
        """The topic whose framework topic URI ``uri`` is (None: not one)."""
        match = re.fullmatch(re.escape(base_url) + r"/topics/([^/]+)/framework", uri)
        return None if match is None else match.group(1)

    def stream_key(self, prefix: str, topic: str) -> str:
        """The Redis stream holding the topic's events."""
        return TopicKeys(prefix, topic).framework

    async def events_after(
        self, store: TopicStore, topic: str, after: Position, *, count: int | None = None
    ) -> list[FrameworkEvent]:
        """The topic's events after ``after`` (exclusive), decoded, in order."""
        return await store.framework_events_after(topic, after, count=count)

    def notification(self, base_url: str, topic: str, events: Sequence[FrameworkEvent]) -> bytes:
        """§3: one notification of ``events`` (at least one), ``from`` the first one's time
        ``until`` the last one's, ``up`` to the topic's Capability List."""
        return notification(Urls(base_url, topic), [e.change for e in events])


FRAMEWORK = FrameworkChannel()


def notification(urls: Urls, changes: Sequence[FrameworkChange]) -> bytes:
    times = [c.time for c in changes if c.time is not None]
    return serialise(
        framework_notification(
            changes,
            start=min(times, default=None),
            until=max(times, default=None),
            up=urls.capability_list,
        )
    )


def rotation_announcement(urls: Urls, number: int, max_events: int) -> RotationAnnouncement:
    """What the rotation closing list ``number`` records (§2: documents under an index)."""
    return RotationAnnouncement(
        max_events=max_events,
        closed_loc=urls.closed_change_list(number),
        open_loc=urls.change_list,
        index_loc=urls.change_list_index,
    )


@dataclass(frozen=True, slots=True)
class FrameworkPolicy:
    resourcelist_interval_s: float
    max_events: int
    max_entries: int
    """Entries past which the Resource List is an index (its parts are announced)."""


async def announce_resource_list(
    store: TopicStore, urls: Urls, policy: FrameworkPolicy, now: datetime
) -> bool:
    """Record 'Resource List updated' if it changed and the interval passed (True if so)."""
    outcome = await store.announce_resource_list(
        urls.topic,
        now_us=to_us(now),
        interval_us=int(policy.resourcelist_interval_s * 1_000_000),
        max_events=policy.max_events,
        list_loc=urls.resource_list,
        part_loc=urls.resource_list_part(0),
        max_entries=policy.max_entries,
    )
    return outcome == "added"


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


async def announce_configuration(
    store: TopicStore,
    documents: DocumentService,
    topics: list[str],
    *,
    max_events: int,
    now: datetime,
) -> list[tuple[str, FrameworkChange]]:
    """At startup: record the Capability Lists and the Source Description the configuration
    makes, announcing those that are new or changed since the hub last ran (topics added or
    removed, a description, the push URL…). Returns what was announced, on which topic."""
    added, removed = await store.record_topics(topics, forget=CAPABILITY_LIST_FIELD)
    announced: list[tuple[str, FrameworkChange]] = []
    now_us = to_us(now)
    for topic in topics:
        urls = Urls(documents.base_url, topic)
        meta = await store.meta(topic)
        fresh = topic in added and meta.last_us is None and meta.state_at_us is None
        change = await store.announce_document(
            topic,
            field=CAPABILITY_LIST_FIELD,
            digest=_digest(documents.capability_list(topic).body),
            first_change=Change.CREATED if fresh else Change.UPDATED,
            now_us=now_us,
            max_events=max_events,
            loc=urls.capability_list,
            capability=Capability.CAPABILITYLIST,
        )
        if change:
            announced.append(
                (
                    topic,
                    FrameworkChange(
                        urls.capability_list, Change(change), Capability.CAPABILITYLIST, now
                    ),
                )
            )
    # The public Source Description: what every Destination reads.
    description = documents.source_description()
    digest = _digest(description.body)
    old = await store.swap_description_digest(digest)
    if old != digest:
        change_sd = FrameworkChange(
            Urls(documents.base_url, "").source_description,
            Change.CREATED if old is None else Change.UPDATED,
            Capability.DESCRIPTION,
            now,
        )
        # §2: Source Description changes go out on every framework channel.
        for topic in topics:
            await store.add_framework_event(topic, change_sd, max_events=max_events)
            announced.append((topic, change_sd))
    if added or removed:
        log.info(
            "framework: topics added %s, removed %s since the last run",
            ", ".join(added) or "none",
            ", ".join(removed) or "none",
        )
    return announced
