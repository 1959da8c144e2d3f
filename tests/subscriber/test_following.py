"""The agent following a static Source after its baseline: polling its Change Lists (through
a Change List Index whose open list grows, updates sharing a datetime, lists that start after
the Resource List), and falling back to polling when the push channel sends a bad frame."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.agents import converged, mirror_files, running_agent
from tests.support.static_source import (
    T0,
    T1,
    T2,
    capability_list,
    changed,
    config_for,
    running_push_endpoint,
    running_source,
    serve_resource_list,
    sitemapindex,
    subscribed_frame,
    time_of,
    urlset,
)
from tests.support.waiting import eventually


async def test_index_poll_picks_up_changes_in_the_open_child_list(tmp_path: Path) -> None:
    """§12.2: the index stays the same (304) while its open list grows; the agent reads the
    open list anyway."""
    async with running_source() as source:
        capability_list(
            source,
            {"resourcelist": "/resourcelist.xml", "changelist": "/changelist-index.xml"},
        )
        serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
        source.put("/b.txt", b"bravo")
        source.put_document(
            "/changelist-index.xml",
            sitemapindex(
                "changelist",
                f"<sitemap><loc>{source.uri('/cl1.xml')}</loc>"
                f'<rs:md from="{T0}" until="{T1}"/></sitemap>'
                f'<sitemap><loc>{source.uri("/cl2.xml")}</loc><rs:md from="{T1}"/></sitemap>',
            ),
        )
        source.put_document(
            "/cl1.xml",
            urlset(
                "changelist",
                changed(source, "/b.txt", "created", "2026-01-01T12:00:00Z", b"bravo"),
                from_=T0,
                until=T1,
            ),
        )
        source.put_document("/cl2.xml", urlset("changelist", from_=T1))
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)  # a from the baseline, b from the closed list
            polls = source.requests["/changelist-index.xml"]
            await eventually(
                lambda: source.requests["/changelist-index.xml"] >= polls + 2,
                "two more polls of the unchanged index",
            )
            # The Source appends to its open list, as it does with every change.
            source.put("/c.txt", b"charlie")
            source.put_document(
                "/cl2.xml",
                urlset(
                    "changelist", changed(source, "/c.txt", "created", T2, b"charlie"), from_=T1
                ),
            )
            await converged(source, dest)
            assert source.uri("/c.txt") in {e["uri"] for e in run.applied("poll")}
            assert not run.task.done()


async def test_same_time_update_with_other_bytes_is_applied(tmp_path: Path) -> None:
    """Two updates of one resource with the same datetime and different bytes: the later one is
    applied."""
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml", "changelist": "/cl.xml"})
        serve_resource_list(source, {"/x.txt": b"v0"}, at=T0, lastmod=T0)
        source.put_document("/cl.xml", urlset("changelist", from_=T0))
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)
            source.put("/x.txt", b"v1")
            first = changed(source, "/x.txt", "updated", T1, b"v1")
            source.put_document("/cl.xml", urlset("changelist", first, from_=T0))
            await converged(source, dest)
            assert mirror_files(dest) == {"/x.txt": b"v1"}
            # Later the same second: another update with other bytes, same datetime.
            source.put("/x.txt", b"v2, longer")
            second = changed(source, "/x.txt", "updated", T1, b"v2, longer")
            source.put_document("/cl.xml", urlset("changelist", first + second, from_=T0))
            await converged(source, dest)
            assert mirror_files(dest) == {"/x.txt": b"v2, longer"}
            assert run.agent.mirror is not None
            assert run.agent.mirror.stats["failed"] == 0


@pytest.mark.parametrize("kind", ["unknown change type", "not JSON"])
async def test_malformed_push_frame_falls_back_to_polling(tmp_path: Path, kind: str) -> None:
    """A push frame the agent cannot read drops the connection; the agent reconnects and keeps
    following the Change List by polling, without crashing."""
    async with running_source() as source:

        def script(connection: int) -> list[str]:
            if kind == "not JSON":
                bad = "this is not JSON"
            else:
                bad = json.dumps(
                    {
                        "type": "changes",
                        "topic": "t",
                        "epoch": "e1",
                        "from": T0,
                        "until": T0,
                        "changes": [
                            {
                                "position": f"{connection}-0",
                                "loc": source.uri("/a.txt"),
                                "change": "moved",
                                "datetime": T0,
                            }
                        ],
                    }
                )
            return [subscribed_frame(), bad]

        async with running_push_endpoint(script) as hub:
            capability_list(
                source, {"resourcelist": "/resourcelist.xml", "changelist": "/cl.xml"}, hub.url
            )
            serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
            source.put_document("/cl.xml", urlset("changelist", from_=T0))
            dest = tmp_path / "mirror"
            async with running_agent(config_for(source, dest)) as run:
                await converged(source, dest)
                await eventually(lambda: hub.connections >= 2, "a reconnection after the bad frame")
                # The Source changes; only its Change List says so (the push channel is broken).
                source.put("/b.txt", b"bravo")
                source.put_document(
                    "/cl.xml",
                    urlset(
                        "changelist", changed(source, "/b.txt", "created", T1, b"bravo"), from_=T0
                    ),
                )
                await converged(source, dest)
                assert [e["uri"] for e in run.applied("poll")] == [source.uri("/b.txt")]
                assert not run.task.done(), "the agent crashed"


async def test_no_rebaseline_when_change_lists_start_after_the_resource_list(
    tmp_path: Path,
) -> None:
    """Change Lists starting after the Resource List's ``at`` are followed from where they
    start, without a rebaseline."""
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml", "changelist": "/cl.xml"})
        serve_resource_list(source, {"/a.txt": b"alpha"}, at=T0, lastmod=T0)
        source.put_document("/cl.xml", urlset("changelist", from_=T1))  # starts after T0
        dest = tmp_path / "mirror"
        async with running_agent(config_for(source, dest)) as run:
            await converged(source, dest)
            mirror = run.agent.mirror
            assert mirror is not None

            def rebaselined() -> bool:
                return any(e["event"] == "rebaseline" for e in run.events)

            await eventually(
                lambda: mirror.watermark.last_time == time_of(T1) or rebaselined(),
                "the agent to follow the lists from where they start",
            )
            assert not rebaselined(), [e for e in run.events if e["event"] == "rebaseline"]
            # And it does follow them.
            source.put("/b.txt", b"bravo")
            source.put_document(
                "/cl.xml",
                urlset("changelist", changed(source, "/b.txt", "created", T2, b"bravo"), from_=T1),
            )
            await converged(source, dest)
        assert [e for e in run.events if e["event"] == "rebaseline"] == []
        assert run.agent.rebaselines == 0
        assert source.requests["/resourcelist.xml"] == 1
