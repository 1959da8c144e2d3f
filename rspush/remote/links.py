"""Pure parsing for discovery (Z39.99 §6): HTTP ``Link`` headers (RFC 8288), HTML
``<link rel="resourcesync">``, ``robots.txt`` ``Sitemap:`` lines, topic names, and the order
in which candidate URLs for a SOURCE_URL are tried. No I/O: :mod:`rspush.remote.discovery`
fetches and follows."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urljoin, urlsplit

from lxml import etree
from lxml import html as lxml_html

WELL_KNOWN: Final = "/.well-known/resourcesync"
ROBOTS: Final = "/robots.txt"
RESOURCESYNC_REL: Final = "resourcesync"  # Z39.99 §6.3.3
MAX_PAGE_BYTES: Final = 1024 * 1024  # of an HTML page or robots.txt that is read


@dataclass(frozen=True, slots=True)
class HeaderLink:
    """One link of an HTTP ``Link`` header: absolute target, lower-cased relation types."""

    target: str
    rels: frozenset[str]


_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_LINK_VALUE = re.compile(rf"\s*<([^>]*)>((?:\s*;\s*{_TOKEN}\s*(?:=\s*(?:{_QUOTED}|[^\s;,\"]*))?)*)")
_LINK_PARAM = re.compile(rf"\s*;\s*({_TOKEN})\s*(?:=\s*({_QUOTED}|[^\s;,\"]*))?")
_ESCAPE = re.compile(r"\\(.)")


def parse_links(values: Iterable[str], base: str) -> list[HeaderLink]:
    """The links of ``Link`` header values (RFC 8288 §3), targets resolved against ``base``.

    A value may hold several comma-separated links; ``rel`` may be quoted and hold several
    space-separated types; only a parameter's first occurrence counts (§3.3). Links with an
    ``anchor`` are about another resource and are left out. A malformed remainder is
    skipped. (httpx's ``Response.links`` keys links by the raw ``rel`` string, so it loses
    repeated relations and multi-type ``rel`` values.)
    """
    links = []
    for value in values:
        pos = 0
        while (match := _LINK_VALUE.match(value, pos)) is not None:
            params: dict[str, str] = {}
            for name, raw in _LINK_PARAM.findall(match.group(2)):
                if raw.startswith('"'):
                    raw = _ESCAPE.sub(r"\1", raw[1:-1])
                params.setdefault(name.lower(), raw)
            rels = frozenset(params.get("rel", "").lower().split())
            target = join_url(base, match.group(1).strip(), ())
            if rels and target is not None and "anchor" not in params:
                links.append(HeaderLink(target, rels))
            comma = value.find(",", match.end())
            if comma < 0:
                break
            pos = comma + 1
    return links


def html_resourcesync_links(page: bytes, page_url: str) -> list[str]:
    """Targets of ``<link rel="resourcesync" href>`` in an HTML page (§6.3.3), resolved
    against ``<base href>`` or the page URL. Reads at most :data:`MAX_PAGE_BYTES`."""
    parser = lxml_html.HTMLParser(
        no_network=True, remove_comments=True, remove_pis=True, huge_tree=False
    )
    try:
        root = lxml_html.document_fromstring(page[:MAX_PAGE_BYTES], parser=parser)
    except (etree.LxmlError, ValueError):
        return []
    base = page_url
    for element in root.iter("base"):
        href = element.get("href")
        if href:
            base = join_url(page_url, href.strip()) or page_url
            break
    targets = []
    for element in root.iter("link"):
        href = element.get("href")
        if href and RESOURCESYNC_REL in (element.get("rel") or "").lower().split():
            target = join_url(base, href.strip())
            if target is not None:
                targets.append(target)
    return unique(targets)


def robots_sitemaps(robots: bytes, robots_url: str) -> list[str]:
    """The ``Sitemap:`` URLs of a robots.txt (§6.3.4; RFC 9309 §2.2.4 allows other records)."""
    sitemaps = []
    for line in robots[:MAX_PAGE_BYTES].decode("utf-8", errors="replace").splitlines():
        name, colon, value = line.split("#", 1)[0].partition(":")
        if colon and name.strip().lower() == "sitemap" and value.strip():
            target = join_url(robots_url, value.strip())
            if target is not None:
                sitemaps.append(target)
    return unique(sitemaps)


def topic_name(capability_list: str, notification_loc: str | None = None) -> str:
    """A topic's name, never empty: the last path segment of its change-notification topic
    URI; for a Source without one, the Capability List's directory name
    (``/dataset1/capabilitylist.xml`` → ``dataset1``); for a Capability List at the root, its
    file name without ``.xml`` (Example 12's ``/capabilitylist1.xml`` → ``capabilitylist1``);
    else the host."""
    if notification_loc:
        name = url_part(notification_loc).rstrip("/").rsplit("/", 1)[-1]
        if name:
            return name
    directory, _, file = url_part(capability_list).rpartition("/")
    name = directory.rsplit("/", 1)[-1] or file.removesuffix(".xml")
    return name or url_part(capability_list, "hostname") or capability_list or "default"


def url_part(url: str, part: str = "path") -> str:
    try:
        return str(getattr(urlsplit(url), part) or "")
    except ValueError:
        return ""


WEB_SCHEMES: Final = ("http", "https")


def join_url(base: str, href: str, schemes: tuple[str, ...] = WEB_SCHEMES) -> str | None:
    """``href`` made absolute, without fragment; None unless it is a valid URL with a host
    and one of ``schemes`` (any scheme when empty)."""
    try:
        url = urljoin(base, href)
        parts = urlsplit(url)
    except ValueError:
        return None
    if (schemes and parts.scheme not in schemes) or not parts.hostname:
        return None
    return url.partition("#")[0]


def unique(urls: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(urls))


def candidate_urls(url: str) -> list[tuple[str, str]]:
    """The candidates to try for a SOURCE_URL, in order, as (kind, URL)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    robots = ("robots", origin + ROBOTS)
    path = parts.path.rstrip("/")
    if not path and not parts.query:
        return [("page", origin + WELL_KNOWN), ("page", origin + "/"), robots]
    plan = [("page", url)]
    directory_like = "." not in path.rsplit("/", 1)[-1] and not path.endswith(WELL_KNOWN)
    if directory_like and not parts.query:
        plan.append(("page", origin + path + WELL_KNOWN))
    plan += [("page", origin + WELL_KNOWN), robots]
    return list(dict.fromkeys(plan))
