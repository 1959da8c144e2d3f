"""The oracle for the hub's change records: the forms written the earlier way, model field by
model field through a generic element writer, a ``replaced`` map and a JSON encoder, and the
datetime formatted field by field. The product builds the same bytes more cheaply; the
property tests compare the two over generated entries. Test code only: nothing in the
product imports it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from rspush.resourcesync import Change, Entry, HashValue, Link, Metadata

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
_NO_METADATA = Metadata()
_EMPTY_MD = "<rs:md/>"
_NOT_STATE: dict[str, str | None] = {"change": None, "datetime": None}


def format_w3c_datetime(moment: datetime) -> str:
    utc = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    text = (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}"
        f"T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    )
    if utc.microsecond:
        text += "." + f"{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def record(entry: Entry, moment: datetime) -> tuple[str, str | None, str]:
    """(Change List entry, Resource List entry or None, change JSON) as they were built."""
    md = entry.md
    change = (md.change if md is not None else None) or Change.UPDATED
    moment_text = format_w3c_datetime(moment)
    own_lastmod = None if entry.lastmod is None else format_w3c_datetime(entry.lastmod)
    deleted = change == Change.DELETED
    lastmod = own_lastmod if deleted else own_lastmod or moment_text
    entry_md = md_element(md, {"datetime": moment_text})
    return (
        serialise_entry_with(entry, lastmod=lastmod, md=entry_md),
        None if deleted else state_xml(entry, own_lastmod or moment_text),
        change_json_with(entry, change, moment_text, lastmod),
    )


def state_xml(entry: Entry, lastmod: str) -> str:
    return serialise_entry_with(entry, lastmod=lastmod, md=md_element(entry.md, _NOT_STATE))


def serialise_entry(entry: Entry, tag: str = "url") -> str:
    lastmod = None if entry.lastmod is None else format_w3c_datetime(entry.lastmod)
    md = None if entry.md is None else _element("rs:md", entry.md)
    return serialise_entry_with(entry, lastmod=lastmod, md=md, tag=tag)


def serialise_entry_with(
    entry: Entry, *, lastmod: str | None, md: str | None, tag: str = "url"
) -> str:
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


def element(tag: str, model: Metadata | Link) -> str:
    return _element(tag, model)


def md_element(md: Metadata | None, replaced: dict[str, str | None]) -> str | None:
    element = _element("rs:md", md or _NO_METADATA, replaced)
    return None if element == _EMPTY_MD else element


def change_json_with(
    entry: Entry, change: str, datetime_text: str, lastmod_text: str | None
) -> str:
    md = entry.md
    data: dict[str, Any] = {"loc": entry.loc, "change": change, "datetime": datetime_text}
    if lastmod_text is not None:
        data["lastmod"] = lastmod_text
    if md is not None:
        if md.hash:
            data["hash"] = " ".join(str(h) for h in md.hash)
        for name in ("length", "type", "encoding"):
            value = getattr(md, name)
            if value is not None:
                data[name] = value
    if entry.links:
        data["links"] = [
            link.model_dump(mode="json", exclude_defaults=True) for link in entry.links
        ]
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _priority(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") if value else "0.0"


def _escape_text(text: str) -> str:
    return text.translate(_TEXT_ESCAPES) if _TEXT_SPECIAL.search(text) else text


def _escape_attr(text: str) -> str:
    return text.translate(_ATTR_ESCAPES) if _ATTR_SPECIAL.search(text) else text


def _element(
    tag: str, model: Metadata | Link, replaced: dict[str, str | None] | None = None
) -> str:
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
