"""Applying a run of changes from the lists at once (``Mirror.apply_batch``, the catch-up's
path): each URI applied once (the newest), failures recorded, records and the watermark
committed together (what a second reader of the state file sees), retries of a URI finished
first, stopping mid-run. A real checkpoint in ``tmp_path``; waits on conditions."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from rspush.subscriber.appliers import ApplyError
from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.checkpoint import Checkpoint
from rspush.subscriber.mirror import Mirror
from rspush.subscriber.watermark import Watermark
from tests.subscriber.test_mirror import (
    T0,
    WAIT_S,
    RecordingApplier,
    applier,
    change,
    checkpoint,
    events,
    make_mirror,
)
from tests.support.waiting import eventually

__all__ = ["applier", "checkpoint", "events", "make_mirror"]  # the fixtures


def listed(name: str, minutes: int, kind: ChangeType = ChangeType.UPDATED) -> ResourceChange:
    return change(name, None, minutes=minutes, kind=kind, channel=Channel.ARCHIVE)


def committed(path: Path) -> tuple[dict[str, int], int | None]:
    """What another connection sees in the state file: resource times by URI (µs), and the
    watermark's time (µs)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = dict(db.execute("SELECT uri, time_us FROM resources").fetchall())
        mark = db.execute("SELECT last_time_us FROM topics").fetchone()
    finally:
        db.close()
    return rows, None if mark is None else mark[0]


def us(minutes: int) -> int:
    return int((T0 + timedelta(minutes=minutes)).timestamp()) * 1_000_000


async def test_each_uri_is_applied_once_from_its_newest_change(
    make_mirror: Callable[..., Mirror],
    applier: RecordingApplier,
    checkpoint: Checkpoint,
    events: list[dict[str, Any]],
) -> None:
    mirror = make_mirror()
    run = [listed("a", 1), listed("b", 2), listed("a", 3), listed("c", 4), listed("a", 3)]
    await mirror.apply_batch(run)
    assert [(c.uri.rsplit("/", 1)[1], c.time) for c, _, _ in applier.calls] == [
        ("b", run[1].time),
        ("c", run[3].time),
        ("a", run[4].time),
    ]
    assert mirror.stats["superseded"] == 2
    assert mirror.stats["applied"] == 3
    rows, mark = committed(checkpoint.path)
    assert rows[run[0].uri] == us(3)
    assert mark == us(4)
    assert sorted(e["uri"] for e in events if e["event"] == "applied") == sorted(
        {c.uri for c in run}
    )


async def test_an_older_change_later_in_the_run_does_not_undo_a_newer_one(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    await mirror.apply_batch([listed("a", 5), listed("a", 2)])
    assert [c.time for c, _, _ in applier.calls] == [T0 + timedelta(minutes=5)]
    held = checkpoint.resource(listed("a", 5).uri)
    assert held is not None and held.time == T0 + timedelta(minutes=5)


async def test_a_change_already_held_is_skipped_and_the_watermark_still_moves(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    await mirror.apply_batch([listed("a", 1), listed("b", 2)])
    applier.calls.clear()
    await mirror.apply_batch([listed("a", 1), listed("b", 2), listed("c", 3)])
    assert [c.uri for c, _, _ in applier.calls] == [listed("c", 3).uri]
    assert mirror.stats["skip-duplicate"] == 2
    assert committed(checkpoint.path)[1] == us(3)


async def test_a_failure_in_a_run_is_recorded_and_the_watermark_moves_on(
    make_mirror: Callable[..., Mirror],
    applier: RecordingApplier,
    checkpoint: Checkpoint,
    events: list[dict[str, Any]],
) -> None:
    mirror = make_mirror()
    bad = listed("bad", 1)
    applier.failing[bad.uri] = ApplyError("--exec exited 3")
    await mirror.apply_batch([bad, listed("good", 2)])
    [failure] = checkpoint.failures()
    assert failure.uri == bad.uri and "exited 3" in failure.reason
    assert committed(checkpoint.path)[1] == us(2)
    assert {e["event"] for e in events} == {"failed", "applied"}
    # A later run that applies it clears the failure row.
    del applier.failing[bad.uri]
    await mirror.apply_batch([listed("bad", 3)])
    assert checkpoint.failures() == []


async def test_nothing_of_a_run_is_durable_until_all_of_it_is(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    await mirror.apply_batch([listed("first", 1)])
    before = committed(checkpoint.path)
    run = [listed("a", 2), listed("slow", 3), listed("c", 4)]
    gate = applier.hold(run[1])
    batch = asyncio.create_task(mirror.apply_batch(run))

    async def held() -> bool:
        return run[1] in applier.started and run[2] in applier.finished

    await eventually(held, timeout=WAIT_S, what="the run to reach its held change")
    # Two of three applied, in memory only: another reader sees the state before the run.
    assert committed(checkpoint.path) == before
    gate.set()
    await batch
    rows, mark = committed(checkpoint.path)
    assert {c.uri for c in run} <= set(rows)
    assert mark == us(4)


async def test_a_run_cut_short_leaves_the_state_as_before_it(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    """The agent killed mid-run (here: its task cancelled): nothing of the run is written,
    the watermark stays before it, so the next start reads the run again."""
    mirror = make_mirror()
    await mirror.apply_batch([listed("first", 1)])
    before = committed(checkpoint.path)
    run = [listed("a", 2), listed("slow", 3)]
    applier.hold(run[1])
    batch = asyncio.create_task(mirror.apply_batch(run))
    await eventually(lambda: run[1] in applier.started, timeout=WAIT_S, what="the held one")
    batch.cancel()
    await asyncio.wait([batch])
    assert batch.cancelled()
    assert committed(checkpoint.path) == before
    await asyncio.wait_for(mirror.drain(), WAIT_S)
    assert mirror.watermark.last_time == T0 + timedelta(minutes=1)


async def test_stopping_mid_run_keeps_the_watermark_before_what_was_not_applied(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror(concurrency=1)
    run = [listed("a", 1), listed("held", 2), listed("c", 3), listed("d", 4)]
    gate = applier.hold(run[1])
    batch = asyncio.create_task(mirror.apply_batch(run))
    await eventually(lambda: run[1] in applier.started, timeout=WAIT_S, what="the held one")
    mirror.abandon()
    gate.set()
    await asyncio.wait_for(batch, WAIT_S)
    assert [c.uri for c, _, _ in applier.calls] == [run[0].uri, run[1].uri]
    rows, mark = committed(checkpoint.path)
    assert set(rows) == {run[0].uri, run[1].uri}
    assert mark == us(2)


async def test_a_run_waits_for_a_change_of_its_uri_already_applying(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    retry = change("a", None, minutes=1, channel=Channel.RETRY)
    gate = applier.hold(retry)
    await mirror.submit(retry)
    await eventually(lambda: retry in applier.started, timeout=WAIT_S, what="the retry")
    batch = asyncio.create_task(mirror.apply_batch([listed("a", 5), listed("b", 6)]))
    await eventually(
        lambda: listed("b", 6) in applier.finished, timeout=WAIT_S, what="the run's other URI"
    )
    assert listed("a", 5) not in applier.started, "two writers of one file at once"
    gate.set()
    await asyncio.wait_for(batch, WAIT_S)
    assert applier.started[-1] == listed("a", 5)
    held = checkpoint.resource(retry.uri)
    assert held is not None and held.time == T0 + timedelta(minutes=5)


async def test_a_run_with_no_listener_still_records_everything(
    make_mirror: Callable[..., Mirror], checkpoint: Checkpoint
) -> None:
    mirror = make_mirror(events=None)
    await mirror.apply_batch([listed(f"r{n}", n) for n in range(1, 50)])
    assert mirror.stats["applied"] == 49
    rows, mark = committed(checkpoint.path)
    assert len(rows) == 49 and mark == us(49)
    assert mirror.watermark == Watermark(None, None, T0 + timedelta(minutes=49))


async def test_rows_kept_in_memory_follow_every_write(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    """During a catch-up the rows stay in memory; a change applied another way (a pushed
    one) must not be undone by a later run holding a stale row."""
    mirror = make_mirror()
    with mirror.states_in_memory():
        await mirror.apply_batch([listed("a", 1), listed("b", 2)])
        pushed = change("a", 10)
        await mirror.submit(pushed)
        await mirror.drain()
        applier.calls.clear()
        await mirror.apply_batch([listed("a", 5), listed("b", 6)])
        assert [c.uri for c, _, _ in applier.calls] == [listed("b", 6).uri]
        assert mirror.stats["skip-older"] == 1
    held = checkpoint.resource(pushed.uri)
    assert held is not None and held.time == pushed.time
