"""The pure parts of ``rs-publish watch``: skip patterns, URIs of tree paths, the diff of a
tree against the published state, the debounce decision, retry waits and batch keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from rspush.resourcesync.models import Change
from rspush.source.debounce import Debouncer
from rspush.source.diff import Published, decide, to_look_at
from rspush.source.fragment import FileFacts, IncreasingClock
from rspush.source.posting import (
    MAX_RETRY_AFTER_S,
    derived_key,
    retried,
    retry_after_s,
    wait_s,
)
from rspush.source.tree import DEFAULT_SKIPS, Skips, Stat
from rspush.source.uris import base_url, uri_of


@pytest.mark.parametrize(
    ("path", "skipped"),
    [
        ("a.txt", False),
        ("dir/b c.txt", False),
        (".hidden", True),
        ("dir/.git/config", True),  # a hidden folder hides what is under it
        ("notes.txt~", True),
        ("data.tmp", True),
        (".notes.txt.swp", True),
        ("big.iso.part", True),
        ("#draft#", True),
        ("dir/#draft#", True),
        ("a.part.txt", False),
        ("x\udcff.txt", True),  # not UTF-8: no URI names it at the mirror
        ("a\\b.txt", True),  # a separator elsewhere: Destinations refuse it
    ],
)
def test_default_skips(path: str, skipped: bool) -> None:
    assert Skips(DEFAULT_SKIPS).skipped(path) is skipped


def test_skips_are_configurable() -> None:
    assert Skips(("*.log",)).skipped("logs/x.log")
    assert not Skips(("*.log",)).skipped(".hidden")
    assert not Skips(()).skipped("#x#")


def test_uris_encode_each_segment_once() -> None:
    base = base_url("http://example.org/data")
    assert base == "http://example.org/data/"
    assert uri_of(base, "a/b c.txt") == "http://example.org/data/a/b%20c.txt"
    assert uri_of(base, "é/☃") == "http://example.org/data/%C3%A9/%E2%98%83"
    assert uri_of(base, "q?x#y%z") == "http://example.org/data/q%3Fx%23y%25z"
    assert uri_of(base, "a;b=c&d+e") == "http://example.org/data/a;b=c&d+e"
    for bad in ("ftp://example.org/", "example.org/x", "http://example.org/?q=1"):
        with pytest.raises(ValueError):
            base_url(bad)


def _published(size: int, mtime: int, sha: str = "s") -> Published:
    return Published(size, mtime, "m", sha)


def test_the_diff_looks_at_new_gone_and_restated_files() -> None:
    state = {"same": _published(1, 10), "touched": _published(1, 10), "gone": _published(1, 10)}
    scanned = {"same": Stat(1, 10, 7), "touched": Stat(1, 11, 7), "new": Stat(5, 1, 8)}
    assert to_look_at(scanned, state) == ["gone", "new", "touched"]
    assert to_look_at({}, {}) == []


def test_the_change_is_decided_by_content() -> None:
    facts = FileFacts(3, "m", "sha-new", None)
    assert decide(facts, None) is Change.CREATED
    assert decide(facts, _published(3, 1, "sha-old")) is Change.UPDATED
    assert decide(facts, _published(3, 1, "sha-new")) is None  # touched, same bytes
    assert decide(None, _published(3, 1)) is Change.DELETED
    assert decide(None, None) is None


def test_a_path_is_due_after_the_quiet_period_since_its_last_touch() -> None:
    debouncer = Debouncer(quiet_s=1.0)
    first, grown = Stat(10, 1, 1), Stat(20, 2, 1)
    debouncer.touch("b", first, now=0.0)
    debouncer.touch("a", None, now=0.5)
    assert debouncer.due(0.9) == []
    assert debouncer.due(1.0) == [("b", first)]
    debouncer.touch("b", grown, now=1.2)  # written again: the clock starts over
    assert debouncer.due(1.6) == [("a", None)]
    assert debouncer.due(2.2) == [("a", None), ("b", grown)]
    debouncer.done("a")
    assert debouncer.pending() == ["b"] and len(debouncer) == 1


def test_retry_waits_back_off_with_jitter_and_follow_retry_after() -> None:
    assert [wait_s(n, first_s=1, cap_s=60, rand=lambda: 1.0) for n in range(3)] == [1, 2, 4]
    assert [wait_s(n, first_s=1, cap_s=60, rand=lambda: 0.0) for n in range(3)] == [0.5, 1, 2]
    assert wait_s(40, first_s=1, cap_s=60, rand=lambda: 1.0) == 60
    assert wait_s(0, retry_after=7.0) == 7.0
    assert wait_s(0, retry_after=1e9) == MAX_RETRY_AFTER_S
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after_s("12", now) == 12.0
    assert retry_after_s(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30
    assert retry_after_s(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0
    assert retry_after_s("soon", now) is None and retry_after_s(None, now) is None


def test_which_answers_are_retried() -> None:
    assert [s for s in (400, 401, 403, 404, 409, 413, 422) if retried(s)] == []
    assert all(retried(s) for s in (408, 425, 429, 500, 502, 503, 504))


def test_a_batch_key_names_its_topic_and_body() -> None:
    key = derived_key("t", b"<urlset/>")
    assert key == derived_key("t", b"<urlset/>") and key.startswith("sha256-")
    assert key != derived_key("u", b"<urlset/>") and key != derived_key("t", b"<urlset />")
    assert len(key) <= 200  # the hub's limit on an Idempotency-Key


def test_the_clock_starts_after_the_last_time_posted() -> None:
    later = datetime.now(UTC) + timedelta(hours=1)  # a clock stepped back since
    clock = IncreasingClock(after=later)
    assert clock() > later and clock.last is not None
