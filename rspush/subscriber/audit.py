"""``rs-subscribe audit``: compare the mirror with the Source's Resource List (Z39.99 §4.1
"audit"), and with ``--repair`` make it equal.

*missing*: listed by the Source, no file here; *different*: the file's length or a hash
differs from the list's; *extra*: a file here the Source does not list (or no mapping turns
into a URI). Files under ``.rs-subscribe/`` are the agent's own and never count.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from rspush.remote.reader import DocumentReader

from .appliers import FilesystemApplier
from .baseline import open_resource_list, resource_list_changes
from .changes import Channel, ResourceChange
from .checkpoint import Checkpoint
from .config import AgentConfig
from .decide import ResourceState
from .errors import SourceError, SubscriberError, UnmappedURIError
from .fetch import Fetcher, check
from .mapping import STATE_DIR, UriMap
from .progress import LogReporter, Reporter
from .wiring import fetcher, find_topic, http_client, open_state, uri_map


@dataclass
class AuditReport:
    listed: int = 0
    missing: list[str] = field(default_factory=list)
    different: list[tuple[str, str]] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    unmapped: list[tuple[str, str]] = field(default_factory=list)
    repaired: int = 0
    repair_failures: list[str] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        return not (self.missing or self.different or self.extra or self.unmapped)

    def as_json(self) -> dict[str, Any]:
        return {
            "listed": self.listed,
            "missing": self.missing,
            "different": [{"uri": u, "problem": p} for u, p in self.different],
            "extra": self.extra,
            "unmapped": [{"uri": u, "problem": p} for u, p in self.unmapped],
            "repaired": self.repaired,
            "repair_failures": self.repair_failures,
        }

    def lines(self, *, repair: bool) -> list[str]:
        """The report as text: a summary line, then one line per problem."""
        summary = (
            f"{self.listed} listed, {len(self.missing)} missing, "
            f"{len(self.different)} different, {len(self.extra)} extra, "
            f"{len(self.unmapped)} unmapped" + (f"; {self.repaired} repaired" if repair else "")
        )
        return [
            summary,
            *(f"missing   {uri}" for uri in self.missing),
            *(f"different {uri}: {problem}" for uri, problem in self.different),
            *(f"extra     {path}" for path in self.extra),
            *(f"unmapped  {uri}: {problem}" for uri, problem in self.unmapped),
            *(f"not repaired: {failure}" for failure in self.repair_failures),
        ]


def file_digests(path: Path, names: set[str]) -> tuple[int, dict[str, bytes]]:
    hashers = {name: hashlib.new(name) for name in names}
    length = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            length += len(chunk)
            for hasher in hashers.values():
                hasher.update(chunk)
    return length, {name: h.digest() for name, h in hashers.items()}


def _local_files(dest: Path) -> list[PurePosixPath]:
    found: list[PurePosixPath] = []
    for root, dirs, files in os.walk(dest):
        relative_root = Path(root).relative_to(dest)
        if relative_root == Path("."):
            dirs[:] = [d for d in dirs if d != STATE_DIR]
        found.extend(PurePosixPath(relative_root.as_posix(), name) for name in files)
    return [PurePosixPath(*p.parts) for p in found]


async def audit(
    config: AgentConfig, *, repair: bool = False, reporter: Reporter | None = None
) -> AuditReport:
    reporter = reporter or LogReporter()
    report = AuditReport()
    async with http_client(config) as client:
        endpoints = await find_topic(client, config)
        if endpoints.resource_list is None:
            raise SourceError(
                f"{endpoints.capability_list} offers no Resource List to audit against"
            )
        mapping = uri_map(config, endpoints)
        reader = DocumentReader(client, limits=config.document_limits)
        source = await open_resource_list(reader, endpoints.resource_list)
        listed: dict[PurePosixPath, ResourceChange] = {}
        phase = reporter.phase("audit", source.total)
        try:
            async for change in resource_list_changes(source):
                if not config.change_filter.wants(change):
                    continue
                report.listed += 1
                try:
                    relative = mapping.path_for(change.uri)
                except UnmappedURIError as exc:
                    report.unmapped.append((change.uri, exc.reason))
                    continue
                listed[relative] = change
                path = config.dest.joinpath(*relative.parts)
                if not path.is_file():
                    report.missing.append(change.uri)
                else:
                    names = {n for h in change.hashes if (n := h.hashlib_name) is not None}
                    length, digests = await asyncio.to_thread(file_digests, path, names)
                    problem = check(change, length, digests)
                    if problem is not None:
                        report.different.append((change.uri, problem))
                phase.advance()
        finally:
            phase.close()
        local = await asyncio.to_thread(_local_files, config.dest)
        report.extra = sorted(str(p) for p in local if p not in listed)
        if repair and not report.in_sync:
            with open_state(config, endpoints) as checkpoint:
                fetch = fetcher(config, client, mapping)
                await _repair(config, fetch, checkpoint, mapping, listed, report)
    return report


async def _repair(
    config: AgentConfig,
    fetch: Fetcher,
    checkpoint: Checkpoint,
    mapping: UriMap,
    listed: dict[PurePosixPath, ResourceChange],
    report: AuditReport,
) -> None:
    """Fetch what is missing or different, delete what is extra, and record it all in the
    checkpoint (so a later ``run`` agrees with the repaired mirror)."""
    by_uri = {change.uri: (relative, change) for relative, change in listed.items()}
    applier = FilesystemApplier(config.dest)
    now = datetime.now(UTC)
    for uri in [*report.missing, *(u for u, _ in report.different)]:
        relative, change = by_uri[uri]
        change = ResourceChange(
            uri,
            change.change,
            change.time,
            Channel.AUDIT,
            change.length,
            change.hashes,
            change.media_type,
            change.links,
        )
        try:
            fetched = await fetch.fetch(change)
            try:
                await applier.apply(change, relative, fetched.path)
            finally:
                fetched.path.unlink(missing_ok=True)
        except (SubscriberError, OSError) as exc:
            report.repair_failures.append(f"{uri}: {exc}")
            continue
        hash_text = change.hash_text or f"sha256:{fetched.sha256}"
        checkpoint.record(
            change,
            ResourceState(uri, change.time, "created", fetched.length, hash_text, str(relative)),
            None,
            now=now,
        )
        report.repaired += 1
    for extra in report.extra:
        path = config.dest / extra
        path.unlink(missing_ok=True)
        extra_uri = mapping.uri_for(PurePosixPath(extra))
        if extra_uri is not None:
            checkpoint.forget(extra_uri)
        report.repaired += 1
