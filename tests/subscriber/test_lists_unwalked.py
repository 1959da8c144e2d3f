"""A catch-up's lists are parsed, turned into changes and freed in one pause of the cyclic
collector: no collection runs while a parsed list is alive, so its objects are never walked
(reference counting frees them). And the reader's two steps (read, then parse) behave as
its one: a conditional read's validators are kept only once the bytes parse.

A real static Source on 127.0.0.1 (ETag, 304) and the agent's own reader and walker."""

from __future__ import annotations

import gc
import traceback
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import pytest

from rspush.remote.errors import SourceError
from rspush.remote.reader import DocumentReader
from rspush.subscriber.changelists import ChangeLists
from rspush.subscriber.changes import Channel
from tests.support.static_source import (
    T0,
    StaticSource,
    capability_list,
    changed,
    running_source,
    time_of,
    urlset,
)

ENTRIES = 3000
"""Enough entries that a collection would run as soon as the parser lets it (every 700
allocations of tracked objects)."""


def a_list(source: StaticSource, first: int, count: int, **attributes: str) -> bytes:
    entries = "".join(
        changed(source, f"/r{n}", "updated", f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}Z", b"x")
        for n in range(first, first + count)
    )
    return urlset("changelist", entries, **attributes)


@asynccontextmanager
async def reader_of(source: StaticSource) -> AsyncIterator[DocumentReader]:
    async with httpx.AsyncClient() as client:
        yield DocumentReader(client)


@contextmanager
def collections_during_a_parse() -> Iterator[list[str]]:
    """Every collection that starts while a list of changes (not the archive or Capability
    List naming them) is being parsed or turned into changes, named by what was running."""
    seen: list[str] = []

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase != "start":
            return
        running = [frame.name for frame in traceback.extract_stack()]
        if "_lists" in running:
            return  # reading what names the lists
        if {"parse_chunks", "dated_changes"} & set(running):
            seen.append(f"generation {info['generation']} in {' < '.join(running[-4:])}")

    gc.callbacks.append(watch)
    try:
        yield seen
    finally:
        gc.callbacks.remove(watch)


async def test_no_collection_walks_a_list_being_read(tmp_path: Any) -> None:
    async with running_source() as source, reader_of(source) as reader:
        capability_list(source, {"changelist-archive": "/archive.xml", "changelist": "/open.xml"})
        source.put_document(
            "/archive.xml",
            urlset(
                "changelist-archive",
                f"<url><loc>{source.uri('/closed.xml')}</loc>"
                f'<rs:md from="{T0}" until="2026-01-01T00:30:00Z"/></url>',
            ),
        )
        source.put_document(
            "/closed.xml", a_list(source, 0, ENTRIES, from_=T0, until="2026-01-01T00:59:59Z")
        )
        source.put_document("/open.xml", a_list(source, ENTRIES, 10, from_=T0))
        lists = ChangeLists(
            reader,
            capability_list=source.uri("/capabilitylist.xml"),
            change_list=None,
            archive=source.uri("/archive.xml"),
        )
        gc.collect()
        with collections_during_a_parse() as seen:
            read = [changes async for changes in lists.since_by_list(time_of(T0), Channel.ARCHIVE)]
        assert [len(changes) for changes in read] == [ENTRIES, 10]
        assert read[0][0].uri == source.uri("/r0") and read[1][-1].uri == source.uri("/r3009")
        assert gc.isenabled()
        assert seen == []


async def test_validators_are_kept_only_once_the_bytes_parse() -> None:
    async with running_source() as source, reader_of(source) as reader:
        url = source.uri("/open.xml")
        source.put_document("/open.xml", b"<not-a-document")
        body = await reader.read(url, conditional=True)
        assert body is not None and body.validators is not None
        with pytest.raises(SourceError):
            reader.parse(body)
        # Nothing was kept: the next conditional read gets the bytes again, not a 304.
        again = await reader.read(url, conditional=True)
        assert again is not None
        source.put_document("/open.xml", a_list(source, 0, 2, from_=T0))
        document = await reader.get(url, conditional=True)
        assert document is not None and len(document.entries) == 2
        assert await reader.read(url, conditional=True) is None  # kept: 304
        assert await reader.get(url, conditional=True) is None
        assert reader.not_modified == 2
