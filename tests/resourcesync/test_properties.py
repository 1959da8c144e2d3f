"""Properties of random valid documents of every type: they round-trip through XML, the
validator finds nothing wrong with them, and what the serialiser writes is XSD-valid."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rspush.resourcesync import (
    Document,
    DocumentType,
    Entry,
    Link,
    Metadata,
    Severity,
    parse_chunks,
    parse_document,
    serialise,
    validate,
)
from rspush.resourcesync.schema import schema_errors
from tests.support.strategies import ALL_TYPES, LAYOUT, documents

KINDS = pytest.mark.parametrize("kind", ALL_TYPES, ids=[kind.name.lower() for kind in ALL_TYPES])
# Per document type, so every type gets its share; 22 types keep the counts modest.
PROPERTY = settings(deadline=None, max_examples=20, suppress_health_check=[HealthCheck.too_slow])
XSD_PROPERTY = settings(
    deadline=None, max_examples=15, suppress_health_check=[HealthCheck.too_slow]
)


@KINDS
@PROPERTY
@given(data=st.data())
def test_parse_of_serialise_is_identity(kind: DocumentType, data: st.DataObject) -> None:
    document = data.draw(documents(kind), label="document")
    xml = serialise(document)

    parsed = parse_document(xml)

    assert parsed == document
    assert parsed.type is kind
    assert parsed.problems == ()
    assert parsed.size == len(xml)
    # Writing the parsed model again gives the same bytes: the output is stable.
    assert serialise(parsed) == xml
    # Fed in small chunks (splitting tags, entities and UTF-8 sequences) it parses the same.
    size = data.draw(st.integers(min_value=1, max_value=64), label="chunk size")
    assert parse_chunks(xml[i : i + size] for i in range(0, len(xml), size)) == document


@KINDS
@PROPERTY
@given(data=st.data())
def test_valid_documents_have_no_violations(kind: DocumentType, data: st.DataObject) -> None:
    document = data.draw(documents(kind), label="document")

    violations = validate(document)

    assert [v for v in violations if v.severity is Severity.ERROR] == []
    # The strategies also honour every SHOULD, so there is nothing to warn about either.
    assert violations == []
    assert validate(parse_document(serialise(document))) == []


@KINDS
@XSD_PROPERTY
@given(data=st.data())
def test_serialised_documents_are_schema_valid(kind: DocumentType, data: st.DataObject) -> None:
    document = data.draw(documents(kind), label="document")

    assert schema_errors(serialise(document)) == []


@PROPERTY
@given(
    moment=st.datetimes(
        min_value=datetime(1970, 1, 1),
        max_value=datetime(2200, 1, 1),
        timezones=st.sampled_from(
            [timezone(timedelta(hours=h, minutes=m)) for h, m in [(5, 30), (-8, 0), (14, 0)]]
        ),
    )
)
def test_datetimes_in_other_zones_are_written_and_read_as_the_same_instant(
    moment: datetime,
) -> None:
    document = Document(
        md=Metadata(capability="resourcelist", at=moment),
        links=(Link(rel="up", href="http://example.com/capabilitylist.xml"),),
        entries=(Entry(loc="http://example.com/res1", lastmod=moment),),
    )
    assert document.md.at is not None and document.md.at.tzinfo is UTC

    xml = serialise(document)
    parsed = parse_document(xml)

    assert parsed.md.at == moment
    assert parsed.entries[0].lastmod == moment
    # Written in UTC with Z (Z39.99 §7's recommended form), never with the input's offset.
    assert re.search(rb' at="[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z"', xml)
    assert re.search(rb"<lastmod>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z</lastmod>", xml)


def test_strategies_cover_every_document_type() -> None:
    # A type missing from the strategies would make the properties above pass vacuously.
    assert set(LAYOUT) == set(DocumentType) - {DocumentType.UNKNOWN}


@pytest.mark.parametrize(
    "kind", [kind for kind in ALL_TYPES if LAYOUT[kind][1] == "sitemapindex"], ids=str
)
def test_empty_index_is_valid_and_schema_valid(kind: DocumentType) -> None:
    # Z39.99 §7: "the <sitemapindex> element has zero or more <sitemap> child elements",
    # the same wording as for <urlset>, whose emptiness schema_errors already tolerates.
    capability, _ = LAYOUT[kind]
    md = {"capability": capability}
    if kind in (
        DocumentType.RESOURCE_LIST_INDEX,
        DocumentType.RESOURCE_DUMP_INDEX,
    ):
        md["at"] = "2024-01-01T00:00:00Z"
    elif kind in (DocumentType.CHANGE_LIST_INDEX, DocumentType.CHANGE_DUMP_INDEX):
        md["from"] = "2024-01-01T00:00:00Z"
    document = Document(
        root="sitemapindex",
        md=Metadata.model_validate(md),
        links=(Link(rel="up", href="http://example.com/capabilitylist.xml"),),
    )
    assert document.type is kind
    assert validate(document) == []

    assert schema_errors(serialise(document)) == []
