"""W3C Datetime (https://www.w3.org/TR/NOTE-datetime), as Z39.99 §7 requires.

Every profile parses: ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, ``YYYY-MM-DDThh:mmTZD``,
``YYYY-MM-DDThh:mm:ssTZD`` and ``YYYY-MM-DDThh:mm:ss.sTZD``. Values are normalised to aware
UTC datetimes; a value with a time but no zone designator is rejected (the note requires one),
a date-only value means midnight UTC. Output is always ``YYYY-MM-DDThh:mm:ss[.s]Z``, the form
the spec recommends.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

_W3C = re.compile(
    r"(?P<year>\d{4})"
    r"(?:-(?P<month>\d{2})"
    r"(?:-(?P<day>\d{2})"
    r"(?:T(?P<hour>\d{2}):(?P<minute>\d{2})"
    r"(?::(?P<second>\d{2})(?:\.(?P<fraction>\d+))?)?"
    r"(?P<tz>Z|[+-]\d{2}:\d{2}))?"
    r")?)?",
    re.ASCII,  # \d must not match full-width or other Unicode digits
)


class W3CDatetimeError(ValueError):
    """The text is not a W3C Datetime."""


# The form nearly every document uses (and the serialiser writes): UTC, seconds, up to six
# fraction digits, ASCII digits. Anything else takes the general path below.
_CANONICAL = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z")


def parse_w3c_datetime(text: str) -> datetime:
    """Parse a W3C Datetime into an aware UTC :class:`datetime`.

    Fractions finer than a microsecond are truncated (Python's resolution).
    """
    value = text.strip()
    if _CANONICAL.fullmatch(value):
        try:
            return datetime.fromisoformat(value)  # tzinfo is datetime.UTC for "Z"
        except ValueError:
            pass  # e.g. Feb 30: the general path words the error
    match = _W3C.fullmatch(value)
    if match is None:
        raise W3CDatetimeError(
            f"{text!r} is not a W3C Datetime (expected e.g. 2013-01-03T09:00:00Z)"
        )
    parts = match.groupdict()
    fraction = parts["fraction"] or ""
    try:
        moment = datetime(
            int(parts["year"]),
            int(parts["month"] or 1),
            int(parts["day"] or 1),
            int(parts["hour"] or 0),
            int(parts["minute"] or 0),
            int(parts["second"] or 0),
            int((fraction + "000000")[:6]),
            tzinfo=_zone(parts["tz"]),
        )
        return moment.astimezone(UTC)
    except ValueError as exc:  # e.g. month 13, Feb 30, hour 25
        raise W3CDatetimeError(f"{text!r} is not a valid date/time: {exc}") from exc
    except OverflowError as exc:  # year 1 with a + offset, year 9999 with a - offset
        raise W3CDatetimeError(f"{text!r} is outside the representable range") from exc


def _zone(tz: str | None) -> timezone:
    if tz is None or tz == "Z":
        return UTC
    sign = -1 if tz[0] == "-" else 1
    hours, minutes = int(tz[1:3]), int(tz[4:6])
    if hours > 23 or minutes > 59:
        raise ValueError(f"zone offset {tz} out of range")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def format_w3c_datetime(moment: datetime) -> str:
    """Format as ``YYYY-MM-DDThh:mm:ss[.s]Z`` in UTC; naive datetimes are refused."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise W3CDatetimeError("naive datetime: ResourceSync datetimes must carry a zone")
    try:
        utc = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    except OverflowError as exc:
        raise W3CDatetimeError(f"{moment!r} is outside the representable range") from exc
    # isoformat() is the cheapest writer (this is on the hub's per-change path): in UTC it
    # ends in "+00:00", and its six fraction digits, present only when non-zero, lose their
    # trailing zeros.
    text = utc.isoformat()[:-6]
    return (text.rstrip("0") if utc.microsecond else text) + "Z"


def ensure_utc(moment: datetime) -> datetime:
    """Return ``moment`` in UTC, refusing naive values (used by the models)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise W3CDatetimeError("naive datetime: ResourceSync datetimes must carry a zone")
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise W3CDatetimeError(f"{moment!r} is outside the representable range") from exc


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(moment: datetime) -> int:
    """Microseconds since the Unix epoch, exact (no float rounding): how the hub's store and
    the agent's checkpoint keep change times as integers that sort like the times."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(value: int) -> datetime:
    """The UTC datetime ``value`` microseconds after the Unix epoch (inverse of :func:`to_us`)."""
    return _EPOCH + timedelta(microseconds=value)
