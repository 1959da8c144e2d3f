"""Turning a posted fragment into change records: pure logic, no Redis, no clock.

A Source posts a Change-List-format fragment (``<urlset>`` with ``capability="changelist"``,
ResourceSync 1.0 or 1.1) or a change notification (``change-notification``, or the draft
``changelist-notification``). Everything is checked here before anything is written:

- the document parses safely and breaks no rule of the spec (errors; warnings pass). Two
  rules are relaxed for fragments: ``from``/``until`` may be missing, because the hub, not the
  Source, decides the intervals of the lists it publishes;
- every entry has a change time: ``rs:md@datetime`` (1.1), else ``<lastmod>`` (1.0), else the
  hub's acceptance time ``now``;
- change times are in forward order and not more than ``future_tolerance`` ahead of ``now``.

**Policy for change times that go backwards**: a fragment whose first change is earlier than
the last change the topic accepted is *rejected* (:class:`.errors.ChangeTimeBackwards`) with
both times in the message, never clamped: clamping would publish a time the Source never
said, and Change Lists list changes in forward chronological order (ResourceSync 1.1 §12.1).
The comparison with the topic's last change happens inside the atomic append (:mod:`.store`),
so concurrent posters cannot interleave out of order.

Every rejection here is a :class:`.errors.DocumentRejected` with its code; the HTTP status is
the edge's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rspush.protocol import MAX_CHANGE_BYTES, change_json_with
from rspush.resourcesync import (
    Capability,
    Change,
    Document,
    DocumentError,
    Entry,
    Severity,
    parse_document,
    validate,
)
from rspush.resourcesync.fragments import FRAGMENT_CAPABILITIES, RELAXED_FOR_FRAGMENTS
from rspush.resourcesync.serialiser import change_entries, state_entry
from rspush.resourcesync.w3cdt import format_w3c_datetime, to_us

from .errors import Code, DocumentRejected

# What a fragment may be and which rules it need not follow: shared with rs-validate
# --fragment, so the validator says exactly what the hub would accept.
CHANGE_CAPABILITIES = FRAGMENT_CAPABILITIES
_RELAXED_RULES = RELAXED_FOR_FRAGMENTS


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """One change ready for the stream: its time in microseconds since the epoch, the
    ``<url>`` XML for Change Lists, and the Resource List entry XML (None for deletions)."""

    time_us: int
    loc: str
    change: str
    entry_xml: str
    state_xml: str | None
    entry_json: str
    """The change in the push channel's compact JSON form (docs/protocol.md)."""


@dataclass(frozen=True, slots=True)
class IngestPlan:
    records: list[ChangeRecord] = field(default_factory=list)
    stamped: bool = False
    """Some change had no time and got the hub's ``now``: if a concurrent request appends
    later times first, the hub may re-stamp and retry (it made the time up itself)."""

    @property
    def first_time_us(self) -> int:
        return self.records[0].time_us

    @property
    def last_time_us(self) -> int:
        return self.records[-1].time_us


@dataclass(frozen=True, slots=True)
class SeedPlan:
    """A Resource List taken as the topic's state at ``at`` (no change events)."""

    at_us: int
    state: dict[str, str]


def parse_fragment(body: bytes, *, max_bytes: int) -> Document:
    try:
        return parse_document(body, max_bytes=max_bytes)
    except DocumentError as exc:
        raise DocumentRejected(_error_code(exc), str(exc)) from exc


_ERROR_CODES = {
    "UnsafeXMLError": Code.UNSAFE_XML,
    "DocumentTooLargeError": Code.DOCUMENT_TOO_LARGE,
    "MalformedXMLError": Code.MALFORMED_XML,
    "WrongNamespaceError": Code.WRONG_NAMESPACE,
    "NotResourceSyncError": Code.NOT_RESOURCESYNC,
}


def _error_code(exc: DocumentError) -> Code:
    return _ERROR_CODES.get(type(exc).__name__, Code.INVALID_DOCUMENT)


def _reject_violations(document: Document, relaxed: frozenset[str]) -> None:
    errors = [
        v for v in validate(document) if v.severity is Severity.ERROR and v.rule not in relaxed
    ]
    if errors:
        first = errors[0]
        raise DocumentRejected(
            Code.INVALID_DOCUMENT,
            f"{len(errors)} rule violation(s); first: {first}",
            errors,
            entry=first.entry,
            rule=first.rule,
        )


def plan_changes(
    document: Document,
    *,
    now: datetime,
    max_entries: int,
    future_tolerance: timedelta,
    stamp: datetime | None = None,
) -> IngestPlan:
    """Check a parsed change fragment and turn it into records (or raise DocumentRejected).

    Entries without a time get ``stamp`` (default ``now``); the times a Source gave must not
    be more than ``future_tolerance`` ahead of ``now``, whatever the stamp."""
    if document.capability not in CHANGE_CAPABILITIES or document.is_index:
        raise DocumentRejected(
            Code.WRONG_CAPABILITY,
            f"expected a Change List fragment (<urlset>, capability 'changelist') or a change "
            f"notification; got <{document.root}> capability={document.capability!r}",
        )
    if not document.entries:
        raise DocumentRejected(Code.EMPTY, "the fragment lists no changes")
    if len(document.entries) > max_entries:
        raise DocumentRejected(
            Code.TOO_MANY_ENTRIES,
            f"{len(document.entries)} entries; at most {max_entries} per request",
        )
    _reject_violations(document, _RELAXED_RULES)

    latest_allowed = now + future_tolerance
    records: list[ChangeRecord] = []
    previous: datetime | None = None
    stamped = False
    for index, entry in enumerate(document.entries):
        own = entry.change_time
        stamped = stamped or own is None
        moment = own or stamp or now
        if own is not None and moment > latest_allowed:
            raise DocumentRejected(
                Code.FUTURE_CHANGE_TIME,
                f"entry {index}: change time {moment.isoformat()} is more than "
                f"{future_tolerance.total_seconds():.0f} s ahead of the hub's clock",
                entry=index,
            )
        if previous is not None and moment < previous:
            note = "" if own else " (it had no time; the hub stamped it now)"
            raise DocumentRejected(
                Code.FORWARD_ORDER,
                f"entry {index}: change time {moment.isoformat()}{note} is before entry "
                f"{index - 1}'s {previous.isoformat()}; give every entry a datetime in forward "
                "chronological order",
                entry=index,
            )
        previous = moment
        record = _record(entry, moment)
        if max(len(record.entry_xml), len(record.entry_json)) > MAX_CHANGE_BYTES:
            # A pushed frame carries at least one whole change (docs/protocol.md, limits).
            raise DocumentRejected(
                Code.ENTRY_TOO_LARGE,
                f"entry {index}: more than {MAX_CHANGE_BYTES:,} bytes once published; "
                "a change must fit one push frame",
                entry=index,
            )
        records.append(record)
    return IngestPlan(records, stamped)


def _record(entry: Entry, moment: datetime) -> ChangeRecord:
    """The three forms of one change, built from the posted entry in one pass (no model
    copies; each datetime formatted once):

    - the Change List entry: what the Source sent, always saying when the change happened
      (1.1 ``rs:md@datetime``) and, for a created/updated resource, its lastmod — as the
      Resource List does: 1.0 clients (resync among them) date resources by lastmod only;
    - the Resource List entry after the change, None for a deletion;
    - the push channel's JSON form of the Change List entry."""
    md = entry.md
    change = (md.change if md is not None else None) or Change.UPDATED
    moment_text = format_w3c_datetime(moment)
    own = entry.lastmod
    # A 1.0 entry's change time is its lastmod: the same text, formatted once.
    own_lastmod = (
        None if own is None else moment_text if own is moment else format_w3c_datetime(own)
    )
    deleted = change == Change.DELETED
    lastmod = own_lastmod if deleted else own_lastmod or moment_text
    entry_xml, state_xml = change_entries(
        entry,
        datetime=moment_text,
        lastmod=lastmod,
        state_lastmod=None if deleted else own_lastmod or moment_text,
    )
    return ChangeRecord(
        time_us=to_us(moment),
        loc=entry.loc,
        change=change,
        entry_xml=entry_xml,
        state_xml=state_xml,
        entry_json=change_json_with(entry, change, moment_text, lastmod),
    )


def plan_seed(
    document: Document,
    *,
    max_entries: int,
    now: datetime | None = None,
    future_tolerance: timedelta = timedelta(0),
) -> SeedPlan:
    """Check a posted Resource List (the topic's baseline) and turn it into state."""
    if document.capability != Capability.RESOURCELIST or document.is_index:
        raise DocumentRejected(
            Code.WRONG_CAPABILITY,
            f"a baseline is a Resource List (<urlset>, capability 'resourcelist'); got "
            f"<{document.root}> capability={document.capability!r}",
        )
    if len(document.entries) > max_entries:
        raise DocumentRejected(
            Code.TOO_MANY_ENTRIES, f"{len(document.entries)} entries; at most {max_entries}"
        )
    _reject_violations(document, frozenset())
    at = document.md.at
    assert at is not None  # validate() reports time-at-missing as an error
    if now is not None and at > now + future_tolerance:
        # A future `at` would make every real change until then "go backwards".
        raise DocumentRejected(
            Code.FUTURE_CHANGE_TIME,
            f"the Resource List's at {at.isoformat()} is more than "
            f"{future_tolerance.total_seconds():.0f} s ahead of the hub's clock",
        )
    state: dict[str, str] = {}
    at_text = format_w3c_datetime(at)
    for entry in document.entries:
        lastmod = at_text if entry.lastmod is None else format_w3c_datetime(entry.lastmod)
        state[entry.loc] = state_entry(entry, lastmod)
    return SeedPlan(at_us=to_us(at), state=state)
