"""Choosing the content coding from Accept-Encoding (RFC 9110 §12.5.3), and the bounded cache
of gzipped documents (pure: no server)."""

from __future__ import annotations

import asyncio
import gzip

import pytest

from rspush.hub.compressed import GzipCache
from rspush.hub.negotiation import Coding, choose, weights
from rspush.hub.serving import coded_etag


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, Coding.IDENTITY),  # not asked: identity
        ("", Coding.IDENTITY),  # empty: identity only
        ("gzip", Coding.GZIP),
        ("GZIP", Coding.GZIP),
        ("x-gzip", Coding.GZIP),
        ("gzip, deflate", Coding.GZIP),
        ("gzip, deflate, br, zstd", Coding.GZIP),
        ("deflate, br", Coding.IDENTITY),
        ("*", Coding.GZIP),
        ("*;q=0", Coding.IDENTITY),  # nothing acceptable: sent without a coding
        ("gzip;q=0", Coding.IDENTITY),
        ("gzip;q=0.0, identity", Coding.IDENTITY),
        ("gzip ; q=0.000", Coding.IDENTITY),
        ("gzip;q=0.5", Coding.GZIP),  # named, identity not named: gzip preferred
        ("gzip;q=0.5, identity;q=1", Coding.IDENTITY),
        ("gzip;q=1, identity;q=0.5", Coding.GZIP),
        ("identity;q=0, gzip;q=0.1", Coding.GZIP),
        ("*;q=0.3, gzip;q=0", Coding.IDENTITY),
        ("*;q=0.3, identity;q=0.2", Coding.GZIP),
        ("gzip;q=2", Coding.IDENTITY),  # malformed weight: the member is ignored
        ("gzip;q=abc", Coding.IDENTITY),
        ("gzip;q=-1", Coding.IDENTITY),
        ("identity;q=0.5, gzip;q=0.5", Coding.GZIP),  # a tie: the smaller one
        (" , ,gzip,", Coding.GZIP),
    ],
)
def test_choose(header: str | None, expected: Coding) -> None:
    assert choose(header) is expected


def test_weights_keep_the_highest_of_repeated_names() -> None:
    assert weights("gzip;q=0.2, x-gzip;q=0.7, br") == {"gzip": 0.7, "br": 1.0}


def test_the_gzip_etag_is_another_strong_tag() -> None:
    assert coded_etag('"e1-7-open"', Coding.GZIP) == '"e1-7-open-gzip"'


async def test_one_compression_per_version_shared_by_concurrent_requests() -> None:
    cache = GzipCache(level=1, immutable_level=6, max_bytes=1 << 20)
    body = b"<urlset>" + b"<url><loc>http://example.com/r</loc></url>" * 20_000 + b"</urlset>"
    results = await asyncio.gather(
        *(cache.get("/a.xml", '"v1"', body, immutable=True) for _ in range(10))
    )
    assert cache.compressions == 1
    assert all(r == results[0] for r in results)
    assert gzip.decompress(results[0]) == body
    assert results[0] == gzip.compress(body, 6, mtime=0)  # deterministic: same in every process
    # A new version of the same path replaces the old one.
    await cache.get("/a.xml", '"v2"', body + b" ", immutable=False)
    assert cache.compressions == 2
    assert cache.bytes == len(gzip.compress(body + b" ", 1, mtime=0))


async def test_the_cache_is_bounded_by_bytes_least_recently_used_first() -> None:
    bodies = {f"/{n}.xml": bytes(range(256)) * (40 + n) for n in range(20)}
    sizes = {p: len(gzip.compress(b, 1, mtime=0)) for p, b in bodies.items()}
    cache = GzipCache(level=1, max_bytes=sizes["/0.xml"] * 5)
    for path, body in bodies.items():
        await cache.get(path, '"v"', body, immutable=False)
        assert cache.bytes <= cache.max_bytes
    before = cache.compressions
    await cache.get("/19.xml", '"v"', bodies["/19.xml"], immutable=False)  # recent: kept
    assert cache.compressions == before
    await cache.get("/0.xml", '"v"', bodies["/0.xml"], immutable=False)  # oldest: dropped
    assert cache.compressions == before + 1


async def test_a_body_larger_than_the_cache_is_compressed_but_not_kept() -> None:
    cache = GzipCache(max_bytes=10)
    packed = await cache.get("/big.xml", '"v"', b"x" * 1000, immutable=True)
    assert gzip.decompress(packed) == b"x" * 1000
    assert cache.bytes == 0
