"""Finding a topic's Capability List and push endpoint from a Source URL (Z39.99 §6.3).

Accepts a hub or Source base URL, its ``/.well-known/resourcesync``, or a Capability List.
The push endpoint comes from the change-notification entry's ``rs:ln rel="urn:rspush:websocket"``
or, failing that, the same relation in the HTTP ``Link`` header (docs/protocol.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from hub.push.protocol import PUSH_REL
from resourcesync import Capability, Document, DocumentError, DocumentType, parse_document

WELL_KNOWN = "/.well-known/resourcesync"


class DiscoveryError(Exception):
    """The Source could not be discovered; the message says what was missing."""


@dataclass(frozen=True)
class TopicEndpoints:
    topic: str
    capability_list: str
    change_list: str | None
    change_list_archive: str | None
    resource_list: str | None
    push_url: str | None


def _topic_name(topic_uri: str) -> str:
    return urlsplit(topic_uri).path.rstrip("/").rsplit("/", 1)[-1]


def _link_header(reply: httpx.Response, rel: str) -> str | None:
    for link in reply.headers.get_list("link"):
        for part in link.split(","):
            target, _, params = part.partition(";")
            if f'rel="{rel}"' in params.replace(" ", "") or f"rel={rel}" in params:
                return target.strip().strip("<>")
    return None


async def _get(client: httpx.AsyncClient, url: str) -> httpx.Response:
    try:
        reply = await client.get(url)
    except httpx.HTTPError as exc:
        raise DiscoveryError(f"GET {url}: {exc}") from exc
    if reply.status_code != 200:
        raise DiscoveryError(f"GET {url}: HTTP {reply.status_code}")
    return reply


async def discover(client: httpx.AsyncClient, source_url: str, topic: str | None) -> TopicEndpoints:
    """Follow well-known → Source Description → Capability List for ``topic``.

    With ``topic`` None the Source must have exactly one topic; otherwise the error lists
    them.
    """
    url = source_url.rstrip("/")
    reply = await _get(client, url if url.endswith((".xml", WELL_KNOWN)) else url + WELL_KNOWN)
    document = _parse(reply)
    if document.type is DocumentType.CAPABILITY_LIST:
        return _endpoints(reply, document_url=str(reply.url), document=document)
    if document.type is not DocumentType.SOURCE_DESCRIPTION:
        raise DiscoveryError(f"{reply.url} is a {document.type}, not a Source Description")
    lists = [e.loc for e in document.entries]
    chosen: list[tuple[httpx.Response, str]] = []
    names: list[str] = []
    for capability_url in lists:
        cap_reply = await _get(client, capability_url)
        endpoints = _endpoints(cap_reply, capability_url, _parse(cap_reply))
        names.append(endpoints.topic)
        if topic is None or endpoints.topic == topic:
            chosen.append((cap_reply, capability_url))
    if topic is not None and not chosen:
        raise DiscoveryError(f"no topic {topic!r}; the Source has: {', '.join(names) or 'none'}")
    if len(chosen) != 1:
        raise DiscoveryError(
            f"the Source has {len(chosen)} topics ({', '.join(names)}): choose one with --topic"
        )
    cap_reply, capability_url = chosen[0]
    return _endpoints(cap_reply, capability_url, _parse(cap_reply))


def _parse(reply: httpx.Response) -> Document:
    try:
        return parse_document(reply.content)
    except DocumentError as exc:
        raise DiscoveryError(f"{reply.url}: {exc}") from exc


def _endpoints(reply: httpx.Response, document_url: str, document: Document) -> TopicEndpoints:
    by_capability = {e.md.capability: e for e in document.entries if e.md is not None}
    notification = by_capability.get(Capability.CHANGE_NOTIFICATION) or by_capability.get(
        Capability.CHANGELIST_NOTIFICATION
    )
    push = None
    topic = _topic_name(document_url.removesuffix("/capabilitylist.xml"))
    if notification is not None:
        topic = _topic_name(notification.loc)
        link = notification.link(PUSH_REL)
        push = link.href if link is not None else None
    push = push or _link_header(reply, PUSH_REL)

    def loc(capability: str) -> str | None:
        entry = by_capability.get(capability)
        return None if entry is None else entry.loc

    return TopicEndpoints(
        topic=topic,
        capability_list=document_url,
        change_list=loc(Capability.CHANGELIST),
        change_list_archive=loc(Capability.CHANGELIST_ARCHIVE),
        resource_list=loc(Capability.RESOURCELIST),
        push_url=push,
    )
