"""W3C Datetime (https://www.w3.org/TR/NOTE-datetime), as Z39.99 §7 uses it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rspush.resourcesync import format_w3c_datetime, parse_document, parse_w3c_datetime, validate
from rspush.resourcesync.w3cdt import W3CDatetimeError, ensure_utc


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Year, YYYY: the start of the year, UTC.
        ("1997", utc(1997, 1, 1)),
        # Year and month, YYYY-MM.
        ("1997-07", utc(1997, 7, 1)),
        # Complete date, YYYY-MM-DD: midnight UTC.
        ("1997-07-16", utc(1997, 7, 16)),
        # Complete date plus hours and minutes, YYYY-MM-DDThh:mmTZD.
        ("1997-07-16T19:20+01:00", utc(1997, 7, 16, 18, 20)),
        ("1997-07-16T19:20Z", utc(1997, 7, 16, 19, 20)),
        # Complete date plus hours, minutes and seconds, YYYY-MM-DDThh:mm:ssTZD.
        ("1997-07-16T19:20:30+01:00", utc(1997, 7, 16, 18, 20, 30)),
        ("2013-01-03T09:00:00Z", utc(2013, 1, 3, 9)),
        # Complete date plus hours, minutes, seconds and a decimal fraction of a second.
        ("1997-07-16T19:20:30.45+01:00", utc(1997, 7, 16, 18, 20, 30, 450_000)),
        ("2013-01-03T09:00:00.5Z", utc(2013, 1, 3, 9, 0, 0, 500_000)),
        ("2013-01-03T09:00:00.000001Z", utc(2013, 1, 3, 9, 0, 0, 1)),
        ("2013-01-03T09:00:00.123456Z", utc(2013, 1, 3, 9, 0, 0, 123_456)),
        # Finer than Python's microsecond: truncated.
        ("2013-01-03T09:00:00.1234569Z", utc(2013, 1, 3, 9, 0, 0, 123_456)),
        # Negative offsets; offsets with minutes.
        ("2013-01-03T09:00:00-05:00", utc(2013, 1, 3, 14)),
        ("2013-01-03T09:00:00+05:30", utc(2013, 1, 3, 3, 30)),
        ("2013-01-03T09:00:00+00:00", utc(2013, 1, 3, 9)),
        ("2013-01-03T09:00:00-00:00", utc(2013, 1, 3, 9)),
        # Offsets crossing a day, a month and a year boundary.
        ("2013-01-01T00:30:00+01:00", utc(2012, 12, 31, 23, 30)),
        ("2012-12-31T23:30:00-01:00", utc(2013, 1, 1, 0, 30)),
        ("2012-02-29T23:00:00-02:00", utc(2012, 3, 1, 1)),
        # Leap day.
        ("2012-02-29", utc(2012, 2, 29)),
        # Surrounding whitespace, as in pretty-printed <lastmod> text.
        ("  2013-01-03T09:00:00Z\n", utc(2013, 1, 3, 9)),
    ],
)
def test_every_profile_parses_to_aware_utc(text: str, expected: datetime) -> None:
    parsed = parse_w3c_datetime(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    [
        "2013-13-01",  # month 13
        "2013-00-10",  # month 0
        "2013-02-30",  # Feb 30
        "2013-02-29",  # not a leap year
        "2013-04-31",
        "2013-01-00",
        "2013-01-03T09:00",  # a time needs a zone designator
        "2013-01-03T09:00:00",
        "2013-01-03T09:00:00.5",
        "2013-01-03T25:00Z",  # hour 25
        "2013-01-03T24:00:00Z",
        "2013-01-03T09:60Z",
        "2013-01-03T09:00:61Z",
        "2013-01-03T09Z",  # hours without minutes are not a profile
        "2013-01-03T09:00:00+25:00",  # offset out of range
        "2013-01-03T09:00:00+01:60",
        "2013-01-03T09:00:00+0100",  # offsets are +hh:mm
        "2013-01-03T09:00:00+01",
        "2013-01-03T09:00:00 Z",
        "2013-01-03 09:00:00Z",  # the T is required
        "2013-01-03t09:00:00Z",
        "2013-01-03T09:00:00z",
        "2013-01-03T09:00:00.Z",  # a fraction needs digits
        "2013-1-3",  # two-digit month and day
        "13-01-03",  # four-digit year
        "20130103",  # basic ISO 8601 format
        "2013-01-03T09:00:00ZZ",
        "2013-W01",
        "yesterday",
        "",
        "   ",
        "２０１３-01-03",  # full-width digits are not ASCII digits
    ],
)
def test_invalid_datetimes_raise(text: str) -> None:
    with pytest.raises(W3CDatetimeError):
        parse_w3c_datetime(text)


def test_error_is_a_value_error_naming_the_text() -> None:
    with pytest.raises(ValueError, match="2013-02-30"):
        parse_w3c_datetime("2013-02-30")


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:30+00:31"]
)
def test_out_of_range_after_zone_conversion_is_a_w3c_datetime_error(text: str) -> None:
    # Valid syntax, but the UTC instant is outside Python's datetime range: it must be
    # reported like any other bad value, not escape as an OverflowError.
    with pytest.raises(W3CDatetimeError):
        parse_w3c_datetime(text)


def test_parser_reports_an_unrepresentable_datetime_as_a_violation() -> None:
    data = (
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        b' xmlns:rs="http://www.openarchives.org/rs/terms/">'
        b'<rs:md capability="resourcelist" at="0001-01-01T00:00:00+01:00"/></urlset>'
    )
    rules = {v.rule for v in validate(parse_document(data))}
    assert "datetime-syntax" in rules


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (utc(2013, 1, 3, 9), "2013-01-03T09:00:00Z"),
        (utc(2013, 1, 3, 9, 0, 0, 500_000), "2013-01-03T09:00:00.5Z"),
        (utc(2013, 1, 3, 9, 0, 0, 120_000), "2013-01-03T09:00:00.12Z"),
        (utc(2013, 1, 3, 9, 0, 0, 1), "2013-01-03T09:00:00.000001Z"),
        (utc(2013, 1, 3, 9, 0, 0, 123_456), "2013-01-03T09:00:00.123456Z"),
        (
            datetime(2013, 1, 3, 10, 0, tzinfo=timezone(timedelta(hours=1))),
            "2013-01-03T09:00:00Z",
        ),
        (
            datetime(2012, 12, 31, 20, 0, tzinfo=timezone(timedelta(hours=-5))),
            "2013-01-01T01:00:00Z",
        ),
        (utc(1, 1, 1), "0001-01-01T00:00:00Z"),
        (utc(999, 12, 31, 23, 59, 59), "0999-12-31T23:59:59Z"),
        (utc(9999, 12, 31, 23, 59, 59, 999_999), "9999-12-31T23:59:59.999999Z"),
    ],
)
def test_format_is_utc_with_z_and_optional_fraction(moment: datetime, text: str) -> None:
    assert format_w3c_datetime(moment) == text


def test_format_refuses_naive_datetimes() -> None:
    with pytest.raises(W3CDatetimeError):
        format_w3c_datetime(datetime(2013, 1, 3, 9))


def test_ensure_utc() -> None:
    moment = datetime(2013, 1, 3, 10, tzinfo=timezone(timedelta(hours=1)))
    assert ensure_utc(moment) == utc(2013, 1, 3, 9)
    assert ensure_utc(moment).tzinfo is UTC
    with pytest.raises(W3CDatetimeError):
        ensure_utc(datetime(2013, 1, 3, 9))


# YYYY-MM-DDThh:mm:ss[.s]Z, the form Z39.99 §7 recommends; no trailing zeros in the fraction.
FORMAT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]*[1-9])?Z")

zones = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@settings(deadline=None, max_examples=300)
@given(moment=st.datetimes(timezones=st.just(UTC)))
def test_format_then_parse_round_trips(moment: datetime) -> None:
    text = format_w3c_datetime(moment)
    assert parse_w3c_datetime(text) == moment
    assert FORMAT.fullmatch(text), text


@settings(deadline=None, max_examples=200)
@given(
    moment=st.datetimes(
        min_value=datetime(1000, 1, 2), max_value=datetime(9998, 12, 30), timezones=zones
    )
)
def test_any_zone_formats_to_the_same_instant(moment: datetime) -> None:
    parsed = parse_w3c_datetime(format_w3c_datetime(moment))
    assert parsed == moment
    assert parsed.tzinfo is UTC


@settings(deadline=None, max_examples=200)
@given(
    moment=st.datetimes(
        min_value=datetime(1000, 1, 2), max_value=datetime(9998, 12, 30), timezones=zones
    )
)
def test_isoformat_with_offset_parses_to_the_same_instant(moment: datetime) -> None:
    # Python's isoformat() of an aware datetime is a W3C Datetime (+hh:mm offsets).
    assert parse_w3c_datetime(moment.isoformat()) == moment
