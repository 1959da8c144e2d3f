"""Applying changes (``subscriber.mirror.Mirror``) in metadata-only mode (no fetcher, no HTTP)
with a real checkpoint in ``tmp_path`` and a recording :class:`~subscriber.appliers.Applier`
that can hold a change until the test lets it go, or fail it.

Ordering per URI, concurrency across URIs and its bound, the gap-free watermark, idempotent
re-submission, failures, ``watermark_held``, the events, and abandoning the queue on stop
(only the changes in flight finish). Waits are on conditions (the loop
runs until a predicate holds, bounded by a timeout), never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from rspush.resourcesync import Link
from rspush.resourcesync.hashes import parse_hashes
from rspush.subscriber.appliers import Applier, ApplyError
from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.checkpoint import Checkpoint, Watermark
from rspush.subscriber.fetch import Fetched
from rspush.subscriber.filters import ChangeFilter
from rspush.subscriber.mapping import UriMap
from rspush.subscriber.mirror import Mirror
from tests.support.waiting import TIMEOUT_SCALE, eventually

SITE = "http://example.org/"
SOURCE = "http://example.org/.well-known/resourcesync"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
T0 = datetime(2026, 2, 1, 0, 0, 0, tzinfo=UTC)
WAIT_S = 5 * TIMEOUT_SCALE
EPOCH = "epoch-1"


def change(
    name: str,
    position: int | None,
    *,
    minutes: int = 0,
    kind: ChangeType = ChangeType.UPDATED,
    channel: Channel = Channel.PUSH,
    **kw: Any,
) -> ResourceChange:
    return ResourceChange(
        uri=SITE + name,
        change=kind,
        time=T0 + timedelta(minutes=minutes if minutes else position or 0),
        channel=channel,
        position=None if position is None else f"{position}-0",
        epoch=EPOCH if channel is Channel.PUSH else None,
        **kw,
    )


class RecordingApplier:
    """An :class:`Applier` that records what it is given, counts what is in flight, and can
    be told to hold a change (until its event is set) or to fail a URI."""

    def __init__(self) -> None:
        self.started: list[ResourceChange] = []
        self.finished: list[ResourceChange] = []
        self.calls: list[tuple[ResourceChange, PurePosixPath, bytes | None]] = []
        self.gates: dict[tuple[str, datetime, str], asyncio.Event] = {}
        self.failing: dict[object, BaseException] = {}
        """By URI (every change of it) or by ``change.key`` (that one change)."""
        self.in_flight = 0
        self.max_in_flight = 0

    def hold(self, held: ResourceChange) -> asyncio.Event:
        gate = self.gates[held.key] = asyncio.Event()
        return gate

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        self.started.append(change)
        self.calls.append((change, relative, None if content is None else content.read_bytes()))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            gate = self.gates.get(change.key)
            if gate is not None:
                await gate.wait()
            failure = self.failing.get(change.key) or self.failing.get(change.uri)
            if failure is not None:
                raise failure
        finally:
            self.in_flight -= 1
        self.finished.append(change)


def _is_applier(applier: Applier) -> Applier:
    return applier  # mypy checks RecordingApplier against the protocol here


async def settle(turns: int = 20) -> None:
    """Give every runnable task a chance to run (to show something does *not* happen)."""
    for _ in range(turns):
        await asyncio.sleep(0)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Iterator[Checkpoint]:
    with Checkpoint(tmp_path / "state.sqlite", SOURCE, "dataset1") as opened:
        yield opened


@pytest.fixture
def applier() -> RecordingApplier:
    return _is_applier(RecordingApplier())  # type: ignore[return-value]


@pytest.fixture
def events() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def make_mirror(
    checkpoint: Checkpoint, applier: RecordingApplier, events: list[dict[str, Any]]
) -> Callable[..., Mirror]:
    def make(**kw: Any) -> Mirror:
        kw.setdefault("events", events.append)
        kw.setdefault("clock", lambda: NOW)
        return Mirror(checkpoint, UriMap.build([(SITE, "")]), applier, None, **kw)

    return make


def position(checkpoint: Checkpoint) -> str | None:
    state = checkpoint.state()
    return None if state is None else state.watermark.position


# --- applying ------------------------------------------------------------------------------


async def test_metadata_only_records_what_the_source_announced(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    created = change("a/b.txt", 1, kind=ChangeType.CREATED, length=5, hashes=parse_hashes("md5:ab"))

    await mirror.submit(created)
    await mirror.drain()

    assert applier.calls == [(created, PurePosixPath("a/b.txt"), None)]
    held = checkpoint.resource(created.uri)
    assert held is not None
    assert (held.time, held.change, held.length, held.hash, held.path) == (
        created.time,
        "created",
        5,
        "md5:ab",
        "a/b.txt",
    )
    state = checkpoint.state()
    assert state is not None
    assert state.watermark == Watermark(EPOCH, "1-0", created.time)
    assert mirror.stats["applied"] == 1


async def test_changes_of_one_uri_are_applied_in_submit_order(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror(concurrency=4)
    first, second = change("a", 1), change("a", 2, kind=ChangeType.DELETED)
    gate = applier.hold(first)

    await mirror.submit(first)
    await eventually(lambda: applier.started == [first])
    await mirror.submit(second)
    await settle()

    assert applier.started == [first]  # the second waits for the slow first
    gate.set()
    await mirror.drain()

    assert applier.finished == [first, second]
    held = checkpoint.resource(first.uri)
    assert held is not None and (held.time, held.change) == (second.time, "deleted")


async def test_the_next_change_of_a_uri_runs_even_when_the_previous_failed(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    first, second = change("a", 1), change("a", 2)
    gate = applier.hold(first)
    applier.failing[first.key] = ApplyError("transient")

    await mirror.submit(first)
    await eventually(lambda: len(applier.started) == 1)
    await mirror.submit(second)
    await settle()
    assert applier.started == [first]
    gate.set()
    await mirror.drain()

    assert applier.started == [first, second]
    assert applier.finished == [second]
    assert checkpoint.failures() == []  # the later success cleared the failure row


async def test_different_uris_run_concurrently(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror(concurrency=2)
    slow, fast = change("slow", 1), change("fast", 2)
    gate = applier.hold(slow)

    await mirror.submit(slow)
    await mirror.submit(fast)
    await eventually(lambda: checkpoint.resource(fast.uri) is not None)

    assert applier.finished == [fast]
    assert checkpoint.resource(slow.uri) is None
    gate.set()
    await mirror.drain()
    assert applier.finished == [fast, slow]


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_no_more_than_concurrency_changes_are_in_flight(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, concurrency: int
) -> None:
    # A window as small as the concurrency: submit() itself has to wait.
    mirror = make_mirror(concurrency=concurrency, window=concurrency)
    changes = [change(f"r{i}", i + 1) for i in range(8)]
    gates = [applier.hold(c) for c in changes]

    async def submit_all() -> None:
        for c in changes:
            await mirror.submit(c)

    submitter = asyncio.create_task(submit_all())
    await eventually(lambda: applier.in_flight >= concurrency)
    await settle()
    assert applier.in_flight == concurrency
    assert not submitter.done()  # submit() waits for room in the window

    for done, gate in enumerate(gates, start=1):
        gate.set()
        await eventually(lambda: len(applier.finished) == done)  # noqa: B023 - awaited right here
        await settle()
        assert applier.in_flight <= concurrency

    await submitter
    await mirror.drain()
    assert applier.max_in_flight == concurrency
    assert sorted(c.uri for c in applier.finished) == sorted(c.uri for c in changes)


async def test_a_change_queued_behind_a_newer_one_of_its_uri_is_superseded(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    stale, newer = change("a", 1), change("a", 2, kind=ChangeType.DELETED)

    await mirror.submit(stale)
    await mirror.submit(newer)
    await mirror.drain()

    assert [c for c, _, _ in applier.calls] == [newer]
    assert mirror.stats["superseded"] == 1
    assert position(checkpoint) == "2-0"


async def test_baseline_changes_are_never_superseded(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier
) -> None:
    mirror = make_mirror()
    first = change("a", None, minutes=1, kind=ChangeType.CREATED, channel=Channel.BASELINE)
    second = change("a", None, minutes=2, channel=Channel.BASELINE)

    await mirror.submit(first)
    await mirror.submit(second)
    await mirror.drain()

    assert [c for c, _, _ in applier.calls] == [first, second]
    assert mirror.stats["superseded"] == 0


async def test_a_late_older_change_does_not_supersede_a_newer_one(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    await mirror.submit(change("a", 1, minutes=1, kind=ChangeType.CREATED))
    await mirror.drain()
    deleted = change("a", 2, minutes=5, kind=ChangeType.DELETED)
    late_created = change("a", 3, minutes=2, kind=ChangeType.CREATED)  # older than deleted

    await mirror.submit(deleted)
    await mirror.submit(late_created)
    await mirror.drain()

    held = checkpoint.resource(deleted.uri)
    assert held is not None
    assert (held.change, held.time) == ("deleted", deleted.time)
    assert deleted in [c for c, _, _ in applier.calls]


# --- the watermark -------------------------------------------------------------------------


async def test_the_watermark_only_covers_a_gap_free_prefix(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    a, b, c = change("a", 1), change("b", 2), change("c", 3)
    gate_a, gate_c = applier.hold(a), applier.hold(c)

    for each in (a, b, c):
        await mirror.submit(each)
    await eventually(lambda: checkpoint.resource(b.uri) is not None)  # b is done and recorded

    assert position(checkpoint) != "2-0"
    assert mirror.watermark.position != "2-0"

    gate_a.set()
    await eventually(lambda: checkpoint.resource(a.uri) is not None)
    assert position(checkpoint) == "2-0"  # a and b: c still runs

    gate_c.set()
    await mirror.drain()
    state = checkpoint.state()
    assert state is not None
    assert state.watermark == Watermark(EPOCH, "3-0", c.time)


async def test_the_watermark_time_never_goes_back(
    make_mirror: Callable[..., Mirror], checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()

    await mirror.submit(change("a", 1, minutes=30, channel=Channel.POLL))
    await mirror.submit(change("b", 2, minutes=10, channel=Channel.POLL))  # an older time
    await mirror.drain()

    state = checkpoint.state()
    assert state is not None
    assert state.watermark.last_time == T0 + timedelta(minutes=30)


async def test_resubmitted_changes_are_skipped_without_events(
    make_mirror: Callable[..., Mirror],
    applier: RecordingApplier,
    checkpoint: Checkpoint,
    events: list[dict[str, Any]],
) -> None:
    changes = [change("a", 1), change("b", 2), change("c", 3)]
    first = make_mirror()
    for each in changes:
        await first.submit(each)
    await first.drain()
    assert [e["event"] for e in events] == ["applied"] * 3

    # After a restart the same changes come again (at-least-once delivery).
    again = make_mirror()
    for each in changes:
        await again.submit(each)
    await again.drain()
    await again.submit(change("c", 4, minutes=1))  # an older change of c comes late
    await again.drain()

    assert len(applier.calls) == 3
    assert len(events) == 3
    assert again.stats["skip-duplicate"] == 3
    assert again.stats["skip-older"] == 1
    assert again.stats["applied"] == 0
    assert position(checkpoint) == "4-0"  # skipped changes' watermark, written by drain()


async def test_skipped_changes_still_move_the_watermark(
    make_mirror: Callable[..., Mirror], checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    await mirror.submit(change("a", 5))
    await mirror.drain()

    await mirror.submit(change("a", 5))  # a duplicate...
    await mirror.drain()
    await mirror.submit(change("a", 6, minutes=1))  # ...and an older one, at later positions
    await mirror.drain()

    assert position(checkpoint) == "6-0"


async def test_a_failed_change_is_recorded_and_the_watermark_moves_on(
    make_mirror: Callable[..., Mirror],
    applier: RecordingApplier,
    checkpoint: Checkpoint,
    events: list[dict[str, Any]],
) -> None:
    mirror = make_mirror()
    bad, good = change("bad", 1), change("good", 2)
    applier.failing[bad.uri] = ApplyError("--exec exited 3 on http://example.org/bad")

    await mirror.submit(bad)
    await mirror.submit(good)
    await mirror.drain()

    [failure] = checkpoint.failures()
    assert (failure.uri, failure.time, failure.change) == (bad.uri, bad.time, "updated")
    assert "exited 3" in failure.reason
    assert checkpoint.resource(bad.uri) is None
    assert checkpoint.resource(good.uri) is not None
    assert position(checkpoint) == "2-0"
    assert mirror.stats["failed"] == 1
    assert [(e["event"], e["uri"]) for e in events] == [("failed", bad.uri), ("applied", good.uri)]
    assert "exited 3" in events[0]["reason"]


async def test_an_os_error_of_the_applier_is_a_failure(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    full = change("full", 1)
    applier.failing[full.uri] = OSError(28, "No space left on device")

    await mirror.submit(full)
    await mirror.drain()

    [failure] = checkpoint.failures()
    assert failure.reason == f"{full.uri}: No space left on device"
    assert position(checkpoint) == "1-0"


async def test_an_unmapped_uri_is_refused_as_a_failure(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    mirror = make_mirror()
    escape = replace(change("x", 1), uri="http://example.org/%2e%2e/etc/passwd")
    foreign = replace(change("x", 2), uri="http://other.org/x")

    await mirror.submit(escape)
    await mirror.submit(foreign)
    await mirror.drain()

    assert applier.calls == []
    assert [f.uri for f in checkpoint.failures()] == [escape.uri, foreign.uri]
    assert "would leave the destination" in checkpoint.failures()[0].reason
    assert mirror.stats["refused"] == 2
    assert position(checkpoint) == "2-0"


async def test_hold_watermark_keeps_the_checkpoints_watermark(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    before = Watermark("epoch-0", "7-0", T0)
    checkpoint.set_watermark(before, now=NOW)
    held = True  # the agent is in a baseline
    mirror = make_mirror(watermark_held=lambda: held)
    applier.failing[SITE + "bad"] = ApplyError("no")

    for each in (change("a", 8), change("bad", 9), change("a", 8), change("b", 10)):
        await mirror.submit(each)
    await mirror.drain()
    mirror.flush()

    state = checkpoint.state()
    assert state is not None and state.watermark == before
    assert checkpoint.resource(SITE + "a") is not None  # resources are recorded all the same
    assert checkpoint.resource(SITE + "b") is not None
    assert [f.uri for f in checkpoint.failures()] == [SITE + "bad"]

    # The baseline ends: its own watermark is written explicitly.
    after = Watermark(None, None, T0 + timedelta(hours=1))
    held = False
    mirror.set_watermark(after)
    state = checkpoint.state()
    assert state is not None and state.watermark == after


# --- what is applied -----------------------------------------------------------------------


async def test_unwanted_changes_are_filtered_but_deletions_of_held_ones_pass(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    collection = "http://example.org/collections/maps"
    in_collection = (Link(rel="collection", href=collection),)
    mirror = make_mirror(change_filter=ChangeFilter.build(collection=collection))
    wanted = change("map", 1, links=in_collection)
    unwanted = change("photo", 2)
    deleted_held = change("map", 3, kind=ChangeType.DELETED)  # no links, as is common
    deleted_other = change("other", 4, kind=ChangeType.DELETED)  # never held

    await mirror.submit(wanted)
    await mirror.drain()
    for each in (unwanted, deleted_held, deleted_other):
        await mirror.submit(each)
    await mirror.drain()

    assert [c for c, _, _ in applier.calls] == [wanted, deleted_held]
    assert mirror.stats["filtered"] == 2
    assert checkpoint.resource(unwanted.uri) is None
    assert position(checkpoint) == "4-0"


async def test_the_same_content_is_recorded_without_applying(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier, checkpoint: Checkpoint
) -> None:
    digest = hashlib.md5(b"x").hexdigest()
    mirror = make_mirror()
    first = change("a", 1, length=1, hashes=parse_hashes(f"md5:{digest}"))
    touched = change("a", 2, length=1, hashes=parse_hashes(f"md5:{digest}"))

    await mirror.submit(first)
    await mirror.drain()
    await mirror.submit(touched)
    await mirror.drain()

    assert [c for c, _, _ in applier.calls] == [first]
    assert mirror.stats["same-content"] == 1
    held = checkpoint.resource(first.uri)
    assert held is not None and held.time == touched.time


async def test_verified_content_is_handed_over_and_then_removed(
    make_mirror: Callable[..., Mirror],
    applier: RecordingApplier,
    checkpoint: Checkpoint,
    tmp_path: Path,
) -> None:
    part = tmp_path / "fetch-1.part"
    part.write_bytes(b"hello")
    sha = hashlib.sha256(b"hello").hexdigest()
    mirror = make_mirror()
    created = change("h.txt", 1, kind=ChangeType.CREATED)

    await mirror.submit(created, Fetched(part, 5, sha))
    await mirror.drain()

    assert applier.calls == [(created, PurePosixPath("h.txt"), b"hello")]
    assert not part.exists()
    held = checkpoint.resource(created.uri)
    assert held is not None and (held.length, held.hash) == (5, f"sha256:{sha}")


async def test_events_say_what_was_applied_when(
    make_mirror: Callable[..., Mirror], events: list[dict[str, Any]]
) -> None:
    mirror = make_mirror()
    pushed = change("a", 1, kind=ChangeType.CREATED, length=3)
    polled = change("b", None, minutes=2, kind=ChangeType.DELETED, channel=Channel.POLL)

    await mirror.submit(pushed)
    await mirror.submit(polled)
    await mirror.drain()

    assert events == [
        {
            "event": "applied",
            "uri": pushed.uri,
            "change": "created",
            "time": "2026-02-01T00:01:00Z",
            "position": "1-0",
            "channel": "push",
            "applied": "2026-03-01T12:00:00Z",
        },
        {
            "event": "applied",
            "uri": polled.uri,
            "change": "deleted",
            "time": "2026-02-01T00:02:00Z",
            "channel": "poll",
            "applied": "2026-03-01T12:00:00Z",
        },
    ]


# --- robustness ----------------------------------------------------------------------------


class Unexpected(Exception):
    """Not an ApplyError, SubscriberError or OSError: what a plug-in applier might raise."""


@pytest.mark.parametrize("trigger", ["applier raises ValueError", "lone surrogate in URI"])
async def test_an_unexpected_error_does_not_stall_the_mirror(
    make_mirror: Callable[..., Mirror],
    applier: RecordingApplier,
    checkpoint: Checkpoint,
    trigger: str,
) -> None:
    mirror = make_mirror()
    if trigger == "lone surrogate in URI":
        # json.loads('"\\ud800"') yields one: a pushed "loc" can hold it.
        broken = ResourceChange(
            uri=SITE + "a\ud800", change=ChangeType.CREATED, time=T0, channel=Channel.PUSH
        )
    else:
        broken = change("broken", 1)
        applier.failing[broken.uri] = ValueError("plug-in bug")

    await mirror.submit(broken)
    await mirror.submit(change("fine", 2))
    try:
        async with asyncio.timeout(WAIT_S / 5):
            await mirror.drain()
    except TimeoutError:
        pytest.fail("drain() never returned")
    except (ValueError, UnicodeError):
        return  # reporting the error is as good as recording it
    assert position(checkpoint) == "2-0"


async def test_the_window_queues_ahead_while_only_concurrency_changes_apply(
    make_mirror: Callable[..., Mirror], applier: RecordingApplier
) -> None:
    mirror = make_mirror(concurrency=2, window=100)
    changes = [change(f"r{i}", i + 1) for i in range(8)]
    gates = [applier.hold(c) for c in changes]
    for c in changes:
        await mirror.submit(c)  # never blocks: the window has room for all eight
    await eventually(lambda: applier.in_flight == 2)
    await settle()
    assert applier.in_flight == 2
    for gate in gates:
        gate.set()
    await mirror.drain()
    assert applier.max_in_flight == 2
    assert len(applier.finished) == 8


async def test_the_epoch_of_a_subscription_is_kept_with_the_watermark(
    make_mirror: Callable[..., Mirror], checkpoint: Checkpoint
) -> None:
    """Named by the hub before any change moved the watermark (right after a baseline), the
    epoch still reaches the checkpoint: a resume by time then carries it."""
    mirror = make_mirror()
    mirror.set_watermark(Watermark(None, None, NOW))
    mirror.note_epoch("e1")
    await mirror.drain()
    state = checkpoint.state()
    assert state is not None
    assert state.watermark == Watermark("e1", None, NOW)
    mirror.note_epoch(None)  # nothing new said: nothing changes
    await mirror.drain()
    state = checkpoint.state()
    assert state is not None and state.watermark.epoch == "e1"


class HeldApplier:
    """Holds every apply until released, and remembers which ones started."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = asyncio.Event()

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        self.started.append(change.uri)
        await self.release.wait()


async def test_abandon_applies_only_the_changes_in_flight(tmp_path: Path) -> None:
    """Stopping abandons the queue: only the changes in flight finish, and the watermark stops
    before the first abandoned one."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    concurrency, backlog = 4, 500
    applier = HeldApplier()
    with Checkpoint(tmp_path / "state.sqlite", "src", "t") as checkpoint:
        mirror = Mirror(
            checkpoint,
            UriMap.build([("http://s/", "")]),
            applier,
            None,
            concurrency=concurrency,
        )
        uris = [f"http://s/r{i}" for i in range(backlog)]
        for i, uri in enumerate(uris):  # a catch-up backlog
            await mirror.submit(
                ResourceChange(
                    uri, ChangeType.CREATED, base + timedelta(seconds=i), Channel.ARCHIVE
                )
            )
        await eventually(lambda: len(applier.started) == concurrency, "the first changes to apply")
        mirror.abandon()  # Agent.stop()
        applier.release.set()
        async with asyncio.timeout(5 * TIMEOUT_SCALE):
            await mirror.drain()
        assert applier.started == uris[:concurrency], "queued changes were started"
        assert mirror.stats["applied"] == concurrency
        # The watermark stops before the first abandoned change: the next run gets it again.
        last_applied = base + timedelta(seconds=concurrency - 1)
        assert mirror.watermark.last_time == last_applied
        state = checkpoint.state()
        assert state is not None
        assert state.watermark.last_time == last_applied
        assert checkpoint.resource(uris[concurrency]) is None
