"""Requests to subscribers' callbacks, within the address policy and the hub's bounds.

- only ``http``/``https``; redirects are never followed (a 3xx is a failure);
- connect and read timeouts; at most ``max_response_bytes`` of an answer are read;
- the host is resolved here and every address it resolves to must pass the
  :class:`.addresses.AddressPolicy`; the request then goes to that checked address (the URL's
  host travels in ``Host`` and, for https, as the TLS server name), so a DNS answer that
  changes between the check and the connection (rebinding) cannot redirect it;
- requests to one host are bounded by a semaphore, all requests by another.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx

from .addresses import AddressPolicy

USER_AGENT = "rspush-websub-hub"


class CallbackRefused(Exception):
    """The callback may not be reached (scheme, or an address the policy refuses)."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def with_query(url: str, params: Mapping[str, str]) -> str:
    """``url`` with ``params`` appended to its query (WebSub §5.3: the callback's own query
    string is preserved)."""
    return url + ("&" if urlsplit(url).query else "?") + urlencode(params)


def callback_host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


class CallbackClient:
    def __init__(
        self,
        policy: AddressPolicy,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_response_bytes: int,
        per_host: int,
        total: int,
    ) -> None:
        self.policy = policy
        self.max_response_bytes = max_response_bytes
        self.per_host = per_host
        self._total = asyncio.Semaphore(total)
        self._hosts: dict[str, asyncio.Semaphore] = {}
        self._http = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the policy checks the target
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=total, max_keepalive_connections=total),
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def resolve(self, url: str) -> str:
        """The address to connect to for ``url``: every address its host resolves to must
        pass the policy (:class:`CallbackRefused` otherwise, or when it does not resolve)."""
        parts = urlsplit(url)
        host = parts.hostname
        if parts.scheme not in ("http", "https") or not host:
            raise CallbackRefused("callbacks must be http or https URLs")
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [str(literal)]
        else:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
            except OSError:
                raise CallbackRefused(f"callback host {host!r} does not resolve") from None
            addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        refused = [a for a in addresses if not self.policy.permits(a.split("%")[0])]
        if refused or not addresses:
            raise CallbackRefused(f"callback host {host!r} resolves to an address not allowed")
        return addresses[0]

    def _host_slot(self, host: str) -> asyncio.Semaphore:
        slot = self._hosts.get(host)
        if slot is None:
            slot = self._hosts[host] = asyncio.Semaphore(self.per_host)
        return slot

    @asynccontextmanager
    async def _pinned(self, url: str) -> AsyncIterator[tuple[str, dict[str, str], dict[str, str]]]:
        """(URL with the checked address, Host header, request extensions), within the
        per-host and total bounds."""
        address = await self.resolve(url)
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{address}]" if ":" in address else address
        if parts.port is not None:
            netloc += f":{parts.port}"
        pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        host_header = parts.netloc.rpartition("@")[2]
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        async with self._host_slot(host.lower()), self._total:
            yield pinned, {"Host": host_header}, extensions

    async def _exchange(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None
    ) -> Answer:
        async with self._pinned(url) as (pinned, host, extensions):
            request = self._http.build_request(
                method,
                pinned,
                headers={**headers, **host},
                content=content,
                extensions=extensions,
            )
            response = await self._http.send(request, stream=True)
            try:
                body = bytearray()
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) >= self.max_response_bytes:
                        break
                return Answer(response.status_code, bytes(body[: self.max_response_bytes]))
            finally:
                await response.aclose()

    async def get(self, url: str, params: Mapping[str, str]) -> Answer:
        """GET ``url`` with ``params`` added to its query (verification of intent)."""
        return await self._exchange("GET", with_query(url, params), {}, None)

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> Answer:
        return await self._exchange("POST", url, headers, body)


REQUEST_ERRORS = (httpx.HTTPError, CallbackRefused, OSError)
"""What a request to a callback may raise: each means the request failed."""
