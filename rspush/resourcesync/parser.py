"""The one hardened XML entry point for ResourceSync documents.

Safety: lxml's pull parser with entity resolution off, no network, no DTD
loading and ``huge_tree`` off; any DTD at all is refused (ResourceSync documents never need one,
and refusing it stops XXE and entity expansion before a single entity is read); input over a
byte cap is refused before parsing; nesting deeper than a Sitemap can be is refused; only UTF-8
is accepted (the Sitemap protocol requires it).

Streaming: bytes are fed to the pull parser in chunks and every ``<url>``/``<sitemap>`` is
turned into an :class:`~rspush.resourcesync.models.Entry` and then cleared from the tree, so a
50,000-entry list never exists twice in memory. :func:`stream_document` hands entries out one
by one; :func:`parse_document` collects them.

Attribute values that do not convert (a bad datetime, a non-integer length, a malformed hash)
do not abort the parse: they are recorded as :class:`~rspush.resourcesync.violations.Violation` in
``Document.problems`` and left out of the model, so the validator can report every problem
of a document at once.

Why one module of this size: it is the project's only XML entry point, and its safety rests on
the parser construction, the chunk feeding and the depth and count caps staying together where
one reading can check them.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lxml import etree

from . import namespaces as ns
from .errors import (
    DocumentError,
    DocumentTooLargeError,
    MalformedXMLError,
    NotResourceSyncError,
    UnsafeXMLError,
    WrongNamespaceError,
)
from .hashes import HashSyntaxError, parse_hashes
from .models import Document, Entry, Link, Metadata, Root, construct
from .violations import Severity, Violation
from .w3cdt import W3CDatetimeError, parse_w3c_datetime

# lxml builds a chunk's elements before we can release them: small chunks keep memory flat.
CHUNK_BYTES = 256 * 1024
# lxml's attribute access is quadratic in the attribute count; ResourceSync needs ~13.
MAX_ATTRIBUTES = 64
# A hostile document could otherwise produce one violation per byte.
MAX_PROBLEMS = 1000
# W3C/XML declared encodings we accept (the Sitemap protocol requires UTF-8).
_UTF8_NAMES = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})
_DECLARED_ENCODING = re.compile(rb"""^<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
# urlset > url > rs:ln is depth 3; foreign extensions (e.g. image sitemaps) may nest a little
# more. Anything deeper is not a Sitemap and is refused before it can cost anything.
MAX_DEPTH = 8

_SECTION_ATTRS = "Z39.99 §7"
_DATETIME_ATTRS = frozenset({"at", "completed", "from", "until", "datetime", "modified"})
_MD_ATTRS = frozenset(
    {"capability", "change", "path", "type", "encoding", "hash", "length"} | _DATETIME_ATTRS
)
_LN_ATTRS = frozenset(
    {"rel", "href", "hash", "length", "path", "pri", "type", "encoding", "profile", "modified"}
)


@dataclass
class DocumentHead:
    """What precedes the entries: the root element and the document-level md/ln."""

    root: Root
    md: Metadata
    links: tuple[Link, ...]


@dataclass
class _State:
    problems: list[Violation] = field(default_factory=list)
    size: int = 0

    def problem(
        self,
        rule: str,
        message: str,
        *,
        entry: int | None,
        line: int | None,
        section: str = _SECTION_ATTRS,
        severity: Severity = Severity.ERROR,
    ) -> None:
        if len(self.problems) >= MAX_PROBLEMS:
            if len(self.problems) == MAX_PROBLEMS:
                self.problems.append(
                    Violation(
                        rule="too-many-problems",
                        message=f"more than {MAX_PROBLEMS} problems; the rest are not listed",
                        section=_SECTION_ATTRS,
                        line=line,
                    )
                )
            return
        self.problems.append(
            Violation(
                rule=rule,
                message=message,
                section=section,
                severity=severity,
                entry=entry,
                line=line,
            )
        )


def _new_parser() -> etree.XMLPullParser:
    return etree.XMLPullParser(
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


def _chunks_of(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(view), CHUNK_BYTES):
        yield bytes(view[start : start + CHUNK_BYTES])


def parse_document(
    data: bytes,
    *,
    max_bytes: int = ns.MAX_DOCUMENT_BYTES,
    max_entries: int = ns.MAX_ENTRIES,
) -> Document:
    """Parse one ResourceSync document from bytes.

    Raises a :class:`~rspush.resourcesync.errors.DocumentError` subclass when the bytes are not a
    usable document; value-level problems end up in ``Document.problems`` instead.
    """
    if len(data) > max_bytes:
        raise DocumentTooLargeError(f"document is {len(data)} bytes; the limit is {max_bytes}")
    return parse_chunks(_chunks_of(data), max_bytes=max_bytes, max_entries=max_entries)


def parse_chunks(
    chunks: Iterable[bytes],
    *,
    max_bytes: int = ns.MAX_DOCUMENT_BYTES,
    max_entries: int = ns.MAX_ENTRIES,
) -> Document:
    """Parse a document arriving as byte chunks (a file or an HTTP body)."""
    stream = stream_document(chunks, max_bytes=max_bytes, max_entries=max_entries)
    # Every entry is ~10 GC-tracked objects, all alive until the end: with the collector on,
    # its full collections walk the growing list again and again for nothing.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        entries = tuple(stream)
    finally:
        if paused:
            gc.enable()
    head = stream.head
    assert head is not None  # stream_document raises before finishing without a head
    return Document.model_construct(
        root=head.root,
        md=head.md,
        links=head.links,
        entries=entries,
        problems=tuple(stream.problems),
        size=stream.size,
    )


class stream_document(Iterator[Entry]):  # noqa: N801 - used like a function
    """Iterate over a document's entries as they are parsed.

    ``head`` (root, document ``rs:md`` and ``rs:ln``) is set once the first entry is
    reached (the Sitemap schema puts them first); ``problems`` and ``size`` are complete
    once iteration ends.
    """

    def __init__(
        self,
        chunks: Iterable[bytes],
        *,
        max_bytes: int = ns.MAX_DOCUMENT_BYTES,
        max_entries: int = ns.MAX_ENTRIES,
    ) -> None:
        self.head: DocumentHead | None = None
        self._state = _State()
        self._iterator = self._run(iter(chunks), max_bytes, max_entries)

    @property
    def problems(self) -> list[Violation]:
        return self._state.problems

    @property
    def size(self) -> int:
        return self._state.size

    def __iter__(self) -> stream_document:
        return self

    def __next__(self) -> Entry:
        return next(self._iterator)

    def _run(self, chunks: Iterator[bytes], max_bytes: int, max_entries: int) -> Iterator[Entry]:
        etree.clear_error_log()  # lxml's log is per thread: drop other parses' errors
        parser = _new_parser()
        state = self._state
        depth = 0
        root_el: Any = None
        root_kind: Root = "urlset"
        entry_tag = ns.URL
        doc_md: Metadata | None = None
        doc_links: list[Link] = []
        index = 0

        def batches() -> Iterator[Iterator[tuple[str, Any]]]:
            # The events of each chunk as one iterator (lxml's queue, emptied by the loop
            # below before the next chunk is fed): no generator step per event.
            try:
                for chunk in chunks:
                    if state.size == 0 and chunk:
                        _check_encoding(chunk)
                    state.size += len(chunk)
                    if state.size > max_bytes:
                        raise DocumentTooLargeError(
                            f"document is over the limit of {max_bytes} bytes"
                        )
                    parser.feed(chunk)
                    yield parser.read_events()
                if state.size == 0:
                    raise MalformedXMLError("empty document: no root element")
                parser.close()
                yield parser.read_events()
            except etree.XMLSyntaxError as exc:
                raise _syntax_error(exc) from exc

        for batch in batches():
            for event, el in batch:
                if event == "start":
                    depth += 1
                    if len(el.attrib) > MAX_ATTRIBUTES:
                        raise MalformedXMLError(
                            f"element with more than {MAX_ATTRIBUTES} attributes: not a Sitemap",
                            line=el.sourceline,
                        )
                    if depth > MAX_DEPTH:
                        raise MalformedXMLError(
                            f"elements nested deeper than {MAX_DEPTH} levels: not a Sitemap",
                            line=el.sourceline,
                        )
                    if depth == 1:
                        root_el = el
                        root_kind = _check_root(el)
                        entry_tag = ns.URL if root_kind == "urlset" else ns.SITEMAP
                    continue

                # event == "end"
                depth -= 1
                if depth != 1:
                    continue
                tag = el.tag
                if tag == entry_tag or tag in (ns.URL, ns.SITEMAP):
                    if self.head is None:
                        self.head = _head(root_kind, doc_md, doc_links, el.sourceline)
                    if tag != entry_tag:
                        state.problem(
                            "entry-element",
                            f"<{_local(tag)}> inside <{root_kind}>; expected <{_local(entry_tag)}>",
                            entry=index,
                            line=el.sourceline,
                            section="Z39.99 §7",
                        )
                    if index >= max_entries:
                        raise DocumentTooLargeError(
                            f"more than {max_entries} entries (the Sitemap limit; split the list "
                            "under an index)",
                            line=el.sourceline,
                        )
                    entry = _entry(el, index, state)
                    index += 1
                    _release(el, root_el)
                    yield entry
                elif tag == ns.RS_MD:
                    if doc_md is not None:
                        state.problem(
                            "md-repeated",
                            "more than one document-level <rs:md>",
                            entry=None,
                            line=el.sourceline,
                        )
                    else:
                        doc_md = _metadata(el, None, state)
                    _release(el, root_el)
                elif tag == ns.RS_LN:
                    link = _link(el, None, state)
                    if link is not None:
                        doc_links.append(link)
                    _release(el, root_el)
                else:
                    _unknown_element(el, None, state)
                    _release(el, root_el)

        if root_el is None:
            raise MalformedXMLError("empty document: no root element")
        if self.head is None:
            self.head = _head(root_kind, doc_md, doc_links, None)


def _head(root: Root, md: Metadata | None, links: list[Link], line: int | None) -> DocumentHead:
    if md is None:
        raise NotResourceSyncError(
            "no document-level <rs:md capability=...> before the first entry: a plain "
            "Sitemap, not a ResourceSync document (Z39.99 §7)",
            line=line,
        )
    return DocumentHead(root=root, md=md, links=tuple(links))


def _syntax_error(exc: etree.XMLSyntaxError) -> DocumentError:
    # The first fatal entry of the log is the real cause: exc.msg may be a generic "no
    # element found" at line 0. The log is cleared when a parse starts (see _run), so it
    # holds this parse's errors only.
    message, line = (str(exc.msg) if exc.msg else str(exc)), exc.lineno
    log: Any = exc.error_log
    fatal = [e for e in log if e.level_name == "FATAL"]
    if fatal:
        message, line = fatal[0].message, fatal[0].line
    where = line if line and line > 0 else None
    if "Document is empty" in message or "no element found" in message:
        return MalformedXMLError("empty document: no root element", line=where)
    if "depth" in message.lower() or "XML_PARSE_HUGE" in message:
        return MalformedXMLError(
            f"elements nested deeper than {MAX_DEPTH} levels: not a Sitemap", line=where
        )
    if "Entity" in message or "entity" in message:
        return UnsafeXMLError(f"entity reference refused: {message}", line=where)
    return MalformedXMLError(f"not well-formed XML: {message}", line=where)


def _check_encoding(first: bytes) -> None:
    """UTF-8 only (Sitemap protocol), checked on the raw bytes: during a pull parse lxml
    does not report the declared encoding, and it would happily decode UTF-16 or Latin-1."""
    if first.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")) or b"\x00" in first[:4]:
        raise MalformedXMLError("document is UTF-16/UTF-32; Sitemaps must be UTF-8", line=1)
    head = first.removeprefix(b"\xef\xbb\xbf")
    declared = _DECLARED_ENCODING.match(head)
    if declared is not None and declared.group(1).decode().lower() not in _UTF8_NAMES:
        raise MalformedXMLError(
            f"document declares encoding {declared.group(1).decode()}; Sitemaps must be UTF-8",
            line=1,
        )


def _check_root(el: Any) -> Root:
    info = el.getroottree().docinfo
    if info.internalDTD is not None or info.externalDTD is not None or info.system_url:
        raise UnsafeXMLError(
            "document declares a DTD; ResourceSync documents never need one and DTDs are "
            "refused (they enable XXE and entity-expansion attacks)",
            line=el.sourceline,
        )
    tag = el.tag
    if tag == ns.URLSET:
        return "urlset"
    if tag == ns.SITEMAPINDEX:
        return "sitemapindex"
    local = _local(tag)
    if local in ("urlset", "sitemapindex"):
        namespace = _namespace(tag) or "no namespace"
        raise WrongNamespaceError(
            f"root <{local}> is in {namespace}; ResourceSync documents use {ns.SITEMAP_NS}",
            line=el.sourceline,
        )
    raise NotResourceSyncError(
        f"root element <{local}> is not <urlset> or <sitemapindex>", line=el.sourceline
    )


def _release(el: Any, root: Any) -> None:
    """Drop a processed child and everything before it, keeping memory flat."""
    el.clear(keep_tail=False)
    while el.getprevious() is not None:
        del root[0]


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _namespace(tag: str) -> str | None:
    return tag[1:].partition("}")[0] if tag.startswith("{") else None


def _unknown_element(el: Any, entry: int | None, state: _State) -> None:
    """Foreign-namespace extensions are allowed and ignored; our own namespaces are not."""
    tag = el.tag
    if not isinstance(tag, str):
        return
    namespace = _namespace(tag)
    local = _local(tag)
    if namespace in (ns.SITEMAP_NS, ns.RS_NS) or namespace is None:
        state.problem(
            "unknown-element",
            f"unexpected element <{local}>"
            + ("" if namespace else " with no namespace")
            + (" inside an entry" if entry is not None else " at document level"),
            entry=entry,
            line=el.sourceline,
        )
    elif local in ("md", "ln") and namespace.rstrip("/") == ns.RS_NS.rstrip("/"):
        state.problem(
            "wrong-namespace",
            f"<{local}> is in {namespace}; the ResourceSync namespace is {ns.RS_NS}",
            entry=entry,
            line=el.sourceline,
        )


def _entry(el: Any, index: int, state: _State) -> Entry:
    loc: str | None = None
    lastmod: datetime | None = None
    changefreq: str | None = None
    priority: float | None = None
    md: Metadata | None = None
    links: list[Link] = []
    for child in el:
        tag = child.tag
        if tag == ns.LOC:
            loc = (child.text or "").strip()
        elif tag == ns.RS_MD:
            if md is not None:
                state.problem(
                    "md-repeated",
                    "more than one <rs:md> in an entry (§7: not repeatable)",
                    entry=index,
                    line=child.sourceline,
                )
            else:
                md = _metadata(child, index, state)
        elif tag == ns.RS_LN:
            link = _link(child, index, state)
            if link is not None:
                links.append(link)
        elif tag == ns.LASTMOD:
            lastmod = _datetime(child.text or "", "<lastmod>", index, child.sourceline, state)
        elif tag == ns.CHANGEFREQ:
            changefreq = (child.text or "").strip()
        elif tag == ns.PRIORITY:
            priority = _priority(child.text or "", index, child.sourceline, state)
        else:
            _unknown_element(child, index, state)
    if not loc:
        state.problem(
            "loc-missing",
            "entry has no <loc> (mandatory, Z39.99 §7)",
            entry=index,
            line=el.sourceline,
        )
        loc = ""
    return construct(
        Entry,
        {
            "loc": loc,
            "lastmod": lastmod,
            "changefreq": changefreq,
            "priority": priority,
            "md": md,
            "links": tuple(links),
        },
    )


class _Invalid(ValueError):
    """An attribute or element value that does not convert: the problem to record."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


def _datetime(
    text: str, what: str, entry: int | None, line: int | None, state: _State
) -> datetime | None:
    try:
        return _dt_attr(text, what)
    except _Invalid as bad:
        state.problem(bad.rule, bad.message, entry=entry, line=line)
        return None


def _priority(text: str, entry: int, line: int | None, state: _State) -> float | None:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        state.problem(
            "priority-range",
            f"<priority> {text.strip()!r} is not a number from 0.0 to 1.0",
            entry=entry,
            line=line,
            section="Sitemap protocol",
        )
        return None
    return value


def _integer(text: str, what: str) -> int:
    value = text.strip()
    # 20 digits: any real length; longer ones would only cost int() time (and hit its limit).
    if value.isascii() and value.isdigit() and len(value) <= 20:
        return int(value)
    raise _Invalid(
        "length-integer" if what == "length" else f"{what}-integer",
        f"{what}={text[:40]!r} is not a non-negative integer (at most 20 digits)",
    )


def _attributes(
    el: Any,
    known: dict[str, _Known],
    element: str,
    entry: int | None,
    state: _State,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Split an element's attributes into converted known ones (by model field name) and
    foreign extras."""
    values: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for name, raw in el.items():
        spec = known.get(name)
        if spec is not None:
            field, converter, what = spec
            if converter is None:
                values[field] = raw
            else:
                try:
                    values[field] = converter(raw, what)
                except _Invalid as bad:
                    state.problem(bad.rule, bad.message, entry=entry, line=el.sourceline)
        elif name.startswith("{"):
            if _namespace(name) == ns.RS_NS:
                state.problem(
                    "attribute-prefixed",
                    f"{element} attribute rs:{_local(name)} must not have a namespace prefix",
                    entry=entry,
                    line=el.sourceline,
                )
            else:
                extra[name] = raw
        else:
            state.problem(
                "unknown-attribute",
                f"{element} has unknown attribute {name!r}; extensions must use their own "
                "XML namespace",
                entry=entry,
                line=el.sourceline,
            )
    return values, extra


def _hash_attr(raw: str, what: str) -> tuple[Any, ...]:
    try:
        return parse_hashes(raw)
    except HashSyntaxError as exc:
        raise _Invalid("hash-syntax", f"{what}: {exc}") from None


def _pri_attr(raw: str, what: str) -> int:
    value = _integer(raw, "pri")
    if not 1 <= value <= 999_999:
        raise _Invalid("pri-range", f"{what}={raw!r} is outside 1..999999")
    return value


def _dt_attr(raw: str, what: str) -> datetime:
    try:
        return parse_w3c_datetime(raw)
    except W3CDatetimeError as exc:
        raise _Invalid("datetime-syntax", f"{what}: {exc}") from None


def _len_attr(raw: str, what: str) -> int:
    return _integer(raw, "length")


_Converter = Callable[[str, str], Any]
_CONVERTERS: dict[str, _Converter] = {
    **dict.fromkeys(_DATETIME_ATTRS, _dt_attr),
    "hash": _hash_attr,
    "length": _len_attr,
    "pri": _pri_attr,
}
_Known = tuple[str, "_Converter | None", str]
"""What to do with a known attribute: its model field, its converter (None: kept as text)
and how messages name it."""


def _known(element: str, names: frozenset[str]) -> dict[str, _Known]:
    # Made once per element kind: the per-attribute work is one dict look-up.
    field = {"from": "from_"}
    return {
        name: (field.get(name, name), _CONVERTERS.get(name), f"{element}@{name}") for name in names
    }


_MD_KNOWN = _known("<rs:md>", _MD_ATTRS)
_LN_KNOWN = _known("<rs:ln>", _LN_ATTRS)


def _metadata(el: Any, entry: int | None, state: _State) -> Metadata:
    values, extra = _attributes(el, _MD_KNOWN, "<rs:md>", entry, state)
    values["extra"] = extra
    return construct(Metadata, values)


def _link(el: Any, entry: int | None, state: _State) -> Link | None:
    values, extra = _attributes(el, _LN_KNOWN, "<rs:ln>", entry, state)
    missing = [name for name in ("rel", "href") if not values.get(name)]
    if missing:
        state.problem(
            "link-attributes",
            f"<rs:ln> without mandatory {' and '.join(missing)}",
            entry=entry,
            line=el.sourceline,
        )
        return None
    values["extra"] = extra
    return construct(Link, values)
