"""Baseline synchronisation (Z39.99 §4.1, §10, §11): the Source's current state.

From a Resource List — or its index, part by part — or, when the Source offers one, from a
Resource Dump: ZIP packages whose manifests say which member is which resource. Every
resource is verified (length, every hash) as any other change; the list's ``at`` (the earliest
of the parts') is where incremental sync starts (§10.1: changes after ``at`` may be missing
from the list).
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rspush.remote.reader import DocumentReader
from rspush.resourcesync import Capability, Document, Entry

from .changes import Channel, ResourceChange, from_entry
from .dump import PACKAGE_ERRORS, DumpError, extract_member, open_package, read_manifest
from .errors import SourceError
from .fetch import Fetched, Fetcher, check

log = logging.getLogger("rs_subscribe")

MAX_PARTS = 10_000
_MAX_INFLATION = 1100


@dataclass
class BaselineSource:
    """A Resource List (or Resource Dump) read lazily, part by part."""

    reader: DocumentReader
    url: str
    first: Document
    at: datetime | None
    total: int | None
    """Entries in all parts, when known up front (a single list), for progress bars."""


async def open_resource_list(reader: DocumentReader, url: str) -> BaselineSource:
    document = await reader.get(url)
    assert document is not None
    if document.md.capability not in (Capability.RESOURCELIST, Capability.RESOURCEDUMP):
        raise SourceError(f"{url} is a {document.type}, not a Resource List or Dump")
    if document.is_index and len(document.entries) > MAX_PARTS:
        raise SourceError(f"{url}: an index of more than {MAX_PARTS} parts")
    total = None if document.is_index else len(document.entries)
    return BaselineSource(reader, url, document, document.md.at, total)


async def resource_list_changes(
    source: BaselineSource, *, fallback_time: datetime | None = None
) -> AsyncIterator[ResourceChange]:
    """Each resource as a ``created`` change at its ``lastmod`` (else the list's ``at``,
    else ``fallback_time``: when the agent started reading a list that gives neither)."""
    parts = [source.first] if not source.first.is_index else None
    if parts is None:
        for entry in source.first.entries:
            part = await source.reader.get(entry.loc)
            assert part is not None
            if part.md.capability != Capability.RESOURCELIST or part.is_index:
                raise SourceError(f"{entry.loc}: not a Resource List part")
            if part.md.at is not None and (source.at is None or part.md.at < source.at):
                source.at = part.md.at
            for change in _entries(part.entries, source.at or fallback_time):
                yield change
        return
    for change in _entries(source.first.entries, source.at or fallback_time):
        yield change


def _entries(entries: tuple[Entry, ...], at: datetime | None) -> list[ResourceChange]:
    changes = []
    for entry in entries:
        change = from_entry(entry, Channel.BASELINE, default_time=at)
        if change is None:
            log.warning("skipping %s: no time and no list 'at' to date it", entry.loc)
            continue
        changes.append(change)
    return changes


async def dump_changes(
    source: BaselineSource,
    fetcher: Fetcher,
    *,
    max_bytes: int,
    on_package: Callable[[str], None] | None = None,
) -> AsyncIterator[tuple[ResourceChange, Fetched | None]]:
    """Each resource of each package with its verified bytes in a temp file (§11); a
    member that fails verification comes without bytes, to be fetched from the Source."""
    for package_entry in source.first.entries:
        package = from_entry(package_entry, Channel.BASELINE, default_time=source.at)
        if package is None:
            raise SourceError(f"{package_entry.loc}: a dump package without a time")
        fetched = await fetcher.fetch(package)
        inflated = 0
        try:
            if on_package is not None:
                on_package(package_entry.loc)
            with open_package(fetched.path, package_name=package_entry.loc) as archive:
                for member in read_manifest(archive, package_name=package_entry.loc):
                    change = from_entry(member.entry, Channel.BASELINE, default_time=source.at)
                    if change is None:
                        continue
                    fd, name = tempfile.mkstemp(dir=fetcher.temp_dir, suffix=".part")
                    os.close(fd)
                    target = Path(name)
                    try:
                        length, digests = await asyncio.to_thread(
                            extract_member, archive, member, target, max_bytes=max_bytes
                        )
                        problem = check(change, length, digests)
                    except DumpError as exc:
                        problem = str(exc)
                    except BaseException:
                        target.unlink(missing_ok=True)
                        raise
                    if problem is not None:
                        target.unlink(missing_ok=True)
                        log.warning(
                            "%s in %s: %s; fetching it from the Source instead",
                            member.path,
                            package_entry.loc,
                            problem,
                        )
                        yield change, None
                        continue
                    inflated += length
                    if inflated > _MAX_INFLATION * max(fetched.length, 1):
                        # DEFLATE cannot shrink data more than ~1,032:1; past that, the
                        # manifest points many entries at one member (a ZIP bomb).
                        target.unlink(missing_ok=True)
                        raise DumpError(
                            f"inflates past {_MAX_INFLATION}x its size", package=package_entry.loc
                        )
                    yield change, Fetched(target, length, digests.get("sha256", b"").hex())
        except DumpError:
            raise  # already names the package
        except PACKAGE_ERRORS as exc:
            raise SourceError(f"Resource Dump package {package_entry.loc}: {exc}") from exc
        finally:
            fetched.path.unlink(missing_ok=True)
