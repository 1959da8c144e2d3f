"""The composition root: the parts of an agent (``run``, ``baseline``) or of an ``audit``,
built from an :class:`~rspush.subscriber.config.AgentConfig` — one HTTP client, the topic's
endpoints (discovery), its checkpoint (locked), the URI map, the fetcher, the document
reader, the Change Lists and the mirror that applies changes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import httpx

from rspush.remote.discovery import TopicEndpoints, discover
from rspush.remote.reader import DocumentReader

from .appliers import Applier, FilesystemApplier, NullApplier
from .backoff import Backoff
from .changelists import ChangeLists
from .changes import Outcome
from .checkpoint import Checkpoint
from .config import USER_AGENT, AgentConfig
from .errors import DiscoveryError
from .fetch import Fetcher, clear_temp
from .mapping import UriMap
from .mirror import EventSink, Mirror
from .redirects import RedirectPolicy
from .source_auth import source_auth
from .stopping import sleep_unless_stopped, unless_stopped

log = logging.getLogger("rs_subscribe")

ACCEPT_ENCODING = "gzip, deflate"
"""What the agent accepts (httpx decodes both). Said explicitly: an installed ``brotli`` or
``zstandard`` package would otherwise widen httpx's default."""


@asynccontextmanager
async def http_client(config: AgentConfig) -> AsyncIterator[httpx.AsyncClient]:
    # gzip, decoded by httpx: documents shrink 5-6x on the wire (docs/subscriber.md); every
    # size cap and hash applies to the decoded bytes (:mod:`.reader`, :mod:`.fetch`).
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING}
    async with httpx.AsyncClient(
        timeout=config.http_timeout,
        follow_redirects=True,
        headers=headers,
        auth=source_auth(config.source_url, config.token),
    ) as client:
        yield client


async def find_topic(client: httpx.AsyncClient, config: AgentConfig) -> TopicEndpoints:
    return await discover(client, config.source_url, config.topic)


async def find_topic_patiently(
    client: httpx.AsyncClient, config: AgentConfig, stopped: asyncio.Event
) -> TopicEndpoints | None:
    """:func:`find_topic`, tried again with backoff while the Source is unreachable or
    answers 5xx (a transient :class:`DiscoveryError`) — an agent may start before its hub;
    None when ``stopped`` is set first. A configuration error (a 404 everywhere, documents
    that are not ResourceSync) is raised at once."""
    backoff = Backoff(config.backoff_initial, config.backoff_max)
    while not stopped.is_set():
        try:
            return await unless_stopped(find_topic(client, config), stopped)
        except DiscoveryError as exc:
            if not exc.transient:
                raise
            delay = backoff.next()
            log.warning("discovery: %s; trying again in %.1f s", exc, delay)
        await sleep_unless_stopped(stopped, delay)
    return None


def uri_map(config: AgentConfig, endpoints: TopicEndpoints) -> UriMap:
    """The ``--map`` pairs; by default the Source's base URI onto the destination."""
    return UriMap.build(config.maps or [(endpoints.base_uri, "")])


@contextmanager
def open_state(config: AgentConfig, endpoints: TopicEndpoints) -> Iterator[Checkpoint]:
    """The topic's checkpoint, locked (:class:`~rspush.subscriber.errors.StateLockedError` if
    another agent holds it); what a killed agent left in the temp directory is cleared — only
    now, under the lock."""
    config.dest.mkdir(parents=True, exist_ok=True)
    with Checkpoint(config.state_path, endpoints.capability_list, endpoints.topic) as checkpoint:
        clear_temp(config.temp_dir)
        yield checkpoint


def fetcher(config: AgentConfig, client: httpx.AsyncClient, mapping: UriMap) -> Fetcher:
    return Fetcher(
        client,
        config.temp_dir,
        tries=config.tries,
        max_bytes=config.max_bytes,
        limits=config.transfer_limits,
        redirects=RedirectPolicy(mapping, config.change_filter),
    )


def default_applier(config: AgentConfig) -> Applier:
    if not config.fetch:
        return NullApplier()  # metadata-only: there are no bytes to write
    return FilesystemApplier(config.dest, keep_deleted=config.keep_deleted)


@dataclass(frozen=True)
class AgentParts:
    endpoints: TopicEndpoints
    fetcher: Fetcher
    reader: DocumentReader
    lists: ChangeLists
    mirror: Mirror


@asynccontextmanager
async def agent_parts(
    config: AgentConfig,
    *,
    applier: Applier | None,
    events: EventSink | None,
    on_outcome: Callable[[Outcome], None] | None,
    watermark_held: Callable[[], bool],
    stopped: asyncio.Event,
) -> AsyncIterator[AgentParts | None]:
    """Everything an agent runs with, for as long as the block lasts (then the checkpoint is
    closed and unlocked, and the HTTP client closed); None when ``stopped`` was set before
    the Source could be discovered."""
    async with http_client(config) as client:
        endpoints = await find_topic_patiently(client, config, stopped)
        if endpoints is None:
            yield None
            return
        with open_state(config, endpoints) as checkpoint:
            mapping = uri_map(config, endpoints)
            fetch = fetcher(config, client, mapping)
            reader = DocumentReader(client, limits=config.document_limits)
            mirror = Mirror(
                checkpoint,
                mapping,
                applier or default_applier(config),
                fetch if config.fetch else None,
                change_filter=config.change_filter,
                events=events,
                on_outcome=on_outcome,
                concurrency=config.concurrency,
                watermark_held=watermark_held,
            )
            lists = ChangeLists(
                reader,
                capability_list=endpoints.capability_list,
                change_list=endpoints.change_list,
                archive=endpoints.change_list_archive,
                on_unplaced=lambda u: mirror.report_unplaced(u.uri, u.change, u.reason),
            )
            yield AgentParts(endpoints, fetch, reader, lists, mirror)
