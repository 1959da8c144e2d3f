"""Reading a Source's documents over HTTP: size-capped, parsed by the one hardened parser,
and conditional (ETag / Last-Modified) for the lists the agent polls. Each read has a deadline
(:mod:`rspush.remote.deadlines`); a Source that cannot be reached, answers 5xx (or 408,
429) or misses the deadline is a *transient* :class:`SourceError` — try again later — while
a 4xx or a document that is not ResourceSync is not.

Gzipped documents are read too: ``Content-Encoding: gzip`` is decoded by the HTTP client
(and its inflation bounded here), a gzip body (a ``.xml.gz`` Sitemap) by
:func:`rspush.resourcesync.compression.decompressed` — both under the document cap, which
applies to the uncompressed document."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from rspush.resourcesync import Document, DocumentError, parse_document
from rspush.resourcesync.compression import decompressed, inflation_exceeded
from rspush.resourcesync.namespaces import MAX_DOCUMENT_BYTES

from .deadlines import DOCUMENT_LIMITS, RateDeadline, TransferLimits
from .errors import SourceError

_TRANSIENT_STATUS = frozenset({408, 425, 429})


def transient_status(status: int) -> bool:
    """An HTTP status worth asking again for in a moment (a Source's outage, not its
    configuration)."""
    return status >= 500 or status in _TRANSIENT_STATUS


@dataclass(frozen=True, slots=True)
class _Validators:
    etag: str | None
    last_modified: str | None


@dataclass(frozen=True, slots=True)
class Body:
    """A document's bytes as :meth:`DocumentReader.read` got them, not parsed yet."""

    url: str
    data: bytes
    validators: _Validators | None
    """What a conditional read's next request sends (kept once the bytes parse); None for
    an unconditional read."""


class DocumentReader:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        max_bytes: int = MAX_DOCUMENT_BYTES,
        limits: TransferLimits = DOCUMENT_LIMITS,
    ) -> None:
        self.client = client
        self.max_bytes = max_bytes
        self.limits = limits
        self._validators: dict[str, _Validators] = {}
        self.requests = 0
        self.not_modified = 0

    async def get(self, url: str, *, conditional: bool = False) -> Document | None:
        """The document at ``url``; None when ``conditional`` and it has not changed since
        the last time (HTTP 304). Raises :class:`SourceError` for anything unusable."""
        body = await self.read(url, conditional=conditional)
        return None if body is None else self.parse(body)

    async def read(self, url: str, *, conditional: bool = False) -> Body | None:
        """:meth:`get` in two steps, this the first: the document's bytes, not parsed yet
        (:meth:`parse` them), so that a caller can parse them and use the document in one
        synchronous stretch. None when ``conditional`` and it has not changed (HTTP 304)."""
        headers = {}
        known = self._validators.get(url) if conditional else None
        if known is not None:
            if known.etag:
                headers["If-None-Match"] = known.etag
            if known.last_modified:
                headers["If-Modified-Since"] = known.last_modified
        self.requests += 1
        deadline = RateDeadline(self.limits)
        try:
            async with deadline, self.client.stream("GET", url, headers=headers) as reply:
                if reply.status_code == 304 and known is not None:
                    self.not_modified += 1
                    return None
                if reply.status_code != 200:
                    raise SourceError(
                        f"GET {url}: HTTP {reply.status_code}",
                        transient=transient_status(reply.status_code),
                    )
                body = bytearray()
                async for chunk in reply.aiter_bytes():
                    body += chunk
                    deadline.received(len(chunk))
                    if len(body) > self.max_bytes:
                        raise SourceError(f"GET {url}: larger than {self.max_bytes} bytes")
                    if inflation_exceeded(len(body), reply.num_bytes_downloaded):
                        raise SourceError(
                            f"GET {url}: its Content-Encoding inflates it past the allowed "
                            "ratio (a decompression bomb?)"
                        )
        except TimeoutError as exc:
            raise SourceError(f"GET {url}: {deadline.reason}", transient=True) from exc
        except httpx.HTTPError as exc:
            raise SourceError(f"GET {url}: {type(exc).__name__}: {exc}", transient=True) from exc
        validators = None
        if conditional:
            validators = _Validators(reply.headers.get("etag"), reply.headers.get("last-modified"))
        return Body(url, bytes(body), validators)

    def parse(self, body: Body) -> Document:
        """The document of bytes :meth:`read` returned. Raises :class:`SourceError` when they
        are not a usable document; once they are, a conditional read's validators are kept
        for the next one."""
        try:
            document = parse_document(decompressed(body.data, max_bytes=self.max_bytes))
        except DocumentError as exc:
            raise SourceError(f"{body.url}: {exc}") from exc
        if body.validators is not None:
            self._validators[body.url] = body.validators
        return document

    def forget(self, url: str) -> None:
        self._validators.pop(url, None)
