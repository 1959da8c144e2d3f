"""The rotation decisions, without Redis or a clock: how many entries of the open Change List
to close, and how far retention may trim the stream."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rspush.hub.rotation import RotationPolicy, entries_to_close, trim_floor
from rspush.hub.store import TopicMeta
from rspush.resourcesync.w3cdt import to_us
from tests.support.ingest import NOW


def meta(
    *,
    open_count: int,
    open_from_us: int | None = 1,
    open_since: datetime | None = None,
    open_start: str = "0-0",
) -> TopicMeta:
    return TopicMeta(
        epoch="e",
        created_us=1,
        last_us=None,
        open_from_us=open_from_us,
        open_since_us=None if open_since is None else to_us(open_since),
        open_start=open_start,
        open_count=open_count,
        version=1,
        state_at_us=None,
    )


POLICY = RotationPolicy(max_entries=5, max_age_s=60, retention_s=3600)


@pytest.mark.parametrize(
    ("open_count", "age_s", "expected"),
    [
        (0, 1000, 0),  # nothing open: nothing to close, however old
        (4, 10, 0),  # neither full nor old
        (5, 0, 5),  # full
        (12, 0, 5),  # a burst: close one full list at a time
        (3, 60, 3),  # old enough: close what there is
        (3, 59.9, 0),
    ],
)
def test_entries_to_close(open_count: int, age_s: float, expected: int) -> None:
    since = NOW - timedelta(seconds=age_s)
    assert entries_to_close(meta(open_count=open_count, open_since=since), NOW, POLICY) == expected


def test_entries_to_close_needs_a_from_and_a_first_change_time() -> None:
    assert entries_to_close(meta(open_count=9, open_from_us=None), NOW, POLICY) == 0
    # Without open_since the age is unknown: only the size rule applies.
    assert entries_to_close(meta(open_count=3, open_since=None), NOW, POLICY) == 0
    assert entries_to_close(meta(open_count=5, open_since=None), NOW, POLICY) == 5


def test_trim_floor_never_passes_the_open_list() -> None:
    now_ms = to_us(NOW) // 1000
    # Nothing closed yet: never trim.
    assert trim_floor("0-0", NOW, 0) is None
    # Retention 0: everything closed goes (the first id kept is the one after the last closed).
    last_closed = f"{now_ms - 5}-3"
    assert trim_floor(last_closed, NOW, 0) == f"{now_ms - 5}-4"
    # A window: entries older than it go, even if closed later ones stay.
    assert trim_floor(f"{now_ms - 5}-3", NOW, 3600) == f"{now_ms - 3_600_000}-0"
    # Closed long ago, window shorter than that: only up to the closed boundary.
    old = f"{now_ms - 10_000_000}-0"
    assert trim_floor(old, NOW, 60) == f"{now_ms - 10_000_000}-1"
    # A window reaching before the epoch: nothing to trim.
    assert trim_floor(f"{now_ms}-0", NOW, to_us(NOW) / 1e6 + 10) is None
