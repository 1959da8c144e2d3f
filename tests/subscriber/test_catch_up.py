"""Catching up through the Change List archive after the push channel reports its history
trimmed: a transient archive error is retried, and where to resume after the catch-up."""

from __future__ import annotations

import json
from pathlib import Path

from rspush.resourcesync.w3cdt import parse_w3c_datetime
from rspush.subscriber.agent import _before_oldest
from tests.support.agents import converged, running_agent
from tests.support.static_source import (
    T0,
    T1,
    capability_list,
    changed,
    config_for,
    running_push_endpoint,
    running_source,
    serve_resource_list,
    subscribed_frame,
    urlset,
)
from tests.support.waiting import eventually


async def test_catch_up_survives_a_transient_archive_error(tmp_path: Path) -> None:
    """A 503 on the archive during a catch-up is retried; the agent then subscribes to push."""
    async with running_source() as source:

        def script(connection: int) -> list[str]:
            if connection <= 2:  # trimmed: catch up from the archive (twice: see below)
                insufficient = {
                    "type": "history-insufficient",
                    "topic": "t",
                    "reason": "trimmed",
                    "epoch": "e1",
                    "oldest": "6-0",
                    "after": "5-0",
                    "archive": source.uri("/archive.xml"),
                }
                return [json.dumps(insufficient)]
            return [subscribed_frame()]

        async with running_push_endpoint(script) as hub:
            capability_list(
                source,
                {
                    "resourcelist": "/resourcelist.xml",
                    "changelist-archive": "/archive.xml",
                    "changelist": "/cl.xml",
                },
                push=hub.url,
            )
            serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
            source.put("/b.txt", b"bravo")
            source.put_document(
                "/archive.xml",
                urlset(
                    "changelist-archive",
                    f'<url><loc>{source.uri("/cl.xml")}</loc><rs:md from="{T0}"/></url>',
                ),
            )
            source.put_document(
                "/cl.xml",
                urlset("changelist", changed(source, "/b.txt", "created", T1, b"bravo"), from_=T0),
            )
            source.unavailable["/archive.xml"] = 1  # the first catch-up meets a 503
            dest = tmp_path / "mirror"
            async with running_agent(config_for(source, dest)) as run:
                await converged(source, dest)
                await eventually(lambda: hub.connections >= 3, "the catch-up to be retried")
                await eventually(lambda: run.agent.channel == "push", "push after the catch-up")
                assert source.requests["/archive.xml"] >= 2  # the 503, then a good read
                assert not run.task.done(), "the agent exited"


def test_resume_after_the_trim_only_when_the_catch_up_reached_it() -> None:
    """The hub's ``after`` is used only if the catch-up read up to ``after_time``: retention
    may have trimmed more while it ran (then: catch up again)."""
    info = {"epoch": "e1", "oldest": "7-0", "after": "6-2", "after_time": "2026-01-01T00:00:10Z"}
    reached = parse_w3c_datetime("2026-01-01T00:00:10Z")
    short = parse_w3c_datetime("2026-01-01T00:00:09Z")
    assert _before_oldest(info, reached) == ("6-2", "e1")
    assert _before_oldest(info, short) is None
    assert _before_oldest(info, None) is None
    # A hub without after: just before its oldest change.
    assert _before_oldest({"epoch": "e1", "oldest": "7-0"}, reached) == (
        "6-18446744073709551615",
        "e1",
    )
    assert _before_oldest({"oldest": "7-0"}, reached) is None
