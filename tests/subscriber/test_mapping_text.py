"""``UriMap.text_for``, the path's text without the path (what a catch-up records): for any
URI the same text as ``str(path_for(uri))``, or the same refusal."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rspush.subscriber.errors import UnmappedURIError
from rspush.subscriber.mapping import UriMap

MAP = UriMap.build(
    [
        ("http://example.org/", ""),
        ("http://example.org/deep/er/", "nested/dir"),
        ("https://other.example:8443/x", "o"),
    ]
)

_segment = st.lists(
    st.sampled_from(list("ab.%2F5c/?=&é ") + ["%2e", "%2F", "%00", "%25", ".."]), max_size=8
).map("".join)
_uris = st.builds(
    lambda base, segments, tail: base + "/".join(segments) + tail,
    st.sampled_from(
        [
            "http://example.org/",
            "HTTP://Example.org:80/",
            "http://example.org/deep/er/",
            "https://other.example:8443/x/",
            "https://other.example:8443/",
            "http://elsewhere.example/",
            "ftp://example.org/",
        ]
    ),
    st.lists(_segment, max_size=4),
    st.sampled_from(["", "/", "?q=1", "#frag", "/?a=b/c"]),
)


def outcome(mapping: UriMap, uri: str, text: bool) -> str:
    try:
        return mapping.text_for(uri) if text else str(mapping.path_for(uri))
    except UnmappedURIError as exc:
        return f"refused: {exc}"


@settings(max_examples=500, deadline=None)
@given(_uris)
@example("http://example.org/deep/er/a/b")
@example("http://example.org/a//b")
@example("http://example.org/.rs-subscribe/x")
@example("http://example.org/" + "n" * 256)
def test_text_for_is_the_paths_text(uri: str) -> None:
    assert outcome(MAP, uri, text=True) == outcome(MAP, uri, text=False)
    # and again, remembered
    assert outcome(MAP, uri, text=True) == outcome(MAP, uri, text=False)


@pytest.mark.parametrize(
    ("uri", "text"),
    [
        ("http://example.org/a/b.txt", "a/b.txt"),
        ("http://example.org/", "index"),
        ("http://example.org/deep/er/z?x=1", "nested/dir/z%3Fx%3D1"),
        ("https://other.example:8443/x/y/", "o/y/index"),
    ],
)
def test_what_text_for_gives(uri: str, text: str) -> None:
    assert MAP.text_for(uri) == text
