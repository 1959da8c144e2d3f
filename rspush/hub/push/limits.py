"""How many push sockets one hub process holds: per process and per client address, counted
from the moment a socket is accepted (before its handshake), so idle and half-open sockets
count too. Pure bookkeeping; the server refuses with HTTP 503 before any upgrade."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..connections import plain_response


@dataclass
class ConnectionLimiter:
    """Counts open push sockets; :meth:`admit` says why one is refused (None: admitted)."""

    max_total: int
    max_per_address: int
    total: int = 0
    by_address: Counter[str] = field(default_factory=Counter)

    def admit(self, address: str) -> str | None:
        if self.total >= self.max_total:
            return f"this hub holds its maximum of {self.max_total} push connections; retry later"
        if self.by_address[address] >= self.max_per_address:
            return (
                f"at most {self.max_per_address} push connections per client address; retry later"
            )
        self.total += 1
        self.by_address[address] += 1
        return None

    def release(self, address: str) -> None:
        self.total -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]


def service_unavailable(message: str) -> bytes:
    """The 503 written in place of the handshake's answer."""
    return plain_response("503 Service Unavailable", message, "retry-after: 5")
