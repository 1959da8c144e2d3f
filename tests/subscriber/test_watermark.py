"""The watermark (``subscriber.watermark.WatermarkTracker``): it moves only over the gap-free
prefix of finished changes. Pure: no checkpoint, no event loop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.watermark import NO_WATERMARK, Watermark, WatermarkTracker

T0 = datetime(2026, 2, 1, tzinfo=UTC)


def pushed(n: int, epoch: str = "e1") -> ResourceChange:
    return ResourceChange(
        f"http://example.org/{n}",
        ChangeType.UPDATED,
        T0 + timedelta(minutes=n),
        Channel.PUSH,
        position=f"{n}-0",
        epoch=epoch,
    )


def polled(n: int, channel: Channel = Channel.POLL) -> ResourceChange:
    return ResourceChange(
        f"http://example.org/{n}", ChangeType.UPDATED, T0 + timedelta(minutes=n), channel
    )


def test_the_watermark_waits_for_the_first_unfinished_change() -> None:
    tracker = WatermarkTracker()
    one, two, three = (tracker.submitted(pushed(n)) for n in (1, 2, 3))

    assert not tracker.finished(three)
    assert not tracker.finished(two)
    assert tracker.watermark == NO_WATERMARK

    assert tracker.finished(one)
    assert tracker.watermark == Watermark("e1", "3-0", T0 + timedelta(minutes=3))


def test_it_moves_change_by_change_in_order() -> None:
    tracker = WatermarkTracker()
    one, two = tracker.submitted(pushed(1)), tracker.submitted(pushed(2))
    assert tracker.finished(one)
    assert tracker.watermark.position == "1-0"
    assert tracker.finished(two)
    assert tracker.watermark.position == "2-0"


def test_polled_changes_resume_by_time_and_time_never_goes_back() -> None:
    tracker = WatermarkTracker(Watermark("e1", "5-0", T0 + timedelta(minutes=5)))
    late = tracker.submitted(polled(2))  # an older change polled again
    assert tracker.finished(late)
    assert tracker.watermark == Watermark("e1", None, T0 + timedelta(minutes=5))


def test_retries_advance_the_prefix_but_not_the_stream() -> None:
    start = Watermark("e1", "5-0", T0 + timedelta(minutes=5))
    tracker = WatermarkTracker(start)
    retry = tracker.submitted(polled(9, Channel.RETRY))
    assert tracker.finished(retry)  # the prefix moved…
    assert tracker.watermark == start  # …where the stream stands did not


def test_a_new_epoch_comes_with_its_changes() -> None:
    tracker = WatermarkTracker(Watermark("e1", "5-0", T0))
    seq = tracker.submitted(pushed(1, epoch="e2"))
    tracker.finished(seq)
    assert tracker.epoch == "e2" and tracker.watermark.epoch == "e2"


def test_a_subscriptions_epoch_is_kept_before_any_change() -> None:
    tracker = WatermarkTracker(Watermark(None, None, T0))
    assert tracker.note_epoch("e1")
    assert tracker.watermark == Watermark("e1", None, T0)
    assert not tracker.note_epoch("e2")  # the watermark keeps the epoch it was reached in
    assert tracker.watermark.epoch == "e1" and tracker.epoch == "e2"
    assert not tracker.note_epoch(None)
    assert tracker.epoch == "e2"


def test_reset_moves_it_without_a_change() -> None:
    tracker = WatermarkTracker(Watermark("e1", "5-0", T0))
    at = Watermark(None, None, T0 + timedelta(days=1))
    tracker.reset(at)
    assert tracker.watermark == at and tracker.epoch is None
