"""Finding a topic's Capability List and push endpoint from any Source URL (Z39.99 §6.3).

SOURCE_URL may be a hub or Source base URL, its ``/.well-known/resourcesync`` (§6.3.2), a
Source Description, a Capability List, any other ResourceSync document (its ``rs:ln
rel="up"`` chain leads to the Capability List, §6.2), or any page whose HTTP ``Link`` header
or HTML ``<link>`` has ``rel="resourcesync"`` (§6.3.3). When none of those answers, the
origin's ``robots.txt`` ``Sitemap:`` lines are followed (§6.3.4). Candidates, in order:

    base URL (no path)    /.well-known/resourcesync, the home page, /robots.txt
    any other URL         the URL itself, URL/.well-known/resourcesync (when the path looks
                          like a directory or mount point), /.well-known/resourcesync,
                          /robots.txt

A candidate answering 4xx or with something that is not ResourceSync is noted and the next
one is tried; anything reached by following a link must be there. The push endpoint comes
from the change-notification entry's ``rs:ln rel="urn:rspush:websocket"`` or, failing that,
the same relation in the Capability List's HTTP ``Link`` header (docs/protocol.md).

The walk's steps share its state (what was tried, the documents read) and its limits, so
they stay together in this module (hence its length); the link and page parsing they use is
in :mod:`rspush.remote.links`.

Every fetch is capped (``max_bytes``) and so is every chain of links (``max_hops``), so a
hostile Source cannot make discovery loop or read without end. All XML goes through
:func:`rspush.resourcesync.parse_document`; HTML is read with lxml.html, network off, capped.

Errors: everything raised is a :class:`~rspush.remote.errors.DiscoveryError` (``url`` names the
document the problem is about, when there is one). It is *transient* when the Source could
not be reached, answered 5xx (or 408, 429) or missed a document's deadline
(:mod:`rspush.remote.deadlines`): the agent tries again later. A 4xx on every candidate, or
documents that are not ResourceSync, are a configuration error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

import httpx

from rspush.protocol import PUSH_REL
from rspush.resourcesync import Capability, Document, DocumentError, DocumentType, parse_document

from .deadlines import DOCUMENT_LIMITS, RateDeadline, TransferLimits
from .errors import DiscoveryError, TopicNotFound
from .links import (
    RESOURCESYNC_REL,
    WEB_SCHEMES,
    candidate_urls,
    html_resourcesync_links,
    join_url,
    parse_links,
    robots_sitemaps,
    topic_name,
    unique,
)
from .reader import transient_status

# Bounds on what discovery reads and follows, so a hostile Source cannot make it read
# without end; discover() takes the first two as arguments.
MAX_DISCOVERY_BYTES: Final = 10 * 1024 * 1024  # per fetched document
MAX_HOPS: Final = 8  # links followed in one chain (up, index, resourcesync)
MAX_CAPABILITY_LISTS: Final = 64  # read from Source Descriptions
MAX_LINKS: Final = 16  # resourcesync links of one page, or Sitemap lines of robots.txt, followed

_ACCEPT: Final = {"Accept": "application/xml, text/xml;q=0.9, text/html;q=0.8, */*;q=0.5"}
_FOUND_TYPES: Final = frozenset(
    {
        DocumentType.CAPABILITY_LIST,
        DocumentType.SOURCE_DESCRIPTION,
        DocumentType.SOURCE_DESCRIPTION_INDEX,
    }
)


def source_base_uri(url: str) -> str:
    """``scheme://host[:port]/`` of ``url``: the default base of the Source's resources."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2].lower()
    return f"{parts.scheme.lower()}://{host}/"


@dataclass(frozen=True)
class TopicEndpoints:
    """Where one topic's documents and push channel are.

    ``base_uri`` defaults to :func:`source_base_uri` of ``capability_list``.
    """

    topic: str
    capability_list: str
    change_list: str | None  # may be a Change List Index (§12.2)
    change_list_archive: str | None
    resource_list: str | None  # may be a Resource List Index (§10.2)
    push_url: str | None
    resource_dump: str | None = None
    change_dump: str | None = None
    source_description: str | None = None  # the one read on the way, if any
    base_uri: str = ""
    framework: str | None = None
    """The framework-notification topic URI (Framework Notification §5), when advertised:
    the hub then sends framework frames on its push channel to a client that asks."""

    def __post_init__(self) -> None:
        if not self.base_uri:
            object.__setattr__(self, "base_uri", source_base_uri(self.capability_list))


# --- Sans-I/O: reading links, pages and names ------------------------------------------------


# --- I/O: fetching and following ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Reply:
    url: str  # as requested
    final_url: str  # after redirects: the base of relative references
    status: int
    headers: httpx.Headers
    content: bytes

    def links(self, rel: str, schemes: tuple[str, ...] = WEB_SCHEMES) -> list[str]:
        found = parse_links(self.headers.get_list("link"), self.final_url)
        return unique(
            link.target
            for link in found
            if rel in link.rels and (not schemes or urlsplit(link.target).scheme in schemes)
        )

    @property
    def is_html(self) -> bool:
        media = self.headers.get("content-type", "").partition(";")[0].strip().lower()
        head = self.content[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
        return media in ("text/html", "application/xhtml+xml") or head.startswith(
            (b"<!doctype html", b"<html")
        )


@dataclass(frozen=True, slots=True)
class _Found:
    url: str
    reply: _Reply
    document: Document


@dataclass
class _Walk:
    client: httpx.AsyncClient
    max_bytes: int
    max_hops: int
    limits: TransferLimits = DOCUMENT_LIMITS
    tried: list[str] = field(default_factory=list)
    documents: dict[str, _Found] = field(default_factory=dict)

    async def get(self, url: str) -> _Reply:
        """GET ``url``, reading at most ``max_bytes`` of its body (none of an error's)."""
        deadline = RateDeadline(self.limits)
        try:
            async with deadline, self.client.stream("GET", url, headers=_ACCEPT) as response:
                body = bytearray()
                if response.status_code < 400:
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > self.max_bytes:
                        raise self.too_large(url, f"{int(declared)} bytes")
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        deadline.received(len(chunk))
                        if len(body) > self.max_bytes:
                            raise self.too_large(url, f"more than {len(body)} bytes")
        except TimeoutError as exc:
            raise DiscoveryError(f"GET {url}: {deadline.reason}", url=url, transient=True) from exc
        except httpx.HTTPError as exc:
            raise DiscoveryError(
                f"GET {url}: {str(exc) or type(exc).__name__}", url=url, transient=True
            ) from exc
        return _Reply(url, str(response.url), response.status_code, response.headers, bytes(body))

    def too_large(self, url: str, size: str) -> DiscoveryError:
        return DiscoveryError(
            f"GET {url}: the document is {size}; discovery reads at most {self.max_bytes}",
            url=url,
        )

    async def locate(self, source_url: str) -> list[_Found]:
        """Source Descriptions and/or Capability Lists reached from ``source_url``."""
        url = join_url(source_url.strip(), "")
        if url is None:
            raise DiscoveryError(f"SOURCE_URL must be an http(s) URL, not {source_url!r}")
        for kind, candidate in candidate_urls(url):
            found = await (self.robots(candidate) if kind == "robots" else self.page(candidate))
            if found:
                return found
        raise DiscoveryError(
            f"no ResourceSync Source Description or Capability List found from {source_url}; "
            f"tried: {'; '.join(self.tried)}",
            url=source_url,
        )

    async def page(self, url: str) -> list[_Found]:
        """A candidate: a ResourceSync document, or a page linking to one (§6.3.3)."""
        reply = await self.get(url)
        if not self.answered(reply):
            return []
        targets = reply.links(RESOURCESYNC_REL)
        if reply.is_html:
            targets = unique([*targets, *html_resourcesync_links(reply.content, reply.final_url)])
            problem = f'an HTML page without <link rel="{RESOURCESYNC_REL}">'
        elif not reply.content.strip():
            problem = "an empty response"
        else:
            try:
                document = parse_document(reply.content, max_bytes=self.max_bytes)
            except DocumentError as exc:
                problem = f"not a ResourceSync document: {exc}"
            else:
                self.documents[url] = _Found(url, reply, document)
                if document.type in _FOUND_TYPES or _up(document, reply) is not None:
                    return [await self.climb(url, [])]
                problem = f'a {document.type} with no rs:ln rel="up" link'
        if targets:
            return [await self.climb(target, [url]) for target in targets[:MAX_LINKS]]
        self.tried.append(f"{url} ({problem})")
        return []

    async def robots(self, url: str) -> list[_Found]:
        """§6.3.4: each ``Sitemap:`` that is a ResourceSync document, up to its Capability List."""
        reply = await self.get(url)
        if not self.answered(reply):
            return []
        sitemaps = robots_sitemaps(reply.content, reply.final_url)
        if not sitemaps:
            self.tried.append(f"{url} (no Sitemap lines)")
        found = []
        for sitemap in sitemaps[:MAX_LINKS]:
            listed = await self.get(sitemap)
            if not self.answered(listed):
                continue
            try:
                document = parse_document(listed.content, max_bytes=self.max_bytes)
            except DocumentError as exc:
                self.tried.append(f"{sitemap} from {url} (not a ResourceSync document: {exc})")
                continue
            self.documents[sitemap] = _Found(sitemap, listed, document)
            found.append(await self.climb(sitemap, [url]))
        return list({item.url: item for item in found}.values())

    def answered(self, reply: _Reply) -> bool:
        """False (noted) for a candidate that is not there; raises for a server error."""
        if 200 <= reply.status < 300:
            return True
        if 400 <= reply.status < 500:
            self.tried.append(f"{reply.url} (HTTP {reply.status})")
            return False
        hint = " (a redirect: the client must follow redirects)" if reply.status < 400 else ""
        raise DiscoveryError(
            f"GET {reply.url}: HTTP {reply.status}{hint}",
            url=reply.url,
            transient=transient_status(reply.status),
        )

    async def climb(self, url: str, trail: list[str]) -> _Found:
        """Follow ``up`` links (§6.2) from ``url`` to a Capability List or Source Description;
        ``trail`` is how we got here."""
        trail = list(trail)
        while True:
            if url in trail:
                raise DiscoveryError(
                    f"links loop: {' → '.join([*trail, url])}; no Capability List reached",
                    url=url,
                )
            if len(trail) > self.max_hops:
                raise DiscoveryError(
                    f"gave up after following {self.max_hops} links without reaching a "
                    f"Capability List: {' → '.join(trail)} → {url}",
                    url=url,
                )
            trail.append(url)
            found = await self.document(url, trail[-2] if len(trail) > 1 else None)
            if found.document.type in _FOUND_TYPES:
                return found
            up = _up(found.document, found.reply)
            if up is None:
                raise DiscoveryError(
                    f'{url} is a {found.document.type} with no rs:ln rel="up" link to its '
                    f"Capability List (reached by {' → '.join(trail)})",
                    url=url,
                )
            url = up

    async def document(self, url: str, referrer: str | None) -> _Found:
        """The ResourceSync document at ``url``, which must be there."""
        if url in self.documents:
            return self.documents[url]
        via = "" if referrer is None else f" (linked from {referrer})"
        reply = await self.get(url)
        if not 200 <= reply.status < 300:
            raise DiscoveryError(
                f"GET {url}{via}: HTTP {reply.status}",
                url=url,
                transient=transient_status(reply.status),
            )
        try:
            document = parse_document(reply.content, max_bytes=self.max_bytes)
        except DocumentError as exc:
            raise DiscoveryError(
                f"{url}{via} is not a ResourceSync document: {exc}", url=url
            ) from exc
        found = self.documents[url] = _Found(url, reply, document)
        return found

    async def capability_lists(self, found: list[_Found]) -> list[tuple[_Found, str | None]]:
        """Every Capability List found or listed by a Source Description (§8), with the
        Source Description that listed it."""
        lists: dict[str, tuple[_Found, str | None]] = {}
        for item in found:
            if item.document.type is DocumentType.CAPABILITY_LIST:
                lists.setdefault(item.url, (item, None))
                continue
            listed = await self.listed(item)
            if not listed:
                raise DiscoveryError(
                    f"the Source Description {item.url} lists no Capability Lists", url=item.url
                )
            for url in listed:
                if url in lists:
                    continue
                capability_list = await self.document(url, item.url)
                if capability_list.document.type is not DocumentType.CAPABILITY_LIST:
                    raise DiscoveryError(
                        f"{url}, listed in the Source Description {item.url}, is a "
                        f"{capability_list.document.type}, not a Capability List",
                        url=url,
                    )
                lists[url] = (capability_list, item.url)
        return list(lists.values())

    async def listed(self, description: _Found) -> list[str]:
        """The Capability List URLs of a Source Description or of a Source Description
        Index's parts (§8)."""
        parts = [description]
        if description.document.is_index:
            parts = [
                await self.document(url, description.url)
                for url in _locs(description, None)[:MAX_CAPABILITY_LISTS]
            ]
        urls = unique(url for part in parts for url in _locs(part, Capability.CAPABILITYLIST))
        if len(urls) > MAX_CAPABILITY_LISTS:
            raise DiscoveryError(
                f"the Source Description {description.url} lists {len(urls)} Capability Lists, "
                f"more than {MAX_CAPABILITY_LISTS}: give your topic's Capability List URL",
                url=description.url,
            )
        return urls


def _locs(found: _Found, capability: str | None) -> list[str]:
    """Absolute ``<loc>`` of entries (with this capability, or none given), valid ones only."""
    urls = []
    for entry in found.document.entries:
        has = None if entry.md is None else entry.md.capability
        if capability is None or has in (capability, None):
            url = join_url(found.reply.final_url, entry.loc.strip())
            if url is not None:
                urls.append(url)
    return urls


def _up(document: Document, reply: _Reply) -> str | None:
    """Where a document's Capability List is: its ``up`` link (§6.2; the archives' ``up``
    points at the Capability List too), else its ``index`` (a part of an index), else the
    HTTP ``Link rel="resourcesync"``."""
    for rel in ("up", "index"):
        link = document.link(rel)
        target = None if link is None else join_url(reply.final_url, link.href.strip())
        if target is not None:
            return target
    return next(iter(reply.links(RESOURCESYNC_REL)), None)


def _endpoints(found: _Found, source_description: str | None) -> TopicEndpoints:
    by_capability: dict[str, str] = {}
    notification = None
    for entry in found.document.entries:
        capability = None if entry.md is None else entry.md.capability
        url = join_url(found.reply.final_url, entry.loc.strip())
        if capability is None or url is None:
            continue
        by_capability.setdefault(capability, url)
        if notification is None and capability in (
            Capability.CHANGE_NOTIFICATION,
            Capability.CHANGELIST_NOTIFICATION,
        ):
            notification = entry
    push = None
    if notification is not None and (link := notification.link(PUSH_REL)) is not None:
        push = link.href
    push = push or next(iter(found.reply.links(PUSH_REL, ("ws", "wss"))), None)
    return TopicEndpoints(
        topic=topic_name(found.url, None if notification is None else notification.loc),
        capability_list=found.url,
        change_list=by_capability.get(Capability.CHANGELIST),
        change_list_archive=by_capability.get(Capability.CHANGELIST_ARCHIVE),
        resource_list=by_capability.get(Capability.RESOURCELIST),
        push_url=push,
        resource_dump=by_capability.get(Capability.RESOURCEDUMP),
        change_dump=by_capability.get(Capability.CHANGEDUMP),
        source_description=source_description,
        framework=by_capability.get(Capability.FRAMEWORK_NOTIFICATION),
    )


def choose(topics: list[TopicEndpoints], topic: str | None) -> TopicEndpoints:
    """The topic asked for, or the only one; otherwise an error listing them."""
    names = ", ".join(t.topic for t in topics) or "none"
    if topic is not None:
        matching = [t for t in topics if t.topic == topic]
        if not matching:
            where = f" (Capability List {topics[0].capability_list})" if len(topics) == 1 else ""
            raise TopicNotFound(f"no topic {topic!r}; the Source has: {names}{where}")
        if len(matching) > 1:
            urls = ", ".join(t.capability_list for t in matching)
            raise DiscoveryError(
                f"{len(matching)} Capability Lists are named {topic!r} ({urls}): "
                "give the Capability List URL instead"
            )
        return matching[0]
    if len(topics) != 1:
        raise DiscoveryError(
            f"the Source has {len(topics)} topics ({names}): choose one with --topic"
        )
    return topics[0]


async def discover(
    client: httpx.AsyncClient,
    source_url: str,
    topic: str | None,
    *,
    max_bytes: int = MAX_DISCOVERY_BYTES,
    max_hops: int = MAX_HOPS,
) -> TopicEndpoints:
    """Find ``topic``'s endpoints from any ResourceSync URL of the Source (module docstring).

    With ``topic`` None the Source must have exactly one topic; otherwise the error lists
    them. ``client`` should follow redirects.
    """
    walk = _Walk(client, max_bytes, max_hops)
    found = await walk.locate(source_url)
    lists = await walk.capability_lists(found)
    return choose([_endpoints(item, description) for item, description in lists], topic)
