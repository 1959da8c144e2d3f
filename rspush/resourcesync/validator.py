"""The spec's rules, checked on a parsed or constructed :class:`Document`.

:func:`validate` returns every violation, each with its rule id, the entry index and the
spec section, never stopping at the first. Rules (ids in brackets):

- capability values and the root each capability allows  [capability-*, root-*]
- Appendix A: where ``at``/``completed``/``from``/``until`` are mandatory, recommended or not
  used, per document type, at document and entry level  [time-*]
- intervals: ``completed`` >= ``at``, ``until`` >= ``from``; 1.1's entry ``datetime`` inside
  the document interval  [interval-order, datetime-interval]
- mandatory ``up`` links  [up-link]
- forward chronological order of Change Lists, notifications, Change Dump Manifests, Change
  List / Change Dump indexes and archives  [forward-order]
- ``change`` values; ``path`` in dump manifests except for deletions  [change-*, path-*]
- Capability Lists: one entry per capability  [capability-duplicate]
- framework notifications: each entry names the changed document's capability (an unknown
  one is a warning: other specifications may add values)  [capability-entry]
- Sitemap limits: 50,000 entries, 50 MB  [limit-*]
- the string values the XML Schemas type: ``<loc>`` an absolute URI of 12-2,048 characters,
  ``rs:ln`` href/profile absolute URIs, rel a relation type, ``type`` a schema content type
  (:mod:`.values`)  [loc-uri, link-uri, rel-syntax, type-syntax]
- plus what the parser recorded: hash syntax, integer lengths, W3C datetimes…

Severity: a broken MUST is an ``error``, a SHOULD/recommended is a ``warning``. One MUST is
reported as a warning on purpose: the ``up`` link, which the spec's own walkthrough examples
(§1.3, Examples 1–5 and 8) leave out and which only aids navigation; ``rs-validate --strict``
counts warnings as failures.

Why one module of this size: the rules are small functions that share the Appendix A tables
and one pass over the entries (split, they would each walk the entries again).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime

from . import namespaces as ns
from .models import (
    CHANGEFREQ_VALUES,
    Capability,
    Change,
    Document,
    DocumentType,
    Entry,
    Link,
    Metadata,
)
from .values import is_absolute_uri, is_media_type, is_rel, loc_problem
from .violations import Severity, Violation

_CHANGES = frozenset(c.value for c in Change)
_CAPABILITIES = frozenset(c.value for c in Capability)
_CAPLIST_ENTRY_CAPABILITIES = _CAPABILITIES - {
    Capability.DESCRIPTION.value,
    Capability.CAPABILITYLIST.value,
    Capability.RESOURCEDUMP_MANIFEST.value,
    Capability.CHANGEDUMP_MANIFEST.value,
    Capability.CHANGELIST_NOTIFICATION.value,
}
# The XSD's pathType "/.*[^/]": leading slash, no trailing slash; in XML Schema "." matches
# any character but a line feed or a carriage return.
_PATH = re.compile(r"/[^\n\r]*[^/]")

T = DocumentType

# Appendix A, Table 4 (and the archives spec): what the document-level rs:md must carry.
_SNAPSHOT_DOCS = {
    T.RESOURCE_LIST,
    T.RESOURCE_LIST_INDEX,
    T.RESOURCE_DUMP,
    T.RESOURCE_DUMP_INDEX,
    T.RESOURCE_DUMP_MANIFEST,
}
_INTERVAL_DOCS = {
    T.CHANGE_LIST,
    T.CHANGE_LIST_INDEX,
    T.CHANGE_DUMP,
    T.CHANGE_DUMP_INDEX,
    T.CHANGE_DUMP_MANIFEST,
    T.CHANGE_NOTIFICATION,
}
# Entry-level: at optional / from recommended; "X" in Table 4 means not used.
_ENTRY_AT_ALLOWED = {
    T.RESOURCE_LIST_INDEX,
    T.RESOURCE_DUMP,
    T.RESOURCE_DUMP_INDEX,
    T.RESOURCE_LIST_ARCHIVE,
    T.RESOURCE_DUMP_ARCHIVE,
}
_ENTRY_FROM_RECOMMENDED = {T.CHANGE_LIST_INDEX, T.CHANGE_DUMP, T.CHANGE_DUMP_INDEX}
_ENTRY_FROM_ALLOWED = _ENTRY_FROM_RECOMMENDED | {T.CHANGE_LIST_ARCHIVE, T.CHANGE_DUMP_ARCHIVE}
# Documents whose entries are changes (§12.1, §13.2, notification §3).
_CHANGE_DOCS = {
    T.CHANGE_LIST,
    T.CHANGE_DUMP_MANIFEST,
    T.CHANGE_NOTIFICATION,
    T.FRAMEWORK_NOTIFICATION,
}
# Documents without a mandatory up link: the Source Description is the top; the
# notifications' up links are optional (notification §3, framework notification §3).
_NO_UP = {
    T.SOURCE_DESCRIPTION,
    T.SOURCE_DESCRIPTION_INDEX,
    T.CHANGE_NOTIFICATION,
    T.FRAMEWORK_NOTIFICATION,
    T.UNKNOWN,
}
# Framework notification §3: from and until are optional.
_OPTIONAL_INTERVAL_DOCS = {T.FRAMEWORK_NOTIFICATION}
_FRAMEWORK = "Framework Notification §3"

_SECTION = {
    T.SOURCE_DESCRIPTION: "Z39.99 §8",
    T.SOURCE_DESCRIPTION_INDEX: "Z39.99 §8",
    T.CAPABILITY_LIST: "Z39.99 §9",
    T.RESOURCE_LIST: "Z39.99 §10.1",
    T.RESOURCE_LIST_INDEX: "Z39.99 §10.2",
    T.RESOURCE_DUMP: "Z39.99 §11.1",
    T.RESOURCE_DUMP_INDEX: "Z39.99 §11.1",
    T.RESOURCE_DUMP_MANIFEST: "Z39.99 §11.2",
    T.CHANGE_LIST: "Z39.99 §12.1",
    T.CHANGE_LIST_INDEX: "Z39.99 §12.2",
    T.CHANGE_DUMP: "Z39.99 §13.1",
    T.CHANGE_DUMP_INDEX: "Z39.99 §13.1",
    T.CHANGE_DUMP_MANIFEST: "Z39.99 §13.2",
    T.RESOURCE_LIST_ARCHIVE: "Archives §3",
    T.RESOURCE_LIST_ARCHIVE_INDEX: "Archives §3.1",
    T.RESOURCE_DUMP_ARCHIVE: "Archives §4",
    T.RESOURCE_DUMP_ARCHIVE_INDEX: "Archives §3.1",
    T.CHANGE_LIST_ARCHIVE: "Archives §5",
    T.CHANGE_LIST_ARCHIVE_INDEX: "Archives §3.1",
    T.CHANGE_DUMP_ARCHIVE: "Archives §6",
    T.CHANGE_DUMP_ARCHIVE_INDEX: "Archives §3.1",
    T.CHANGE_NOTIFICATION: "Notification §3",
    T.FRAMEWORK_NOTIFICATION: _FRAMEWORK,
    T.UNKNOWN: "Z39.99 §7",
}
_APPENDIX_A = "Z39.99 Appendix A"


def validate(document: Document) -> list[Violation]:
    """Every violation in ``document``: what the parser found, then the spec's rules."""
    found = [*document.problems, *_check(document)]
    # Document-level first, then by entry: the order a reader fixes them in.
    found.sort(key=lambda v: -1 if v.entry is None else v.entry)
    return found


def is_valid(document: Document, *, strict: bool = False) -> bool:
    """No errors (and, with ``strict``, no warnings either)."""
    return not any(strict or v.severity is Severity.ERROR for v in validate(document))


def _v(
    rule: str,
    message: str,
    section: str,
    *,
    entry: int | None = None,
    severity: Severity = Severity.ERROR,
) -> Violation:
    return Violation(rule=rule, message=message, section=section, entry=entry, severity=severity)


def _check(doc: Document) -> Iterator[Violation]:
    kind = doc.type
    section = _SECTION[kind]
    yield from _check_capability(doc, kind)
    if kind is T.UNKNOWN:
        return
    yield from _check_limits(doc)
    yield from _check_document_times(doc, kind, section)
    yield from _check_links(doc, kind, section)
    yield from _check_entries(doc, kind, section)
    yield from _check_values(doc)
    yield from _check_order(doc, kind, section)
    if kind is T.CAPABILITY_LIST:
        yield from _check_capability_list(doc)
    if kind is T.FRAMEWORK_NOTIFICATION:
        yield from _check_framework_entries(doc)


def _check_capability(doc: Document, kind: DocumentType) -> Iterator[Violation]:
    capability = doc.md.capability
    if not capability:
        yield _v(
            "capability-missing",
            "document-level <rs:md> has no capability attribute",
            "Z39.99 §7",
        )
        return
    if capability not in _CAPABILITIES:
        yield _v(
            "capability-unknown",
            f"capability={capability!r} is not a value defined by the core, archives or "
            f"notification specs ({', '.join(sorted(_CAPABILITIES))})",
            "Z39.99 §7",
        )
        return
    if kind is T.UNKNOWN:
        # A defined capability in a root the spec does not define for it.
        notification = capability in (
            Capability.CHANGE_NOTIFICATION,
            Capability.CHANGELIST_NOTIFICATION,
            Capability.FRAMEWORK_NOTIFICATION,
        )
        yield _v(
            "root-not-allowed",
            f"capability={capability!r} cannot be a <{doc.root}>"
            + (
                "; notifications are split into several <urlset> documents"
                if notification
                else "; it has no index form"
            ),
            "Notification §3" if notification else "Z39.99 §7",
        )
    elif capability == Capability.CHANGELIST_NOTIFICATION:
        yield _v(
            "capability-deprecated",
            "capability 'changelist-notification' is the draft name; the published spec "
            "uses 'change-notification'",
            "Notification §3",
            severity=Severity.WARNING,
        )


def _check_limits(doc: Document) -> Iterator[Violation]:
    if len(doc.entries) > ns.MAX_ENTRIES:
        yield _v(
            "limit-entries",
            f"{len(doc.entries)} entries; a Sitemap holds at most {ns.MAX_ENTRIES} "
            "(split it and publish an index)",
            "Z39.99 §7",
        )
    if doc.size is not None and doc.size > ns.MAX_DOCUMENT_BYTES:
        yield _v(
            "limit-bytes",
            f"{doc.size} bytes; a Sitemap is at most {ns.MAX_DOCUMENT_BYTES} bytes",
            "Z39.99 §7",
        )


def _check_document_times(doc: Document, kind: DocumentType, section: str) -> Iterator[Violation]:
    md = doc.md
    if kind in _SNAPSHOT_DOCS:
        if md.at is None:
            yield _v("time-at-missing", f"a {kind} must have rs:md@at", _APPENDIX_A)
    elif md.at is not None or md.completed is not None:
        yield _v(
            "time-at-not-used",
            f"rs:md@at/completed are not used in a {kind}",
            _APPENDIX_A,
        )
    if kind in _INTERVAL_DOCS:
        if md.from_ is None:
            yield _v("time-from-missing", f"a {kind} must have rs:md@from", _APPENDIX_A)
        if kind is T.CHANGE_NOTIFICATION and md.until is None:
            yield _v(
                "time-until-missing",
                "a change notification must have rs:md@until",
                "Notification §3",
            )
    elif kind not in _OPTIONAL_INTERVAL_DOCS and (md.from_ is not None or md.until is not None):
        yield _v(
            "time-from-not-used",
            f"rs:md@from/until are not used in a {kind}",
            _APPENDIX_A,
        )
    yield from _interval(md.at, md.completed, md.from_, md.until, None, section)


def _interval(
    at: datetime | None,
    completed: datetime | None,
    start: datetime | None,
    until: datetime | None,
    entry: int | None,
    section: str,
) -> Iterator[Violation]:
    if at is not None and completed is not None and completed < at:
        yield _v("interval-order", "completed is before at", section, entry=entry)
    if start is not None and until is not None and until < start:
        yield _v("interval-order", "until is before from", section, entry=entry)


def _check_links(doc: Document, kind: DocumentType, section: str) -> Iterator[Violation]:
    if kind not in _NO_UP and doc.link("up") is None:
        yield _v(
            "up-link",
            f'a {kind} must have <rs:ln rel="up"> to its '
            + ("Source Description" if kind is T.CAPABILITY_LIST else "Capability List"),
            section,
            severity=Severity.WARNING,
        )


def _check_entries(doc: Document, kind: DocumentType, section: str) -> Iterator[Violation]:
    is_change_doc = kind in _CHANGE_DOCS
    is_manifest = kind in (T.RESOURCE_DUMP_MANIFEST, T.CHANGE_DUMP_MANIFEST)
    doc_from, doc_until = doc.md.from_, doc.md.until
    from_recommended = kind in _ENTRY_FROM_RECOMMENDED
    for index, entry in enumerate(doc.entries):
        md = entry.md
        if entry.changefreq is not None and entry.changefreq not in CHANGEFREQ_VALUES:
            yield _v(
                "changefreq-value",
                f"<changefreq> {entry.changefreq!r} is not one of "
                f"{', '.join(sorted(CHANGEFREQ_VALUES))}",
                "Z39.99 §7",
                entry=index,
            )
        if is_change_doc:
            change = None if md is None else md.change
            if change is None or change not in _CHANGES:
                yield from _check_change(entry, index, section)
            if md is not None and md.datetime is not None:
                outside = (doc_from is not None and md.datetime < doc_from) or (
                    doc_until is not None and md.datetime > doc_until
                )
                if outside:
                    yield _v(
                        "datetime-interval",
                        "rs:md@datetime is outside the document's from/until interval",
                        "Z39.99 §7",
                        entry=index,
                    )
        elif md is not None and md.change is not None:
            yield _v(
                "change-not-used",
                f"rs:md@change is only used in Change Lists and Change Dump Manifests, "
                f"not in a {kind}",
                "Z39.99 §7",
                entry=index,
                severity=Severity.WARNING,
            )
        if is_manifest:
            yield from _check_path(entry, index, kind, section)
        elif md is not None and md.path is not None:
            yield _v(
                "path-not-used",
                "rs:md@path is only used in dump manifests",
                "Z39.99 §7",
                entry=index,
                severity=Severity.WARNING,
            )
        for link in entry.links:
            if link.path is not None and not _PATH.fullmatch(link.path):
                yield _v(
                    "path-syntax",
                    f"rs:ln@path={link.path!r} must start with '/' and not end with '/'",
                    "Z39.99 §7",
                    entry=index,
                )
        if from_recommended or (
            md is not None
            and (
                md.at is not None
                or md.completed is not None
                or md.from_ is not None
                or md.until is not None
            )
        ):
            yield from _check_entry_times(entry, index, kind)
        if (
            kind is T.SOURCE_DESCRIPTION
            and md is not None
            and md.capability
            not in (
                None,
                Capability.CAPABILITYLIST,
            )
        ):
            yield _v(
                "capability-entry",
                f"Source Description entries point to Capability Lists, not {md.capability!r}",
                section,
                entry=index,
            )


_SCHEMA = "Sitemap and ResourceSync XML Schemas"


def _check_values(doc: Document) -> Iterator[Violation]:
    """The values the XML Schemas constrain: what breaks them makes the document invalid."""
    yield from _check_md_and_links(doc.md, doc.links, None)
    parsed_missing = {v.entry for v in doc.problems if v.rule == "loc-missing"}
    for index, entry in enumerate(doc.entries):
        if not entry.loc:
            # A parsed document has this from the parser already; one built in code does not.
            if index not in parsed_missing:
                yield _v("loc-missing", "entry has no <loc> (mandatory)", "Z39.99 §7", entry=index)
            continue
        problem = loc_problem(entry.loc)
        if problem is not None:
            yield _v("loc-uri", problem, _SCHEMA, entry=index)
        if entry.md is not None or entry.links:
            yield from _check_md_and_links(entry.md, entry.links, index)


def _check_md_and_links(
    md: Metadata | None, links: tuple[Link, ...], entry: int | None
) -> Iterator[Violation]:
    if md is not None and md.type is not None and not is_media_type(md.type):
        yield _type_violation("rs:md", md.type, entry)
    for link in links:
        for name, value in (("href", link.href), ("profile", link.profile)):
            if value is not None and not is_absolute_uri(value):
                yield _v(
                    "link-uri",
                    f"rs:ln@{name}={_cut(value)} is not an absolute URI",
                    _SCHEMA,
                    entry=entry,
                )
        if not is_rel(link.rel):
            yield _v(
                "rel-syntax",
                f"rs:ln@rel={_cut(link.rel)} is neither a registered relation type "
                "([a-z][a-z0-9.-]*) nor an absolute URI",
                _SCHEMA,
                entry=entry,
            )
        if link.type is not None and not is_media_type(link.type):
            yield _type_violation("rs:ln", link.type, entry)


def _type_violation(element: str, value: str, entry: int | None) -> Violation:
    return _v(
        "type-syntax",
        f"{element}@type={_cut(value)} is not type/subtype of letters, digits, '$', '+', '^' "
        "or '-' (the schema's contentType)",
        _SCHEMA,
        entry=entry,
    )


def _cut(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _check_change(entry: Entry, index: int, section: str) -> Iterator[Violation]:
    change = entry.change
    if change is None:
        yield _v(
            "change-missing",
            'each change needs <rs:md change="created|updated|deleted">',
            section,
            entry=index,
        )
    elif change not in _CHANGES:
        yield _v(
            "change-value",
            f"change={change!r} is not created, updated or deleted",
            "Z39.99 §7",
            entry=index,
        )


def _check_path(entry: Entry, index: int, kind: DocumentType, section: str) -> Iterator[Violation]:
    path = None if entry.md is None else entry.md.path
    if path is None:
        # §13.2: "Except in the case of change="deleted", the element must also have a path".
        if not (kind is T.CHANGE_DUMP_MANIFEST and entry.change == Change.DELETED):
            yield _v(
                "path-missing",
                f"entries of a {kind} need rs:md@path (the bitstream in the ZIP package)",
                section,
                entry=index,
            )
    elif not _PATH.fullmatch(path):
        yield _v(
            "path-syntax",
            f"rs:md@path={path!r} must start with '/' and not end with '/'",
            section,
            entry=index,
        )


def _check_entry_times(entry: Entry, index: int, kind: DocumentType) -> Iterator[Violation]:
    md = entry.md
    if md is None:
        if kind in _ENTRY_FROM_RECOMMENDED:
            yield _entry_from_recommended(kind, index)
        return
    if (md.at is not None or md.completed is not None) and kind not in _ENTRY_AT_ALLOWED:
        yield _v(
            "time-at-not-used",
            f"entry rs:md@at/completed are not used in a {kind}",
            _APPENDIX_A,
            entry=index,
        )
    if (md.from_ is not None or md.until is not None) and kind not in _ENTRY_FROM_ALLOWED:
        yield _v(
            "time-from-not-used",
            f"entry rs:md@from/until are not used in a {kind}",
            _APPENDIX_A,
            entry=index,
        )
    if kind in _ENTRY_FROM_RECOMMENDED and md.from_ is None:
        yield _entry_from_recommended(kind, index)
    yield from _interval(md.at, md.completed, md.from_, md.until, index, _APPENDIX_A)


def _entry_from_recommended(kind: DocumentType, index: int) -> Violation:
    return _v(
        "time-from-recommended",
        f"entries of a {kind} should carry rs:md@from (and until once closed)",
        _APPENDIX_A,
        entry=index,
        severity=Severity.WARNING,
    )


def _order_key(entry: Entry, kind: DocumentType) -> datetime | None:
    """The datetime an ordered document is ordered by, for one entry."""
    if kind in _CHANGE_DOCS:
        return entry.change_time
    md = entry.md
    if md is None:
        return None
    if kind in (T.RESOURCE_LIST_ARCHIVE, T.RESOURCE_DUMP_ARCHIVE):
        return md.at
    return md.from_


_ORDERED = _CHANGE_DOCS | {
    T.CHANGE_LIST_INDEX,
    T.CHANGE_DUMP,
    T.CHANGE_DUMP_INDEX,
    T.RESOURCE_LIST_ARCHIVE,
    T.RESOURCE_DUMP_ARCHIVE,
    T.CHANGE_LIST_ARCHIVE,
    T.CHANGE_DUMP_ARCHIVE,
}


def _check_order(doc: Document, kind: DocumentType, section: str) -> Iterator[Violation]:
    """§12.1/§12.2/§13.2, notification §3, archives §5/§6: forward chronological order.

    Entries without a datetime are skipped: 1.1 allows a change with neither datetime nor
    lastmod, its place in the list being its only time (Example 19).
    """
    if kind not in _ORDERED:
        return
    previous: datetime | None = None
    change_doc = kind in _CHANGE_DOCS
    for index, entry in enumerate(doc.entries):
        if change_doc:  # inlined _order_key / Entry.change_time: the hot case
            md = entry.md
            moment = md.datetime if md is not None and md.datetime is not None else entry.lastmod
        else:
            moment = _order_key(entry, kind)
        if moment is None:
            continue
        if previous is not None and moment < previous:
            yield _v(
                "forward-order",
                f"entry at {moment.isoformat()} comes after one at {previous.isoformat()}; "
                f"a {kind} must be in forward chronological order",
                section,
                entry=index,
            )
        if previous is None or moment > previous:
            previous = moment


def _check_capability_list(doc: Document) -> Iterator[Violation]:
    seen: dict[str, int] = {}
    for index, entry in enumerate(doc.entries):
        capability = None if entry.md is None else entry.md.capability
        if capability is None:
            yield _v(
                "capability-entry",
                'each Capability List entry needs <rs:md capability="...">',
                "Z39.99 §9",
                entry=index,
            )
            continue
        if capability not in _CAPLIST_ENTRY_CAPABILITIES:
            yield _v(
                "capability-entry",
                f"capability={capability!r} is not a capability a Capability List advertises",
                "Z39.99 §9",
                entry=index,
            )
        if capability in seen:
            yield _v(
                "capability-duplicate",
                f"capability {capability!r} already listed at entry {seen[capability]}; "
                "a Capability List must only contain one entry per capability",
                "Z39.99 §9",
                entry=index,
            )
        else:
            seen[capability] = index


# Framework notification §3: what a framework notification's entries may name; the archives
# spec's values too, and other specifications may add more (so an unknown one is a warning).
_FRAMEWORK_SUBJECTS = frozenset(
    {
        Capability.RESOURCELIST,
        Capability.RESOURCEDUMP,
        Capability.CHANGELIST,
        Capability.CHANGEDUMP,
        Capability.CAPABILITYLIST,
        Capability.DESCRIPTION,
        Capability.RESOURCELIST_ARCHIVE,
        Capability.RESOURCEDUMP_ARCHIVE,
        Capability.CHANGELIST_ARCHIVE,
        Capability.CHANGEDUMP_ARCHIVE,
    }
)


def _check_framework_entries(doc: Document) -> Iterator[Violation]:
    """Framework notification §3: each entry's rs:md names the changed document's capability."""
    for index, entry in enumerate(doc.entries):
        capability = None if entry.md is None else entry.md.capability
        if capability is None:
            yield _v(
                "capability-entry",
                'each framework notification entry needs <rs:md capability="..."> naming '
                "the changed document's capability",
                _FRAMEWORK,
                entry=index,
            )
        elif capability not in _FRAMEWORK_SUBJECTS:
            yield _v(
                "capability-entry",
                f"capability={capability!r} is not a capability document the core or "
                "archives specs define",
                _FRAMEWORK,
                entry=index,
                severity=Severity.WARNING,
            )
