"""Write documents as XML valid against the official schemas.

Order is what the Sitemap 0.9 and ResourceSync 1.1 XSDs require: at document level the
``rs:ln`` and ``rs:md`` elements (``xsd:any ##other``) before the first ``<url>``; inside an
entry ``<loc>``, ``<lastmod>``, ``<changefreq>``, ``<priority>``, then ``rs:md``, then
``rs:ln``. Datetimes are written ``YYYY-MM-DDThh:mm:ss[.s]Z`` (Z39.99 §7's recommendation).

Text is built directly rather than through an element tree: it is several times faster for
50,000-entry lists and the escaping rules for the handful of values involved are simple.
:func:`iter_serialise` yields one string per entry so large documents can be streamed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime

from . import namespaces as ns
from .hashes import HashValue
from .models import Document, Entry, Link, Metadata
from .w3cdt import format_w3c_datetime

_NO_METADATA = Metadata()
_EMPTY_MD = "<rs:md/>"
_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
_XMLNS = f'xmlns="{ns.SITEMAP_NS}" xmlns:rs="{ns.RS_NS}"'

# Attribute order is the models' field order, which follows Table 3 of Z39.99 §7.
_ATTR_NAME = {"from_": "from"}

_TEXT_SPECIAL = re.compile(r"[&<>]")
_ATTR_SPECIAL = re.compile(r'[&<>"\n\t\r]')
_TEXT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_ATTR_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&quot;",
        "\n": "&#10;",
        "\t": "&#9;",
        "\r": "&#13;",
    }
)


def serialise(document: Document) -> bytes:
    """The whole document as UTF-8 bytes."""
    return "".join(iter_serialise(document)).encode("utf-8")


def iter_serialise(document: Document) -> Iterator[str]:
    """The document as a sequence of strings: head, one per entry, tail."""
    yield serialise_head(document)
    entry_tag = "url" if document.root == "urlset" else "sitemap"
    for entry in document.entries:
        yield serialise_entry(entry, entry_tag)
    yield serialise_tail(document)


def serialise_head(document: Document) -> str:
    parts = [_HEAD, f"<{document.root} {_XMLNS}>\n"]
    for link in document.links:
        parts.append("  " + _element("rs:ln", link) + "\n")
    parts.append("  " + _element("rs:md", document.md) + "\n")
    return "".join(parts)


def serialise_tail(document: Document) -> str:
    return f"</{document.root}>\n"


def serialise_entry(entry: Entry, tag: str = "url") -> str:
    lastmod = None if entry.lastmod is None else format_w3c_datetime(entry.lastmod)
    md = None if entry.md is None else _element("rs:md", entry.md)
    return serialise_entry_with(entry, lastmod=lastmod, md=md, tag=tag)


def serialise_entry_with(
    entry: Entry, *, lastmod: str | None, md: str | None, tag: str = "url"
) -> str:
    """:func:`serialise_entry` with the ``<lastmod>`` text and the ``<rs:md>`` element given
    (None: left out) instead of the entry's own: several forms of one entry are written
    without copying its model (the hub stores each change in three)."""
    parts = [f"  <{tag}>\n    <loc>", _escape_text(entry.loc), "</loc>\n"]
    if lastmod is not None:
        parts += ["    <lastmod>", lastmod, "</lastmod>\n"]
    if entry.changefreq is not None:
        parts += ["    <changefreq>", _escape_text(entry.changefreq), "</changefreq>\n"]
    if entry.priority is not None:
        parts += ["    <priority>", _priority(entry.priority), "</priority>\n"]
    if md is not None:
        parts += ["    ", md, "\n"]
    for link in entry.links:
        parts += ["    ", _element("rs:ln", link), "\n"]
    parts.append(f"  </{tag}>\n")
    return "".join(parts)


def _priority(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") if value else "0.0"


def _escape_text(text: str) -> str:
    return text.translate(_TEXT_ESCAPES) if _TEXT_SPECIAL.search(text) else text


def _escape_attr(text: str) -> str:
    return text.translate(_ATTR_ESCAPES) if _ATTR_SPECIAL.search(text) else text


def md_element(md: Metadata | None, replaced: dict[str, str | None]) -> str | None:
    """The ``<rs:md …/>`` element of ``md`` (or of no metadata) with the attributes named in
    ``replaced`` (model field names) given as text, or left out when None, in their places;
    None if it has no attribute left."""
    element = _element("rs:md", md or _NO_METADATA, replaced)
    return None if element == _EMPTY_MD else element


def _element(
    tag: str, model: Metadata | Link, replaced: dict[str, str | None] | None = None
) -> str:
    """``<rs:md …/>`` or ``<rs:ln …/>``: attributes in field order, which is Table 3's."""
    parts = ["<", tag]
    for name, value in model.__dict__.items():
        if replaced and name in replaced:
            value = replaced[name]
        if value is None or name == "extra":
            continue
        kind = type(value)
        if kind is str:
            text = value
        elif kind is tuple:
            if not value:
                continue
            text = " ".join(str(v) for v in value if isinstance(v, HashValue))
        elif isinstance(value, datetime):
            text = format_w3c_datetime(value)
        else:
            text = str(value)
        parts += [" ", _ATTR_NAME.get(name, name), '="', _escape_attr(text), '"']
    for name, text in _foreign(model.extra):
        parts += [" ", name, '="', _escape_attr(text), '"']
    parts.append("/>")
    return "".join(parts)


def _foreign(extra: dict[str, str]) -> Iterator[tuple[str, str]]:
    """Foreign-namespace attributes (Clark names), each with an inline prefix declaration.

    Declaring prefixes on the element keeps it well-formed without tracking prefixes
    document-wide; such attributes are rare.
    """
    prefixes: dict[str, str] = {}
    for name, value in extra.items():
        namespace, _, local = name[1:].partition("}")
        if namespace == "http://www.w3.org/XML/1998/namespace":
            yield f"xml:{local}", value
            continue
        if namespace not in prefixes:
            prefixes[namespace] = f"ext{len(prefixes)}"
            yield f"xmlns:{prefixes[namespace]}", namespace
        yield f"{prefixes[namespace]}:{local}", value
