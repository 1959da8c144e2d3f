"""The ResourceSync bridge: a remote, pull-only ResourceSync Source republished on a topic.

From any URL discovery starts from (a base URL, ``/.well-known/resourcesync``, a Source
Description, a Capability List, a page with a ``Link rel="resourcesync"``, robots.txt;
Z39.99 §6 — :mod:`rspush.remote.discovery`), the bridge

1. seeds the topic from the remote's Resource List (or the parts of its Resource List
   Index, §10), page by page: ``baseline`` steps;
2. then follows its Change Lists from the Resource List's ``at`` (else ``completed``): the
   lists of its Change List Archive (archives spec §5, nested archive indexes too), its
   Change List Index (§12.2) and its current Change List (§12.1), oldest first, each entry
   once, in document order.

Entries are republished exactly as the remote gives them — hashes, length, type, links,
``lastmod`` — with one addition: an entry without a time of its own (a 1.0 deletion; 1.1
makes ``rs:md@datetime`` optional) gets the time its list places it at
(:func:`.rs_position.placed_entries`), so the hub keeps the remote's order instead of
stamping it with its own clock.

The checkpoint (:class:`.rs_position.Checkpoint`) is a place in the remote's lists, not a
time, so a list that closed and moved into the index or archive between two polls is read
to its end before the next one (the reference client loses those entries), and a re-read
never republishes an entry. What the remote does wrong — a list rewritten, history lost, a
time going backwards, an entry nothing places in time — is reported through ``report`` and
never ends the bridge; what cannot be read now (a 5xx, the network, a deadline) raises
:class:`~rspush.remote.errors.SourceError` for the framework to back off on.

Reads: every document through :class:`~rspush.remote.reader.DocumentReader` (size cap,
gzip, deadlines); the Capability List, archives, indexes and the open list are conditional
GETs (ETag / Last-Modified), so a poll of an unchanged Source costs a few ``304``s; a closed
list, which does not change (§12.1), is read once while it is needed.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Final

import httpx

from rspush.remote.discovery import MAX_DISCOVERY_BYTES, TopicEndpoints, discover
from rspush.remote.errors import SourceError
from rspush.remote.links import join_url
from rspush.remote.reader import DocumentReader
from rspush.resourcesync import Capability, Document, Entry
from rspush.resourcesync.namespaces import MAX_DOCUMENT_BYTES

from .base import BridgeStep
from .rs_position import (
    Checkpoint,
    ListPlace,
    ListRef,
    Placed,
    Seen,
    after_time,
    ordered,
    placed_entries,
    resume_in,
    route,
    with_time,
)

log = logging.getLogger("rspush.hub.bridges.resourcesync")

MAX_STEP_ENTRIES: Final = 1000
"""Entries one step returns at most (the framework appends them at once)."""
MAX_ARCHIVE_PARTS: Final = 10_000
"""Lists or archive parts one archive may name; more is refused as hostile or broken."""
MAX_ARCHIVE_DEPTH: Final = 2
"""Archive indexes nested deeper than this are refused."""
KEPT_LISTS: Final = 4
"""Closed Change Lists kept parsed between steps (a catch-up reads them in order)."""
USER_AGENT: Final = "rs-hub-bridge/0.1 (rspush)"

Report = Callable[[str], None]


def _log_report(problem: str) -> None:
    log.warning("%s", problem)


class ResourceSyncBridge:
    """One remote Source followed for one topic (module docstring). ``step()`` is the
    bridge contract (:mod:`.base`)."""

    kind: Final = "resourcesync"

    def __init__(
        self,
        url: str,
        *,
        client: httpx.AsyncClient | None = None,
        topic: str | None = None,
        max_entries: int = MAX_STEP_ENTRIES,
        max_bytes: int = MAX_DOCUMENT_BYTES,
        report: Report = _log_report,
    ) -> None:
        self.url = url
        self.topic = topic
        self.max_entries = max_entries
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(
            follow_redirects=True, headers={"User-Agent": USER_AGENT}, timeout=30.0
        )
        self.reader = DocumentReader(self.client, max_bytes=max_bytes)
        self.report = report
        self.problems = 0
        """Problems reported so far (a status figure)."""
        self._endpoints: TopicEndpoints | None = None
        self._documents: dict[str, Document] = {}
        """Conditionally read documents, by URL: the copy a ``304`` confirms."""
        self._closed: OrderedDict[str, Document] = OrderedDict()
        self._items: dict[str, tuple[Document, list[Placed]]] = {}
        self._polled: set[str] = set()
        """URLs read (conditionally) in this step: not asked for again in it."""

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()

    # --- the contract ---------------------------------------------------------------------

    async def step(self, checkpoint: str | None) -> BridgeStep | None:
        """The next entries after ``checkpoint`` (None: start with the baseline), or None
        when the remote has nothing new."""
        if checkpoint is None:
            return await self._start()
        state = Checkpoint.loads(checkpoint)
        if state.phase == "baseline":
            return await self._baseline(state)
        return await self._changes(state)

    # --- baseline -------------------------------------------------------------------------

    async def _start(self) -> BridgeStep:
        endpoints = await self._discover()
        if endpoints.resource_list is None:
            self._problem(
                f"{endpoints.capability_list} lists no Resource List: no baseline; following "
                "every change its Change Lists hold"
            )
            return BridgeStep([], Checkpoint(phase="changes").dumps(), baseline=False, more=True)
        document = await self._get(endpoints.resource_list)
        since = document.md.at or document.md.completed
        if document.is_index:
            parts = tuple(
                url
                for entry in document.entries
                if (url := join_url(endpoints.resource_list, entry.loc.strip())) is not None
            )
        else:
            parts = (endpoints.resource_list,)
            self._keep(endpoints.resource_list, document)
        return await self._baseline(Checkpoint(phase="baseline", since=since, parts=parts))

    async def _baseline(self, state: Checkpoint) -> BridgeStep:
        entries: list[Entry] = []
        part, offset = state.part, state.offset
        while part < len(state.parts) and len(entries) < self.max_entries:
            document = await self._part(state.parts[part])
            if document.md.capability != Capability.RESOURCELIST or document.is_index:
                raise SourceError(f"{state.parts[part]} is a {document.type}, not a Resource List")
            taken = document.entries[offset : offset + self.max_entries - len(entries)]
            entries.extend(taken)
            offset += len(taken)
            if offset >= len(document.entries):
                part, offset = part + 1, 0
                self._closed.pop(state.parts[part - 1], None)
        if part < len(state.parts):
            following = state.model_copy(update={"part": part, "offset": offset})
        else:
            following = Checkpoint(phase="changes", since=state.since)
        return BridgeStep(entries, following.dumps(), baseline=True, more=True)

    async def _part(self, url: str) -> Document:
        """A Resource List (part) being read page by page: kept while it is read."""
        document = self._closed.get(url)
        if document is None:
            document = await self._get(url)
            self._keep(url, document)
        return document

    # --- changes --------------------------------------------------------------------------

    async def _changes(self, state: Checkpoint) -> BridgeStep | None:
        self._polled.clear()
        refs = await self._lists()
        plan = route(refs, state)
        if plan.problem:
            self._problem(plan.problem)
        place, seen = state.place, state.seen
        out: list[Entry] = []
        more = False
        for position, ref in enumerate(plan.lists):
            items = self._placed(ref.url, await self._list(ref))
            if position == 0 and plan.resume_place and place is not None:
                resumed = resume_in(items, place, seen)
                if resumed.problem:
                    self._problem(resumed.problem)
                start = resumed.index
            elif seen is not None:
                start = after_time(items, seen.time) if not plan.resume_place else 0
            else:
                start = 0
            place = ListPlace(url=ref.url, start=ref.start, consumed=start)
            for index in range(start, len(items)):
                if len(out) >= self.max_entries:
                    more = True
                    break
                item = items[index]
                place = ListPlace(url=ref.url, start=ref.start, consumed=index + 1)
                entry, seen = self._take(item, seen, state.since)
                if entry is not None:
                    out.append(entry)
            if more:
                break
        if not out and place == state.place and seen == state.seen:
            return None
        following = state.model_copy(update={"place": place, "seen": seen})
        return BridgeStep(out, following.dumps(), baseline=False, more=more)

    def _take(
        self, item: Placed, seen: Seen | None, since: datetime | None
    ) -> tuple[Entry | None, Seen | None]:
        """The entry to republish for ``item`` (None: reported or before the baseline), and
        the last entry seen after it."""
        if item.problem is not None:
            self._problem(item.problem)
            return None, seen
        if seen is None and since is not None and item.time < since and not item.placed:
            return None, seen  # the baseline already holds it (§12.1: lists overlap the list)
        if seen is not None and item.time < seen.time:
            if not item.placed:
                self._problem(
                    f"{item.entry.loc}: the remote went back in time ({item.entry.change} at "
                    f"{item.time.isoformat()}, after {seen.time.isoformat()}); not republished"
                )
                return None, seen
            item = Placed(item.entry, seen.time, placed=True)
        return with_time(item), item.seen

    # --- reading ----------------------------------------------------------------------------

    async def _discover(self) -> TopicEndpoints:
        if self._endpoints is None:
            self._endpoints = await discover(
                self.client, self.url, self.topic, max_bytes=MAX_DISCOVERY_BYTES
            )
        return self._endpoints

    async def _lists(self) -> list[ListRef]:
        """Every Change List the remote names, oldest first (archive, index, current)."""
        endpoints = await self._discover()
        capabilities = await self._fresh(endpoints.capability_list)
        here = endpoints.capability_list
        current = _listed(here, capabilities, Capability.CHANGELIST) or endpoints.change_list
        archive = _listed(here, capabilities, Capability.CHANGELIST_ARCHIVE)
        archive = archive or endpoints.change_list_archive
        refs: list[ListRef] = []
        if archive is not None:
            refs += await self._expand(archive, 0)
        if current is not None:
            refs += await self._expand(current, 0)
        return ordered(refs)

    async def _expand(self, url: str, depth: int) -> list[ListRef]:
        if depth > MAX_ARCHIVE_DEPTH:
            raise SourceError(f"{url}: archive indexes nested more than {MAX_ARCHIVE_DEPTH} deep")
        document = await self._fresh(url)
        capability = document.md.capability
        if capability == Capability.CHANGELIST and not document.is_index:
            self._keep(url, document)
            return [ListRef(url, document.md.from_, document.md.until)]
        if len(document.entries) > MAX_ARCHIVE_PARTS:
            raise SourceError(f"{url}: more than {MAX_ARCHIVE_PARTS} lists or parts")
        if capability == Capability.CHANGELIST or (
            capability == Capability.CHANGELIST_ARCHIVE and not document.is_index
        ):
            return [ref for entry in document.entries if (ref := _ref(url, entry)) is not None]
        if capability == Capability.CHANGELIST_ARCHIVE:
            refs: list[ListRef] = []
            for part in document.entries:
                target = join_url(url, part.loc.strip())
                if target is not None:
                    refs += await self._expand(target, depth + 1)
            return refs
        raise SourceError(f"{url} is a {document.type}, not a Change List, index or archive")

    async def _list(self, ref: ListRef) -> Document:
        """A Change List: a closed one from what was read (it does not change), an open
        one with a conditional GET."""
        kept = self._closed.get(ref.url)
        if kept is not None and (
            (ref.until is not None and kept.md.until == ref.until) or ref.url in self._polled
        ):
            self._closed.move_to_end(ref.url)
            return kept
        document = await self._fresh(ref.url)
        if document.md.capability != Capability.CHANGELIST or document.is_index:
            raise SourceError(f"{ref.url} is a {document.type}, not a Change List")
        self._keep(ref.url, document)
        return document

    def _placed(self, url: str, document: Document) -> list[Placed]:
        """The list's entries placed in time, worked out once per document read (a
        catch-up reads one list over many steps)."""
        held = self._items.get(url)
        if held is None or held[0] is not document:
            held = self._items[url] = (document, placed_entries(document))
            while len(self._items) > KEPT_LISTS:
                self._items.pop(next(iter(self._items)))
        return held[1]

    def _keep(self, url: str, document: Document) -> None:
        self._closed[url] = document
        self._closed.move_to_end(url)
        while len(self._closed) > KEPT_LISTS:
            self._closed.popitem(last=False)

    async def _fresh(self, url: str) -> Document:
        """``url`` read with a conditional GET: the copy held when it has not changed."""
        self._polled.add(url)
        document = await self.reader.get(url, conditional=True)
        if document is None:
            held = self._documents.get(url)
            if held is not None:
                return held
            self.reader.forget(url)
            return await self._get(url)
        if document.md.capability != Capability.CHANGELIST or document.md.until is None:
            self._documents[url] = document  # open lists, indexes, archives: polled
        else:
            self._documents.pop(url, None)
            self.reader.forget(url)
        return document

    async def _get(self, url: str) -> Document:
        document = await self.reader.get(url)
        assert document is not None  # unconditional
        return document

    def _problem(self, problem: str) -> None:
        self.problems += 1
        self.report(problem)


def _listed(base: str, capabilities: Document, capability: Capability) -> str | None:
    for entry in capabilities.entries:
        if entry.md is not None and entry.md.capability == capability:
            return join_url(base, entry.loc.strip())
    return None


def _ref(base: str, entry: Entry) -> ListRef | None:
    url = join_url(base, entry.loc.strip())
    if url is None:
        return None
    md = entry.md
    return ListRef(url, md.from_ if md else None, md.until if md else None)
