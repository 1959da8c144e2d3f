"""Framework notifications (Framework Notification 1.0.1 §3): the spec's examples read and
validate, the builder writes them back exactly, and what it builds is XSD-valid."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rspush.resourcesync import (
    Change,
    Document,
    DocumentType,
    FrameworkChange,
    Severity,
    framework_changes,
    framework_notification,
    parse_document,
    serialise,
    validate,
)
from rspush.resourcesync.schema import schema_errors
from tests.resourcesync.test_examples import canonical

# Examples 1 and 2 of §3, as the spec prints them.
EXAMPLE_1 = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up"
         href="http://example.com/dataset1/capabilitylist.xml"/>
  <rs:md capability="framework-notification"/>
   <url>
      <loc>http://example.com/resourceset1/resourcelist.xml</loc>
      <rs:md change="created" datetime="2013-01-03T00:07:22Z"
             capability="resourcelist"/>
   </url>
</urlset>
"""

EXAMPLE_2 = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="framework-notification"/>
   <url>
      <loc>http://example.com/dataset1/resourcelist.xml</loc>
      <rs:md change="created"
             capability="resourcelist"/>
      <rs:ln rel="index"
             href="http://example.com/dataset1/resourcelist-index.xml"/>
   </url>
   <url>
      <loc>http://example.com/dataset1/resourcedump.xml</loc>
      <rs:md change="created"
             capability="resourcedump"/>
   </url>
   <url>
      <loc>http://example.com/dataset1/changelist.xml</loc>
      <rs:md change="updated"
             capability="changelist"/>
   </url>
</urlset>
"""

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
T1 = datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)


def _errors(document: Document) -> list[str]:
    return [str(v) for v in validate(document) if v.severity is Severity.ERROR]


@pytest.mark.parametrize("example", [EXAMPLE_1, EXAMPLE_2], ids=["example-1", "example-2"])
def test_the_spec_examples_are_valid_and_the_builder_writes_them_back(example: bytes) -> None:
    document = parse_document(example)
    assert document.type is DocumentType.FRAMEWORK_NOTIFICATION
    assert validate(document) == []
    assert schema_errors(example) == []
    up = document.link("up")
    rebuilt = framework_notification(
        framework_changes(document), up=None if up is None else up.href
    )
    assert canonical(serialise(rebuilt)) == canonical(example)


def test_a_built_notification_is_xsd_valid_and_reads_back() -> None:
    changes = [
        FrameworkChange(
            "http://hub.example/topics/t/changelists/0.xml",
            Change.UPDATED,
            "changelist",
            T0,
            index="http://hub.example/topics/t/changelist-index.xml",
        ),
        FrameworkChange(
            "http://hub.example/topics/t/changelist.xml",
            Change.CREATED,
            "changelist",
            T0,
            index="http://hub.example/topics/t/changelist-index.xml",
        ),
        FrameworkChange(
            "http://hub.example/topics/t/resourcelist.xml", Change.UPDATED, "resourcelist", T1
        ),
    ]
    document = framework_notification(
        changes, start=T0, until=T1, up="http://hub.example/topics/t/capabilitylist.xml"
    )
    data = serialise(document)
    assert schema_errors(data) == []
    parsed = parse_document(data)
    assert validate(parsed) == []
    assert parsed.md.from_ == T0 and parsed.md.until == T1
    assert framework_changes(parsed) == changes
    # §3: a document under an index carries rel="index"; one that is not, none.
    assert b'<rs:ln rel="index" href="http://hub.example/topics/t/changelist-index.xml"/>' in data
    assert data.count(b'rel="index"') == 2


def test_rules_an_entry_without_capability_or_change_breaks() -> None:
    bad = EXAMPLE_1.replace(b'\n             capability="resourcelist"', b"")
    assert any("capability" in e for e in _errors(parse_document(bad)))
    no_change = EXAMPLE_1.replace(b'change="created" ', b"")
    assert any("change" in e for e in _errors(parse_document(no_change)))
    as_index = EXAMPLE_2.replace(b"urlset", b"sitemapindex").replace(b"<url>", b"<sitemap>")
    as_index = as_index.replace(b"</url>", b"</sitemap>")
    assert any("sitemapindex" in e for e in _errors(parse_document(as_index)))


def test_an_unknown_subject_capability_is_only_a_warning() -> None:
    other = EXAMPLE_1.replace(b'capability="resourcelist"', b'capability="x-other"')
    found = validate(parse_document(other))
    assert [v.severity for v in found] == [Severity.WARNING]


def test_reading_a_change_notification_as_framework_is_refused() -> None:
    document = parse_document(
        EXAMPLE_1.replace(b"framework-notification", b"change-notification").replace(
            b' capability="resourcelist"', b""
        )
    )
    with pytest.raises(ValueError, match="framework notification"):
        framework_changes(document)
