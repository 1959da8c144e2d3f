"""Framework notifications (ResourceSync Framework Notification 1.0.1 §3), built and read.

A framework notification tells a Destination that a capability document changed: a Change
List was created or updated, a Resource List updated, a Capability List or the Source
Description created, updated or deleted. It is a ``<urlset>`` whose ``rs:md`` has
``capability="framework-notification"`` (optional ``from``/``until``), with one ``<url>`` per
changed document: its URI in ``<loc>``, an ``rs:md`` with ``change``, ``datetime`` and the
document's ``capability``, and — for a document under an index — ``<rs:ln rel="index">`` to
that index (§2, §3: notifications are never sent about the index itself).

:func:`framework_notification` builds the document from :class:`FrameworkChange` values;
:func:`framework_changes` reads them back from a parsed one. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .models import Capability, Change, Document, Entry, Link, Metadata

INDEX_REL = "index"
"""§3: the relation from a changed document to the index it resides under."""


@dataclass(frozen=True, slots=True)
class FrameworkChange:
    """One change to a Source's ResourceSync framework (§3, one ``<url>``).

    ``capability`` is the changed document's capability (``changelist``, ``resourcelist``,
    ``capabilitylist``, ``description``…), ``index`` the index it resides under, if any."""

    loc: str
    change: Change
    capability: str
    time: datetime | None
    """When the document changed (§3: optional, the hub always gives it)."""
    index: str | None = None


def framework_notification(
    changes: Sequence[FrameworkChange],
    *,
    start: datetime | None = None,
    until: datetime | None = None,
    up: str | None = None,
) -> Document:
    """§3: one notification of ``changes`` (in the order given: forward chronological), with
    ``from``/``until`` when given and an ``up`` link (to the Capability List of the set of
    resources) when given."""
    entries = tuple(
        Entry(
            loc=change.loc,
            md=Metadata(
                change=change.change.value, datetime=change.time, capability=change.capability
            ),
            links=() if change.index is None else (Link(rel=INDEX_REL, href=change.index),),
        )
        for change in changes
    )
    return Document(
        md=Metadata(capability=Capability.FRAMEWORK_NOTIFICATION, from_=start, until=until),
        links=() if up is None else (Link(rel="up", href=up),),
        entries=entries,
    )


def framework_changes(document: Document) -> list[FrameworkChange]:
    """The changes a framework notification announces, in document order. Raises
    ValueError for a document that is not one (or an entry without change or capability)."""
    if document.md.capability != Capability.FRAMEWORK_NOTIFICATION or document.is_index:
        raise ValueError(f"expected a framework notification, got a {document.type}")
    found = []
    for entry in document.entries:
        md = entry.md
        if md is None or md.change is None or md.capability is None:
            raise ValueError(
                f"{entry.loc}: a framework notification entry needs change and capability"
            )
        index = entry.link(INDEX_REL)
        found.append(
            FrameworkChange(
                loc=entry.loc,
                change=Change(md.change),
                capability=md.capability,
                time=md.datetime,
                index=None if index is None else index.href,
            )
        )
    return found
