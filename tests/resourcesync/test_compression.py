"""Gzipped documents: inflated under a size cap and a ratio cap; a gzip bomb is refused
after at most the cap of output, with bounded memory."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from pathlib import Path

import pytest

from rspush.resourcesync import DocumentError, parse_document
from rspush.resourcesync.compression import (
    MAX_GZIP_RATIO,
    decompressed,
    gunzip_capped,
    inflation_exceeded,
    is_gzip,
)
from rspush.resourcesync.errors import DocumentTooLargeError, MalformedXMLError
from tests.resourcesync.test_cli import rs_validate

DOC = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    b'xmlns:rs="http://www.openarchives.org/rs/terms/">'
    b'<rs:md capability="resourcelist" at="2026-01-01T00:00:00Z"/>'
    b"<url><loc>http://example.com/a</loc></url></urlset>"
)


def bomb(inflated: int) -> bytes:
    """A gzip stream of ``inflated`` zero bytes, built without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1024 * 1024)
    parts = [packer.compress(zeros) for _ in range(inflated // len(zeros))]
    return b"".join(parts) + packer.flush()


def test_gzip_is_recognised_by_its_magic_bytes_and_inflated() -> None:
    packed = gzip.compress(DOC)
    assert is_gzip(packed) and not is_gzip(DOC)
    assert decompressed(packed) == DOC
    assert decompressed(DOC) is DOC
    assert parse_document(decompressed(packed)).entries[0].loc == "http://example.com/a"


def test_concatenated_members_are_one_document() -> None:
    half = len(DOC) // 2
    assert gunzip_capped(gzip.compress(DOC[:half]) + gzip.compress(DOC[half:])) == DOC


def test_over_the_size_cap_is_refused() -> None:
    with pytest.raises(DocumentTooLargeError, match="inflates past 100 bytes"):
        gunzip_capped(gzip.compress(DOC * 3), max_bytes=100)


def test_a_gzip_bomb_is_refused_with_bounded_memory() -> None:
    packed = bomb(1024 * 1024 * 1024)  # 1 GiB of zeros in about 1 MB
    assert len(packed) < 2 * 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(DocumentTooLargeError, match="document limit"):
            gunzip_capped(packed, max_bytes=8 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Never more than the cap inflated (plus the compressed input and a chunk).
    assert peak < 8 * 1024 * 1024 + 4 * len(packed) + 1024 * 1024, peak


def test_a_bomb_under_the_size_cap_trips_the_ratio() -> None:
    packed = bomb(40 * 1024 * 1024)  # 40 MB of zeros: under 50 MB, ~1000:1
    with pytest.raises(DocumentTooLargeError, match=f"past {MAX_GZIP_RATIO}x"):
        gunzip_capped(packed)


def test_small_documents_may_compress_far() -> None:
    spaces = DOC.replace(b"<url>", b" " * 200_000 + b"<url>")
    assert gunzip_capped(gzip.compress(spaces)) == spaces
    assert not inflation_exceeded(200_000, 100)
    assert inflation_exceeded(10 * 1024 * 1024, 1000)


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_damaged_gzip_is_a_document_error(damage: str) -> None:
    packed = bytearray(gzip.compress(DOC))
    if damage == "truncated":
        packed = packed[: len(packed) // 2]
    else:
        packed[12:20] = b"\xff" * 8
    with pytest.raises(MalformedXMLError) as caught:
        gunzip_capped(bytes(packed))
    assert isinstance(caught.value, DocumentError)


def test_rs_validate_reads_gzipped_files_and_refuses_a_bomb(tmp_path: Path) -> None:
    good = tmp_path / "resourcelist.xml.gz"
    good.write_bytes(gzip.compress(DOC))
    done = rs_validate(str(good))
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "UTF-16" not in done.stdout
    boom = tmp_path / "bomb.xml.gz"
    boom.write_bytes(bomb(256 * 1024 * 1024))
    done = rs_validate(str(boom))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "decompression bomb" in done.stdout
