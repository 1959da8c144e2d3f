"""URI → destination path mapping (``subscriber.mapping``): pure, no file system, no event loop.

What is mapped where (longest prefix, origin normalisation, ``index``, query strings), what is
refused (anything that could leave the destination or reach the agent's own directory, empty
path segments), and
properties: every accepted path is a safe relative path, and ``uri_for`` inverts ``path_for``.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import quote

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rspush.subscriber.errors import SubscriberError, UnmappedURIError
from rspush.subscriber.mapping import INDEX_NAME, STATE_DIR, UriMap

P = PurePosixPath
SITE = "http://example.org/"


def site_map(*extra: tuple[str, str]) -> UriMap:
    return UriMap.build([(SITE, ""), *extra])


# --- what maps where -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("http://example.org/a", "a"),
        ("http://example.org/a/b/c.txt", "a/b/c.txt"),
        ("http://example.org/a#section", "a"),  # a fragment is not part of the resource
        ("http://example.org/caf%C3%A9", "café"),  # names are stored decoded
        ("http://example.org/a%20b", "a b"),
        ("http://example.org/%252e%252e", "%252e%252e"),  # decoded once; "%" kept as "%25"
        ("http://example.org/a%3Fb", "a?b"),  # an encoded '?' is part of the name
        ("http://example.org/...", "..."),
    ],
)
def test_paths_under_the_root_prefix(uri: str, path: str) -> None:
    assert site_map().path_for(uri) == P(path)


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("http://example.org/", INDEX_NAME),
        ("http://example.org", INDEX_NAME),
        ("http://example.org/a/", f"a/{INDEX_NAME}"),
        ("http://example.org/a/b/", f"a/b/{INDEX_NAME}"),
    ],
)
def test_a_uri_ending_in_a_slash_maps_to_index(uri: str, path: str) -> None:
    assert site_map().path_for(uri) == P(path)


def test_the_longest_prefix_wins_whatever_the_order_given() -> None:
    pairs = [
        ("http://example.org/", "site"),
        ("http://example.org/data/big/", "big"),
        ("http://example.org/data/", "data"),
    ]
    for order in (pairs, pairs[::-1]):
        uri_map = UriMap.build(order)
        assert uri_map.path_for("http://example.org/data/big/x") == P("big/x")
        assert uri_map.path_for("http://example.org/data/small/x") == P("data/small/x")
        assert uri_map.path_for("http://example.org/other/x") == P("site/other/x")


def test_a_prefix_matches_whole_segments_only() -> None:
    uri_map = UriMap.build([("http://example.org/data/", "data"), (SITE, "site")])

    assert uri_map.path_for("http://example.org/database/x") == P("site/database/x")
    assert uri_map.path_for("http://example.org/data") == P(f"data/{INDEX_NAME}")


def test_a_prefix_without_trailing_slash_covers_the_same_uris() -> None:
    with_slash = UriMap.build([("http://example.org/data/", "d")])
    without = UriMap.build([("http://example.org/data", "d")])

    assert with_slash.path_for("http://example.org/data/x") == P("d/x")
    assert without.path_for("http://example.org/data/x") == P("d/x")


@pytest.mark.parametrize(
    "uri",
    [
        "HTTP://EXAMPLE.ORG/a",
        "http://Example.Org/a",
        "http://example.org:80/a",
        "http://user@example.org/a",
    ],
)
def test_scheme_host_case_and_default_port_are_normalised(uri: str) -> None:
    assert site_map().path_for(uri) == P("a")


def test_https_default_port_is_443() -> None:
    uri_map = UriMap.build([("https://example.org/", "")])

    assert uri_map.path_for("https://example.org:443/a") == P("a")
    with pytest.raises(UnmappedURIError):
        uri_map.path_for("https://example.org:80/a")


def test_a_query_string_becomes_part_of_the_last_name_encoded() -> None:
    uri_map = site_map()

    assert uri_map.path_for("http://example.org/a?x=1") == P("a%3Fx%3D1")
    assert uri_map.path_for("http://example.org/d/?q=a/b") == P(f"d/{INDEX_NAME}%3Fq%3Da%2Fb")
    # A URI with and without the query are different resources, different files.
    assert uri_map.path_for("http://example.org/a") != uri_map.path_for("http://example.org/a?x")
    assert uri_map.path_for("http://example.org/a?x=1") != uri_map.path_for(
        "http://example.org/a?x=2"
    )


def test_the_map_target_is_a_directory_inside_the_destination() -> None:
    uri_map = UriMap.build([("http://example.org/a/", "mirror/a"), ("http://other.org/", "o")])

    assert uri_map.path_for("http://example.org/a/b") == P("mirror/a/b")
    assert uri_map.path_for("http://other.org/x") == P("o/x")


# --- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("http://example.org/a/../b", "leave the destination"),
        ("http://example.org/../b", "leave the destination"),
        ("http://example.org/a/./b", "leave the destination"),
        ("http://example.org/%2e%2e/etc/passwd", "leave the destination"),
        ("http://example.org/%2E%2E/etc/passwd", "leave the destination"),
        ("http://example.org/.%2e/x", "leave the destination"),
        ("http://example.org/%2e/x", "leave the destination"),
        ("http://example.org/a/..", "leave the destination"),
        ("http://example.org/a/../", "leave the destination"),
        ("http://example.org/a%2Fb", "separator"),
        ("http://example.org/a%2fb", "separator"),
        ("http://example.org/..%2F..%2Fetc", "separator"),
        ("http://example.org/a%5Cb", "separator"),
        ("http://example.org/a\\b", "separator"),
        ("http://example.org/a%00b", "NUL"),
        ("http://example.org/a\x00b", "NUL"),
        ("http://example.org/" + "x" * 256, "longer than a file name"),
        ("http://example.org/" + "%C3%A9" * 128, "longer than a file name"),  # 256 bytes
        # Another URI than a/b, the same file if empty segments were dropped.
        ("http://example.org/a//b", "empty path segment"),
        ("http://example.org//a/b", "empty path segment"),
    ],
)
def test_paths_that_could_leave_the_destination_are_refused(uri: str, reason: str) -> None:
    with pytest.raises(UnmappedURIError, match=reason) as caught:
        site_map().path_for(uri)

    assert caught.value.uri == uri
    assert isinstance(caught.value, SubscriberError)


def test_a_name_of_exactly_255_bytes_is_accepted() -> None:
    assert site_map().path_for("http://example.org/" + "x" * 255) == P("x" * 255)


@pytest.mark.parametrize(
    "uri",
    [
        f"http://example.org/{STATE_DIR}/state.sqlite",
        f"http://example.org/{STATE_DIR}/",
        f"http://example.org/{STATE_DIR}",
        "http://example.org/%2Ers-subscribe/tmp/x",
    ],
)
def test_the_agents_own_directory_is_refused(uri: str) -> None:
    with pytest.raises(UnmappedURIError, match=STATE_DIR):
        site_map().path_for(uri)


def test_the_state_directory_name_is_fine_below_the_top() -> None:
    assert site_map().path_for(f"http://example.org/a/{STATE_DIR}") == P(f"a/{STATE_DIR}")


@pytest.mark.parametrize(
    "uri",
    [
        "http://other.org/a",
        "https://example.org/a",  # another scheme is another origin
        "http://example.org:8080/a",
        "http://sub.example.org/a",
        "http://example.org.evil.net/a",
    ],
)
def test_uris_of_other_origins_are_refused_with_a_hint(uri: str) -> None:
    with pytest.raises(UnmappedURIError, match="no --map covers it") as caught:
        site_map().path_for(uri)

    assert SITE in caught.value.reason
    assert "add --map" in caught.value.reason


def test_uris_outside_a_path_prefix_are_refused() -> None:
    uri_map = UriMap.build([("http://example.org/data/", "")])

    with pytest.raises(UnmappedURIError, match="no --map"):
        uri_map.path_for("http://example.org/other/x")


@pytest.mark.parametrize(
    "uri",
    [
        "ftp://example.org/a",
        "file:///etc/passwd",
        "mailto:someone@example.org",
        "urn:isbn:0451450523",
        "/relative/path",
        "",
        "http:///no-host",
        "http://example.org:notaport/a",
        "http://example.org:99999/a",
    ],
)
def test_non_http_or_malformed_uris_are_refused(uri: str) -> None:
    with pytest.raises(UnmappedURIError) as caught:
        site_map().path_for(uri)

    assert caught.value.uri == uri


def test_a_uri_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(UnmappedURIError):
        site_map().path_for("http://example.org/a\ud800b")


def test_a_query_making_the_name_over_long_is_refused() -> None:
    uri = "http://example.org/a?" + "q" * 300

    try:
        path = site_map().path_for(uri)
    except UnmappedURIError:
        return
    assert len(path.name.encode()) <= 255, f"{len(path.name.encode())}-byte name accepted"


# --- build ---------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["/etc", "/", "..", "../x", "a/../../x", "a/.."])
def test_build_refuses_targets_outside_the_destination(target: str) -> None:
    with pytest.raises(ValueError, match="must stay inside the destination"):
        UriMap.build([(SITE, target)])


@pytest.mark.parametrize("prefix", ["ftp://example.org/", "example.org/", "http:///", ""])
def test_build_refuses_non_http_prefixes_naming_them(prefix: str) -> None:
    with pytest.raises(ValueError, match="is not an http"):
        UriMap.build([(prefix, "")])


@pytest.mark.parametrize(("target", "expected"), [("", "a"), (".", "a"), ("./d", "d/a")])
def test_build_accepts_the_root_and_dot_targets(target: str, expected: str) -> None:
    assert UriMap.build([(SITE, target)]).path_for("http://example.org/a") == P(expected)


def test_an_empty_map_covers_nothing() -> None:
    with pytest.raises(UnmappedURIError, match="mapped: nothing"):
        UriMap.build([]).path_for("http://example.org/a")


# --- the inverse ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "uri"),
    [
        ("a/b.txt", "http://example.org/a/b.txt"),
        (INDEX_NAME, "http://example.org/"),
        (f"a/{INDEX_NAME}", "http://example.org/a/"),
        ("a%3Fx%3D1", "http://example.org/a?x=1"),
        ("a b", "http://example.org/a%20b"),
        ("café", "http://example.org/caf%C3%A9"),
    ],
)
def test_uri_for_inverts_path_for(path: str, uri: str) -> None:
    assert site_map().uri_for(P(path)) == uri


def test_uri_for_uses_the_rule_that_owns_the_directory() -> None:
    uri_map = UriMap.build([("http://example.org/data/", "d"), ("http://other.org/", "o")])

    assert uri_map.uri_for(P("d/x/y")) == "http://example.org/data/x/y"
    assert uri_map.uri_for(P("o/x")) == "http://other.org/x"
    assert uri_map.uri_for(P("elsewhere/x")) is None
    assert uri_map.uri_for(P("d")) is None  # the directory itself is no resource


# --- properties ----------------------------------------------------------------------------

# Maps whose targets cannot overlap: with the destination root as one target and "d" as
# another, http://example.org/d/x and http://example.org/data/x would share d/x (a
# configuration the operator must avoid; build() cannot tell).
MAPS = [
    UriMap.build([(SITE, "")]),
    UriMap.build(
        [
            ("http://example.org/", "site"),
            ("http://example.org/data/", "d"),
            ("https://mirror.example.net:8443/x/y/", "m/n"),
        ]
    ),
]
map_and_prefix = st.sampled_from([(m, prefix) for m in MAPS for prefix, _ in m.rules])

# Unreserved characters (RFC 3986 §2.3): the segment is the same written or decoded.
UNRESERVED = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"
safe_segments = st.text(UNRESERVED, min_size=1, max_size=40).filter(
    lambda s: s not in (".", "..", INDEX_NAME, STATE_DIR)
)
queries = st.one_of(st.just(""), st.text(UNRESERVED + "=&", min_size=1, max_size=30))


def _uri(prefix: str, segments: list[str], slash: bool, query: str) -> str:
    uri = prefix + "/".join(segments) + ("/" if slash and segments else "")
    return uri + ("?" + query if query else "")


@settings(max_examples=300)
@given(
    chosen=map_and_prefix,
    segments=st.lists(safe_segments, min_size=1, max_size=6),
    slash=st.booleans(),
    query=queries,
)
def test_safe_uris_map_inside_the_destination_and_back(
    chosen: tuple[UriMap, str], segments: list[str], slash: bool, query: str
) -> None:
    uri_map, prefix = chosen
    uri = _uri(prefix, segments, slash, query)

    path = uri_map.path_for(uri)

    assert not path.is_absolute()
    assert ".." not in path.parts and "." not in path.parts
    assert path.parts[0] != STATE_DIR
    assert uri_map.uri_for(path) == uri


@settings(max_examples=500)
@given(
    chosen=map_and_prefix,
    names=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=5),
    query=st.text(max_size=20),
)
@example(chosen=(MAPS[0], SITE), names=[".."], query="")
@example(chosen=(MAPS[0], SITE), names=["a/../.."], query="")
def test_any_accepted_uri_yields_a_safe_relative_path(
    chosen: tuple[UriMap, str], names: list[str], query: str
) -> None:
    """Arbitrary names, percent-encoded the way a Source would: either refused, or a path
    whose every part is a plain file name inside the destination."""
    uri_map, prefix = chosen
    uri = prefix + "/".join(quote(n, safe="") for n in names)
    if query:
        uri += "?" + quote(query, safe="=&")

    try:
        path = uri_map.path_for(uri)
    except UnmappedURIError:
        return

    assert not path.is_absolute()
    assert path.parts and path.parts[0] != STATE_DIR
    for part in path.parts:
        assert part not in ("", ".", "..")
        assert "/" not in part and "\x00" not in part and "\\" not in part
    # The inverse lands on the same file (URIs may differ in percent-encoding only).
    again = uri_map.uri_for(path)
    assert again is not None
    if INDEX_NAME not in names[-1:] and not any("%3F" in n for n in names[-1:]):
        assert uri_map.path_for(again) == path


def test_distinct_uris_never_share_a_file_query_separator() -> None:
    uri_map = site_map()

    assert uri_map.path_for("http://example.org/a%253Fb") != uri_map.path_for(
        "http://example.org/a?b"
    )


@pytest.mark.xfail(
    strict=True,
    reason="LIMITATION: 'http://x/a/' and 'http://x/a/index' both map to a/index, so a "
    "resource literally named 'index' collides with its directory's index",
)
def test_distinct_uris_never_share_a_file_index_name() -> None:
    uri_map = site_map()

    assert uri_map.path_for("http://example.org/a/") != uri_map.path_for(
        "http://example.org/a/index"
    )


@pytest.mark.parametrize("uri", ["http://s/a//b", "http://s//a/b"])
def test_empty_path_segment_is_refused(uri: str) -> None:
    """A URI with an empty path segment is refused (it would map onto another URI's file)."""
    uri_map = UriMap.build([("http://s/", "")])
    assert uri_map.path_for("http://s/a/b") == PurePosixPath("a/b")
    with pytest.raises(UnmappedURIError, match="empty path segment"):
        uri_map.path_for(uri)
