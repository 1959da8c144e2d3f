"""HTTP for bridges: one client per bridge, with the limits a poller of someone else's server
needs.

- a timeout per request (connect and each read) and a deadline for the whole body;
- a cap on the body: read at most ``max_bytes`` off the wire, and a gzipped body (by
  ``Content-Encoding: gzip`` or by its magic bytes, as sitemaps are often served ``.xml.gz``)
  inflated under the document layer's caps (:mod:`rspush.resourcesync.compression`: the size
  cap and the inflation-ratio cap against decompression bombs);
- ``429`` and ``503`` raise :class:`.base.BridgeError` with the ``Retry-After`` delay
  (RFC 9110 §10.2.3: seconds or an HTTP date), which the runner honours;
- conditional GETs (RFC 9110 §13): with ``conditional=True`` the validators of the last
  ``200`` of the same URL are sent and a ``304`` returns None.

Remote targets on loopback are allowed: bridges are configured by the hub's operator.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

import httpx

from rspush.remote.retry import retry_after_s
from rspush.resourcesync import DocumentError
from rspush.resourcesync.compression import decompressed

from .base import BridgeError

MAX_REDIRECTS: Final = 5
USER_AGENT: Final = "rspush-bridge"


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    """The final URL (after redirects)."""
    content: bytes
    """The body, inflated if it was gzipped."""
    headers: httpx.Headers


class BridgeHttp:
    def __init__(self, *, timeout_s: float, max_bytes: int) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._validators: dict[str, tuple[str | None, str | None]] = {}
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            # Only encodings this module inflates under its caps.
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip"},
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def get(
        self, url: str, *, params: dict[str, str] | None = None, conditional: bool = False
    ) -> Fetched | None:
        """The body of ``url`` (None: ``304 Not Modified`` to a conditional GET)."""
        request = self.client.build_request("GET", url, params=params)
        key = str(request.url)
        if conditional and key in self._validators:
            etag, modified = self._validators[key]
            if etag:
                request.headers["If-None-Match"] = etag
            if modified:
                request.headers["If-Modified-Since"] = modified
        try:
            async with asyncio.timeout(self.timeout_s * 2):
                response = await self.client.send(request, stream=True)
                try:
                    raw = await self._read_capped(response)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise BridgeError(f"{_host(key)}: no complete answer within the timeout") from None
        except httpx.HTTPError as exc:
            raise BridgeError(f"{_host(key)}: {type(exc).__name__}") from None
        if response.status_code == 304:
            return None
        if response.status_code in (429, 503):
            raise BridgeError(
                f"{_host(key)}: HTTP {response.status_code}",
                retry_after_s=retry_after_s(response.headers.get("retry-after")),
            )
        if response.status_code != 200:
            raise BridgeError(f"{_host(key)}: HTTP {response.status_code}")
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip", "x-gzip"):
            raise BridgeError(f"{_host(key)}: unsupported Content-Encoding {encoding!r}")
        try:
            content = decompressed(raw, max_bytes=self.max_bytes)
        except DocumentError as exc:
            raise BridgeError(f"{_host(key)}: {exc}") from None
        if conditional:
            self._validators[key] = (
                response.headers.get("etag"),
                response.headers.get("last-modified"),
            )
        return Fetched(str(response.url), content, response.headers)

    async def _read_capped(self, response: httpx.Response) -> bytes:
        """The raw (still encoded) body, refused past ``max_bytes``."""
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise BridgeError(f"{_host(str(response.url))}: body over {self.max_bytes} bytes")
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > self.max_bytes:
                raise BridgeError(f"{_host(str(response.url))}: body over {self.max_bytes} bytes")
        return bytes(body)


def _host(url: str) -> str:
    """The remote named in messages: scheme, host and port (no query, which may hold keys)."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.host}{port}"
