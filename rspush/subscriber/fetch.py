"""Fetching a resource into a temp file and checking it against what the Source announced.

Bytes are hashed while they stream to disk, with every algorithm the change names; the file
is handed on only when its length and every computable hash match (hex or base64 digests
alike). A mismatch is retried — the Source may have been caught mid-update — and then
reported; a mismatching file is deleted, never renamed into the mirror.

Content codings: the agent asks for ``gzip`` (RFC 9110 §12.5.3) and the HTTP client removes
it, so the length cap, the announced ``length`` and every hash apply to the decoded bytes —
the resource's own bitstream, which is what is written to the mirror. ResourceSync 1.1 §7
describes ``hash`` and ``length`` as those of the representation the URI returns, and names
any coding in a separate ``encoding`` attribute; a Source that gzips on the fly because a
client asked does so per request, so what it announces is the uncoded resource.

Every transfer has a deadline (:mod:`rspush.remote.deadlines`): a server that trickles is
cut off, the change fails with a timeout reason (retried later, not at once). Redirects are
followed here, hop by hop, only where :mod:`rspush.subscriber.redirects` allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from rspush.remote.deadlines import RateDeadline, TransferLimits
from rspush.resourcesync.hashes import DigestEncoding

from .changes import ResourceChange
from .errors import FetchError, RedirectRefusedError, SupersededError, VerificationError
from .redirects import MAX_REDIRECTS, RedirectPolicy

DEFAULT_TRIES = 3
DEFAULT_MAX_BYTES = 1 << 30
"""No single resource larger than this (1 GiB) is written; override with ``max_bytes``."""

_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Fetched:
    path: Path
    """A temp file inside the destination's state directory: rename it or delete it."""
    length: int
    sha256: str
    """Our own digest of the bytes, kept when the Source gave no hash."""


def check(change: ResourceChange, length: int, digests: dict[str, bytes]) -> str | None:
    """None when the bytes match the announcement, else what differs (pure)."""
    if change.length is not None and change.length != length:
        return f"length {length} != announced {change.length}"
    for value in change.hashes:
        name = value.hashlib_name
        if name is None or value.encoding is DigestEncoding.UNKNOWN:
            # An algorithm we cannot compute, or a digest neither hex nor base64 of the
            # algorithm's size: nothing we could check it against (never a rejection).
            continue
        if not value.matches_digest(digests[name]):
            return f"{value.algorithm} digest {digests[name].hex()} != announced {value.digest}"
    return None


def _too_large(max_bytes: int, reply: httpx.Response) -> str:
    coding = reply.headers.get("content-encoding", "identity").strip().lower()
    if coding in ("", "identity"):
        return f"larger than the {max_bytes}-byte limit"
    # The cap is on the decoded bytes: a small coded body cannot expand past it.
    return (
        f"larger than the {max_bytes}-byte limit once its Content-Encoding ({coding}) is "
        "decoded (a decompression bomb?)"
    )


def clear_temp(temp_dir: Path) -> int:
    """Delete what a killed agent left in its temp directory. Call it only while holding the
    state lock (another agent's downloads live in its own directory, under its own lock)."""
    removed = 0
    if temp_dir.is_dir():
        for leftover in temp_dir.glob("*.part"):
            leftover.unlink(missing_ok=True)
            removed += 1
    return removed


class Fetcher:
    def __init__(
        self,
        client: httpx.AsyncClient,
        temp_dir: Path,
        *,
        tries: int = DEFAULT_TRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        retry_delay: float = 0.5,
        limits: TransferLimits | None = None,
        redirects: RedirectPolicy | None = None,
    ) -> None:
        """``redirects``: which redirects to follow; None follows none (a redirect fails the
        change)."""
        self.client = client
        self.temp_dir = temp_dir
        self.tries = tries
        self.max_bytes = max_bytes
        self.retry_delay = retry_delay
        self.limits = limits or TransferLimits()
        self.redirects = redirects
        temp_dir.mkdir(parents=True, exist_ok=True)

    async def fetch(
        self, change: ResourceChange, superseded: Callable[[], bool] | None = None
    ) -> Fetched:
        """Download and verify; raise :class:`FetchError` / :class:`VerificationError` after
        ``tries`` attempts — or :class:`SupersededError` as soon as ``superseded()`` says a
        newer change of the resource has arrived (the bytes we got are probably its)."""
        for attempt in range(1, self.tries + 1):
            try:
                return await self._once(change)
            except FetchError as exc:
                if superseded is not None and superseded():
                    raise SupersededError(change.uri, exc.reason) from exc
                if not exc.transient or attempt == self.tries:
                    raise
                # Jittered backoff: a Source mid-update (or overloaded) gets time to settle.
                await asyncio.sleep(self.retry_delay * 2 ** (attempt - 1) * random.uniform(0.5, 1))
        raise AssertionError("unreachable")

    async def _once(self, change: ResourceChange) -> Fetched:
        names = {"sha256"} | {n for h in change.hashes if (n := h.hashlib_name) is not None}
        hashers = {name: hashlib.new(name) for name in names}
        fd, name = tempfile.mkstemp(dir=self.temp_dir, prefix="fetch-", suffix=".part")
        path = Path(name)
        ok = False
        try:
            length = 0
            deadline = RateDeadline(self.limits)
            with os.fdopen(fd, "wb") as out:
                try:
                    async with deadline, self._follow(change.uri) as reply:
                        if reply.status_code != 200:
                            raise FetchError(
                                change.uri,
                                f"HTTP {reply.status_code}",
                                transient=reply.status_code in _RETRY_STATUS,
                            )
                        async for chunk in reply.aiter_bytes():
                            length += len(chunk)
                            deadline.received(len(chunk))
                            if length > self.max_bytes:
                                raise FetchError(
                                    change.uri,
                                    _too_large(self.max_bytes, reply),
                                    transient=False,
                                )
                            for hasher in hashers.values():
                                hasher.update(chunk)
                            out.write(chunk)
                except TimeoutError as exc:
                    # Not tried again at once: a server this slow would only hold the
                    # change (and a shutdown) as long again. The periodic retries get it.
                    raise FetchError(change.uri, deadline.reason, transient=False) from exc
                except httpx.HTTPError as exc:
                    raise FetchError(change.uri, f"{type(exc).__name__}: {exc}") from exc
            digests = {n: h.digest() for n, h in hashers.items()}
            problem = check(change, length, digests)
            if problem is not None:
                raise VerificationError(change.uri, problem)
            ok = True
            return Fetched(path, length, digests["sha256"].hex())
        finally:
            if not ok:
                path.unlink(missing_ok=True)

    @contextlib.asynccontextmanager
    async def _follow(self, uri: str) -> AsyncIterator[httpx.Response]:
        """The streamed response at the end of ``uri``'s redirects, each hop allowed by the
        policy first (:mod:`rspush.subscriber.redirects`)."""
        url = uri
        for _ in range(MAX_REDIRECTS + 1):
            async with self.client.stream("GET", url, follow_redirects=False) as reply:
                following = reply.next_request if reply.has_redirect_location else None
                if following is None:
                    yield reply
                    return
            target = str(following.url)
            if self.redirects is None:
                raise RedirectRefusedError(
                    uri, f"redirects to {target}; redirects are not followed"
                )
            await self.redirects.check(uri, target)
            url = target
        raise FetchError(uri, f"more than {MAX_REDIRECTS} redirects", transient=False)
