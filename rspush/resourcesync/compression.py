"""Gzipped documents, decompressed under caps (pure: bytes in, bytes out).

Sitemaps are commonly served as ``.xml.gz`` (sitemaps.org: "You can compress your Sitemap
files using gzip"); ResourceSync documents are Sitemaps (Z39.99 §7). The 50 MB document limit
applies to the *uncompressed* document, so a gzipped one is inflated at most to that size,
and refused once it inflates past ``max_ratio`` times its compressed size: a gzip bomb
(gigabytes of zeros in a few kilobytes) is refused after at most ``max_bytes`` of output,
never inflated in full. Recognised by its magic bytes (RFC 1952 §2.3.1: ``1f 8b``), whatever
the file name or media type says.
"""

from __future__ import annotations

import zlib
from typing import Final

from .errors import DocumentTooLargeError, MalformedXMLError
from .namespaces import MAX_DOCUMENT_BYTES

GZIP_MAGIC: Final = b"\x1f\x8b"

MAX_GZIP_RATIO: Final = 200
"""A document inflating past this many times its gzipped size is refused. XML Sitemaps
compress 5–30:1, their most repetitive forms about 100:1; DEFLATE's ceiling is ~1,032:1, which
only crafted input approaches."""

RATIO_FLOOR_BYTES: Final = 1024 * 1024
"""Below this inflated size the ratio is not checked: a tiny document may compress far
(a 60-byte gzip of 20 kB of whitespace is no bomb)."""

_CHUNK: Final = 64 * 1024


def is_gzip(data: bytes) -> bool:
    return data[:2] == GZIP_MAGIC


def inflation_exceeded(inflated: int, compressed: int, max_ratio: int = MAX_GZIP_RATIO) -> bool:
    """True when ``inflated`` bytes from ``compressed`` ones pass the ratio cap (past the
    floor) — for callers that inflate elsewhere (an HTTP client decoding
    ``Content-Encoding: gzip``)."""
    return inflated > RATIO_FLOOR_BYTES and inflated > max_ratio * max(compressed, 1)


def gunzip_capped(
    data: bytes, *, max_bytes: int = MAX_DOCUMENT_BYTES, max_ratio: int = MAX_GZIP_RATIO
) -> bytes:
    """The decompressed bytes of a gzip stream (several members are concatenated, RFC 1952
    §2.2). Raises :class:`DocumentTooLargeError` past ``max_bytes`` or ``max_ratio``, and
    :class:`MalformedXMLError` for a damaged or truncated stream."""
    out = bytearray()
    pending = data
    while pending:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing only
        while not inflater.eof:
            room = max_bytes + 1 - len(out)
            try:
                chunk = inflater.decompress(pending, min(room, _CHUNK))
            except zlib.error as exc:
                raise MalformedXMLError(f"damaged gzip data ({exc})") from None
            out += chunk
            pending = inflater.unconsumed_tail
            if len(out) > max_bytes:
                raise DocumentTooLargeError(
                    f"gzipped document inflates past {max_bytes} bytes (the document limit)"
                )
            if inflation_exceeded(len(out), len(data), max_ratio):
                raise DocumentTooLargeError(
                    f"gzipped document inflates past {max_ratio}x its compressed size "
                    "(a decompression bomb?)"
                )
            if not chunk and not pending:
                raise MalformedXMLError("truncated gzip data")
        pending = inflater.unused_data
        if pending and not is_gzip(pending):
            break  # trailing bytes after the last member are ignored, as gzip(1) does
    return bytes(out)


def decompressed(
    data: bytes, *, max_bytes: int = MAX_DOCUMENT_BYTES, max_ratio: int = MAX_GZIP_RATIO
) -> bytes:
    """``data`` inflated if it is gzip (by its magic bytes), else as it is."""
    if not is_gzip(data):
        return data
    return gunzip_capped(data, max_bytes=max_bytes, max_ratio=max_ratio)
