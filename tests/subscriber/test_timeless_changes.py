"""Change List entries without a time (ResourceSync 1.1 makes ``<lastmod>`` optional and
``rs:md@datetime`` a "may"; 1.0 Sources publish deletions with none): timed by the list, in
document order — or, when the list gives nothing to place them by, a reported failure. Never
a silent skip."""

from __future__ import annotations

from pathlib import Path

from rspush.resourcesync import parse_document
from rspush.subscriber.changelists import dated_changes
from rspush.subscriber.changes import Channel
from rspush.subscriber.checkpoint import list_topics, recent_failures
from tests.support.agents import converged, mirror_files, running_agent
from tests.support.static_source import (
    T0,
    T1,
    capability_list,
    changed,
    config_for,
    running_source,
    serve_resource_list,
    time_of,
    urlset,
)
from tests.support.waiting import eventually


def timeless(uri: str, change: str) -> str:
    return f'<url><loc>{uri}</loc><rs:md change="{change}"/></url>'


def test_timeless_entries_take_the_previous_entrys_time_else_the_lists() -> None:
    document = parse_document(
        urlset(
            "changelist",
            timeless("http://s.example/a", "deleted")
            + '<url><loc>http://s.example/b</loc><rs:md change="created" '
            f'datetime="{T1}"/></url>' + timeless("http://s.example/c", "deleted"),
            from_=T0,
        )
    )
    changes, unplaced = dated_changes(document, Channel.POLL)
    assert [(c.uri[-1], c.change, c.time) for c in changes] == [
        ("a", "deleted", time_of(T0)),  # before any timed entry: the list's from
        ("b", "created", time_of(T1)),
        ("c", "deleted", time_of(T1)),  # after b: b's time
    ]
    assert unplaced == []
    # The same list read again gives the same times: de-duplication holds.
    assert dated_changes(document, Channel.POLL)[0] == changes


def test_an_entry_the_list_cannot_place_is_unplaced_with_a_reason() -> None:
    document = parse_document(urlset("changelist", timeless("http://s.example/a", "deleted")))
    changes, unplaced = dated_changes(document, Channel.POLL)
    assert changes == []
    assert [(u.uri, u.change) for u in unplaced] == [("http://s.example/a", "deleted")]
    assert "no time" in unplaced[0].reason


async def test_a_timeless_deletion_in_a_two_entry_list_is_applied(tmp_path: Path) -> None:
    async with running_source() as source:
        capability_list(
            source, {"resourcelist": "/resourcelist.xml", "changelist": "/changelist.xml"}
        )
        serve_resource_list(source, {"/a.txt": b"alpha", "/b.txt": b"bravo"}, at=T0, lastmod=T0)
        source.put_document("/changelist.xml", urlset("changelist", from_=T0))
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)
            source.put("/c.txt", b"charlie")
            source.delete("/a.txt")
            source.put_document(
                "/changelist.xml",
                urlset(
                    "changelist",
                    changed(source, "/c.txt", "created", T1, b"charlie")
                    + timeless(source.uri("/a.txt"), "deleted"),
                    from_=T0,
                ),
            )
            await eventually(
                lambda: mirror_files(dest) == {"/b.txt": b"bravo", "/c.txt": b"charlie"},
                "the time-less deletion applied",
            )
            deleted = [e for e in run.applied("poll") if e["change"] == "deleted"]
            assert [(e["uri"], e["time"]) for e in deleted] == [(source.uri("/a.txt"), T1)]
            assert not run.task.done()


async def test_an_unplaceable_entry_is_a_failure_row_and_event(tmp_path: Path) -> None:
    async with running_source() as source:
        capability_list(
            source, {"resourcelist": "/resourcelist.xml", "changelist": "/changelist.xml"}
        )
        serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
        source.put_document("/changelist.xml", urlset("changelist", from_=T0))
        dest = tmp_path / "mirror"
        config = config_for(source, dest)
        async with running_agent(config) as run:
            await converged(source, dest)
            # A broken Source: no from, no until, no at, no time in the entry.
            source.put_document(
                "/changelist.xml", urlset("changelist", timeless(source.uri("/a.txt"), "deleted"))
            )
            await eventually(
                lambda: any(e["event"] == "failed" for e in run.events), "a failed event"
            )
            failed = next(e for e in run.events if e["event"] == "failed")
            assert failed["uri"] == source.uri("/a.txt")
            assert "no time" in failed["reason"]
        [(topic, _)] = list_topics(config.state_path)
        rows = recent_failures(config.state_path, topic.source, topic.topic)
        assert [row.uri for row in rows] == [source.uri("/a.txt")]
