"""Gzipped copies of the served documents, made once per document version and kept in a
bounded in-process cache.

Why in this process and not in Redis beside the XML: every process can rebuild the same bytes
from the XML it already holds (gzip output is deterministic for one level and ``mtime=0``,
so ETags and bytes agree across processes), a cache hit then costs no round trip, and the
store stays the one door to Redis. The cache is a least-recently-used map bounded by the
bytes it holds (``[compression] cache_bytes``); each document path keeps only its latest
version, so an open Change List that changes on every append replaces its own entry instead
of pushing the closed lists out.

Levels (measured on hub-built Change Lists, see docs/benchmarks.md): level 1 makes a
1,000-entry list 5.4x smaller in about 1 ms, level 6 6.0x in about 2 ms. Documents that
change (the open Change List, Resource Lists, indexes) are compressed at
``[compression] level`` on the first request of each version; immutable ones (closed Change
Lists) once, at ``[compression] immutable_level``, for every later request. Bodies past
:data:`THREAD_BYTES` are compressed in a worker thread (zlib releases the GIL) so a
50,000-entry list does not hold up the event loop; concurrent requests for one version wait
for the one compression under way.
"""

from __future__ import annotations

import asyncio
import gzip
from collections import OrderedDict
from typing import Final

from .settings import DEFAULT_GZIP_CACHE_BYTES, DEFAULT_GZIP_IMMUTABLE_LEVEL, DEFAULT_GZIP_LEVEL

THREAD_BYTES: Final = 256 * 1024


def gzipped(body: bytes, level: int) -> bytes:
    """``body`` as a gzip member (RFC 1952) without a timestamp: the same bytes every time."""
    return gzip.compress(body, compresslevel=level, mtime=0)


class GzipCache:
    def __init__(
        self,
        *,
        level: int = DEFAULT_GZIP_LEVEL,
        immutable_level: int = DEFAULT_GZIP_IMMUTABLE_LEVEL,
        max_bytes: int = DEFAULT_GZIP_CACHE_BYTES,
    ) -> None:
        self.level = level
        self.immutable_level = immutable_level
        self.max_bytes = max_bytes
        self.bytes = 0
        self.compressions = 0
        """How many bodies this process compressed (tests and the status page read it)."""
        # path -> (version's ETag, gzipped body), least recently used first.
        self._entries: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._pending: dict[tuple[str, str], asyncio.Task[bytes]] = {}

    async def get(self, path: str, etag: str, body: bytes, *, immutable: bool) -> bytes:
        """The gzipped ``body`` of the document at ``path`` whose version is ``etag``."""
        entry = self._entries.get(path)
        if entry is not None and entry[0] == etag:
            self._entries.move_to_end(path)
            return entry[1]
        key = (path, etag)
        task = self._pending.get(key)
        if task is None:
            # A task of its own: a request that goes away does not cancel the compression
            # the others wait for.
            task = asyncio.create_task(self._compress(path, etag, body, immutable))
            self._pending[key] = task
            task.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(task)

    async def _compress(self, path: str, etag: str, body: bytes, immutable: bool) -> bytes:
        level = self.immutable_level if immutable else self.level
        if len(body) > THREAD_BYTES:
            packed = await asyncio.to_thread(gzipped, body, level)
        else:
            packed = gzipped(body, level)
        self.compressions += 1
        self._keep(path, etag, packed)
        return packed

    def _keep(self, path: str, etag: str, packed: bytes) -> None:
        old = self._entries.pop(path, None)
        if old is not None:
            self.bytes -= len(old[1])
        if len(packed) > self.max_bytes:
            return  # larger than the whole cache: served, not kept
        self._entries[path] = (etag, packed)
        self.bytes += len(packed)
        while self.bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.bytes -= len(evicted)
