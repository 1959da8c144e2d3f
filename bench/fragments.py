"""The Change List fragments the benchmarks post: what a real Source sends per change
(loc, change, datetime, an md5 hash, length, type)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime


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
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        '<rs:md capability="changelist"/>' + "".join(urls) + "</urlset>"
    ).encode()
