"""The URIs ``rs-publish watch`` gives tree paths name the same paths at an ``rs-subscribe``
mirror: the Source's encoding and the Destination's mapping are inverse, for any name a
file may have (spaces, reserved characters, any Unicode), and both ends spell a path's URI
the same way. A ``%`` is the one exception: the mirror keeps it as ``%25`` (its reversible
naming of query strings), so the content arrives under an escaped name; names with a
backslash, which rs-subscribe refuses, are not published (tests/source)."""

from __future__ import annotations

from pathlib import PurePosixPath

from hypothesis import given
from hypothesis import strategies as st

from rspush.source.uris import uri_of
from rspush.subscriber.mapping import UriMap

BASE = "http://127.0.0.1:8000/data/"
MAP = UriMap.build([(BASE, "")])

segment = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00%\\"),
    min_size=1,
    max_size=40,
).filter(lambda s: s not in (".", ".."))


@given(st.lists(segment, min_size=1, max_size=4))
def test_every_tree_path_maps_back_to_itself(segments: list[str]) -> None:
    relative = "/".join(segments)
    uri = uri_of(BASE, relative)
    assert MAP.path_for(uri) == PurePosixPath(relative)
    assert MAP.uri_for(PurePosixPath(relative)) == uri  # one spelling at both ends


def test_names_the_watcher_publishes() -> None:
    for relative in ("a b/é ü ☃.txt", "odd #?;=&+ name.txt", "~x/y,z'(1)", "[brackets]"):
        assert MAP.path_for(uri_of(BASE, relative)) == PurePosixPath(relative)


def test_a_percent_sign_arrives_escaped() -> None:
    assert MAP.path_for(uri_of(BASE, "100%.txt")) == PurePosixPath("100%25.txt")
