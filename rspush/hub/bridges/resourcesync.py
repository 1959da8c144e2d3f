"""The ResourceSync bridge: a remote, pull-only ResourceSync Source republished on a topic.

From any URL discovery starts from (a base URL, ``/.well-known/resourcesync``, a Source
Description, a Capability List, a page with a ``Link rel="resourcesync"``, robots.txt;
Z39.99 §6 — :mod:`rspush.remote.discovery`), the bridge

1. seeds the topic from the remote's Resource List (or the parts of its Resource List
   Index, §10) in one ``baseline`` step at the list's ``at`` — or, when it has more entries
   than one step may append (``max_changes_per_step``), republishes them as changes at that
   ``at``, step by step;
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
time going backwards — is listed in the step's ``regressions`` (the runner counts them in
the status and ``/metrics``) and the step goes on past it; an entry nothing places in time
is a note. None of it ends the bridge. What cannot be read
now (a 5xx, the network, a deadline, a document that is not ResourceSync) raises
:class:`.base.BridgeError` for the runner to back off on.

Reads: discovery is :func:`rspush.remote.discovery.discover` (shared with the Destination
agent); every document is read through the bridge's HTTP client (:mod:`.http`: size cap,
gzip under the inflation caps, timeouts, ``Retry-After``) and parsed by the one hardened
parser; the Capability List, archives, indexes and the open list are conditional
GETs (ETag / Last-Modified), so a poll of an unchanged Source costs a few ``304``s; a closed
list, which does not change (§12.1), is read once while it is needed.

Why one module of this size: one step's walk (discovery, baseline, the lists in order, the
conditional reads and the cache of closed lists) shares the bridge's state between polls;
the pure parts — where an entry's time is placed and the checkpoint — are in
:mod:`.rs_position`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Final

from pydantic import ValidationError

from rspush.remote.discovery import TopicEndpoints, discover
from rspush.remote.errors import RemoteError, SourceError
from rspush.remote.links import join_url
from rspush.resourcesync import (
    Capability,
    Document,
    DocumentError,
    Entry,
    Metadata,
    parse_document,
)

from .base import BridgeError, BridgeStep
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

if TYPE_CHECKING:
    from ..settings import BridgeConfig
    from .http import BridgeHttp

MAX_ARCHIVE_PARTS: Final = 10_000
"""Lists or archive parts one archive may name; more is refused as hostile or broken."""
MAX_ARCHIVE_DEPTH: Final = 2
"""Archive indexes nested deeper than this are refused."""
MAX_REREADS: Final = 3
"""Fresh listings one step tries when the Source rotates its lists while they are read."""
KEPT_LISTS: Final = 4
"""Closed Change Lists kept parsed between steps (a catch-up reads them in order)."""


class ResourceSyncBridge:
    """One remote Source followed for one topic (module docstring): the ``resourcesync``
    bridge kind of :mod:`.base`, built as ``ResourceSyncBridge(config, http)``."""

    kind: Final = "resourcesync"

    def __init__(self, config: BridgeConfig, http: BridgeHttp) -> None:
        self.url = config.url
        self.max_entries = config.max_changes_per_step
        self.http = http
        self.max_bytes = config.max_bytes
        self.requests = 0
        """GETs of Source documents (discovery left out)."""
        self.not_modified = 0
        """…of which answered ``304 Not Modified``."""
        self.synced_through: datetime | None = None
        """When caught up: the remote's time through which every change is bridged."""
        self.problems = 0
        """Problems reported so far."""
        self._notes: list[str] = []
        self._regressions: list[str] = []
        self._endpoints: TopicEndpoints | None = None
        self._documents: dict[str, Document] = {}
        """Conditionally read documents, by URL: the copy a ``304`` confirms."""
        self._closed: OrderedDict[str, Document] = OrderedDict()
        self._items: dict[str, tuple[Document, list[Placed]]] = {}
        self._polled: set[str] = set()
        """URLs read (conditionally) in this step: not asked for again in it."""

    # --- the contract ---------------------------------------------------------------------

    async def step(self, checkpoint: str | None) -> BridgeStep | None:
        """The next entries after ``checkpoint`` (None: start with the baseline), or None
        when the remote has nothing new. What cannot be read now raises
        :class:`.base.BridgeError`; a remote that lost history or went back in time is in
        the step's ``regressions`` (counted and shown by the runner) and the step goes on
        past it."""
        self._notes, self._regressions = [], []
        step: BridgeStep | None
        try:
            if checkpoint is None:
                step = await self._start()
            else:
                state = Checkpoint.loads(checkpoint)
                if state.phase == "baseline":
                    step = await self._baseline(state)
                else:
                    step = await self._changes(state)
        except RemoteError as exc:
            raise BridgeError(str(exc)) from None
        except ValidationError:
            raise BridgeError("the stored checkpoint is not one this bridge wrote") from None
        if step is not None and (self._notes or self._regressions):
            step = replace(
                step,
                notes=[*step.notes, *self._notes],
                regressions=[*step.regressions, *self._regressions],
            )
        return step

    # --- baseline -------------------------------------------------------------------------

    async def _start(self) -> BridgeStep:
        endpoints = await self._discover()
        if endpoints.resource_list is None:
            self._note(
                f"{endpoints.capability_list} lists no Resource List: no baseline; following "
                "every change its Change Lists hold"
            )
            return BridgeStep([], Checkpoint(phase="changes").dumps(), more=True)
        document = await self._get(endpoints.resource_list)
        if document.is_index:
            parts = tuple(
                url
                for entry in document.entries
                if (url := join_url(endpoints.resource_list, entry.loc.strip())) is not None
            )
        else:
            parts = (endpoints.resource_list,)
            self._keep(endpoints.resource_list, document)
        since = document.md.at or document.md.completed
        total = 0
        for url in parts:
            part = await self._part(url)
            since = since or part.md.at or part.md.completed
            total += len(part.entries)
            if total > self.max_entries:
                break
        if since is None:
            raise SourceError(
                f"{endpoints.resource_list}: the Resource List gives no 'at' (Z39.99 §10 "
                "requires one): nothing shows where its changes start"
            )
        state = Checkpoint(phase="baseline", since=since, parts=parts)
        if total > self.max_entries:
            self._note(
                f"the Resource List has more than max_changes_per_step ({self.max_entries}) "
                "entries: the topic is seeded with them as changes at its 'at', step by step"
            )
            return await self._baseline(state.model_copy(update={"paged": True}))
        return await self._baseline(state)

    async def _baseline(self, state: Checkpoint) -> BridgeStep:
        """The Resource List: in one step as the topic's seed, or (``paged``, too large for
        one step) as changes at its ``at``, one step at a time."""
        entries: list[Entry] = []
        part, offset = state.part, state.offset
        while part < len(state.parts) and len(entries) < self.max_entries:
            document = await self._part(state.parts[part])
            taken = document.entries[offset : offset + self.max_entries - len(entries)]
            entries.extend(taken)
            offset += len(taken)
            if offset >= len(document.entries):
                part, offset = part + 1, 0
        if part < len(state.parts):
            following = state.model_copy(update={"part": part, "offset": offset})
        else:
            following = Checkpoint(phase="changes", since=state.since)
        if state.paged:
            at = state.since
            entries = [_at(entry, at) for entry in entries] if at is not None else entries
            return BridgeStep(entries, following.dumps(), more=True)
        return BridgeStep(entries, following.dumps(), baseline=True, more=True, at=state.since)

    async def _part(self, url: str) -> Document:
        """A Resource List (part) being read: kept while it is read."""
        document = self._closed.get(url)
        if document is None:
            document = await self._get(url)
            if document.md.capability != Capability.RESOURCELIST or document.is_index:
                raise SourceError(f"{url} is a {document.type}, not a Resource List")
            self._keep(url, document)
        return document

    # --- changes --------------------------------------------------------------------------

    async def _changes(self, state: Checkpoint) -> BridgeStep | None:
        """:meth:`_changes_once`, again from a fresh listing when a list changed between
        reading the index (or archive) that names it and reading the list itself."""
        notes, regressions = len(self._notes), len(self._regressions)
        for _ in range(MAX_REREADS):
            try:
                return await self._changes_once(state)
            except _ListMoved:
                del self._notes[notes:], self._regressions[regressions:]
        raise BridgeError(
            f"the Source's Change Lists changed under every one of {MAX_REREADS} reads; "
            "trying again later"
        )

    async def _changes_once(self, state: Checkpoint) -> BridgeStep | None:
        self._polled.clear()
        refs = await self._lists()
        plan = route(refs, state)
        if plan.problem:
            self._regression(plan.problem)
        place, seen = state.place, state.seen
        out: list[Entry] = []
        more = False
        for position, ref in enumerate(plan.lists):
            items = self._placed(ref.url, await self._list(ref))
            if position == 0 and plan.resume_place and place is not None:
                resumed = resume_in(items, place, seen)
                if resumed.problem:
                    self._regression(resumed.problem)
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
        if not more:
            current = self._documents.get(plan.lists[-1].url) if plan.lists else None
            self.synced_through = _synced(current, seen, state.since)
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
            self._note(item.problem)
            return None, seen
        floor = seen.time if seen is not None else since
        if floor is None or item.time >= floor:
            return with_time(item), item.seen
        if seen is None and not item.placed:
            return None, seen  # before the baseline's `at`: the Resource List holds it
        if not item.placed:
            self._regression(
                f"{item.entry.loc}: the remote went back in time ({item.entry.change} at "
                f"{item.time.isoformat()}, after {floor.isoformat()}); not republished"
            )
            return None, seen
        # Placed by its list before what was republished already: the earliest time the
        # order allows now is that of the last change.
        item = Placed(item.entry, floor, placed=True)
        return with_time(item), item.seen

    # --- reading ----------------------------------------------------------------------------

    async def _discover(self) -> TopicEndpoints:
        if self._endpoints is None:
            self._endpoints = await discover(
                self.http.client, self.url, None, max_bytes=self.max_bytes
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
        md = document.md
        if (
            (ref.start is not None and md.from_ != ref.start)
            or (ref.until is not None and md.until != ref.until)
            or (ref.until is None and md.until is not None)
        ):
            # The index said otherwise a moment ago: the Source rotated its lists in
            # between (a new open list at the same URL, or this one closed).
            raise _ListMoved(ref.url)
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
        document = await self._read(url, conditional=True)
        if document is None:
            self.not_modified += 1
            held = self._documents.get(url)
            # Validators of a document no longer held (a list that closed): read it again.
            return held if held is not None else await self._get(url)
        if document.md.capability != Capability.CHANGELIST or document.md.until is None:
            self._documents[url] = document  # open lists, indexes, archives: polled
        else:
            self._documents.pop(url, None)
        return document

    async def _get(self, url: str) -> Document:
        document = await self._read(url, conditional=False)
        assert document is not None  # unconditional
        return document

    async def _read(self, url: str, *, conditional: bool) -> Document | None:
        """The document at ``url`` through the bridge's HTTP client (size cap, gzip,
        timeouts, ``Retry-After``, validators); None for a ``304``."""
        self.requests += 1
        fetched = await self.http.get(url, conditional=conditional)
        if fetched is None:
            return None
        try:
            return parse_document(fetched.content, max_bytes=self.max_bytes)
        except DocumentError as exc:
            raise SourceError(f"{url}: {exc}") from None

    def _note(self, note: str) -> None:
        """Something the operator should know (the step's notes: log and status)."""
        self.problems += 1
        self._notes.append(note)

    def _regression(self, problem: str) -> None:
        """The remote lost history or went back in time (the step's ``regressions``)."""
        self.problems += 1
        self._regressions.append(problem)


class _ListMoved(Exception):
    """A Change List is not the one its index or archive described when it was read."""


def _synced(current: Document | None, seen: Seen | None, since: datetime | None) -> datetime | None:
    """Caught up: the time the open list says it was written (``at``), else its ``until``,
    else the last change's time, else the baseline's."""
    if current is not None and (current.md.at or current.md.until):
        return current.md.at or current.md.until
    return since if seen is None else seen.time


def _at(entry: Entry, at: datetime) -> Entry:
    """A Resource List entry as a change at the list's time (its change type is the hub's:
    created, or updated when the topic holds the URI)."""
    md = entry.md or Metadata()
    return entry.model_copy(update={"md": md.model_copy(update={"datetime": at})})


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
