"""Deadlines for what the agent reads from a Source: a slow or trickling server must not hold
a baseline, a poll or a shutdown for ever.

A transfer gets a *grace* period, then must keep up an average of at least *min_rate* bytes
per second: its deadline starts ``grace`` seconds after the request and moves ``1/min_rate``
seconds later with every byte received. So a resource of known length has a total deadline
of ``grace + length / min_rate``, and a server feeding a byte every few seconds is cut off
once the grace is spent (the HTTP client's own read timeout only notices a server that
sends nothing at all). ``total``, when given, caps the deadline whatever the rate (Source
documents: a per-document deadline).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import Final

DEFAULT_GRACE: Final = 30.0
"""Seconds a transfer may take before the minimum rate applies (connection, first bytes)."""
DEFAULT_MIN_RATE: Final = 1024.0
"""Bytes per second a transfer must average after the grace (a slow link is fine; a drip
is not)."""
DEFAULT_DOCUMENT_TOTAL: Final = 300.0
"""Seconds one Source document (a list, an index, a discovery page) may take at most."""


@dataclass(frozen=True, slots=True)
class TransferLimits:
    grace: float = DEFAULT_GRACE
    min_rate: float = DEFAULT_MIN_RATE
    total: float | None = None
    """A hard cap in seconds on the whole transfer; None: only grace and rate."""

    def __post_init__(self) -> None:
        if self.grace <= 0 or self.min_rate <= 0 or (self.total is not None and self.total <= 0):
            raise ValueError("transfer limits must be positive")


DOCUMENT_LIMITS: Final = TransferLimits(total=DEFAULT_DOCUMENT_TOTAL)
"""What one Source document (or discovery page) may take."""


class RateDeadline:
    """``async with deadline:`` around a transfer, :meth:`received` for every chunk; the
    block raises :class:`TimeoutError` once the transfer falls behind (:attr:`reason` says
    how far it got)."""

    def __init__(self, limits: TransferLimits) -> None:
        self.limits = limits
        self.bytes = 0
        self._start = 0.0
        self._timeout: asyncio.Timeout | None = None

    def _when(self) -> float:
        limits = self.limits
        when = self._start + limits.grace + self.bytes / limits.min_rate
        if limits.total is not None:
            when = min(when, self._start + limits.total)
        return when

    async def __aenter__(self) -> RateDeadline:
        self._start = asyncio.get_running_loop().time()
        self._timeout = asyncio.timeout_at(self._when())
        await self._timeout.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._timeout is not None
        # Turns the cancellation it caused into TimeoutError; suppresses nothing.
        await self._timeout.__aexit__(kind, exc, tb)

    def received(self, count: int) -> None:
        self.bytes += count
        if self._timeout is not None and not self._timeout.expired():
            self._timeout.reschedule(self._when())

    @property
    def reason(self) -> str:
        """Why the deadline passed, in one line."""
        elapsed = asyncio.get_running_loop().time() - self._start
        limits = self.limits
        if limits.total is not None and elapsed >= limits.total - 0.001:
            return f"timed out: not complete after {limits.total:g} s"
        return (
            f"timed out: {self.bytes} bytes in {elapsed:.1f} s, slower than "
            f"{limits.min_rate:g} bytes/s after a {limits.grace:g} s grace"
        )
