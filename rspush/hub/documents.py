"""Serving the materialised documents: read the store, build with :mod:`rspush.hub.materialise`,
cache by the topic's version so repeated polls of an unchanged list cost one HGETALL.

Every hub process builds the same bytes from the same Redis state, so any of them can serve
any document (and ETags agree across processes).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from rspush.resourcesync.w3cdt import from_us

from . import materialise as m
from .errors import NotFound
from .store import TopicStore


@dataclass(frozen=True, slots=True)
class Served:
    body: bytes
    etag: str
    last_modified: datetime | None
    immutable: bool = False


CLOSED_CACHE = 16  # closed Change Lists kept in memory (each up to 50,000 entries)


class DocumentService:
    def __init__(
        self,
        store: TopicStore,
        base_url: str,
        topics: list[str],
        *,
        index_lists: int,
        described_by: str | None = None,
        topic_descriptions: dict[str, str | None] | None = None,
        push_url: str | None = None,
        private: frozenset[str] = frozenset(),
        framework: bool = False,
    ) -> None:
        self.push_url = push_url
        self.framework = framework
        """Advertise each topic's framework-notification channel (framework notification §5)."""
        self.store = store
        self.base_url = base_url
        self.topics = topics
        self.index_lists = index_lists
        self.described_by = described_by
        self.topic_descriptions = topic_descriptions or {}
        # (topic, document) -> (version, what was built); one entry per kind and topic.
        self._cache: dict[tuple[str, str], tuple[str, Served | dict[int, bytes]]] = {}
        self._modified: dict[tuple[str, str], datetime | None] = {}
        self._closed: dict[tuple[str, int], Served] = {}
        self.private = private
        """Topics only their subscribers may read: the public Source Description omits them."""
        # Keyed by the private topics listed (none for the public one).
        self._source_descriptions: dict[frozenset[str], Served] = {}
        self._capability_lists: dict[str, Served] = {}

    def urls(self, topic: str) -> m.Urls:
        if topic not in self.topics:
            raise NotFound(f"no topic {topic!r}", topic=topic)
        return m.Urls(self.base_url, topic)

    def source_description(self, readable: frozenset[str] = frozenset()) -> Served:
        """Every public topic, and the private ones in ``readable`` (what the requester's
        subscriber token may read). Depends on configuration only: built once per set."""
        shown = self.private & readable
        served = self._source_descriptions.get(shown)
        if served is None:
            topics = [t for t in self.topics if t not in self.private or t in shown]
            body = m.source_description(self.base_url, topics, self.described_by)
            served = Served(body, _etag("sd", body), None)
            self._source_descriptions[shown] = served
        return served

    def capability_list(self, topic: str) -> Served:
        served = self._capability_lists.get(topic)
        if served is None:  # configuration only: built once per topic
            body = m.capability_list(
                self.urls(topic),
                described_by=self.topic_descriptions.get(topic),
                push_url=self.push_url,
                framework=self.framework,
            )
            served = self._capability_lists[topic] = Served(body, _etag("cap", body), None)
        return served

    async def open_change_list(self, topic: str) -> Served:
        urls = self.urls(topic)
        meta = await self.store.meta(topic)
        key = (topic, "open")
        cached = self._cache.get(key)
        if cached is not None and cached[0] == meta.etag_base and isinstance(cached[1], Served):
            return cached[1]
        listed = await self.store.listed(topic, meta.open_start)
        start_us = meta.open_from_us or meta.created_us or 0
        body = m.change_list(
            urls, start=from_us(start_us), until=None, entries=b"" if listed is None else listed.xml
        )
        # Last-Modified is the hub's clock at the last version change (appends and rotations
        # both move it), not a Source's change time.
        last = from_us(meta.modified_us) if meta.modified_us else None
        served = Served(body, f'"{meta.etag_base}-open"', last)
        self._cache[key] = (meta.etag_base, served)
        return served

    async def closed_change_list(self, topic: str, number: int) -> Served:
        self.urls(topic)
        cached = self._closed.get((topic, number))
        if cached is not None:
            return cached
        body = await self.store.closed_xml(topic, number)
        if body is None:
            raise NotFound(f"no closed Change List {number} in topic {topic!r}", topic=topic)
        meta = await self.store.meta(topic)
        served = Served(body, f'"{meta.epoch}-closed-{number}"', None, immutable=True)
        # Closed lists never change: keep the most recent few in memory.
        self._closed[(topic, number)] = served
        while len(self._closed) > CLOSED_CACHE:
            self._closed.pop(next(iter(self._closed)))
        return served

    async def change_list_index(self, topic: str) -> Served:
        urls = self.urls(topic)
        meta = await self.store.meta(topic)
        closed = await self.store.closed_lists(topic)
        recent = [m.span(c.number, c.from_us, c.until_us) for c in closed[-self.index_lists :]]
        open_from = from_us(meta.open_from_us or meta.created_us or 0)
        body = m.change_list_index(urls, recent=recent, open_from=open_from)
        return Served(body, f'"{meta.epoch}-index-{len(closed)}-{meta.open_from_us}"', None)

    async def change_list_archive(self, topic: str, part: int | None = None) -> Served:
        urls = self.urls(topic)
        meta = await self.store.meta(topic)
        closed = await self.store.closed_lists(topic)
        spans = [m.span(c.number, c.from_us, c.until_us) for c in closed]
        main, parts = m.change_list_archive(urls, spans)
        etag = f'"{meta.epoch}-archive-{len(closed)}-{part}"'
        if part is None:
            return Served(main, etag, None)
        if part not in parts:
            raise NotFound(f"no Change List Archive part {part}", topic=topic)
        return Served(parts[part], etag, None)

    async def resource_list(self, topic: str, part: int | None = None) -> Served:
        urls = self.urls(topic)
        key = (topic, "resourcelist")
        meta = await self.store.meta(topic)
        cached = self._cache.get(key)
        if cached is None or cached[0] != meta.etag_base:
            # Cheap check first: the state is read (HGETALL) only when the version moved.
            meta, state = await self.store.state(topic)
            # at: every change accepted up to the topic's last change time is reflected.
            at_us = meta.last_us or meta.state_at_us or meta.created_us or 0
            main, parts = m.resource_list(urls, at=from_us(at_us), state=state)
            modified = from_us(meta.modified_us) if meta.modified_us else None
            documents = {-1: main, **parts}
            self._cache[key] = (meta.etag_base, documents)
            self._modified[key] = modified
            cached = self._cache[key]
        built = cached[1]
        assert isinstance(built, dict)
        number = -1 if part is None else part
        if number not in built:
            raise NotFound(f"no Resource List part {part}", topic=topic)
        return Served(built[number], f'"{cached[0]}-rl-{part}"', self._modified[key])


def _etag(kind: str, body: bytes) -> str:
    # A content hash, identical in every hub process (Python's hash() is salted per process).
    return f'"{kind}-{hashlib.blake2b(body, digest_size=8).hexdigest()}"'
