"""Lease arithmetic (WebSub §5.1, notification spec §4.2): what the hub grants and when a
subscription ends. Times are integer microseconds of the hub's clock."""

from __future__ import annotations

from dataclasses import dataclass

US = 1_000_000


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    default_s: int
    min_s: int
    max_s: int

    def grant(self, requested_s: int | None) -> int:
        """The lease granted for a request of ``requested_s`` (None: the default), within the
        bounds: "the hub MAY choose to respect this value or not" (§5.1)."""
        if requested_s is None:
            return self.default_s
        return max(self.min_s, min(self.max_s, requested_s))


def expires_us(now_us: int, lease_s: int) -> int:
    return now_us + lease_s * US


def expired(expires_at_us: int, now_us: int) -> bool:
    return now_us >= expires_at_us
