"""Following a Source's Change Lists: polling the open one, walking the archives.

Z39.99 §12.1: a Change List covers the interval from ``from`` to ``until`` (an open list has
no ``until`` yet); entries are in forward chronological order. A Change List Index (§12.2)
and a Change List Archive (archives spec §5) list Change Lists with their intervals, oldest
first. From those the walker finds every change at or after a point in time, in order:

* :meth:`ChangeLists.since` — catch-up: the closed lists whose interval reaches that point,
  then the open list. If no list reaches back that far the archive is *too short*
  (:class:`ArchiveTooShortError`) and only a new baseline can answer.
* :meth:`ChangeLists.poll` — one conditional GET of the open list. When its ``from`` moved
  past what we hold (a list closed between two polls) or the list itself closed, it falls
  back to :meth:`since`, which also finds the next open list (via the Capability List).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from rspush.remote.reader import Body, DocumentReader
from rspush.resourcesync import Capability, Change, Document, FrameworkChange
from rspush.resourcesync.w3cdt import format_w3c_datetime

from .changes import ChangeType, Channel, ResourceChange, entry_change
from .errors import SourceError
from .gcpause import gc_paused

MAX_ARCHIVE_PARTS = 1000
"""An archive index naming more parts than this is refused (a hostile or broken Source)."""


class ArchiveTooShortError(SourceError):
    def __init__(self, since: datetime, earliest: datetime | None, lists: int = 0) -> None:
        if earliest is not None:
            reach = f"its lists start at {format_w3c_datetime(earliest)}"
        elif lists:
            # §12.1: a Change List's rs:md has a mandatory `from`; without it nothing shows
            # where the list starts.
            reach = (
                "its Change List gives no 'from' (ResourceSync 1.1 §12.1 requires one), so "
                "nothing shows where its changes start"
                if lists == 1
                else f"none of its {lists} Change Lists gives a 'from' (ResourceSync 1.1 "
                "§12.1 requires one), so nothing shows where their changes start"
            )
        else:
            reach = "no Change Lists at all"
        super().__init__(
            f"the Source's change history does not reach back to "
            f"{format_w3c_datetime(since)} ({reach})"
        )
        self.since = since
        self.earliest = earliest


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A Change List entry the agent cannot place in time: reported as a failure, never
    dropped in silence."""

    uri: str
    change: ChangeType
    reason: str


UnplacedSink = Callable[[Unplaced], None]

PLACED = "placed"
"""Marks (in :attr:`ResourceChange.extra`) a change whose time the list gave, not the entry."""


@dataclass(frozen=True, slots=True)
class ListRef:
    url: str
    start: datetime | None
    until: datetime | None


class ChangeLists:
    def __init__(
        self,
        reader: DocumentReader,
        *,
        capability_list: str,
        change_list: str | None,
        archive: str | None,
        on_unplaced: UnplacedSink | None = None,
    ) -> None:
        self.reader = reader
        self.on_unplaced = on_unplaced
        self.capability_list = capability_list
        self.change_list = change_list
        self.archive = archive
        self._indexes: set[str] = set()
        """Change List URLs that turned out to be Change List Indexes (§12.2)."""
        self.rotations = 0
        """Rotations the Source announced in framework notifications."""

    def note_framework(self, change: FrameworkChange) -> None:
        """A framework notification's change (Framework Notification §3). A Change List
        created is the Source's new open list: the one to poll when the Capability List
        named none yet (one that names a list or an index keeps naming it: a rotation
        changes what is behind that URL, not the URL)."""
        if change.capability != Capability.CHANGELIST:
            return
        if change.change == Change.CREATED:
            self.rotations += 1
            if self.change_list is None:
                self.change_list = change.loc

    async def since(self, moment: datetime, channel: Channel) -> AsyncIterator[ResourceChange]:
        """Every change at or after ``moment``: closed lists first, then the open one."""
        async for changes in self.since_by_list(moment, channel):
            for change in changes:
                yield change

    async def since_by_list(
        self, moment: datetime, channel: Channel
    ) -> AsyncIterator[list[ResourceChange]]:
        """:meth:`since`, one list's changes at a time (the catch-up applies them in runs:
        no step of a generator per change)."""
        refs = await self._lists()
        earliest = min((r.start for r in refs if r.start is not None), default=None)
        if earliest is None or earliest > moment:
            raise ArchiveTooShortError(moment, earliest, len(refs))
        for ref in refs:
            if ref.until is not None and ref.until < moment:
                continue
            body = await self.reader.read(ref.url, conditional=ref.until is None)
            if body is None:  # an open list we just read: fetch it again unconditionally
                self.reader.forget(ref.url)
                body = await self.reader.read(ref.url, conditional=True)
                assert body is not None
            yield self._changes_of(body, moment, channel)

    async def readable_by_list(
        self, moment: datetime, channel: Channel
    ) -> AsyncIterator[list[ResourceChange]]:
        """Every change at or after ``moment`` in the lists the Source names, one list's
        changes at a time: what can still be followed while the lists cannot show that they
        reach back (:meth:`since` refused) and a rebaseline has to wait. Read in full: the
        poll that led here has just read the open list conditionally, and only a list that
        changed leads here."""
        for ref in await self._lists():
            if ref.until is not None and ref.until < moment:
                continue
            body = await self.reader.read(ref.url)
            assert body is not None
            yield self._changes_of(body, moment, channel)

    async def poll(self, moment: datetime | None) -> AsyncIterator[ResourceChange]:
        """Changes at or after ``moment`` in the open list, if it changed since the last poll."""
        url = await self._open_list_url()
        if url in self._indexes:
            async for change in self._poll_index(url, moment):
                yield change
            return
        document = await self.reader.get(url, conditional=True)
        if document is None:
            return
        if document.is_index:
            self._indexes.add(url)
            async for change in self._poll_index(url, moment):
                yield change
            return
        start, until = document.md.from_, document.md.until
        if moment is not None and ((start is not None and start > moment) or until is not None):
            # A list closed since we last looked: changes between our point and the open
            # list's start are in closed lists now.
            if moment is None:
                raise SourceError(f"{url} is not an open Change List and no start time is known")
            async for change in self.since(moment, Channel.POLL):
                yield change
            return
        for change in self._changes(document, moment, Channel.POLL):
            yield change

    async def _poll_index(self, url: str, moment: datetime | None) -> AsyncIterator[ResourceChange]:
        """§12.2: the index itself changes only when a list opens or closes; the open list
        in it changes with every change. So read the index each time, and each list still
        reaching our point with a conditional GET (closed lists answer 304 once read)."""
        index = await self.reader.get(url)
        assert index is not None
        if not index.is_index or index.md.capability != Capability.CHANGELIST:
            self._indexes.discard(url)  # the Source replaced its index by a plain list
            return
        refs = sorted(
            (
                _ref(e.loc, e.md.from_ if e.md else None, e.md.until if e.md else None)
                for e in index.entries
            ),
            key=_order,
        )
        earliest = min((r.start for r in refs if r.start is not None), default=None)
        if moment is None or earliest is None or earliest > moment:
            # Lists before ours may have left the index (archived): walk the archive.
            if moment is None:
                raise SourceError(f"{url}: an index to poll, and no start time known")
            async for change in self.since(moment, Channel.POLL):
                yield change
            return
        for ref in refs:
            if ref.until is not None and ref.until < moment:
                continue
            document = await self.reader.get(ref.url, conditional=True)
            if document is None:
                continue  # unchanged since we read it
            for change in self._changes(document, moment, Channel.POLL):
                yield change

    def _changes_of(
        self, body: Body, moment: datetime | None, channel: Channel
    ) -> list[ResourceChange]:
        """:meth:`_changes` of a list's bytes, parsed, turned into changes and freed in one
        pause of the collector: the tens of thousands of objects of a parsed list live and
        die by reference counting alone, never walked by a collection (with the collector
        running they are walked at least once, as soon as the parse ends: in a catch-up,
        about a fifth of the parse's own time)."""
        with gc_paused():  # synchronous; the document is acyclic (.gcpause)
            return self._changes(self.reader.parse(body), moment, channel)

    def _changes(
        self, document: Document, moment: datetime | None, channel: Channel
    ) -> list[ResourceChange]:
        with gc_paused():  # tens of thousands of acyclic objects (.gcpause)
            changes, unplaced = dated_changes(document, channel)
        for entry in unplaced:
            if self.on_unplaced is None:
                raise SourceError(entry.reason)
            self.on_unplaced(entry)
        # A placed change's time is a bound, not when it happened: it may fall before the
        # watermark and still be news (a 1.0 deletion after our baseline, placed at the
        # list's `from`). It is always applied; decide() skips it when the mirror holds
        # that state or a later one, so it is idempotent like any other.
        return [c for c in changes if moment is None or c.time >= moment or c.extra.get(PLACED)]

    async def _open_list_url(self) -> str:
        if self.change_list is None:
            # A Source may add its first Change List after we discovered it.
            capabilities = await self.reader.get(self.capability_list)
            assert capabilities is not None
            self.change_list = _listed_change_list(capabilities)
        if self.change_list is None:
            raise SourceError(f"{self.capability_list} lists no Change List (yet) to poll")
        return self.change_list

    async def _lists(self) -> list[ListRef]:
        """Every Change List the Source names (archive, index, the Capability List's own),
        oldest first, each once."""
        refs: dict[str, ListRef] = {}
        if self.archive is not None:
            for ref in await self._expand(self.archive, depth=0):
                refs[ref.url] = ref
        # The Capability List names the current list (or index) — re-read it: a Source may
        # point it at a new list when one closes.
        capabilities = await self.reader.get(self.capability_list)
        assert capabilities is not None
        current = _listed_change_list(capabilities) or self.change_list
        if current is not None:
            self.change_list = current
            for ref in await self._expand(current, depth=0):
                refs.setdefault(ref.url, ref)
        return sorted(refs.values(), key=_order)

    async def _expand(self, url: str, depth: int) -> list[ListRef]:
        if depth > 2:
            raise SourceError(f"{url}: archive indexes nested too deep")
        document = await self.reader.get(url)
        assert document is not None
        capability = document.md.capability
        if capability == Capability.CHANGELIST and not document.is_index:
            return [ListRef(url, document.md.from_, document.md.until)]
        if capability == Capability.CHANGELIST:  # a Change List Index: entries are lists
            return [
                _ref(e.loc, e.md.from_ if e.md else None, e.md.until if e.md else None)
                for e in document.entries
            ]
        if capability == Capability.CHANGELIST_ARCHIVE:
            if not document.is_index:
                return [
                    _ref(e.loc, e.md.from_ if e.md else None, e.md.until if e.md else None)
                    for e in document.entries
                ]
            if len(document.entries) > MAX_ARCHIVE_PARTS:
                raise SourceError(f"{url}: more than {MAX_ARCHIVE_PARTS} archive parts")
            refs: list[ListRef] = []
            for part in document.entries:
                refs.extend(await self._expand(part.loc, depth + 1))
            return refs
        raise SourceError(f"{url} is a {document.type}, not a Change List, index or archive")


def _listed_change_list(capabilities: Document) -> str | None:
    return next(
        (e.loc for e in capabilities.entries if e.md and e.md.capability == Capability.CHANGELIST),
        None,
    )


def _ref(url: str, start: datetime | None, until: datetime | None) -> ListRef:
    return ListRef(url, start, until)


def _order(ref: ListRef) -> tuple[bool, datetime, datetime]:
    # Closed lists by start; open lists (no until) last.
    return (ref.until is None, ref.start or _DAWN, ref.until or _DAWN)


_DAWN = datetime(1, 1, 1, tzinfo=UTC)

_CHANGE_TYPES = frozenset(c.value for c in ChangeType)


def dated_changes(
    document: Document, channel: Channel
) -> tuple[list[ResourceChange], list[Unplaced]]:
    """Every entry of a Change List as a change, in document order, each with a time.

    In ResourceSync 1.1 ``<lastmod>`` is optional and ``rs:md@datetime`` is a "may"; 1.0
    Sources publish deletions with no time at all. An entry without one is timed by the list
    (§12.1: entries are in forward chronological order, inside ``from``…``until``): the
    previous entry's time, else the list's ``from``, else its ``until`` or ``at``. That is
    the earliest time consistent with the order, and the same on every read of a list that
    only grows, so the watermark and de-duplication (URI, time, change) stay exact. An entry
    the list gives nothing to place by (no time before it, no ``from``, ``until`` nor ``at``)
    is :class:`Unplaced`: a reported failure, never a silent skip. Placed changes are marked
    (:data:`PLACED`)."""
    if document.md.capability != Capability.CHANGELIST or document.is_index:
        raise SourceError(f"expected a Change List, got a {document.type}")
    md = document.md
    placed_by = md.from_ or md.until or md.at
    changes: list[ResourceChange] = []
    unplaced: list[Unplaced] = []
    append = changes.append
    for entry in document.entries:
        change = entry_change(entry, channel, placed_by, PLACED)
        if change is not None:
            placed_by = change.time
            append(change)
            continue
        kind = entry.md.change if entry.md is not None else None
        if kind is None or kind in _CHANGE_TYPES:
            unplaced.append(
                Unplaced(
                    entry.loc,
                    ChangeType(kind or ChangeType.UPDATED),
                    f"{entry.loc}: the entry has no time and the Change List none to place it "
                    "by (no earlier entry's time, no from, until or at)",
                )
            )
        else:
            unplaced.append(
                Unplaced(entry.loc, ChangeType.UPDATED, f"{entry.loc}: unknown change {kind!r}")
            )
    return changes, unplaced
