"""What the OAI-PMH bridge asks and what it makes of the answers (pure: no I/O, no clock).

**Resources.** Each (identifier, metadataPrefix) is one resource whose URI is its
``GetRecord`` request, ``{base}?verb=GetRecord&identifier=…&metadataPrefix=…`` (OAI-PMH §4.1),
with ``<rs:ln rel="describedby">`` to the format's namespace and one
``<rs:ln rel="collection">`` per set the record is in (the set's URI is its
``ListIdentifiers`` request in that format), as the OAI-PMH ResourceSync use case lays out.
``lastmod`` is the record's datestamp.

**No hash, no length.** A Destination fetches the ``GetRecord`` URL; the response is an
OAI-PMH envelope whose ``responseDate`` (§3.2) changes on every request, so no digest of the
bytes can ever verify, and a digest of the bare ``<metadata>`` would name bytes nobody serves:
``rs:md hash`` and ``length`` are left out.

**The metadata digest.** The bridge lists with ``ListRecords`` and keeps, in the entry's
``rs:md``, the attribute ``{urn:rspush:oai-pmh}metadata`` = ``sha256:<hex>`` of the record's
metadata in exclusive canonical XML (:mod:`.oai_parse`). It is not a digest of what the URI
serves; it lets the runner tell a record edited twice within one datestamp increment (two
edits on one day, at day granularity) from one listed again by the overlap: the datestamp
alone cannot, and the second edit would be lost. (Z39.99 §7 lets communities add attributes
of their own namespace; clients ignore them.)

**Times.** A change's ``rs:md datetime`` is the record's datestamp at the repository's
granularity, moved forward just enough (by microseconds) to stay after the bridge's previous
change: lists are not in datestamp order (§3.5 leaves the order to the repository) and the
hub publishes Change Lists in forward order. ``lastmod`` keeps the datestamp as it is.

**Harvest windows.** A window lists every (metadataPrefix, set) lane with ``from`` = the
previous window's start, inclusive. The next window's ``from`` is the ``responseDate`` of the
window's first response less :data:`OVERLAP` at the repository's granularity — the harvester
guidelines (§3: overlap by one datestamp increment, based on the first response's
``responseDate``, plus a margin for a repository whose search ran before it dated the
response). Records listed again by the overlap leave the topic as it is and are dropped by the
runner, so they are never appended twice.

**Checkpoint.** The window's ``from``, the next ``from``, the lane, the resumptionToken of the
next page and the last change time are committed with each page's changes. A restart resumes
with the token (§3.5 asks repositories to keep the last token valid while it can); a
``badResumptionToken`` (expired, or a repository restarted) restarts the *window* from its
``from``: re-listing never skips, and the re-listed records are dropped as no-ops.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Final
from urllib.parse import quote

from rspush.resourcesync import Change, Entry, Link, Metadata
from rspush.resourcesync.w3cdt import from_us, parse_w3c_datetime, to_us

from .oai_parse import DAY, Header, format_datestamp

OVERLAP: Final = timedelta(seconds=5)
"""Taken off the first response's responseDate for the next window's ``from``."""
CHECKPOINT_VERSION: Final = 1
DIGEST_ATTRIBUTE: Final = "{urn:rspush:oai-pmh}metadata"
"""The ``rs:md`` attribute holding the record's metadata digest."""


@dataclass(frozen=True, slots=True)
class Lane:
    prefix: str
    set_spec: str | None = None


@dataclass
class Checkpoint:
    from_: str | None = None
    """The window's ``from`` (inclusive, at the granularity); None: the whole repository."""
    next_from: str | None = None
    """The next window's ``from``, taken from the window's first response."""
    lane: int = 0
    token: str | None = None
    """The resumptionToken of the lane's next page; None: its first page."""
    floor_us: int = 0
    """The time of the bridge's last change: the next ones are later."""
    phase: str = "incremental"
    """``incremental``, or ``full``: listing every identifier to find deleted records."""
    last_full: str | None = None
    """When the last full listing ended (W3C datetime of the repository's responseDate)."""
    deletes: list[str] = field(default_factory=list)
    """Deletions a full listing found, still to append."""
    formats: dict[str, str] = field(default_factory=dict)
    """metadataPrefix -> namespace of the bridged formats, fixed at the first step."""
    granularity: str = DAY
    began: str | None = None
    """The responseDate of the window's first response (W3C datetime)."""
    synced: str | None = None
    """``began`` of the last window listed to its end: every change the repository made
    before it is bridged."""

    def dumps(self) -> str:
        data = {"v": CHECKPOINT_VERSION} | asdict(self)
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def loads(cls, text: str | None) -> Checkpoint:
        if not text:
            return cls()
        data = json.loads(text)
        data.pop("v", None)
        return cls(**data)

    @property
    def window_start(self) -> bool:
        return self.lane == 0 and self.token is None


def lanes(formats: dict[str, str], sets: list[str]) -> list[Lane]:
    """Every (format, set) to list: all of the repository per format when no set is given."""
    specs: list[str | None] = [*sets] if sets else [None]
    return [Lane(p, s) for p in sorted(formats) for s in specs]


def _q(value: str) -> str:
    """A request argument, percent-encoded (OAI-PMH §3.1.1.3)."""
    return quote(value, safe="")


def record_uri(base_url: str, identifier: str, prefix: str) -> str:
    return f"{base_url}?verb=GetRecord&identifier={_q(identifier)}&metadataPrefix={_q(prefix)}"


@functools.lru_cache(maxsize=4096)
def set_uri(base_url: str, set_spec: str, prefix: str) -> str:
    return f"{base_url}?verb=ListIdentifiers&metadataPrefix={_q(prefix)}&set={_q(set_spec)}"


def list_params(lane: Lane, checkpoint: Checkpoint, *, full: bool) -> dict[str, str]:
    """The lane's next page: ListRecords, or ListIdentifiers for a full listing (only the
    identifiers matter). A resumptionToken is exclusive: it goes alone (§3.5)."""
    verb = "ListIdentifiers" if full else "ListRecords"
    if checkpoint.token is not None:
        return {"verb": verb, "resumptionToken": checkpoint.token}
    params = {"verb": verb, "metadataPrefix": lane.prefix}
    if lane.set_spec is not None:
        params["set"] = lane.set_spec
    if checkpoint.from_ is not None and not full:
        params["from"] = checkpoint.from_
    return params


def next_from(response_date: datetime, granularity: str) -> str:
    """The next window's ``from``: the first response's responseDate less the overlap."""
    return format_datestamp(response_date - OVERLAP, granularity)


def forward_time(datestamp: datetime, floor_us: int, now: datetime) -> int:
    """A change's time: its datestamp (never past ``now``), after the previous change."""
    return max(floor_us + 1, to_us(min(datestamp, now)))


def changes(
    headers: list[Header],
    *,
    base_url: str,
    lane: Lane,
    namespace: str,
    floor_us: int,
    now: datetime,
) -> tuple[list[Entry], int]:
    """The page's records as changes in forward time order, and the new floor.

    A record's change type is left to the runner (created or updated, from the topic's
    state) but for deleted records (§2.5.1: ``status="deleted"``)."""
    entries: list[Entry] = []
    described = (Link(rel="describedby", href=namespace),) if namespace else ()
    for header in sorted(headers, key=lambda h: h.datestamp):
        floor_us = forward_time(header.datestamp, floor_us, now)
        when = from_us(floor_us)
        loc = record_uri(base_url, header.identifier, lane.prefix)
        if header.deleted:
            md = Metadata(change=Change.DELETED, datetime=when)
            entries.append(Entry(loc=loc, md=md))
            continue
        links = described + tuple(
            Link(rel="collection", href=set_uri(base_url, spec, lane.prefix))
            for spec in header.sets
        )
        extra = {} if header.digest is None else {DIGEST_ATTRIBUTE: f"sha256:{header.digest}"}
        md = Metadata(datetime=when, extra=extra)
        entries.append(Entry(loc=loc, lastmod=header.datestamp, md=md, links=links))
    return entries, floor_us


def deletions(locs: list[str], *, floor_us: int, now: datetime) -> tuple[list[Entry], int]:
    """``deleted`` changes of records a full listing no longer found, dated now."""
    entries = []
    for loc in locs:
        floor_us = max(floor_us + 1, to_us(now))
        entries.append(
            Entry(loc=loc, md=Metadata(change=Change.DELETED, datetime=from_us(floor_us)))
        )
    return entries, floor_us


def synced_through(checkpoint: Checkpoint) -> datetime | None:
    """The repository time through which every change is bridged."""
    return None if checkpoint.synced is None else parse_w3c_datetime(checkpoint.synced)
