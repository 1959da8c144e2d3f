"""Hostile documents, and a child process that parses one of them and reports what it cost.

``test_hostile.py`` imports the builders; it also runs this file as a script, one case per
fresh interpreter, because peak memory (``ru_maxrss``) only ever grows within a process::

    python _hostile_child.py CASE

prints one JSON line: the case, the ``DocumentError`` subclass raised (or null), its message,
and the child's own peak RSS in KiB. The peak is ``VmHWM`` from ``/proc/self/status``: the
high-water mark of this process's address space, which starts afresh at ``exec``. (Linux keeps
``ru_maxrss`` across fork and exec, so ``getrusage`` in a child of a large pytest process, or
``RUSAGE_CHILDREN`` in the parent, would report the parent's size rather than the case's.)
Exceptions that are not ``DocumentError`` are not caught: the child then exits non-zero with
the traceback on stderr, which is itself a failure for the test.
"""

from __future__ import annotations

import json
import resource
import sys
from collections.abc import Callable, Iterator

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS_NS = "http://www.openarchives.org/rs/terms/"

MIB = 1 << 20

PROLOG = b'<?xml version="1.0" encoding="UTF-8"?>\n'
URLSET_OPEN = f'<urlset xmlns="{SITEMAP_NS}" xmlns:rs="{RS_NS}">\n'.encode()
CHANGELIST_MD = b'<rs:md capability="changelist" from="2024-01-01T00:00:00Z"/>\n'
UP_LINK = b'<rs:ln rel="up" href="http://example.com/capabilitylist.xml"/>\n'
URLSET_CLOSE = b"</urlset>\n"

# A realistic Change List entry (~200 bytes).
ENTRY = (
    b"<url><loc>http://example.com/res/%08d</loc>"
    b'<rs:md change="updated" datetime="2024-01-01T00:00:00Z" length="8876" type="text/html"'
    b' hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6"/></url>\n'
)


def change_list(body: bytes = b"") -> bytes:
    """A well-formed Change List around ``body`` (entries or anything else)."""
    return b"".join([PROLOG, URLSET_OPEN, UP_LINK, CHANGELIST_MD, body, URLSET_CLOSE])


def change_list_of_size(size: int) -> bytes:
    """A valid-looking Change List of exactly ``size`` bytes (identical entries, padded).

    Built from 1 MiB blocks so that the finished bytes are the only large allocation: the
    child's peak memory is then the document plus whatever the parser adds.
    """
    head = PROLOG + URLSET_OPEN + UP_LINK + CHANGELIST_MD
    entry = ENTRY % 0
    block = entry * (MIB // len(entry))
    room = size - len(head) - len(URLSET_CLOSE)
    blocks, rest = divmod(room, len(block))
    entries, padding = divmod(rest, len(entry))
    data = b"".join([head, *[block] * blocks, entry * entries, b" " * padding, URLSET_CLOSE])
    assert len(data) == size
    return data


def change_list_chunks(total: int, chunk: int = MIB, *, loc_bytes: int = 2000) -> Iterator[bytes]:
    """A Change List of ``total`` bytes, generated lazily ``chunk`` bytes at a time.

    Entries carry ``loc_bytes``-long URLs so a 60 MB stream holds a realistic number of
    entries (tens of thousands) rather than millions.
    """
    head = PROLOG + URLSET_OPEN + UP_LINK + CHANGELIST_MD
    path = b"/".join([b"segment"] * (loc_bytes // 8))
    template = ENTRY.replace(b"/res/", b"/" + path + b"/res/")
    buffer = bytearray(head)
    index = 0
    sent = 0
    while sent < total:
        while len(buffer) < chunk:
            buffer += template % index
            index += 1
        piece = bytes(buffer[: min(chunk, total - sent)])
        del buffer[: len(piece)]
        sent += len(piece)
        yield piece


def billion_laughs(levels: int = 10, fanout: int = 10) -> bytes:
    """The classic exponential entity expansion: ``fanout ** levels`` copies of "lol"."""
    declarations = [b'<!ENTITY lol0 "lol">']
    for level in range(1, levels + 1):
        refs = b"".join([b"&lol%d;" % (level - 1)] * fanout)
        declarations.append(b'<!ENTITY lol%d "%s">' % (level, refs))
    dtd = b"<!DOCTYPE urlset [\n" + b"\n".join(declarations) + b"\n]>\n"
    body = b"<url><loc>http://example.com/&lol%d;</loc></url>\n" % levels
    return PROLOG + dtd + change_list(body)[len(PROLOG) :]


def quadratic_blowup(entity_bytes: int = 100_000, references: int = 10_000) -> bytes:
    """One large entity referenced many times: no nesting, quadratic output."""
    dtd = b'<!DOCTYPE urlset [\n<!ENTITY a "' + b"a" * entity_bytes + b'">\n]>\n'
    body = b"<url><loc>http://example.com/" + b"&a;" * references + b"</loc></url>\n"
    return PROLOG + dtd + change_list(body)[len(PROLOG) :]


def deep_nesting(depth: int = 100_000) -> bytes:
    """``depth`` nested elements inside an otherwise valid Change List."""
    return change_list(b"<url>" * depth + b"</url>" * depth + b"\n")


def junk_elements(count: int = 250_000) -> bytes:
    """``count`` empty, unknown elements at document level (~4 bytes of input each)."""
    return change_list(ENTRY % 0 + b"<x/>" * count + b"\n")


def many_attributes(count: int = 100_000) -> bytes:
    """One document-level ``rs:md`` carrying ``count`` unknown attributes."""
    attributes = b" ".join(b'a%d="1"' % i for i in range(count))
    md = b'<rs:md capability="changelist" ' + attributes + b"/>\n"
    return b"".join([PROLOG, URLSET_OPEN, md, ENTRY % 0, URLSET_CLOSE])


CASES: dict[str, Callable[[], bytes]] = {
    "baseline": change_list,
    "too_large_60mb": lambda: change_list_of_size(60 * MIB),
    "billion_laughs": billion_laughs,
    "quadratic_blowup": quadratic_blowup,
    "deep_nesting": deep_nesting,
    "junk_elements": junk_elements,
    "many_attributes": many_attributes,
}


def peak_rss_kib() -> int:
    """This process's peak resident set size since exec, in KiB."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def main(case: str) -> None:
    from rspush.resourcesync import DocumentError, parse_document

    data = CASES[case]()
    outcome: dict[str, object] = {"case": case, "error": None, "message": None}
    try:
        document = parse_document(data)
    except DocumentError as exc:
        outcome["error"] = type(exc).__name__
        outcome["message"] = str(exc)
    else:
        outcome["entries"] = len(document.entries)
        outcome["problems"] = len(document.problems)
    outcome["peak_kib"] = peak_rss_kib()
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv[1])
