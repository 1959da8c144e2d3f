"""Golden files: every XML example of the specs parses, validates and round-trips (C14N)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lxml import etree

from rspush.resourcesync import DocumentType, Severity, parse_document, serialise, validate
from rspush.resourcesync.schema import schema_errors
from tests.support.spec import find_spec

SPEC = find_spec()
EXAMPLES = sorted(
    p
    for p in (SPEC / "examples").glob("v1.*/*.xml")
    # Example 9 is the HTML <link rel="resourcesync"> discovery example, not a Sitemap.
    if p.name != "resourcesync_ex_9.xml"
)
# Z39.99 §1.3's walkthrough examples omit the up link the later sections make mandatory.
WALKTHROUGH = {f"resourcesync_ex_{n}.xml" for n in (1, 2, 3, 4, 5, 8)}


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def canonical(data: bytes) -> bytes:
    """C14N of the document with insignificant whitespace folded: blank text dropped and
    whitespace runs inside attribute values (multi-line hash lists) collapsed."""
    parser = etree.XMLParser(remove_blank_text=True, resolve_entities=False, no_network=True)
    root = etree.fromstring(data, parser)
    for element in root.iter():
        for name, value in element.attrib.items():
            element.set(name, " ".join(value.split()))
        if element.text is not None:
            element.text = element.text.strip() or None
        element.tail = None
    return etree.tostring(root, method="c14n")


def test_examples_are_found() -> None:
    # Both spec versions and the archives examples: a wrong path must not pass vacuously.
    assert len(EXAMPLES) >= 60
    assert {p.parent.name for p in EXAMPLES} == {"v1.0", "v1.1"}


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
def test_example_parses_validates_round_trips(path: Path) -> None:
    data = path.read_bytes()
    document = parse_document(data)
    assert document.type is not DocumentType.UNKNOWN
    assert document.entries, "every spec example lists at least one entry"

    violations = validate(document)
    assert [v for v in violations if v.severity is Severity.ERROR] == []
    expected_warnings = {"up-link"} if path.name in WALKTHROUGH else set()
    assert {v.rule for v in violations} == expected_warnings

    written = serialise(document)
    assert canonical(written) == canonical(data)
    assert parse_document(written) == document
    assert schema_errors(written) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
def test_example_is_schema_valid_as_published(path: Path) -> None:
    assert schema_errors(path.read_bytes()) == []


def test_document_types_cover_the_examples() -> None:
    types = {parse_document(p.read_bytes()).type for p in EXAMPLES}
    assert types >= {
        DocumentType.SOURCE_DESCRIPTION,
        DocumentType.CAPABILITY_LIST,
        DocumentType.RESOURCE_LIST,
        DocumentType.RESOURCE_LIST_INDEX,
        DocumentType.RESOURCE_DUMP,
        DocumentType.RESOURCE_DUMP_MANIFEST,
        DocumentType.CHANGE_LIST,
        DocumentType.CHANGE_LIST_INDEX,
        DocumentType.CHANGE_DUMP,
        DocumentType.CHANGE_DUMP_MANIFEST,
        DocumentType.RESOURCE_LIST_ARCHIVE,
        DocumentType.RESOURCE_LIST_ARCHIVE_INDEX,
        DocumentType.RESOURCE_DUMP_ARCHIVE,
        DocumentType.CHANGE_LIST_ARCHIVE,
        DocumentType.CHANGE_DUMP_ARCHIVE,
    }


def _notification_example() -> bytes:
    """Example 1 of the change notification spec, lifted from its text."""
    text = (SPEC / "resourcesync-change-notification-1.0.1.md").read_text()
    start = text.index("<?xml", text.index("Example 1 shows"))
    end = text.index("</urlset>", start) + len("</urlset>")
    lines = [line[4:] if line.startswith("    ") else line for line in text[start:end].splitlines()]
    return "\n".join(lines).encode()


def test_change_notification_example() -> None:
    data = _notification_example()
    document = parse_document(data)
    assert document.type is DocumentType.CHANGE_NOTIFICATION
    assert document.version == "1.1"  # it uses rs:md@datetime
    assert validate(document) == []
    assert [e.change_time for e in document.entries] == [
        e.md.datetime for e in document.entries if e.md is not None
    ]
    assert canonical(serialise(document)) == canonical(data)
    assert schema_errors(serialise(document)) == []


def test_older_notification_capability_is_accepted_with_a_warning() -> None:
    data = _notification_example().replace(b"change-notification", b"changelist-notification")
    document = parse_document(data)
    assert document.type is DocumentType.CHANGE_NOTIFICATION
    assert [v.rule for v in validate(document)] == ["capability-deprecated"]


def test_spec_dir_can_be_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSPUSH_SPEC_DIR", os.fspath(SPEC))
    assert find_spec() == SPEC
