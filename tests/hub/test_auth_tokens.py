"""Bearer tokens: parsing the Authorization header, finding a Source by its token digest,
new random tokens."""

from __future__ import annotations

import hashlib
import string

import pytest

from rspush.hub.auth import bearer, find_source, new_token, token_sha256
from rspush.hub.settings import Source


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Basic YTpi", None),
        ("abc", None),
        ("Token abc", None),
    ],
)
def test_bearer(header: str | None, token: str | None) -> None:
    assert bearer(header) == token


def test_find_source_by_token_digest() -> None:
    sources = [
        Source(name="a", token_sha256=token_sha256("tok-a"), topics=["t1"]),
        Source(name="b", token_sha256=token_sha256("tok-b").upper(), topics=["t2"]),
    ]
    assert token_sha256("x") == hashlib.sha256(b"x").hexdigest()
    found_a, found_b = find_source(sources, "tok-a"), find_source(sources, "tok-b")
    assert found_a is not None and found_a.name == "a"
    assert found_b is not None and found_b.name == "b"  # upper-case digest normalised
    assert find_source(sources, "tok-c") is None
    assert find_source(sources, "") is None
    assert find_source([], "tok-a") is None


def test_new_token_is_random_and_matches_its_digest() -> None:
    token, digest = new_token()
    other, _ = new_token()
    assert token != other
    assert len(token) >= 40
    assert set(token) <= set(string.ascii_letters + string.digits + "-_")
    assert digest == token_sha256(token)
