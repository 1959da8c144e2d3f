"""The documents the benchmarks post: Change List fragments as a real Source sends them (loc,
change, datetime, an md5 hash, length, type per change) and Resource Lists for a baseline."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta

from rspush.resourcesync.w3cdt import format_w3c_datetime

XMLNS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def w3c(moment: datetime) -> str:
    """A UTC ``datetime`` as the W3C datetime the fragments carry, always with microseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def change_fragment(entries: Iterable[tuple[int, str]], *, distinct: int) -> bytes:
    """A fragment of ``(n, datetime)`` changes to ``distinct`` different resources."""
    urls = [
        f"<url><loc>http://example.com/res{n % distinct}</loc>"
        f'<rs:md change="updated" datetime="{when}" '
        f'hash="md5:{hashlib.md5(str(n).encode()).hexdigest()}" length="{n}" '
        f'type="text/html"/></url>'
        for n, when in entries
    ]
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {XMLNS}>'
        '<rs:md capability="changelist"/>' + "".join(urls) + "</urlset>"
    ).encode()


def resource_list(entries: Iterable[tuple[str, bytes]], at: datetime) -> bytes:
    """A Resource List (Z39.99 §10) of (URI, bytes): lastmod, md5, length and type per resource."""
    lastmod = format_w3c_datetime(at - timedelta(seconds=1))
    urls = "".join(
        f"<url><loc>{uri}</loc><lastmod>{lastmod}</lastmod>"
        f'<rs:md hash="md5:{hashlib.md5(body).hexdigest()}" length="{len(body)}" '
        f'type="application/octet-stream"/></url>'
        for uri, body in entries
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {XMLNS}>'
        f'<rs:md capability="resourcelist" at="{format_w3c_datetime(at)}"/>{urls}</urlset>'
    ).encode()


def changes(entries: Iterable[tuple[str, str, datetime, bytes]]) -> bytes:
    """A fragment of (URI, change, datetime, bytes) changes, as a Source sends them:
    datetime, md5, length, type each."""
    urls = "".join(
        f'<url><loc>{uri}</loc><rs:md change="{change}" datetime="{format_w3c_datetime(when)}" '
        f'hash="md5:{hashlib.md5(body).hexdigest()}" length="{len(body)}" '
        f'type="application/octet-stream"/></url>'
        for uri, change, when, body in entries
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {XMLNS}>'
        f'<rs:md capability="changelist"/>{urls}</urlset>'
    ).encode()


def one_change(uri: str, change: str, when: datetime, body: bytes) -> bytes:
    """A one-change fragment, as a Source sends it: datetime, md5, length, type."""
    return changes([(uri, change, when, body)])
