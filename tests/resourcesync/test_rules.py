"""The validator catches each rule when a valid document is broken in exactly that way.

Every case starts from a document that validates with no violation at all, applies one
mutation and checks the rule id, the entry it concerns and the severity; the violations
the mutation may legitimately drag along are listed with the case, anything else fails.
Rules the parser reports are exercised through bytes, and must carry the source line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rspush.resourcesync import (
    MAX_DOCUMENT_BYTES,
    MAX_ENTRIES,
    Document,
    DocumentType,
    Entry,
    Link,
    Metadata,
    NotResourceSyncError,
    Severity,
    Violation,
    parse_document,
    serialise,
    validate,
)

E, W = Severity.ERROR, Severity.WARNING
T0 = datetime(2013, 1, 3, 9, 0, tzinfo=UTC)
UP_CAPLIST = Link(rel="up", href="http://example.com/dataset1/capabilitylist.xml")
UP_DESCRIPTION = Link(rel="up", href="http://example.com/.well-known/resourcesync")


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


def loc(name: str) -> str:
    return f"http://example.com/{name}"


# --- valid documents, one per type ----------------------------------------------------------


def source_description() -> Document:
    return Document(
        md=Metadata(capability="description"),
        links=(Link(rel="describedby", href=loc("info_about_source.xml")),),
        entries=(
            Entry(loc=loc("dataset1/capabilitylist.xml"), md=Metadata(capability="capabilitylist")),
            Entry(loc=loc("dataset2/capabilitylist.xml"), md=Metadata(capability="capabilitylist")),
        ),
    )


def source_description_index() -> Document:
    return Document(
        root="sitemapindex",
        md=Metadata(capability="description"),
        entries=(
            Entry(loc=loc("resourcesync-part1.xml")),
            Entry(loc=loc("resourcesync-part2.xml")),
        ),
    )


def capability_list() -> Document:
    return Document(
        md=Metadata(capability="capabilitylist"),
        links=(UP_DESCRIPTION,),
        entries=tuple(
            Entry(loc=loc(f"dataset1/{cap}.xml"), md=Metadata(capability=cap))
            for cap in ("resourcelist", "changelist", "changelist-archive", "change-notification")
        ),
    )


def resource_list() -> Document:
    return Document(
        md=Metadata(capability="resourcelist", at=T0, completed=hours(1)),
        links=(UP_CAPLIST,),
        entries=(
            Entry(
                loc=loc("res1"),
                lastmod=hours(-20),
                changefreq="daily",
                md=Metadata(hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6", length=8876),
                links=(Link(rel="duplicate", href="http://mirror.example.com/res1", pri=1),),
            ),
            Entry(loc=loc("res2"), lastmod=hours(-30), md=Metadata(type="text/html")),
            Entry(loc=loc("res3")),
        ),
    )


def resource_list_index() -> Document:
    return Document(
        root="sitemapindex",
        md=Metadata(capability="resourcelist", at=T0),
        links=(UP_CAPLIST,),
        entries=(
            Entry(loc=loc("resourcelist1.xml"), md=Metadata(at=T0)),
            Entry(loc=loc("resourcelist2.xml"), md=Metadata(at=T0, completed=hours(1))),
        ),
    )


def resource_dump() -> Document:
    return Document(
        md=Metadata(capability="resourcedump", at=T0),
        links=(UP_CAPLIST,),
        entries=(
            Entry(
                loc=loc("resourcedump-part1.zip"),
                md=Metadata(type="application/zip", length=4765, at=T0, completed=hours(1)),
                links=(Link(rel="contents", href=loc("resourcedump_manifest-part1.xml")),),
            ),
        ),
    )


def resource_dump_index() -> Document:
    return resource_list_index().model_copy(
        update={"md": Metadata(capability="resourcedump", at=T0)}
    )


def resource_dump_manifest() -> Document:
    return Document(
        md=Metadata(capability="resourcedump-manifest", at=T0, completed=hours(1)),
        links=(UP_CAPLIST,),
        entries=(
            Entry(loc=loc("res1"), md=Metadata(path="/resources/res1", length=8876)),
            Entry(loc=loc("res2"), md=Metadata(path="/resources/res2", type="text/html")),
        ),
    )


def change_list() -> Document:
    return Document(
        md=Metadata(capability="changelist", from_=T0, until=hours(10)),
        links=(UP_CAPLIST,),
        entries=(
            Entry(loc=loc("res1"), md=Metadata(change="created", datetime=hours(1))),
            Entry(loc=loc("res2"), md=Metadata(change="updated", datetime=hours(2))),
            Entry(loc=loc("res3"), md=Metadata(change="deleted", datetime=hours(3))),
        ),
    )


def change_list_10() -> Document:
    """A 1.0 Change List: change times in <lastmod>, no rs:md@datetime."""
    return Document(
        md=Metadata(capability="changelist", from_=T0),
        links=(UP_CAPLIST,),
        entries=(
            Entry(loc=loc("res1"), lastmod=hours(1), md=Metadata(change="created")),
            Entry(loc=loc("res2"), lastmod=hours(2), md=Metadata(change="updated")),
            Entry(loc=loc("res3"), lastmod=hours(3), md=Metadata(change="deleted")),
        ),
    )


def change_list_index() -> Document:
    return Document(
        root="sitemapindex",
        md=Metadata(capability="changelist", from_=T0),
        links=(UP_CAPLIST,),
        entries=(
            Entry(loc=loc("changelist1.xml"), md=Metadata(from_=T0, until=hours(24))),
            Entry(loc=loc("changelist2.xml"), md=Metadata(from_=hours(24), until=hours(48))),
            Entry(loc=loc("changelist3.xml"), md=Metadata(from_=hours(48))),
        ),
    )


def change_dump() -> Document:
    return Document(
        md=Metadata(capability="changedump", from_=T0),
        links=(UP_CAPLIST,),
        entries=tuple(
            Entry(
                loc=loc(f"changedump-part{n}.zip"),
                md=Metadata(type="application/zip", from_=hours(24 * n), until=hours(24 * n + 24)),
                links=(Link(rel="contents", href=loc(f"changedump_manifest-part{n}.xml")),),
            )
            for n in range(3)
        ),
    )


def change_dump_index() -> Document:
    return change_list_index().model_copy(
        update={"md": Metadata(capability="changedump", from_=T0)}
    )


def change_dump_manifest() -> Document:
    return Document(
        md=Metadata(capability="changedump-manifest", from_=T0, until=hours(10)),
        links=(UP_CAPLIST,),
        entries=(
            Entry(
                loc=loc("res1"),
                md=Metadata(change="created", datetime=hours(1), path="/changes/res1"),
            ),
            Entry(
                loc=loc("res2"),
                md=Metadata(change="updated", datetime=hours(2), path="/changes/res2"),
            ),
            # §13.2: a deletion has no bitstream, so no path.
            Entry(loc=loc("res3"), md=Metadata(change="deleted", datetime=hours(3))),
        ),
    )


def notification() -> Document:
    return Document(
        md=Metadata(capability="change-notification", from_=T0, until=hours(1)),
        entries=(
            Entry(loc=loc("res1"), md=Metadata(change="created", datetime=hours(0.25))),
            Entry(loc=loc("res2"), md=Metadata(change="updated", datetime=hours(0.5))),
            Entry(loc=loc("res3"), md=Metadata(change="deleted", datetime=hours(0.75))),
        ),
    )


def framework_notification() -> Document:
    """Framework Notification §3: entries name the changed document's capability; a
    document under an index links to it."""
    return Document(
        md=Metadata(capability="framework-notification", from_=T0, until=hours(1)),
        links=(UP_CAPLIST,),
        entries=(
            Entry(
                loc=loc("changelists/3.xml"),
                md=Metadata(change="updated", datetime=hours(0.5), capability="changelist"),
                links=(Link(rel="index", href=loc("changelist-index.xml")),),
            ),
            Entry(
                loc=loc("resourcelist.xml"),
                md=Metadata(change="updated", datetime=hours(0.75), capability="resourcelist"),
            ),
        ),
    )


def _archive(capability: str, times: Callable[[int], Metadata]) -> Document:
    return Document(
        md=Metadata(capability=capability),
        links=(UP_CAPLIST,),
        entries=tuple(Entry(loc=loc(f"archived{n}.xml"), md=times(n)) for n in range(3)),
    )


def resource_list_archive() -> Document:
    return _archive("resourcelist-archive", lambda n: Metadata(at=hours(24 * n)))


def resource_dump_archive() -> Document:
    return _archive(
        "resourcedump-archive", lambda n: Metadata(at=hours(24 * n), completed=hours(24 * n + 1))
    )


def change_list_archive() -> Document:
    return _archive(
        "changelist-archive", lambda n: Metadata(from_=hours(24 * n), until=hours(24 * n + 24))
    )


def change_dump_archive() -> Document:
    return _archive(
        "changedump-archive", lambda n: Metadata(from_=hours(24 * n), until=hours(24 * n + 24))
    )


def archive_index(capability: str) -> Callable[[], Document]:
    def build() -> Document:
        return Document(
            root="sitemapindex",
            md=Metadata(capability=capability),
            links=(UP_CAPLIST,),
            entries=(Entry(loc=loc(f"{capability}1.xml")), Entry(loc=loc(f"{capability}2.xml"))),
        )

    return build


BASES: dict[str, Callable[[], Document]] = {
    "source_description": source_description,
    "source_description_index": source_description_index,
    "capability_list": capability_list,
    "resource_list": resource_list,
    "resource_list_index": resource_list_index,
    "resource_dump": resource_dump,
    "resource_dump_index": resource_dump_index,
    "resource_dump_manifest": resource_dump_manifest,
    "change_list": change_list,
    "change_list_10": change_list_10,
    "change_list_index": change_list_index,
    "change_dump": change_dump,
    "change_dump_index": change_dump_index,
    "change_dump_manifest": change_dump_manifest,
    "notification": notification,
    "framework_notification": framework_notification,
    "resource_list_archive": resource_list_archive,
    "resource_dump_archive": resource_dump_archive,
    "change_list_archive": change_list_archive,
    "change_dump_archive": change_dump_archive,
    "resource_list_archive_index": archive_index("resourcelist-archive"),
    "resource_dump_archive_index": archive_index("resourcedump-archive"),
    "change_list_archive_index": archive_index("changelist-archive"),
    "change_dump_archive_index": archive_index("changedump-archive"),
}


@pytest.mark.parametrize("name", BASES)
def test_base_documents_are_valid(name: str) -> None:
    document = BASES[name]()
    assert document.type is not DocumentType.UNKNOWN
    assert validate(document) == []
    assert validate(parse_document(serialise(document))) == []


def test_base_documents_cover_every_type() -> None:
    types = {build().type for build in BASES.values()}
    assert types == set(DocumentType) - {DocumentType.UNKNOWN}


# --- mutations (models are frozen: each returns a modified copy) ----------------------------


def set_md(**changes: Any) -> Callable[[Document], Document]:
    def mutate(doc: Document) -> Document:
        return doc.model_copy(update={"md": doc.md.model_copy(update=changes)})

    return mutate


def set_root(root: str) -> Callable[[Document], Document]:
    return lambda doc: doc.model_copy(update={"root": root})


def set_links(*links: Link) -> Callable[[Document], Document]:
    return lambda doc: doc.model_copy(update={"links": links})


def set_entry(index: int, **changes: Any) -> Callable[[Document], Document]:
    def mutate(doc: Document) -> Document:
        entries = list(doc.entries)
        entries[index] = entries[index].model_copy(update=changes)
        return doc.model_copy(update={"entries": tuple(entries)})

    return mutate


def set_entry_md(index: int, **changes: Any) -> Callable[[Document], Document]:
    def mutate(doc: Document) -> Document:
        md = doc.entries[index].md or Metadata()
        return set_entry(index, md=md.model_copy(update=changes))(doc)

    return mutate


def swap_last_two(doc: Document) -> Document:
    *head, before_last, last = doc.entries
    return doc.model_copy(update={"entries": (*head, last, before_last)})


Expected = tuple[str, int | None, Severity]


def case(
    base: str,
    mutate: Callable[[Document], Document],
    expected: Expected,
    *,
    id: str,
    also: tuple[Expected, ...] = (),
) -> Any:
    return pytest.param(base, mutate, expected, also, id=id)


MODEL_CASES = [
    case(
        "resource_list", set_md(capability=None), ("capability-missing", None, E), id="cap-missing"
    ),
    case(
        "resource_list",
        set_md(capability="resource-list"),
        ("capability-unknown", None, E),
        id="cap-unknown",
    ),
    case(
        "resource_dump_manifest",
        set_root("sitemapindex"),
        ("root-not-allowed", None, E),
        id="root-rd-manifest-index",
    ),
    case(
        "change_dump_manifest",
        set_root("sitemapindex"),
        ("root-not-allowed", None, E),
        id="root-cd-manifest-index",
    ),
    case(
        "capability_list",
        set_root("sitemapindex"),
        ("root-not-allowed", None, E),
        id="root-caplist-index",
    ),
    case(
        "notification",
        set_root("sitemapindex"),
        ("root-not-allowed", None, E),
        id="root-notification-index",
    ),
    case(
        "notification",
        set_md(capability="changelist-notification"),
        ("capability-deprecated", None, W),
        id="cap-deprecated",
    ),
    *(
        case(base, set_md(at=None, completed=None), ("time-at-missing", None, E), id=f"at-{base}")
        for base in (
            "resource_list",
            "resource_list_index",
            "resource_dump",
            "resource_dump_index",
            "resource_dump_manifest",
        )
    ),
    case("change_list", set_md(at=T0), ("time-at-not-used", None, E), id="at-in-changelist"),
    case(
        "change_list",
        set_md(completed=T0),
        ("time-at-not-used", None, E),
        id="completed-in-changelist",
    ),
    case(
        "resource_list_archive",
        set_md(at=T0),
        ("time-at-not-used", None, E),
        id="at-in-archive-head",
    ),
    case(
        "resource_list",
        set_entry_md(1, at=T0),
        ("time-at-not-used", 1, E),
        id="entry-at-in-resourcelist",
    ),
    case(
        "change_list_index",
        set_entry_md(2, at=T0),
        ("time-at-not-used", 2, E),
        id="entry-at-in-changelist-index",
    ),
    *(
        case(
            base,
            set_md(from_=None),
            ("time-from-missing", None, E),
            id=f"from-{base}",
        )
        for base in (
            "change_list",
            "change_list_index",
            "change_dump",
            "change_dump_index",
            "change_dump_manifest",
            "notification",
        )
    ),
    case(
        "notification",
        set_md(until=None),
        ("time-until-missing", None, E),
        id="notification-until",
    ),
    case("resource_list", set_md(from_=T0), ("time-from-not-used", None, E), id="from-in-rl"),
    case(
        "resource_list",
        set_md(until=hours(2)),
        ("time-from-not-used", None, E),
        id="until-in-rl",
    ),
    case(
        "capability_list",
        set_md(from_=T0),
        ("time-from-not-used", None, E),
        id="from-in-caplist",
    ),
    case(
        "resource_list",
        set_entry_md(2, from_=T0),
        ("time-from-not-used", 2, E),
        id="entry-from-in-rl",
    ),
    case(
        "change_list",
        set_entry_md(0, until=hours(9)),
        ("time-from-not-used", 0, E),
        id="entry-until-in-cl",
    ),
    case(
        "resource_list",
        set_md(completed=hours(-1)),
        ("interval-order", None, E),
        id="completed-before-at",
    ),
    case(
        "change_list_index",
        set_md(until=hours(-1)),
        ("interval-order", None, E),
        id="until-before-from",
    ),
    case(
        "change_list_index",
        set_entry_md(1, until=hours(23)),
        ("interval-order", 1, E),
        id="entry-until-before-from",
    ),
    case(
        "resource_dump",
        set_entry_md(0, completed=hours(-1)),
        ("interval-order", 0, E),
        id="entry-completed-before-at",
    ),
    case(
        "change_list",
        set_entry_md(0, datetime=hours(-1)),
        ("datetime-interval", 0, E),
        id="datetime-before-from",
    ),
    case(
        "change_list",
        set_entry_md(2, datetime=hours(11)),
        ("datetime-interval", 2, E),
        id="datetime-after-until",
    ),
    case(
        "notification",
        set_entry_md(2, datetime=hours(2)),
        ("datetime-interval", 2, E),
        id="notification-datetime-after-until",
    ),
    case("resource_list", set_links(), ("up-link", None, W), id="up-missing-rl"),
    case("capability_list", set_links(), ("up-link", None, W), id="up-missing-caplist"),
    case(
        "change_list",
        set_links(Link(rel="index", href=loc("changelist-index.xml"))),
        ("up-link", None, W),
        id="up-missing-cl-with-other-links",
    ),
    case(
        "resource_list_archive_index",
        set_links(),
        ("up-link", None, W),
        id="up-missing-archive-index",
    ),
    case("change_list", set_entry_md(1, change=None), ("change-missing", 1, E), id="change-cl"),
    case("change_list", set_entry(1, md=None), ("change-missing", 1, E), id="change-no-md"),
    case(
        "change_dump_manifest",
        set_entry_md(0, change=None),
        ("change-missing", 0, E),
        id="change-cdm",
    ),
    case(
        "notification",
        set_entry_md(2, change=None),
        ("change-missing", 2, E),
        id="change-notification",
    ),
    case(
        "change_list",
        set_entry_md(0, change="modified"),
        ("change-value", 0, E),
        id="change-value",
    ),
    case(
        "change_list",
        set_entry_md(2, change="Deleted"),
        ("change-value", 2, E),
        id="change-value-case",
    ),
    case(
        "resource_list",
        set_entry_md(0, change="created"),
        ("change-not-used", 0, W),
        id="change-in-rl",
    ),
    case(
        "resource_dump_manifest",
        set_entry_md(1, path=None),
        ("path-missing", 1, E),
        id="path-missing-rdm",
    ),
    case(
        "change_dump_manifest",
        set_entry_md(1, path=None),
        ("path-missing", 1, E),
        id="path-missing-cdm",
    ),
    case(
        "change_dump_manifest",
        set_entry_md(2, change="updated"),
        ("path-missing", 2, E),
        id="path-missing-when-no-longer-deleted",
    ),
    case(
        "resource_dump_manifest",
        set_entry_md(0, path="resources/res1"),
        ("path-syntax", 0, E),
        id="path-relative",
    ),
    case(
        "resource_dump_manifest",
        set_entry_md(1, path="/resources/"),
        ("path-syntax", 1, E),
        id="path-trailing-slash",
    ),
    case(
        "resource_list",
        set_entry(0, links=(Link(rel="duplicate", href=loc("x"), path="res1"),)),
        ("path-syntax", 0, E),
        id="link-path-relative",
    ),
    case(
        "resource_list",
        set_entry_md(2, path="/res3"),
        ("path-not-used", 2, W),
        id="path-in-rl",
    ),
    case(
        "change_list_index",
        set_entry_md(0, from_=None),
        ("time-from-recommended", 0, W),
        id="from-recommended-cli",
    ),
    case(
        "change_dump",
        set_entry(1, md=None),
        ("time-from-recommended", 1, W),
        id="from-recommended-cd",
    ),
    case(
        "change_dump_index",
        set_entry(2, md=Metadata(until=hours(72))),
        ("time-from-recommended", 2, W),
        id="from-recommended-cdi",
    ),
    *(
        case(base, swap_last_two, ("forward-order", 2, E), id=f"order-{base}")
        for base in (
            "change_list",
            "change_list_10",
            "change_list_index",
            "change_dump",
            "change_dump_index",
            "change_dump_manifest",
            "notification",
            "resource_list_archive",
            "resource_dump_archive",
            "change_list_archive",
            "change_dump_archive",
        )
    ),
    case(
        "change_list",
        set_entry_md(2, datetime=hours(0.5)),
        ("forward-order", 2, E),
        id="order-earlier-than-all",
    ),
    case(
        "source_description",
        set_entry_md(1, capability="resourcelist"),
        ("capability-entry", 1, E),
        id="sd-entry-not-caplist",
    ),
    case(
        "capability_list",
        set_entry(2, md=None),
        ("capability-entry", 2, E),
        id="caplist-entry-without-capability",
    ),
    case(
        "capability_list",
        set_entry_md(0, capability="description"),
        ("capability-entry", 0, E),
        id="caplist-entry-description",
    ),
    case(
        "capability_list",
        set_entry_md(1, capability="resourcedump-manifest"),
        ("capability-entry", 1, E),
        id="caplist-entry-manifest",
    ),
    case(
        "capability_list",
        set_entry_md(3, capability="changelist"),
        ("capability-duplicate", 3, E),
        id="caplist-duplicate",
    ),
    case(
        "resource_list",
        set_entry(0, changefreq="sometimes"),
        ("changefreq-value", 0, E),
        id="changefreq",
    ),
    case(
        "resource_list",
        set_entry(1, loc="res1/relative"),
        ("loc-uri", 1, E),
        id="loc-relative",
    ),
    case(
        "resource_list",
        set_entry(0, links=(Link(rel="duplicate", href="mirror/res1"),)),
        ("link-uri", 0, E),
        id="link-href-relative",
    ),
    case(
        "resource_list",
        set_entry(0, links=(Link(rel="Duplicate", href=loc("x")),)),
        ("rel-syntax", 0, E),
        id="rel-capitalised",
    ),
    case(
        "resource_list",
        set_entry_md(0, type="application/vnd.ms-excel"),
        ("type-syntax", 0, E),
        id="type-with-a-dot",
    ),
]


def found(violations: list[Violation]) -> set[Expected]:
    return {(v.rule, v.entry, v.severity) for v in violations}


@pytest.mark.parametrize(("base", "mutate", "expected", "also"), MODEL_CASES)
def test_validator_catches_the_broken_rule(
    base: str,
    mutate: Callable[[Document], Document],
    expected: Expected,
    also: tuple[Expected, ...],
) -> None:
    document = BASES[base]()
    assert validate(document) == []

    violations = validate(mutate(document))

    assert expected in found(violations)
    assert found(violations) <= {expected, *also}, "the one mutation broke more than one rule"
    for violation in violations:
        assert violation.section and violation.message


@pytest.mark.parametrize(
    ("base", "mutate"),
    [
        pytest.param("notification", set_links(), id="notification-up-link-optional"),
        pytest.param("change_dump_manifest", lambda d: d, id="cdm-deletion-without-path"),
        pytest.param("change_list", set_entry_md(1, datetime=None), id="cl-change-without-time"),
        pytest.param(
            "change_list", set_entry_md(2, datetime=hours(2)), id="cl-equal-times-are-ordered"
        ),
        pytest.param("change_list", set_entry_md(2, datetime=hours(10)), id="datetime-at-until"),
        pytest.param("change_list", set_entry_md(0, datetime=T0), id="datetime-at-from"),
        pytest.param("resource_list", swap_last_two, id="resource-list-is-unordered"),
        pytest.param(
            "resource_list", set_md(completed=T0), id="completed-equal-to-at-is-an-interval"
        ),
        pytest.param(
            "notification",
            set_md(capability="changelist-notification"),
            id="deprecated-notification-name-is-no-error",
        ),
    ],
)
def test_valid_variants_raise_no_error(base: str, mutate: Callable[[Document], Document]) -> None:
    violations = validate(mutate(BASES[base]()))
    assert [v for v in violations if v.severity is E] == []
    assert {v.rule for v in violations} <= {"capability-deprecated"}


def test_root_not_allowed_names_the_notification_spec() -> None:
    (violation,) = validate(set_root("sitemapindex")(notification()))
    assert violation.rule == "root-not-allowed"
    assert violation.section == "Notification §3"


# --- Sitemap limits ---------------------------------------------------------------------------


def _resource_list_with(count: int) -> Document:
    entry = Entry(loc=loc("res"))
    return Document.model_construct(
        root="urlset",
        md=Metadata(capability="resourcelist", at=T0),
        links=(UP_CAPLIST,),
        entries=(entry,) * count,
    )


def test_limit_entries() -> None:
    assert validate(_resource_list_with(MAX_ENTRIES)) == []

    violations = validate(_resource_list_with(MAX_ENTRIES + 1))

    assert found(violations) == {("limit-entries", None, E)}


def test_limit_bytes() -> None:
    base = resource_list()
    at_limit = Document.model_construct(**{**dict(base), "size": MAX_DOCUMENT_BYTES})
    over = Document.model_construct(**{**dict(base), "size": MAX_DOCUMENT_BYTES + 1})
    assert validate(at_limit) == []

    assert found(validate(over)) == {("limit-bytes", None, E)}


def test_parsed_documents_record_their_size() -> None:
    xml = serialise(resource_list())
    parsed = parse_document(xml)
    assert parsed.size == len(xml)
    assert validate(parsed) == []


# --- rules the parser reports, from bytes -----------------------------------------------------

XML = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="http://example.com/dataset1/capabilitylist.xml"/>
  <rs:md capability="changelist" from="2013-01-03T00:00:00Z"/>
  <url>
    <loc>http://example.com/res1</loc>
    <lastmod>2013-01-03T11:00:00Z</lastmod>
    <changefreq>daily</changefreq>
    <priority>0.5</priority>
    <rs:md change="updated" datetime="2013-01-03T11:00:00Z" length="8876" type="text/html"/>
    <rs:ln rel="duplicate" href="http://mirror.example.com/res1" pri="1"/>
    <rs:ln rel="alternate" href="http://example.com/res1.txt" modified="2013-01-03T11:00:00Z"/>
    <rs:ln rel="via" href="http://example.com/r" hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6"/>
  </url>
  <url>
    <loc>http://example.com/res2</loc>
    <rs:md change="deleted" datetime="2013-01-03T13:00:00Z"/>
  </url>
</urlset>
"""


def test_base_xml_is_valid() -> None:
    document = parse_document(XML)
    assert document.type is DocumentType.CHANGE_LIST
    assert len(document.entries) == 2
    assert validate(document) == []


def bytes_case(
    old: bytes,
    new: bytes,
    expected: Expected,
    *,
    line_of: bytes,
    id: str,
    also: tuple[Expected, ...] = (),
) -> Any:
    """Replace ``old`` by ``new`` once; the violation is on the line holding ``line_of``."""
    return pytest.param(old, new, expected, line_of, also, id=id)


ENTRY0_MD = b'<rs:md change="updated" datetime="2013-01-03T11:00:00Z"'
ENTRY0_LN = b'<rs:ln rel="duplicate"'
ENTRY0_HASH = b'<rs:ln rel="via"'
DOC_MD = b'<rs:md capability="changelist" from="2013-01-03T00:00:00Z"/>'
ENTRY1 = b"  <url>\n    <loc>http://example.com/res2</loc>\n"

BYTES_CASES = [
    bytes_case(
        b'datetime="2013-01-03T11:00:00Z"',
        b'datetime="2013-01-03 11:00"',
        ("datetime-syntax", 0, E),
        line_of=b'datetime="2013-01-03 11:00"',
        id="datetime-attribute",
    ),
    bytes_case(
        b'modified="2013-01-03T11:00:00Z"',
        b'modified="2013-01-03T11:00:00"',
        ("datetime-syntax", 0, E),
        line_of=b'modified="2013-01-03T11:00:00"',
        id="datetime-without-zone",
    ),
    bytes_case(
        b"<lastmod>2013-01-03T11:00:00Z</lastmod>",
        b"<lastmod>yesterday</lastmod>",
        ("datetime-syntax", 0, E),
        line_of=b"<lastmod>yesterday",
        id="lastmod",
    ),
    bytes_case(
        b'from="2013-01-03T00:00:00Z"',
        b'from="2013-02-30T00:00:00Z"',
        ("datetime-syntax", None, E),
        line_of=b'from="2013-02-30',
        also=(("time-from-missing", None, E),),
        id="datetime-document-level",
    ),
    bytes_case(
        b'length="8876"',
        b'length="8.8k"',
        ("length-integer", 0, E),
        line_of=b'length="8.8k"',
        id="length-not-integer",
    ),
    bytes_case(
        b'length="8876"',
        b'length="-1"',
        ("length-integer", 0, E),
        line_of=b'length="-1"',
        id="length-negative",
    ),
    bytes_case(
        b'pri="1"', b'pri="first"', ("pri-integer", 0, E), line_of=ENTRY0_LN, id="pri-integer"
    ),
    bytes_case(b'pri="1"', b'pri="0"', ("pri-range", 0, E), line_of=ENTRY0_LN, id="pri-zero"),
    bytes_case(
        b'pri="1"', b'pri="1000000"', ("pri-range", 0, E), line_of=ENTRY0_LN, id="pri-too-big"
    ),
    bytes_case(
        b'hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6"',
        b'hash="1584abdf8ebdc9802ac0c6a7402c03b6"',
        ("hash-syntax", 0, E),
        line_of=ENTRY0_HASH,
        id="hash-without-algorithm",
    ),
    bytes_case(
        b'hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6"',
        b'hash=""',
        ("hash-syntax", 0, E),
        line_of=ENTRY0_HASH,
        id="hash-empty",
    ),
    bytes_case(
        b'hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6"',
        b'hash="md5:"',
        ("hash-syntax", 0, E),
        line_of=ENTRY0_HASH,
        id="hash-empty-digest",
    ),
    bytes_case(
        b' href="http://mirror.example.com/res1"',
        b"",
        ("link-attributes", 0, E),
        line_of=ENTRY0_LN,
        id="link-without-href",
    ),
    bytes_case(
        b'<rs:ln rel="duplicate" ',
        b"<rs:ln ",
        ("link-attributes", 0, E),
        line_of=b'<rs:ln href="http://mirror',
        id="link-without-rel",
    ),
    bytes_case(
        b'<rs:ln rel="up" ',
        b"<rs:ln ",
        ("link-attributes", None, E),
        line_of=b'<rs:ln href="http://example.com/dataset1',
        # The link is dropped, so the document has no up link either.
        also=(("up-link", None, W),),
        id="document-link-without-rel",
    ),
    bytes_case(
        ENTRY1,
        b"  <url> <!-- no loc -->\n",
        ("loc-missing", 1, E),
        line_of=b"<!-- no loc -->",
        id="loc-missing",
    ),
    bytes_case(
        b"<loc>http://example.com/res1</loc>",
        b"<loc>  </loc>",
        ("loc-missing", 0, E),
        line_of=b"  <url>",
        id="loc-empty",
    ),
    bytes_case(
        DOC_MD,
        DOC_MD + b'\n  <rs:md capability="resourcelist" at="2013-01-03T00:00:00Z"/>',
        ("md-repeated", None, E),
        line_of=b'<rs:md capability="resourcelist"',
        id="md-repeated-document",
    ),
    bytes_case(
        b'<rs:md change="deleted"',
        b'<rs:md change="created"/>\n    <rs:md change="deleted"',
        ("md-repeated", 1, E),
        line_of=b'<rs:md change="deleted"',
        id="md-repeated-entry",
    ),
    bytes_case(
        b"<changefreq>daily</changefreq>",
        b"<changefreq>daily</changefreq><title>Res 1</title>",
        ("unknown-element", 0, E),
        line_of=b"<title>",
        id="unknown-sitemap-element-in-entry",
    ),
    bytes_case(
        DOC_MD,
        DOC_MD + b"\n  <rs:title>Changes</rs:title>",
        ("unknown-element", None, E),
        line_of=b"<rs:title>",
        id="unknown-rs-element-document-level",
    ),
    bytes_case(
        b"<priority>0.5</priority>",
        b'<priority>0.5</priority>\n    <note xmlns="">x</note>',
        ("unknown-element", 0, E),
        line_of=b'<note xmlns="">',
        id="element-without-namespace",
    ),
    bytes_case(
        b'<rs:md change="deleted" datetime="2013-01-03T13:00:00Z"/>',
        b'<md xmlns="http://www.openarchives.org/rs/terms" change="deleted"/>',
        ("wrong-namespace", 1, E),
        line_of=b'<md xmlns="http://www.openarchives.org/rs/terms"',
        # Without its rs:md, the entry has no change either.
        also=(("change-missing", 1, E),),
        id="rs-namespace-without-slash",
    ),
    bytes_case(
        b'type="text/html"',
        b'type="text/html" mime="text/html"',
        ("unknown-attribute", 0, E),
        line_of=ENTRY0_MD,
        id="unknown-attribute",
    ),
    bytes_case(
        b'<rs:ln rel="up"',
        b'<rs:ln rel="up" title="Capabilities"',
        ("unknown-attribute", None, E),
        line_of=b'<rs:ln rel="up"',
        id="unknown-attribute-document-link",
    ),
    bytes_case(
        b'type="text/html"',
        b'rs:type="text/html"',
        ("attribute-prefixed", 0, E),
        line_of=ENTRY0_MD,
        id="attribute-prefixed",
    ),
    bytes_case(
        ENTRY1 + b'    <rs:md change="deleted" datetime="2013-01-03T13:00:00Z"/>\n  </url>',
        b"  <sitemap>\n    <loc>http://example.com/res2</loc>\n"
        b'    <rs:md change="deleted" datetime="2013-01-03T13:00:00Z"/>\n  </sitemap>',
        ("entry-element", 1, E),
        line_of=b"<sitemap>",
        id="sitemap-in-urlset",
    ),
    bytes_case(
        b"<priority>0.5</priority>",
        b"<priority>1.5</priority>",
        ("priority-range", 0, E),
        line_of=b"<priority>1.5",
        id="priority-over-one",
    ),
    bytes_case(
        b"<priority>0.5</priority>",
        b"<priority>-0.1</priority>",
        ("priority-range", 0, E),
        line_of=b"<priority>-0.1",
        id="priority-negative",
    ),
    bytes_case(
        b"<priority>0.5</priority>",
        b"<priority>high</priority>",
        ("priority-range", 0, E),
        line_of=b"<priority>high",
        id="priority-not-a-number",
    ),
]


def line_of(data: bytes, marker: bytes) -> int:
    assert data.count(marker) >= 1, marker
    return data[: data.index(marker)].count(b"\n") + 1


@pytest.mark.parametrize(("old", "new", "expected", "marker", "also"), BYTES_CASES)
def test_parser_catches_the_broken_rule_with_its_line(
    old: bytes,
    new: bytes,
    expected: Expected,
    marker: bytes,
    also: tuple[Expected, ...],
) -> None:
    assert XML.count(old) == 1
    broken = XML.replace(old, new)

    violations = validate(parse_document(broken))

    assert expected in found(violations)
    assert found(violations) <= {expected, *also}
    rule, entry, _ = expected
    lines = {v.line for v in violations if v.rule == rule and v.entry == entry}
    assert lines == {line_of(broken, marker)}


def test_url_inside_a_sitemapindex_is_an_entry_element_violation() -> None:
    data = b"""<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
              xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="http://example.com/dataset1/capabilitylist.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
  <sitemap><loc>http://example.com/resourcelist1.xml</loc></sitemap>
  <url><loc>http://example.com/resourcelist2.xml</loc></url>
</sitemapindex>
"""
    violations = validate(parse_document(data))
    assert [(v.rule, v.entry, v.severity, v.line) for v in violations] == [
        ("entry-element", 1, E, 7)
    ]


def test_too_many_problems_are_capped_with_a_final_violation() -> None:
    entries = b"".join(
        b"<url><loc>http://example.com/r%d</loc><priority>2</priority>"
        b'<rs:md change="created"/></url>\n' % n
        for n in range(1100)
    )
    data = XML.replace(
        b"  <url>\n    <loc>http://example.com/res1",
        entries + b"  <url>\n    <loc>http://example.com/res1",
    )

    violations = validate(parse_document(data))

    rules = [v.rule for v in violations]
    assert rules.count("priority-range") == 1000
    assert rules.count("too-many-problems") == 1
    assert len(rules) == 1001  # the cap holds whatever else would follow


def test_bad_values_are_left_out_of_the_model() -> None:
    broken = XML.replace(b'length="8876"', b'length="many"').replace(b'pri="1"', b'pri="0"')
    document = parse_document(broken)
    assert document.entries[0].md is not None
    assert document.entries[0].md.length is None
    assert document.entries[0].md.type == "text/html"  # the rest of the element is kept
    assert document.entries[0].links[0].pri is None


def test_changefreq_from_bytes_is_caught_by_the_validator() -> None:
    broken = XML.replace(b"<changefreq>daily</changefreq>", b"<changefreq>often</changefreq>")
    assert found(validate(parse_document(broken))) == {("changefreq-value", 0, E)}


def test_document_md_in_the_wrong_namespace_is_not_resourcesync() -> None:
    # Without the document-level rs:md the document has no capability: not ResourceSync.
    broken = XML.replace(
        DOC_MD,
        b'<rs:md xmlns:rs="http://www.openarchives.org/rs/terms" capability="changelist"'
        b' from="2013-01-03T00:00:00Z"/>',
    )
    with pytest.raises(NotResourceSyncError):
        parse_document(broken)


def test_every_violation_is_reported_at_once_document_level_first() -> None:
    document = change_list()
    for mutate in (
        set_entry_md(2, change="moved"),
        set_entry_md(0, change=None),
        set_links(),
        set_md(at=T0),
    ):
        document = mutate(document)

    violations = validate(document)

    assert [(v.rule, v.entry) for v in violations] == [
        ("time-at-not-used", None),
        ("up-link", None),
        ("change-missing", 0),
        ("change-value", 2),
    ]


def _rule_ids_in(module: Any) -> set[str]:
    """The rule ids a module can produce: first arguments of ``_v(...)``/``problem(...)``."""
    source = Path(module.__file__).read_text(encoding="utf-8")
    calls = re.findall(r'(?:\b_v|\.problem)\(\s*"([a-z-]+)"', source)
    return {*calls, *re.findall(r'\brule="([a-z-]+)"', source)}


def test_every_rule_id_is_exercised() -> None:
    from rspush.resourcesync import parser, validator

    produced = _rule_ids_in(validator) | _rule_ids_in(parser)
    # Built as f"{what}-integer" for pri (length has its own literal).
    produced.add("pri-integer")
    assert len(produced) > 30  # the extraction found the rules, not nothing
    exercised = {param.values[2][0] for param in (*MODEL_CASES, *BYTES_CASES)}
    # Exercised by the tests of their own below.
    exercised |= {"limit-entries", "limit-bytes", "too-many-problems"}
    assert produced - exercised == set()


def test_line_of_a_start_tag_spanning_lines_is_within_the_tag() -> None:
    # libxml2 numbers an element by the line its start tag ends on; either end of the tag
    # points the reader at the right element.
    broken = XML.replace(b' length="8876"', b'\n           length="8876 bytes"\n          ')
    start, end = line_of(broken, ENTRY0_MD), line_of(broken, b"8876 bytes") + 1

    (violation,) = validate(parse_document(broken))

    assert violation.rule == "length-integer"
    assert start <= violation.line <= end  # type: ignore[operator]
