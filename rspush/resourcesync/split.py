"""Split any number of entries into Sitemap-sized documents plus the index the spec requires.

Z39.99 §7 caps a ``<urlset>`` at 50,000 entries and 50 MB; past that a Source publishes
several lists grouped by a ``<sitemapindex>`` of the same capability (§10.2 Resource List
Index, §12.2 Change List Index, archives §3.1). Each part links ``up`` to the Capability List
and ``index`` to the index; the index links ``up`` too.

Snapshot documents (Resource List, Resource Dump, archives of them) give every part and the
index the snapshot's ``at``/``completed``. Change documents give each part the interval it
covers: the first starts at the overall ``from``, each next one at the change time of its
first entry, and each part's ``until`` is the next one's ``from`` (the last keeps the overall
``until``, or none while the list is open) — consecutive, non-overlapping, gap-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from . import namespaces as ns
from .models import Document, DocumentType, Entry, Link, Metadata
from .serialiser import serialise_entry, serialise_head, serialise_tail

_CHANGE_TYPES = frozenset(
    {DocumentType.CHANGE_LIST, DocumentType.CHANGE_DUMP_MANIFEST, DocumentType.CHANGE_NOTIFICATION}
)


@dataclass(frozen=True)
class SplitResult:
    """``parts`` in order; ``index`` is None when one document was enough."""

    parts: list[Document]
    index: Document | None


def split_entries(
    entries: Sequence[Entry],
    *,
    md: Metadata,
    up: str | None,
    part_url: Callable[[int], str],
    index_url: str,
    max_entries: int = ns.MAX_ENTRIES,
    max_bytes: int = ns.MAX_DOCUMENT_BYTES,
    links: Sequence[Link] = (),
) -> SplitResult:
    """Split ``entries`` under document metadata ``md``.

    ``part_url(i)`` names the i-th part (0-based); ``index_url`` names the index. ``links``
    are extra document-level links (e.g. ``archives``) copied onto every part and the index.
    """
    if max_entries < 1:
        raise ValueError("max_entries must be at least 1")
    base_links = ([Link(rel="up", href=up)] if up else []) + list(links)
    single = Document(md=md, links=tuple(base_links), entries=tuple(entries))
    chunks = _chunk(entries, single, max_entries, max_bytes, index_url)
    if len(chunks) == 1:
        return SplitResult(parts=[single], index=None)

    part_links = tuple(base_links + [Link(rel="index", href=index_url)])
    changes = single.type in _CHANGE_TYPES
    times = _part_intervals(chunks, md, changes)
    parts = []
    index_entries = []
    for number, (chunk, (start, until)) in enumerate(zip(chunks, times, strict=True)):
        part_md = md.model_copy(update={"from_": start, "until": until}) if start else md
        parts.append(Document(md=part_md, links=part_links, entries=tuple(chunk)))
        index_md = (
            Metadata(from_=start, until=until)
            if start is not None
            else Metadata(at=md.at, completed=md.completed)
        )
        index_entries.append(Entry(loc=part_url(number), md=index_md))
    index = Document(
        root="sitemapindex", md=md, links=tuple(base_links), entries=tuple(index_entries)
    )
    return SplitResult(parts=parts, index=index)


def _chunk(
    entries: Sequence[Entry], template: Document, max_entries: int, max_bytes: int, index_url: str
) -> list[list[Entry]]:
    """Greedy split by count and by serialised size (head + tail + entries <= max_bytes)."""
    # Measure the largest head a part can have: the index link and a full interval added.
    widest = template.md.model_copy(
        update={"until": template.md.until or template.md.from_ or template.md.at}
    )
    head = template.model_copy(
        update={"md": widest, "links": (*template.links, Link(rel="index", href=index_url))}
    )
    overhead = len(serialise_head(head).encode()) + len(serialise_tail(head).encode())
    chunks: list[list[Entry]] = [[]]
    size = overhead
    for entry in entries:
        entry_size = len(serialise_entry(entry).encode())
        current = chunks[-1]
        if current and (len(current) >= max_entries or size + entry_size > max_bytes):
            chunks.append([])
            size = overhead
        chunks[-1].append(entry)
        size += entry_size
    return chunks


def _boundary(entry: Entry, changes: bool) -> datetime | None:
    """The time an entry marks in its document's interval: its change time in a change
    document; the ``from`` of the package or list it points to otherwise (a Change Dump's
    ``<lastmod>`` is the ZIP file's, not a change time)."""
    if changes:
        return entry.change_time
    return None if entry.md is None else entry.md.from_


def _part_intervals(
    chunks: list[list[Entry]], md: Metadata, changes: bool
) -> list[tuple[datetime | None, datetime | None]]:
    if md.from_ is None:
        return [(None, None)] * len(chunks)
    starts: list[datetime] = [md.from_]
    latest = md.from_
    for previous, chunk in zip(chunks, chunks[1:], strict=False):
        # The latest time seen so far: an undated entry (§12.1 Example 19) belongs after it.
        for entry in previous:
            moment = _boundary(entry, changes)
            if moment is not None and moment > latest:
                latest = moment
        first = _boundary(chunk[0], changes)
        start = max(first, latest) if first is not None else latest
        if md.until is not None:
            start = min(start, md.until)
        starts.append(start)
    untils: list[datetime | None] = [*starts[1:], md.until]
    return list(zip(starts, untils, strict=True))
