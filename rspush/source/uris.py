"""Tree paths as resource URIs: the base URL, then each segment percent-encoded (RFC 3986
§2.1, §3.3).

Each segment is decoded back to exactly its name by a Destination (rs-subscribe maps a URI's
decoded segments to file names), so ``/``, ``?``, ``#``, ``%``, spaces and non-ASCII text are
always encoded; the sub-delimiters and ``:@`` a path segment may hold literally are kept, the
same set rs-subscribe uses when it names a mirrored file's URI, so both ends agree on one
spelling.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

SEGMENT_SAFE = "!$&'()*+,;=:@~"
"""RFC 3986 ``pchar`` minus the unreserved characters ``quote`` always keeps."""


def base_url(value: str) -> str:
    """``value`` as a base ending in ``/``; ValueError unless it is an absolute http(s) URL
    without a query or fragment."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{value!r} is not an http(s) URL")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r}: a base URL has no query or fragment")
    return value if value.endswith("/") else value + "/"


def uri_of(base: str, relative: str) -> str:
    """The URI of the tree path ``relative`` (``a/b c.txt``) under ``base`` (ends in ``/``)."""
    return base + "/".join(quote(segment, safe=SEGMENT_SAFE) for segment in relative.split("/"))
