"""Where the ResourceSync bridge is in a remote Source's lists: the checkpoint, and the pure
rules for finding that place again after the Source rotated, rewrote or lost its lists.

No I/O. :mod:`.resourcesync` reads the documents and calls these.

A remote's Change Lists are a sequence (Z39.99 §12.1: each covers ``from``…``until``, entries
in forward chronological order; a Change List Index §12.2 and a Change List Archive list them
with their intervals). The bridge's place in it is the list it is reading, named by its
``from`` (a Source may move a list to another URL when it closes it, but not change the
interval it covered) or by its URL when it gives no ``from``, plus how many entries of that
list were republished and the last of them (time, URI, change). On the next read:

- the same list, still holding that entry at that place: go on after it;
- the same list rewritten (entries removed or reordered): go on after the entry seen last,
  found by (time, URI, change), else after every entry not later than its time — reported;
- the list gone (archived under another URL, or dropped): the lists whose interval reaches
  past the last time seen, from the first entry after it — a gap reported when no list
  reaches back that far (the remote lost history).

So a re-read never republishes an entry, and a remote going back in time is reported, never
followed backwards (the hub publishes change times in forward order).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rspush.resourcesync import Document, Entry, Metadata

CHECKPOINT_VERSION = 1


class Seen(BaseModel):
    """The last entry republished: its (placed) time, URI and change."""

    model_config = ConfigDict(frozen=True)

    time: datetime
    uri: str
    change: str


class ListPlace(BaseModel):
    """A place in one Change List: the list (by ``from``, else URL) and entries consumed."""

    model_config = ConfigDict(frozen=True)

    url: str
    start: datetime | None = None
    consumed: int = 0


class Checkpoint(BaseModel):
    """The bridge's checkpoint, stored as JSON by the bridge framework."""

    model_config = ConfigDict(frozen=True)

    v: int = CHECKPOINT_VERSION
    phase: Literal["baseline", "changes"]
    since: datetime | None = None
    """Changes at or after this time follow the baseline (the Resource List's ``at``)."""
    parts: tuple[str, ...] = ()
    """Baseline: the Resource List (or the parts of its index), read in order."""
    part: int = 0
    offset: int = 0
    """Baseline: entries of ``parts[part]`` already republished."""
    paged: bool = False
    """Baseline: too large for one step, republished as changes at ``since``."""
    place: ListPlace | None = None
    seen: Seen | None = None

    def dumps(self) -> str:
        return self.model_dump_json(exclude_defaults=False)

    @classmethod
    def loads(cls, text: str) -> Checkpoint:
        return cls.model_validate_json(text)


@dataclass(frozen=True, slots=True)
class ListRef:
    """A Change List the Source names, with the interval it claims."""

    url: str
    start: datetime | None
    until: datetime | None

    @property
    def is_open(self) -> bool:
        return self.until is None

    def is_place(self, place: ListPlace) -> bool:
        if place.start is not None and self.start is not None:
            return self.start == place.start
        return self.url == place.url


_DAWN = datetime(1, 1, 1, tzinfo=UTC)


def ordered(refs: Iterable[ListRef]) -> list[ListRef]:
    """Each list once (first mention of a URL wins), oldest first, open lists last."""
    unique = {ref.url: ref for ref in reversed(list(refs))}
    return sorted(
        unique.values(),
        key=lambda r: (r.until is None, r.start or _DAWN, r.until or _DAWN),
    )


@dataclass(frozen=True, slots=True)
class Placed:
    """A Change List entry with the time it is republished at, and whether the list (not
    the entry) gave that time."""

    entry: Entry
    time: datetime
    placed: bool
    problem: str | None = None
    """Set when nothing places the entry in time: it is reported, not republished."""

    @property
    def seen(self) -> Seen:
        return Seen(time=self.time, uri=self.entry.loc, change=_change(self.entry))


def placed_entries(document: Document) -> list[Placed]:
    """Every entry of a Change List with a time, in document order.

    ResourceSync 1.1 makes ``rs:md@datetime`` a "may" and 1.0 deletions carry no time: an
    entry without one is placed by the list (§12.1: forward chronological order within
    ``from``…``until``) at the previous entry's time, else the list's ``from``, else its
    ``until`` or ``at``: the earliest time consistent with the order, the same on every read
    of a list that only grows. An entry with nothing to place it by is a problem (named),
    never skipped in silence — it is still counted as consumed so the place stays exact."""
    md = document.md
    by: datetime | None = md.from_ or md.until or md.at
    found: list[Placed] = []
    for entry in document.entries:
        own = entry.change_time
        if own is not None:
            by = own
            found.append(Placed(entry, own, placed=False))
        elif by is not None:
            found.append(Placed(entry, by, placed=True))
        else:
            problem = (
                f"{entry.loc}: the entry has no time and the Change List none to place it by "
                "(no earlier entry's time, no from, until or at); not republished"
            )
            found.append(Placed(entry, _DAWN, placed=True, problem=problem))
    return found


def with_time(item: Placed) -> Entry:
    """The entry as the hub republishes it: exactly as the remote gave it (hashes, length,
    type, links, lastmod), plus ``rs:md@datetime`` when the list, not the entry, placed it
    (the hub would otherwise stamp it with its own clock and break the order)."""
    if not item.placed:
        return item.entry
    md = item.entry.md or Metadata()
    return item.entry.model_copy(update={"md": md.model_copy(update={"datetime": item.time})})


def _change(entry: Entry) -> str:
    return (entry.md.change if entry.md is not None else None) or "updated"


@dataclass(frozen=True, slots=True)
class Resume:
    """Where to go on in one list: the index of the next entry, and a problem to report."""

    index: int
    problem: str | None = None


def resume_in(items: list[Placed], place: ListPlace, seen: Seen | None) -> Resume:
    """The index in ``items`` (the list at ``place``, read again) of the first entry not yet
    republished."""
    consumed = place.consumed
    if seen is None or consumed == 0:
        return Resume(min(consumed, len(items)))
    if consumed <= len(items) and items[consumed - 1].seen == seen:
        return Resume(consumed)
    # Rewritten: find the entry seen last, else go past its time.
    for index in range(len(items) - 1, -1, -1):
        if items[index].seen == seen:
            return Resume(
                index + 1,
                f"{place.url}: the Change List was rewritten (the entry read last moved from "
                f"position {consumed} to {index + 1}); going on after it",
            )
    index = after_time(items, seen.time)
    return Resume(
        index,
        f"{place.url}: the Change List no longer holds the entry read last ({seen.uri} "
        f"{seen.change} at {seen.time.isoformat()}); going on after that time",
    )


def after_time(items: list[Placed], moment: datetime) -> int:
    """The index of the first entry later than ``moment``."""
    return next((i for i, item in enumerate(items) if item.time > moment), len(items))


@dataclass(frozen=True, slots=True)
class Route:
    """The lists to read next, from where: the first from ``first_index`` (None: find the
    place in it with :func:`resume_in`), the rest from their start; and a problem."""

    lists: list[ListRef]
    resume_place: bool
    problem: str | None = None


def route(refs: list[ListRef], checkpoint: Checkpoint) -> Route:
    """Which of the Source's lists (``refs``, :func:`ordered`) hold what comes after the
    checkpoint (module docstring)."""
    place, seen, since = checkpoint.place, checkpoint.seen, checkpoint.since
    if place is not None:
        for index, ref in enumerate(refs):
            if ref.is_place(place):
                return Route(refs[index:], resume_place=True)
    moment = seen.time if seen is not None else since
    if moment is None:
        return Route(refs, resume_place=False)
    reaching = [r for r in refs if r.until is None or r.until >= moment]
    earliest = min((r.start for r in refs if r.start is not None), default=None)
    problem = None
    if place is not None:
        problem = (
            f"the Change List read last ({place.url}"
            + (f", from {place.start.isoformat()}" if place.start else "")
            + ") is no longer listed; going on from the lists after "
            + moment.isoformat()
        )
    if refs and (earliest is None or earliest > moment):
        gap = f"the remote's Change Lists start at {earliest.isoformat() if earliest else '?'}"
        problem = (
            f"the remote lost history: changes from {moment.isoformat()} are needed and {gap}; "
            "changes in between cannot be read"
        )
    return Route(reaching, resume_place=False, problem=problem)


def skip_older(items: list[Placed], start: int, moment: datetime | None) -> Iterator[int]:
    """Indexes from ``start`` whose entries are not older than ``moment`` (placed entries are
    kept: a 1.0 deletion placed at its list's ``from`` may well be news)."""
    for index in range(start, len(items)):
        item = items[index]
        if moment is None or item.placed or item.time >= moment:
            yield index
