"""What ``UriMap`` remembers between mappings (each URI's path, each origin's parse) changes
no outcome and stays bounded.

The oracle is the mapping as written before it remembered origins: the target parsed whole
for every URI, the path's parts built to look at the first. Every URI — tricky ones listed
and any text Hypothesis makes up — maps to the same path, or is refused with the same
reason, on a fresh map, on a map that has seen it and its origin before, and by the oracle.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rspush.subscriber import mapping
from rspush.subscriber.errors import UnmappedURIError
from rspush.subscriber.mapping import INDEX_NAME, STATE_DIR, UriMap

RULES = [
    ("http://example.org/", ""),
    ("http://example.org/a/b/", "deep"),
    ("https://Example.org:8443/x", "x"),
    ("http://other.example/", ".rs-subscribe"),
]


def oracle(rules: UriMap, uri: str) -> PurePosixPath:
    try:
        parts = urlsplit(uri)
        target = mapping._Prefix.parse(uri, parts)
    except ValueError as exc:
        raise UnmappedURIError(uri, str(exc)) from None
    if "" in parts.path.split("/")[1:-1]:
        raise UnmappedURIError(uri, "an empty path segment ('//') has no file name")
    for prefix_uri, directory in rules.rules:
        prefix = mapping._Prefix.parse(prefix_uri)
        if prefix.origin != target.origin:
            continue
        if target.segments[: len(prefix.segments)] != prefix.segments:
            continue
        rest = list(target.segments[len(prefix.segments) :])
        if not rest or parts.path.endswith("/"):
            rest.append(INDEX_NAME)
        names = [mapping._safe_name(uri, segment) for segment in rest]
        if parts.query:
            names[-1] += "%3F" + quote(parts.query, safe="")
            mapping._check_length(uri, names[-1])
        path = directory.joinpath(*names)
        if path.parts and path.parts[0] == STATE_DIR:
            raise UnmappedURIError(uri, f"maps into the agent's own {STATE_DIR}/ directory")
        return path
    raise UnmappedURIError(uri, "no --map covers it")


def outcome(map_for: object, uri: str) -> object:
    try:
        return map_for(uri)  # type: ignore[operator]
    except UnmappedURIError as exc:
        return str(exc).split(" (mapped:")[0]  # the oracle's hint names no rules


TRICKY = [
    "http://example.org/a",
    "http://EXAMPLE.org:80/a/b/c",
    "http://example.org/a/b/",
    "http://example.org/a/b",
    "http://example.org",
    "http://example.org/?q=1",
    "http://example.org/a?x=%2F..",
    "http://example.org/a//b",
    "http://example.org//",
    "http://example.org/%2e%2e/x",
    "http://example.org/a/%2F/b",
    "http://example.org/a%5Cb",
    "http://example.org/a%00b",
    "http://example.org/.rs-subscribe/state",
    "http://example.org/" + "n" * 256,
    "http://example.org:99999/a",
    "http://example.org:x/a",
    "http://user@example.org/a",
    "http://[::1]/a",
    "https://example.org:8443/x/y",
    "https://example.org:8443/xy",
    "https://example.org/x/y",
    "http://other.example/a",
    "http://other.example/",
    "ftp://example.org/a",
    "example.org/a",
    "http:///a",
    "http://example.org/caf%C3%A9",
    "http://example.org/\udcff",
]


@pytest.mark.parametrize("uri", TRICKY)
def test_remembered_mappings_are_the_mappings(uri: str) -> None:
    warm = UriMap.build(RULES)
    for other in TRICKY:  # every origin and URI seen before
        outcome(warm.path_for, other)
    expected = outcome(lambda u: oracle(UriMap.build(RULES), u), uri)
    assert outcome(UriMap.build(RULES).path_for, uri) == expected
    assert outcome(warm.path_for, uri) == expected
    assert outcome(warm.path_for, uri) == expected  # asked twice


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.builds(
            "{}://{}{}/{}".format,
            st.sampled_from(["http", "https", "HTTP", "ftp"]),
            st.sampled_from(["example.org", "Example.ORG", "other.example", "example.org:8443"]),
            st.sampled_from(["", ":80", ":443", ":0", ":x"]),
            st.text(alphabet="ab/.%2e?=#x\\", max_size=12),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_any_uri_maps_as_the_oracle_maps_it(uris: list[str]) -> None:
    warm = UriMap.build(RULES)
    for uri in uris:
        expected = outcome(lambda u: oracle(warm, u), uri)
        assert outcome(warm.path_for, uri) == expected


def test_what_is_remembered_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapping, "_MEMO_SIZE", 5)
    monkeypatch.setattr(mapping, "_ORIGINS_SIZE", 3)
    rules = UriMap.build([("http://example.org/", "")])
    for k in range(40):
        # of another origin than the rule's: refused (and not remembered), its origin kept
        with pytest.raises(UnmappedURIError, match="no --map covers it"):
            rules.path_for(f"http://example.org:{8000 + k}/r{k}")
        assert len(rules._origins) <= 3
    assert rules._memo == {}
    for k in range(40):
        assert rules.path_for(f"http://EXAMPLE.org:{80 if k % 2 else ''}/r{k}") == (
            PurePosixPath(f"r{k}")
        )
        assert len(rules._memo) <= 5 and len(rules._origins) <= 3
    assert rules.path_for("http://example.org/r0") == PurePosixPath("r0")
