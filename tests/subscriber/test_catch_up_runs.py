"""The catch-up's metadata-only path: a run settled in one synchronous pass when there is
nothing to fetch and nothing to write (no fetcher, the ``NullApplier``), and the lists cut
into runs.

The pass must leave exactly what the general path (a worker per slot, the applier awaited per
change) leaves on the same inputs: the checkpoint's rows, failures and watermark, the
counters, the events in order. The general path is taken here by an applier that does what
the ``NullApplier`` does under another type. A real checkpoint in ``tmp_path`` each.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rspush.resourcesync import Link
from rspush.resourcesync.hashes import parse_hashes
from rspush.subscriber.agent import runs_of
from rspush.subscriber.appliers import NullApplier
from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.checkpoint import Checkpoint
from rspush.subscriber.decide import ResourceState
from rspush.subscriber.filters import ChangeFilter
from rspush.subscriber.mapping import UriMap
from rspush.subscriber.mirror import Mirror
from rspush.subscriber.watermark import WatermarkTracker
from tests.subscriber.test_mirror import NOW, SITE, SOURCE, T0

MD5 = "md5:cfcd208495d565ef66e7dff9f98764da"


class AwaitedNullApplier(NullApplier):
    """The ``NullApplier``'s behaviour under another type: the mirror awaits it per change."""


def listed(name: str, minutes: int, kind: ChangeType = ChangeType.UPDATED, **kw: Any) -> Any:
    return ResourceChange(
        uri=name if "://" in name else SITE + name,
        change=kind,
        time=T0 + timedelta(minutes=minutes),
        channel=Channel.ARCHIVE,
        **kw,
    )


def held(name: str, minutes: int, length: int | None, hash_text: str | None) -> ResourceState:
    return ResourceState(
        SITE + name, T0 + timedelta(minutes=minutes), "updated", length, hash_text, name
    )


def the_run() -> list[ResourceChange]:
    """Every way a change of a run can end, more than once each, across URIs."""
    run: list[ResourceChange] = []
    for k in range(3):
        run += [
            listed(f"new{k}", 10 + k, length=k, hashes=parse_hashes(MD5)),
            listed(f"two-hashes{k}", 10, length=5, hashes=parse_hashes(f"{MD5} sha-256:abcd")),
            listed(f"no-hash{k}", 11),
            listed(f"same{k}", 20, length=7, hashes=parse_hashes(MD5)),  # same content
            listed(f"dup{k}", 5, length=3, hashes=parse_hashes(MD5)),  # already held
            listed(f"old{k}", 1),  # older than held
            listed(f"gone{k}", 12, ChangeType.DELETED, length=4, hashes=parse_hashes(MD5)),
            listed(f"twice{k}", 13),
            listed(f"twice{k}", 14, ChangeType.DELETED),  # supersedes the one before
            listed(f"dir{k}/", 15, ChangeType.CREATED, media_type="text/html"),
            listed(f"a//b{k}", 16),  # refused: an empty segment
            listed(f"http://elsewhere.example/{k}", 17),  # refused: no --map covers it
            listed(f"q{k}?x=1", 18, links=(Link(rel="collection", href=SITE + "c"),)),
            listed(f"skipped{k}", 19),  # filtered out (below)
        ]
    return run


def stored(checkpoint: Checkpoint) -> None:
    checkpoint.record_many(
        [
            (listed(s.uri, 0), s)
            for k in range(3)
            for s in (
                held(f"same{k}", 2, 7, MD5),
                held(f"dup{k}", 5, 3, MD5),
                held(f"old{k}", 9, None, None),
            )
        ]
    )


def everything(path: Path) -> tuple[list[Any], list[Any], list[Any]]:
    """What a second reader of the state file sees: every table, sorted."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return tuple(  # type: ignore[return-value]
            sorted(db.execute(f"SELECT * FROM {table}").fetchall())
            for table in ("resources", "failures", "topics")
        )
    finally:
        db.close()


async def settle(
    tmp_path: Path, applier: NullApplier, run: list[ResourceChange], change_filter: ChangeFilter
) -> Any:
    events: list[dict[str, Any]] = []
    path = tmp_path / f"{type(applier).__name__}-{change_filter.active}.sqlite"
    with Checkpoint(path, SOURCE, "dataset1") as checkpoint:
        stored(checkpoint)
        mirror = Mirror(
            checkpoint,
            UriMap.build([(SITE, "")]),
            applier,
            None,
            change_filter=change_filter,
            events=events.append,
            clock=lambda: NOW,
        )
        with mirror.states_in_memory():
            await mirror.apply_batch(run[: len(run) // 2])
            await mirror.apply_batch(run[len(run) // 2 :])
        await mirror.drain()
        outcome = (dict(mirror.stats), str(mirror.first_refused), mirror.watermark)
    return outcome, events, everything(path)


@pytest.mark.parametrize("filtering", [True, False], ids=["a filter", "no filter"])
async def test_the_synchronous_pass_leaves_what_the_general_path_leaves(
    tmp_path: Path, filtering: bool
) -> None:
    run = the_run()
    if not filtering:
        run = [c for c in run if "/skipped" not in c.uri]
    change_filter = ChangeFilter.build(exclude=["/skipped"] if filtering else [])
    fast = await settle(tmp_path, NullApplier(), run, change_filter)
    general = await settle(tmp_path, AwaitedNullApplier(), run, change_filter)
    assert fast == general
    (stats, refused, watermark), events, (rows, failures, topics) = fast
    # and the inputs did reach every branch
    assert stats == {
        "applied": 3 * 8,  # same content is recorded too
        "same-content": 3,
        "skip-duplicate": 3,
        "skip-older": 3,
        "superseded": 3,
        "refused": 6,
    } | ({"filtered": 3} if filtering else {})
    assert "empty path segment" in refused
    assert watermark.last_time == max(c.time for c in run)
    assert len(failures) == 6 and len(events) == 3 * 8 + 6
    assert {row[2]: row[6] for row in rows}[SITE + "two-hashes0"] == f"{MD5} sha-256:abcd"


async def test_stopping_before_the_pass_leaves_the_state_as_it_was(tmp_path: Path) -> None:
    with Checkpoint(tmp_path / "state.sqlite", SOURCE, "dataset1") as checkpoint:
        mirror = Mirror(checkpoint, UriMap.build([(SITE, "")]), NullApplier(), None)
        await mirror.apply_batch([listed("a", 1)])
        mirror.abandon()
        await mirror.apply_batch([listed("b", 2), listed("a", 3)])
        await mirror.drain()
        assert checkpoint.resource(SITE + "b") is None
        assert checkpoint.resource(SITE + "a").time == T0 + timedelta(minutes=1)  # type: ignore[union-attr]
        assert mirror.watermark.last_time == T0 + timedelta(minutes=1)


async def lists_of(*sizes: int) -> AsyncIterator[list[ResourceChange]]:
    n = 0
    for size in sizes:
        yield [listed(f"r{n + i}", n + i) for i in range(size)]
        n += size


async def test_lists_are_cut_into_runs_across_their_bounds() -> None:
    runs = [run async for run in runs_of(lists_of(3, 0, 5, 1), 4, lambda: False)]
    assert [len(run) for run in runs] == [4, 4, 1]
    assert [c.uri for run in runs for c in run] == [SITE + f"r{i}" for i in range(9)]
    assert [run async for run in runs_of(lists_of(4), 4, lambda: False)] != []
    assert [len(r) async for r in runs_of(lists_of(8), 4, lambda: False)] == [4, 4]


async def test_no_run_after_stopping() -> None:
    seen: list[list[ResourceChange]] = []
    async for run in runs_of(lists_of(3, 3, 3), 4, lambda: len(seen) == 1):
        seen.append(run)
    assert [len(run) for run in seen] == [4]  # the part-run of the rest is not applied


def test_numbers_given_to_a_run_are_those_given_one_by_one() -> None:
    run = [listed(f"r{i}", i) for i in range(5)] + [listed("r0", 9)]
    one_by_one, at_once = WatermarkTracker(), WatermarkTracker()
    one_by_one.submitted(run[0])
    at_once.submitted(run[0])
    assert at_once.submitted_many(run) == [one_by_one.submitted(c) for c in run]
    assert at_once.submitted_many([]) == []
    for seq in (4, 2, 3, 1):
        assert one_by_one.finished(seq) == at_once.finished(seq)
        assert one_by_one.watermark == at_once.watermark
    assert at_once.finished_many([5, 6, 7]) and at_once.watermark.last_time == run[-1].time
    assert one_by_one.finished_many([5, 6, 7]) and one_by_one.watermark == at_once.watermark


def test_one_hash_value_is_written_as_given() -> None:
    for text in (MD5, f"{MD5} sha-256:abcd", "SHA-256:q80="):
        change = listed("x", 1, hashes=parse_hashes(text))
        assert replace(change).hash_text == text
    assert listed("x", 1).hash_text is None
