"""Which redirects a resource fetch may follow.

A Source's resource may redirect (a CDN, a moved file), but the agent writes whatever the
last hop serves into the mirror: following a redirect to an internal service would copy
that service's answer into the Destination (server-side request forgery). So a hop is
followed only if the agent would fetch its target for its own sake:

- the target is covered by the same ``--map`` rules
  (:class:`~rspush.subscriber.mapping.UriMap`) and passes ``--include``/``--exclude``
  (:meth:`~rspush.subscriber.filters.ChangeFilter.wants_uri`);
- its host resolves to public addresses only — a loopback, private, link-local, reserved
  or cloud-metadata address is allowed only when the Source (the host of the URI the change
  names) is on an address of that same kind.

Anything else fails the change with the reason (not retryable: the Source would redirect
the same way next time). The addresses are resolved here, and the HTTP client resolves the
name again when it connects: a name whose answer changes in between can still slip
through, which is why the ``--map`` rules are checked first and on their own.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from .errors import FetchError, RedirectRefusedError, UnmappedURIError
from .filters import ChangeFilter
from .mapping import UriMap

MAX_REDIRECTS: Final = 10
"""Hops followed for one fetch at most."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES: Final[frozenset[IPAddress]] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack instance metadata
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS instance metadata over IPv6
        "100.100.100.200",  # Alibaba Cloud instance metadata
    )
)
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): its last 32 bits are an IPv4 address."""


def address_kind(address: IPAddress) -> str | None:
    """None for a public address; else the kind of internal one (pure)."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address inside an IPv6 one reaches that IPv4 host: judge the host.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is None and int(address) >> 32 == 0 and int(address) > 1:
            embedded = ipaddress.IPv4Address(int(address))  # IPv4-compatible, ::a.b.c.d
        if embedded is not None:
            address = embedded
    if address in METADATA_ADDRESSES:
        return "metadata"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_unspecified or address.is_multicast:
        return "reserved"
    if address.is_private:
        return "private"
    if address.is_global:
        return None
    return "reserved"  # multicast, unspecified, shared address space…


def rule_refusal(target: str, uri_map: UriMap, change_filter: ChangeFilter) -> str | None:
    """Why the agent would not fetch ``target`` for its own sake, or None (pure)."""
    try:
        uri_map.path_for(target)
    except UnmappedURIError as exc:
        return f"redirects to {target}, which the agent does not fetch: {exc.reason}"
    if not change_filter.wants_uri(target):
        return f"redirects to {target}, which --include/--exclude leave out"
    return None


async def address_kinds(uri: str) -> set[str | None]:
    """The kinds (:func:`address_kind`) of every address ``uri``'s host resolves to;
    raises :class:`OSError` when it does not resolve."""
    parts = urlsplit(uri)
    host = parts.hostname or ""
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    # A scoped IPv6 address ("fe80::1%eth0") names its zone after a "%".
    return {address_kind(ipaddress.ip_address(str(info[4][0]).partition("%")[0])) for info in infos}


@dataclass(frozen=True)
class RedirectPolicy:
    uri_map: UriMap
    change_filter: ChangeFilter

    async def check(self, uri: str, target: str) -> None:
        """Allow the hop from the change's ``uri`` (the first request) to ``target``, or raise
        :class:`RedirectRefusedError` (or a transient :class:`FetchError` when a name does not
        resolve now)."""
        problem = rule_refusal(target, self.uri_map, self.change_filter)
        if problem is not None:
            raise RedirectRefusedError(uri, problem)
        try:
            internal = await address_kinds(target) - {None}
            source = await address_kinds(uri) if internal else set()
        except OSError as exc:
            raise FetchError(uri, f"redirects to {target}, which does not resolve: {exc}") from exc
        if not internal <= source:
            kinds = ", ".join(sorted(k for k in internal if k is not None))
            raise RedirectRefusedError(
                uri, f"redirects to {target}, an internal ({kinds}) address the Source is not on"
            )
