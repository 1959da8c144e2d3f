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
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
        if any(ip in network for network in self.allow):
            return True
        # is_global excludes loopback, private (RFC 1918, fc00::/7), link-local (incl. the
        # 169.254.169.254 metadata address), shared (100.64/10), reserved and unspecified.
        return ip.is_global and not ip.is_multicast
