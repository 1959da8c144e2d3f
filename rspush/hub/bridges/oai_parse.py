"""Reading OAI-PMH 2.0 responses (pure: bytes in, values out).

Parsed with lxml under the same precautions as every other remote document: no DTD loaded, no
entity resolved, no network access, the default depth and size limits (``huge_tree`` off),
and a document carrying a DTD at all is refused — OAI-PMH responses are validated by XML
Schema (OAI-PMH §3.2) and never need one.

Only what a bridge needs is read: ``Identify`` (granularity, deletedRecord,
earliestDatestamp), ``ListMetadataFormats``, ``ListSets``, and the ``<header>`` of each item of
``ListIdentifiers`` or ``ListRecords`` (identifier, datestamp, setSpecs, status) with the
resumptionToken; the ``responseDate`` of each; and the ``<error>`` codes (§3.6).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from lxml import etree

OAI_NS: Final = "http://www.openarchives.org/OAI/2.0/"
_O: Final = f"{{{OAI_NS}}}"

DAY: Final = "YYYY-MM-DD"
SECONDS: Final = "YYYY-MM-DDThh:mm:ssZ"


class OaiParseError(Exception):
    """Not a usable OAI-PMH 2.0 response (the message says why, without the body)."""


@dataclass(frozen=True, slots=True)
class OaiError:
    """An ``<error code=…>`` of the response (§3.6)."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Identify:
    granularity: str
    deleted_record: str
    """``no``, ``persistent`` or ``transient`` (§4.2)."""
    earliest: datetime | None
    base_url: str | None


@dataclass(frozen=True, slots=True)
class Header:
    identifier: str
    datestamp: datetime
    deleted: bool
    sets: tuple[str, ...] = ()
    digest: str | None = None
    """ListRecords: SHA-256 (hex) of the record's metadata in exclusive XML canonical form
    (W3C Exclusive XML Canonicalization 1.0): the same metadata, the same digest, however
    the repository lays the XML out. None for ListIdentifiers and deleted records."""


@dataclass(frozen=True, slots=True)
class Page:
    """One (possibly incomplete) list response."""

    response_date: datetime
    error: OaiError | None = None
    headers: list[Header] = field(default_factory=list)
    token: str | None = None
    """The resumptionToken; None when the list is complete (absent or empty, §3.5)."""
    formats: dict[str, str] = field(default_factory=dict)
    """ListMetadataFormats: metadataPrefix -> metadataNamespace."""
    sets: list[str] = field(default_factory=list)
    """ListSets: setSpecs."""
    identify: Identify | None = None


_PARSER_OPTIONS: Final = {
    "resolve_entities": False,
    "no_network": True,
    "load_dtd": False,
    "dtd_validation": False,
    "huge_tree": False,
    "remove_comments": True,
    "remove_pis": True,
}


def parse_datestamp(text: str) -> datetime:
    """A UTCdatetime of OAI-PMH §3.3.1 (``YYYY-MM-DD`` or ``YYYY-MM-DDThh:mm:ssZ``)."""
    text = text.strip()
    try:
        if len(text) == 10 and text[4] == "-":
            return datetime.fromisoformat(text).replace(tzinfo=UTC)
        if len(text) >= 20 and text.endswith("Z") and text[10] == "T":
            # Some repositories add fractions of a second; the protocol has none.
            return datetime.fromisoformat(text[:19]).replace(tzinfo=UTC)
    except ValueError:
        pass
    raise OaiParseError(f"not an OAI-PMH datestamp: {text[:40]!r}")


def format_datestamp(moment: datetime, granularity: str) -> str:
    """``moment`` at the repository's granularity, for ``from``/``until`` (§3.3.1)."""
    moment = moment.astimezone(UTC)
    if granularity == DAY:
        return moment.strftime("%Y-%m-%d")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(element: etree._Element | None) -> str:
    return "" if element is None or element.text is None else element.text.strip()


def parse_response(body: bytes) -> Page:
    """Any OAI-PMH response: its responseDate, its errors, and what its verb lists."""
    parser = etree.XMLParser(**_PARSER_OPTIONS)  # type: ignore[arg-type]
    try:
        root = etree.fromstring(body, parser)
    except etree.XMLSyntaxError as exc:
        raise OaiParseError(f"malformed XML ({exc.msg})") from None
    if getattr(root.getroottree().docinfo, "doctype", ""):
        raise OaiParseError("a DTD in an OAI-PMH response (refused: entities are not expanded)")
    if root.tag != f"{_O}OAI-PMH":
        raise OaiParseError(f"not an OAI-PMH 2.0 response (root {etree.QName(root).localname!r})")
    response_date = parse_datestamp(_text(root.find(f"{_O}responseDate")))
    error = root.find(f"{_O}error")
    if error is not None:
        return Page(response_date, OaiError(error.get("code", ""), _text(error)[:200]))
    for child in root:
        if not isinstance(child.tag, str) or child.tag in (f"{_O}responseDate", f"{_O}request"):
            continue
        verb = etree.QName(child).localname
        if verb in ("ListIdentifiers", "ListRecords"):
            return _list(response_date, child, verb)
        if verb == "ListMetadataFormats":
            formats = {
                _text(f.find(f"{_O}metadataPrefix")): _text(f.find(f"{_O}metadataNamespace"))
                for f in child.iter(f"{_O}metadataFormat")
            }
            return Page(response_date, formats=formats)
        if verb == "ListSets":
            specs = [_text(s.find(f"{_O}setSpec")) for s in child.iter(f"{_O}set")]
            return Page(response_date, sets=specs, token=_token(child))
        if verb == "Identify":
            return Page(response_date, identify=_identify(child))
        raise OaiParseError(f"unexpected verb element {verb!r}")
    raise OaiParseError("an OAI-PMH response with neither a verb element nor an error")


def _token(container: etree._Element) -> str | None:
    token = container.find(f"{_O}resumptionToken")
    return _text(token) or None


def _list(response_date: datetime, container: etree._Element, verb: str) -> Page:
    headers: list[Header] = []
    # ListIdentifiers lists <header>s; ListRecords lists <record>s, each with one <header>.
    records = (
        [(h, None) for h in container.iterchildren(f"{_O}header")]
        if verb == "ListIdentifiers"
        else [(r.find(f"{_O}header"), r) for r in container.iterchildren(f"{_O}record")]
    )
    for header, record in records:
        if header is None:
            raise OaiParseError("a record without a header")
        identifier = _text(header.find(f"{_O}identifier"))
        if not identifier:
            raise OaiParseError("a header without an identifier")
        headers.append(
            Header(
                identifier=identifier,
                datestamp=parse_datestamp(_text(header.find(f"{_O}datestamp"))),
                deleted=header.get("status") == "deleted",
                sets=tuple(_text(s) for s in header.iterchildren(f"{_O}setSpec")),
                digest=None if record is None else _digest(record),
            )
        )
    return Page(response_date, headers=headers, token=_token(container))


def _digest(record: etree._Element) -> str | None:
    metadata = record.find(f"{_O}metadata")
    if metadata is None:
        return None
    body = next((c for c in metadata if isinstance(c.tag, str)), None)
    if body is None:
        return None
    canonical = etree.tostring(body, method="c14n", exclusive=True, with_comments=False)
    return hashlib.sha256(canonical).hexdigest()


def _identify(element: etree._Element) -> Identify:
    granularity = _text(element.find(f"{_O}granularity")) or DAY
    if granularity not in (DAY, SECONDS):
        raise OaiParseError(f"unknown granularity {granularity[:40]!r}")
    earliest_text = _text(element.find(f"{_O}earliestDatestamp"))
    return Identify(
        granularity=granularity,
        deleted_record=_text(element.find(f"{_O}deletedRecord")) or "no",
        earliest=parse_datestamp(earliest_text) if earliest_text else None,
        base_url=_text(element.find(f"{_O}baseURL")) or None,
    )
