"""What a run of changes reports once committed: each outcome to ``on_outcome`` and each
event to the event sink, both in the run's order, an event with exactly its fields (the
change's, the moment it was applied, a failure's reason). A real checkpoint in ``tmp_path``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rspush.subscriber.appliers import NullApplier
from rspush.subscriber.changes import ChangeType, Channel, Outcome, ResourceChange
from rspush.subscriber.checkpoint import Checkpoint
from rspush.subscriber.mapping import UriMap
from rspush.subscriber.mirror import Mirror
from tests.subscriber.test_mirror import NOW, SITE, SOURCE, T0


class AwaitedNullApplier(NullApplier):
    """The ``NullApplier``'s behaviour under another type: the mirror's general path."""


def change(name: str, minutes: int, **kw: Any) -> ResourceChange:
    uri = name if "://" in name else SITE + name
    return ResourceChange(uri, ChangeType.UPDATED, T0 + timedelta(minutes=minutes), **kw)


@pytest.mark.parametrize("applier", [NullApplier(), AwaitedNullApplier()], ids=type)
async def test_outcomes_and_events_in_the_runs_order(tmp_path: Path, applier: NullApplier) -> None:
    outcomes: list[Outcome] = []
    events: list[dict[str, Any]] = []
    run = [
        change("a", 1, channel=Channel.ARCHIVE),
        change("http://elsewhere.example/x", 2, channel=Channel.ARCHIVE),  # refused: unmapped
        change("b", 3, channel=Channel.ARCHIVE),
    ]
    with Checkpoint(tmp_path / "state.sqlite", SOURCE, "t") as checkpoint:
        mirror = Mirror(
            checkpoint,
            UriMap.build([(SITE, "")]),
            applier,
            None,
            events=events.append,
            on_outcome=outcomes.append,
            clock=lambda: NOW,
        )
        await mirror.apply_batch(run)
        await mirror.drain()
    assert [(o.change, o.event, o.at) for o in outcomes] == [
        (run[0], "applied", NOW),
        (run[1], "failed", NOW),
        (run[2], "applied", NOW),
    ]
    assert outcomes[1].reason is not None and "no --map covers it" in outcomes[1].reason
    assert outcomes[0].reason is None
    assert events == [
        {
            "event": "applied",
            "uri": SITE + "a",
            "change": "updated",
            "time": "2026-02-01T00:01:00Z",
            "channel": "archive",
            "applied": "2026-03-01T12:00:00Z",
        },
        {
            "event": "failed",
            "uri": "http://elsewhere.example/x",
            "change": "updated",
            "time": "2026-02-01T00:02:00Z",
            "channel": "archive",
            "applied": "2026-03-01T12:00:00Z",
            "reason": outcomes[1].reason,
        },
        {
            "event": "applied",
            "uri": SITE + "b",
            "change": "updated",
            "time": "2026-02-01T00:03:00Z",
            "channel": "archive",
            "applied": "2026-03-01T12:00:00Z",
        },
    ]


async def test_a_pushed_changes_event_names_its_position(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    with Checkpoint(tmp_path / "state.sqlite", SOURCE, "t") as checkpoint:
        mirror = Mirror(
            checkpoint,
            UriMap.build([(SITE, "")]),
            NullApplier(),
            None,
            events=events.append,
            clock=lambda: NOW,
        )
        await mirror.submit(change("a", 1, channel=Channel.PUSH, position="7-0"))
        await mirror.drain()
    assert [(e["event"], e["position"], e["channel"]) for e in events] == [
        ("applied", "7-0", "push")
    ]
