"""The ResourceSync bridge's place in a remote's lists (pure: no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rspush.hub.bridges.rs_position import (
    Checkpoint,
    ListPlace,
    ListRef,
    Seen,
    after_time,
    ordered,
    placed_entries,
    resume_in,
    route,
    with_time,
)
from rspush.resourcesync import Document, Entry, Metadata

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def t(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def change_list(entries: list[tuple[str, str, datetime | None]], **md: datetime | None) -> Document:
    return Document(
        md=Metadata.model_validate({"capability": "changelist", **md}),
        entries=tuple(
            Entry(loc=loc, md=Metadata(change=change, datetime=when))
            for loc, change, when in entries
        ),
    )


def test_entries_without_times_are_placed_by_the_list_in_document_order() -> None:
    document = change_list(
        [
            ("http://x/a", "deleted", None),
            ("http://x/b", "updated", t(5)),
            ("http://x/c", "deleted", None),
        ],
        **{"from": t(1)},
    )
    items = placed_entries(document)
    assert [(i.time, i.placed) for i in items] == [(t(1), True), (t(5), False), (t(5), True)]
    assert with_time(items[0]).change_time == t(1)
    assert with_time(items[1]) is items[1].entry  # republished exactly as given


def test_an_entry_nothing_places_is_a_problem_not_a_silent_skip() -> None:
    items = placed_entries(change_list([("http://x/a", "deleted", None)]))
    assert items[0].problem is not None and "no time" in items[0].problem


def test_a_reread_list_resumes_after_the_entry_seen_last() -> None:
    items = placed_entries(
        change_list([(f"http://x/{n}", "updated", t(n)) for n in range(5)], **{"from": t(0)})
    )
    place = ListPlace(url="http://x/cl.xml", start=t(0), consumed=3)
    assert resume_in(items, place, items[2].seen).index == 3
    # Rewritten: two entries before it dropped; found by (time, URI, change).
    shorter = items[2:]
    resumed = resume_in(shorter, place, items[2].seen)
    assert resumed.index == 1 and resumed.problem is not None
    # Gone altogether: after its time.
    gone = [i for i in items if i.entry.loc != "http://x/2"]
    resumed = resume_in(gone, place, items[2].seen)
    assert resumed.index == 2 and "no longer holds" in (resumed.problem or "")
    assert after_time(items, t(2)) == 3


def test_a_closed_list_is_found_by_its_from_wherever_it_moved() -> None:
    refs = ordered(
        [
            ListRef("http://x/changelist.xml", t(10), None),
            ListRef("http://x/archive/1.xml", t(0), t(10)),
        ]
    )
    assert [r.url for r in refs] == ["http://x/archive/1.xml", "http://x/changelist.xml"]
    state = Checkpoint(
        phase="changes",
        since=t(0),
        place=ListPlace(url="http://x/changelist.xml", start=t(0), consumed=4),
        seen=Seen(time=t(3), uri="http://x/3", change="updated"),
    )
    plan = route(refs, state)
    assert plan.resume_place and [r.url for r in plan.lists] == [r.url for r in refs]
    assert plan.problem is None


def test_lost_history_is_named() -> None:
    state = Checkpoint(
        phase="changes",
        place=ListPlace(url="http://x/changelist.xml", start=t(0), consumed=4),
        seen=Seen(time=t(3), uri="http://x/3", change="updated"),
    )
    plan = route([ListRef("http://x/changelist.xml", t(20), None)], state)
    assert not plan.resume_place
    assert plan.problem is not None and "lost history" in plan.problem


def test_the_checkpoint_round_trips_as_json() -> None:
    state = Checkpoint(
        phase="changes",
        since=t(0),
        place=ListPlace(url="http://x/cl.xml", start=t(1), consumed=2),
        seen=Seen(time=t(2), uri="http://x/a", change="deleted"),
    )
    assert Checkpoint.loads(state.dumps()) == state
