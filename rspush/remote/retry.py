"""``Retry-After`` (RFC 9110 §10.2.3), read the same way by everything that calls a remote:
the hub's bridges and the Source-side ``rs-publish``."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` value asks for (delay-seconds or an HTTP-date), None when
    absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)
