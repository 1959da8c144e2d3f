"""Which addresses a callback may reach (server-side request forgery).

A subscriber names any URL as its callback, and the hub then sends requests there: without a
policy it could be made to reach the hub's own loopback services, a private network or a
cloud metadata endpoint. By default only globally routable unicast addresses are reached;
``[websub] callback_allow`` lists CIDR networks that are reached nevertheless (loopback for
tests, a private network in a closed deployment). The check runs on the address the hub
connects to, after resolution (:mod:`.callbacks`), so DNS rebinding cannot slip past it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allow: tuple[Network, ...] = ()

    @classmethod
    def from_cidrs(cls, cidrs: Iterable[str]) -> AddressPolicy:
        return cls(tuple(ipaddress.ip_network(c, strict=False) for c in cidrs))

    def permits(self, address: str | Address) -> bool:
        ip = ipaddress.ip_address(address) if isinstance(address, str) else address
        if any(ip in network for network in self.allow):
            return True
        # An IPv6 address that carries an IPv4 one reaches that IPv4 host (through the host's
        # own stack, a 6to4 relay or a NAT64 gateway): it is judged as the IPv4 address too.
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            if any(embedded in network for network in self.allow):
                return True
            if not _global(embedded):
                return False
        return _global(ip)


def _global(ip: Address) -> bool:
    # is_global excludes loopback, private (RFC 1918, fc00::/7), link-local (incl. the
    # 169.254.169.254 metadata address), shared (100.64/10), reserved and unspecified.
    return ip.is_global and not ip.is_multicast


_NAT64 = (
    ipaddress.IPv6Network("64:ff9b::/96"),  # RFC 6052 well-known prefix
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # RFC 8215 local-use prefix
)
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated ::a.b.c.d (RFC 4291 §2.5.5.1)


def _embedded_ipv4(ip: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for: IPv4-mapped (::ffff:a.b.c.d), 6to4
    (2002:AABB:CCDD::/48), NAT64 (the last 32 bits under 64:ff9b::/96 or 64:ff9b:1::/48) or
    IPv4-compatible (::a.b.c.d); None for the others."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in prefix for prefix in _NAT64) or ip in _IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None
