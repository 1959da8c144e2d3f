"""The values the XML Schemas type (``<loc>``, rs:ln href/profile/rel, ``type``, ``path``):
the validator reports each value the schemas refuse, with its rule and entry, and everything
it lets through serialises to a schema-valid document (checked with the schemas themselves)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rspush.resourcesync import (
    Document,
    Entry,
    Link,
    Metadata,
    Severity,
    parse_document,
    serialise,
    validate,
)
from rspush.resourcesync.schema import schema_errors
from rspush.resourcesync.values import is_absolute_uri, is_media_type, is_rel, loc_problem

T0 = datetime(2024, 1, 1, tzinfo=UTC)
OK_LOC = "http://example.com/resource"


def change_list(
    loc: str = OK_LOC,
    *,
    type_: str | None = None,
    rel: str = "alternate",
    href: str = "http://example.com/other",
    profile: str | None = None,
    path: str | None = None,
    position: int = 1,
) -> Document:
    """A valid Change List of three entries whose entry ``position`` carries the values."""
    odd = Entry(
        loc=loc,
        md=Metadata(change="updated", datetime=T0, type=type_),
        links=(Link(rel=rel, href=href, profile=profile, path=path),),
    )
    plain = [Entry(loc=f"{OK_LOC}{i}", md=Metadata(change="created", datetime=T0)) for i in (0, 1)]
    entries = [*plain[:position], odd, *plain[position:]]
    return Document(
        md=Metadata(capability="changelist", from_=T0),
        links=(Link(rel="up", href="http://example.com/capabilitylist.xml"),),
        entries=tuple(entries),
    )


def errors(document: Document) -> list[tuple[str, int | None]]:
    return [(v.rule, v.entry) for v in validate(document) if v.severity is Severity.ERROR]


def test_the_baseline_document_is_valid_for_the_rules_and_the_schema() -> None:
    document = change_list()
    assert validate(document) == []
    assert schema_errors(serialise(document)) == []


@pytest.mark.parametrize(
    "loc",
    [
        "http://a.b",  # 10 characters: tLoc's minLength is 12
        "http://example.com/" + "a" * 2030,  # 2,049 characters: over tLoc's maxLength
        "/relative/path/only",
        "relative/path/only",
        "//example.com/no-scheme",
        "http://example.com/a b",
        "http://example.com/a\tb",
        "http://example.com/%zz",
        "http://example.com/#a#b",
        "http://example.com/a[1]",
        "1http://example.com/",
    ],
)
def test_loc_the_schema_or_the_spec_refuses_is_an_error_at_its_entry(loc: str) -> None:
    assert errors(change_list(loc, position=2)) == [("loc-uri", 2)]


def test_an_empty_loc_built_in_code_is_missing_and_reported_once() -> None:
    # Parsed documents get loc-missing from the parser; one built in code must get it too
    # (the schema refuses an empty tLoc), and a parsed one must not get it twice.
    assert errors(change_list("", position=1)) == [("loc-missing", 1)]
    parsed = parse_document(
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        b'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        b'<rs:md capability="changelist" from="2020-01-01T00:00:00Z"/>'
        b'<url><loc></loc><rs:md change="created" datetime="2020-01-01T00:00:00Z"/></url>'
        b"</urlset>"
    )
    assert [v.rule for v in validate(parsed)].count("loc-missing") == 1


@pytest.mark.parametrize(
    "loc",
    [
        "http://ab.cd",  # exactly 12
        "http://example.com/" + "a" * 2029,  # exactly 2,048
        "urn:isbn:0451450523",
        "http://[2001:db8::1]:8080/x",
        'http://example.com/é/日本?q=<x>&r="y"#frag',
        "http://example.com/%20",
    ],
)
def test_loc_within_the_schema_passes_and_serialises_schema_valid(loc: str) -> None:
    document = change_list(loc)
    assert errors(document) == []
    assert schema_errors(serialise(document)) == []


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        ({"type_": "application/vnd.ms-excel"}, "type-syntax"),  # "." is not an XSD \w
        ({"type_": "text/plain; charset=utf-8"}, "type-syntax"),
        ({"type_": "text"}, "type-syntax"),
        ({"rel": "Up"}, "rel-syntax"),
        ({"rel": "two words"}, "rel-syntax"),
        ({"href": "other.xml"}, "link-uri"),
        ({"profile": "profiles/x"}, "link-uri"),
        ({"path": "/a\rb"}, "path-syntax"),  # XSD "." matches no carriage return
    ],
)
def test_link_and_md_values_the_schema_refuses_are_errors(
    values: dict[str, str], rule: str
) -> None:
    document = change_list(**values)  # type: ignore[arg-type]
    assert errors(document) == [(rule, 1)]
    assert schema_errors(serialise(document)) != [] or rule in ("link-uri", "rel-syntax")


def test_values_are_found_through_bytes_too() -> None:
    data = serialise(change_list("/relative-loc/x", type_="a.b/c"))
    assert sorted(errors(parse_document(data))) == [("loc-uri", 1), ("type-syntax", 1)]


def test_value_helpers() -> None:
    assert is_absolute_uri("mailto:someone@example.com")
    assert not is_absolute_uri("")
    assert not is_absolute_uri("http://example.com/\u2028")
    assert loc_problem("x" * 11) is not None and "12 to 2048" in str(loc_problem("x" * 11))
    assert is_media_type("application/ld+json")
    assert not is_media_type("application/x_y")  # "_" is punctuation to XML Schema
    assert is_rel("describedby") and is_rel("http://www.openarchives.org/rs/terms/patch")


# --- every value the rules let through is schema-valid ---------------------------------------

_TRICKY = list("aZ09:/?#[]@!$&'()*+,;=%-._~<>\"{}|\\^` \t\né日\u00a0\u2028")
_tricky_text = st.text(st.sampled_from(_TRICKY), max_size=24)
_uris = st.one_of(
    _tricky_text,
    st.builds(lambda s: "http://example.com/" + s, _tricky_text),
    st.builds(lambda s: "http:" + s, _tricky_text),
    st.integers(min_value=0, max_value=40).map(lambda n: "http://" + "a" * n),
    st.integers(min_value=2020, max_value=2040).map(lambda n: "http://e.org/" + "p" * n),
)
_types = st.one_of(
    st.sampled_from(["text/html", "application/ld+json", "a.b/c", "x_y/z", "a/b/c"]),
    st.builds(lambda a, b: f"{a}/{b}", _tricky_text, _tricky_text),
)
_rels = st.one_of(st.sampled_from(["up", "alternate", "Up", "a b", "x.y-z"]), _uris)
_paths = st.one_of(st.none(), st.builds(lambda s: "/" + s, _tricky_text))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loc=_uris, type_=_types, rel=_rels, href=_uris, profile=_uris, path=_paths)
def test_whatever_the_rules_accept_the_schema_accepts(
    loc: str, type_: str, rel: str, href: str, profile: str, path: str | None
) -> None:
    document = change_list(loc, type_=type_, rel=rel, href=href, profile=profile, path=path)
    if errors(document):
        return
    assert schema_errors(serialise(document)) == [], (loc, type_, rel, href, profile, path)
