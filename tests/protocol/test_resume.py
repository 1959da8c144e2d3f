"""The resume decision (docs/protocol.md, "Subscribing" and "History insufficient"), every
branch, as a pure function: no Redis, no event loop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rspush.protocol import (
    ZERO,
    HistoryInsufficient,
    Position,
    Replay,
    SinceLookup,
    StreamFacts,
    TopicRequest,
    check_replay,
    decide_resume,
)
from rspush.resourcesync.w3cdt import format_w3c_datetime

ARCHIVE = "http://hub.example.org/topics/dataset1/changelist-archive.xml"
T_TRIM = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
TRIMMED = Position(1795305599000, 3)
OLDEST = Position(1795305600000, 0)
LATER = Position(1795305700000, 1)


def _facts(**changes: object) -> StreamFacts:
    fields: dict[str, object] = {
        "epoch": "e1",
        "archive": ARCHIVE,
        "oldest": OLDEST,
        "trimmed": TRIMMED,
        "trimmed_time": T_TRIM,
    }
    fields.update(changes)
    return StreamFacts(**fields)  # type: ignore[arg-type]


def _since(moment: datetime, **fields: str) -> TopicRequest:
    return TopicRequest(topic="dataset1", since=format_w3c_datetime(moment), **fields)


def _insufficient(reason: str, oldest: Position | None = OLDEST) -> HistoryInsufficient:
    return HistoryInsufficient(
        topic="dataset1",
        reason="trimmed" if reason == "trimmed" else "epoch-changed",
        epoch="e1",
        oldest=oldest,
        after=TRIMMED,
        after_time=T_TRIM,
        archive=ARCHIVE,
    )


# --- no resume point, position, epoch -----------------------------------------------------


def test_no_resume_point_goes_live() -> None:
    assert decide_resume(TopicRequest(topic="dataset1"), _facts()) == Replay(None)


def test_position_after_the_trim_replays_from_it() -> None:
    request = TopicRequest(topic="dataset1", position=str(LATER), epoch="e1")
    assert decide_resume(request, _facts()) == Replay(LATER)


def test_position_at_the_last_trimmed_change_is_enough() -> None:
    # Resuming *after* the last trimmed change misses nothing.
    request = TopicRequest(topic="dataset1", position=str(TRIMMED))
    assert decide_resume(request, _facts()) == Replay(TRIMMED)


def test_position_before_the_trim_is_insufficient() -> None:
    request = TopicRequest(topic="dataset1", position=str(TRIMMED.predecessor()))
    assert decide_resume(request, _facts()) == _insufficient("trimmed")


def test_position_on_a_never_trimmed_stream() -> None:
    request = TopicRequest(topic="dataset1", position="0-0")
    assert decide_resume(request, _facts(trimmed=None, trimmed_time=None)) == Replay(ZERO)


def test_another_epoch_is_insufficient_even_untrimmed() -> None:
    request = TopicRequest(topic="dataset1", position=str(LATER), epoch="e0")
    decision = decide_resume(request, _facts(trimmed=None, trimmed_time=None))
    assert decision == HistoryInsufficient(
        topic="dataset1",
        reason="epoch-changed",
        epoch="e1",
        oldest=OLDEST,
        after=ZERO,  # nothing trimmed: the stream holds everything after 0-0
        after_time=None,
        archive=ARCHIVE,
    )


def test_the_epoch_is_checked_before_the_position() -> None:
    request = TopicRequest(topic="dataset1", position="1-0", epoch="e0")
    assert decide_resume(request, _facts()) == _insufficient("epoch-changed")


def test_the_position_is_checked_even_with_a_since() -> None:
    request = _since(T_TRIM + timedelta(hours=1), position="1-0")
    lookup = SinceLookup(first=LATER, before=OLDEST)
    assert decide_resume(request, _facts(since=lookup)) == _insufficient("trimmed")


# --- since --------------------------------------------------------------------------------


def test_since_replays_after_the_change_before_it() -> None:
    lookup = SinceLookup(first=LATER, before=OLDEST)
    request = _since(T_TRIM + timedelta(hours=1))
    assert decide_resume(request, _facts(since=lookup)) == Replay(OLDEST)


def test_since_overrides_a_position() -> None:
    lookup = SinceLookup(first=LATER, before=OLDEST)
    request = _since(T_TRIM + timedelta(hours=1), position=str(LATER))
    assert decide_resume(request, _facts(since=lookup)) == Replay(OLDEST)


def test_since_at_the_stream_start_after_the_trim_replays_after_the_trim() -> None:
    lookup = SinceLookup(first=OLDEST, before=None)
    request = _since(T_TRIM + timedelta(seconds=1))
    assert decide_resume(request, _facts(since=lookup)) == Replay(TRIMMED)


def test_since_at_the_stream_start_never_trimmed_replays_everything() -> None:
    lookup = SinceLookup(first=OLDEST, before=None)
    facts = _facts(trimmed=None, trimmed_time=None, since=lookup)
    assert decide_resume(_since(T_TRIM), facts) == Replay(ZERO)


@pytest.mark.parametrize("moment", [T_TRIM, T_TRIM - timedelta(days=1)])
def test_since_at_or_before_a_trimmed_change_is_insufficient(moment: datetime) -> None:
    # The first change at/after since is the stream's oldest, and the last trimmed change is
    # at/after since too: it would be missed.
    lookup = SinceLookup(first=OLDEST, before=None)
    assert decide_resume(_since(moment), _facts(since=lookup)) == _insufficient("trimmed")


def test_since_before_a_trimmed_change_on_an_empty_stream_is_insufficient() -> None:
    lookup = SinceLookup(first=None, before=None)
    facts = _facts(oldest=None, since=lookup)
    assert decide_resume(_since(T_TRIM), facts) == _insufficient("trimmed", oldest=None)


def test_since_after_everything_starts_at_the_tail() -> None:
    lookup = SinceLookup(first=None, before=LATER)
    request = _since(T_TRIM + timedelta(days=1))
    assert decide_resume(request, _facts(since=lookup)) == Replay(LATER)


def test_since_after_the_trim_on_an_empty_stream_starts_after_the_trim() -> None:
    lookup = SinceLookup(first=None, before=None)
    facts = _facts(oldest=None, since=lookup)
    assert decide_resume(_since(T_TRIM + timedelta(seconds=1)), facts) == Replay(TRIMMED)


def test_since_on_an_empty_untrimmed_stream_replays_from_zero() -> None:
    facts = StreamFacts(epoch="e1", archive=ARCHIVE, oldest=None, since=SinceLookup(None, None))
    assert decide_resume(_since(T_TRIM), facts) == Replay(ZERO)


def test_since_with_the_right_epoch() -> None:
    lookup = SinceLookup(first=LATER, before=OLDEST)
    request = _since(T_TRIM + timedelta(hours=1), epoch="e1")
    assert decide_resume(request, _facts(since=lookup)) == Replay(OLDEST)


def test_since_needs_its_lookup() -> None:
    with pytest.raises(ValueError, match="since"):
        decide_resume(_since(T_TRIM), _facts())


# --- during the replay --------------------------------------------------------------------


def test_replay_cursor_at_or_after_the_trim_goes_on() -> None:
    assert check_replay("dataset1", TRIMMED, _facts()) is None
    assert check_replay("dataset1", LATER, _facts()) is None
    assert check_replay("dataset1", ZERO, _facts(trimmed=None, trimmed_time=None)) is None


def test_replay_cursor_overtaken_by_the_trim_is_insufficient() -> None:
    assert check_replay("dataset1", ZERO, _facts()) == _insufficient("trimmed")
    # The trim time may be unknown; the message then has no after_time.
    gap = check_replay("dataset1", ZERO, _facts(trimmed_time=None))
    assert gap is not None and gap.after == TRIMMED and gap.after_time is None
