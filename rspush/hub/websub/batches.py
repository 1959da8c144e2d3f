"""Delivered notification documents, built with the document layer (no I/O).

A batch is consecutive stream entries bounded by entry count and bytes (notification spec
§3: many simultaneous changes "must be split into a sequence of change notifications").
Consecutive notifications to one subscriber cover consecutive ``from``/``until`` intervals:
each one's ``from`` is the previous one's ``until`` (§3).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from rspush.resourcesync import Capability, Change, Document, Entry, Link, Metadata
from rspush.resourcesync.serialiser import serialise, serialise_head, serialise_tail
from rspush.resourcesync.w3cdt import from_us

XML_MEDIA_TYPE = "application/xml"
_TAIL = serialise_tail(Document(md=Metadata(capability=Capability.CHANGE_NOTIFICATION)))


@dataclass(frozen=True, slots=True)
class Interval:
    """What a notification covers: every change with ``from_us`` < time <= ``until_us``."""

    from_us: int
    until_us: int


def interval(previous_until_us: int | None, times_us: Sequence[int]) -> Interval:
    """The interval of a batch with change times ``times_us`` after a notification that ended
    at ``previous_until_us`` (None: the first notification, which starts at its first
    change)."""
    start = times_us[0] if previous_until_us is None else previous_until_us
    return Interval(start, max(start, times_us[-1]))


def split(sizes: Iterable[int], *, max_entries: int, max_bytes: int) -> Iterator[int]:
    """Lengths of consecutive batches of items of ``sizes`` bytes: at most ``max_entries``
    items and ``max_bytes`` bytes each, but never empty (one larger item goes alone)."""
    count = total = 0
    for size in sizes:
        if count and (count >= max_entries or total + size > max_bytes):
            yield count
            count = total = 0
        count += 1
        total += size
    if count:
        yield count


def head(capability_list: str, span: Interval, *, links: Sequence[Link] = ()) -> str:
    """The document head (``rs:ln`` up, then ``rs:md``) of a change notification."""
    document = Document(
        root="urlset",
        md=Metadata(
            capability=Capability.CHANGE_NOTIFICATION,
            from_=from_us(span.from_us),
            until=from_us(span.until_us),
        ),
        links=(Link(rel="up", href=capability_list), *links),
    )
    return serialise_head(document)


def change_notification(capability_list: str, span: Interval, fragments: Iterable[str]) -> bytes:
    """A change notification of stored ``<url>`` fragments (already serialised by the
    document layer at ingest), head and tail from the serialiser."""
    return "".join([head(capability_list, span), *fragments, _TAIL]).encode("utf-8")


def history_moved(capability_list: str, archive: str, span: Interval) -> bytes:
    """The notification sent when the changes of ``span`` are no longer in the stream
    (retention moved them to closed Change Lists) before they reached the subscriber.

    It covers ``span`` so the ``from``/``until`` chain stays contiguous, and its one entry
    is the Change List Archive (``updated`` at the end of ``span``): that is where the
    changes of ``span`` are. A Sitemap ``<urlset>`` needs at least one ``<url>``, and the
    archive also appears as a document-level ``rs:ln rel="collection"`` for readers that
    look there (docs/websub.md, "History moved")."""
    document = Document(
        root="urlset",
        md=Metadata(
            capability=Capability.CHANGE_NOTIFICATION,
            from_=from_us(span.from_us),
            until=from_us(span.until_us),
        ),
        links=(Link(rel="up", href=capability_list), Link(rel="collection", href=archive)),
        entries=(
            Entry(
                loc=archive,
                md=Metadata(
                    change=Change.UPDATED,
                    datetime=from_us(span.until_us),
                    type=XML_MEDIA_TYPE,
                ),
            ),
        ),
    )
    return serialise(document)
